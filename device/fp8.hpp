// float8 e4m3 <-> float, host and device: the "e4m3fn" bytes of FP8 checkpoints (1 sign bit,
// 4 exponent bits of bias 7, 3 mantissa bits; no infinities; S.1111.111 is NaN; the largest
// magnitude 448, the smallest 2^-9). The groundwork of FP8 weights: decoding is exact, encoding
// rounds to nearest even and saturates to +-448, as the GPU's cvt.rn.satfinite does.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "schedules/format.hpp"

namespace mk::device {

MK_HD inline bool f8e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }

MK_HD inline float f8e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t{b & 0x80u} << 24, e = (b >> 3) & 15u, m = b & 7u;
  uint32_t u;
  if (f8e4m3_is_nan(b)) {
    u = sign | 0x7fc00000u;
  } else if (e == 0) {  // subnormal: m * 2^-9, exact in float
    const float v = static_cast<float>(m) * 0.001953125f;
    memcpy(&u, &v, sizeof u);
    u |= sign;
  } else {  // (1 + m/8) * 2^(e - 7): the exponent rebiased, the mantissa's top 3 bits
    u = sign | (e + 120u) << 23 | m << 20;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

MK_HD inline uint8_t f32_to_f8e4m3(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;  // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;  // 448 and above (infinity too): 448
  if (a < 0x3c800000u) {                     // below 2^-6: subnormal, m = |f| * 2^9 rounded
    float x;
    memcpy(&x, &a, sizeof x);
    return sign | static_cast<uint8_t>(rintf(x * 512.0f));  // 8 is 2^-6, the smallest normal
  }
  uint32_t e = (a >> 23) - 120, m = (a >> 20) & 7u;  // e >= 1: 2^-6 <= |f| < 448
  const uint32_t rest = a & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {
    if (++m == 8) m = 0, ++e;
  }
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<uint8_t>(e << 3 | m);
}

}  // namespace mk::device
