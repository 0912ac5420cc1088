// Division by a divisor that is fixed per instruction, as one multiply-high: the divisor's magic
// number is worked out once on the host. Used where a tile index is divided for every tile (the
// matvec's column blocks), which a hardware-less 32-bit division makes ~20 instructions.
#pragma once
#include <cstdint>

#include "schedules/format.hpp"

namespace mk::device {

// m = ceil(2^32 / d), for 2 <= d < 2^32.
constexpr uint32_t magic_divisor(uint32_t d) { return static_cast<uint32_t>(((uint64_t{1} << 32) + d - 1) / d); }

// j / d, given m = magic_divisor(d): exact while j * d < 2^32. With m * d = 2^32 + e, 0 <= e < d,
// j * m / 2^32 = j / d + j * e / (d * 2^32), and the second term stays below 1 / d, too little to
// reach the next multiple of 1 / d, while j * e < 2^32.
MK_HD inline uint32_t magic_divide(uint32_t j, uint32_t m) {
#ifdef __CUDA_ARCH__
  return __umulhi(j, m);
#else
  return static_cast<uint32_t>((uint64_t{j} * m) >> 32);
#endif
}

// Whether magic_divide is exact for every j < n.
constexpr bool magic_divide_exact_below(uint64_t n, uint32_t d) { return n == 0 || (n - 1) * d < (uint64_t{1} << 32); }

}  // namespace mk::device
