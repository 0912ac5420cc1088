// The multiply-high division of device/magic_divide.hpp against the plain one.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "device/magic_divide.hpp"

using mk::device::magic_divide;
using mk::device::magic_divide_exact_below;
using mk::device::magic_divisor;

TEST_CASE("magic division equals integer division wherever j * d < 2^32") {
  std::mt19937_64 rng(std::random_device{}());
  uint64_t checked = 0;
  auto check = [&](uint32_t j, uint32_t d, uint32_t m) {
    if (magic_divide(j, m) != j / d) FAIL_CHECK("d = " << d << ", j = " << j << ": " << magic_divide(j, m) << " != " << j / d);
    ++checked;
  };
  // Every divisor a matvec's column blocks can have (at most 4095), and a spread of larger ones.
  for (uint64_t d = 2; d < (uint64_t{1} << 32); d = d < 4096 ? d + 1 : d * 3 + rng() % 7) {
    const uint32_t m = magic_divisor(static_cast<uint32_t>(d)), jmax = static_cast<uint32_t>(((uint64_t{1} << 32) - 1) / d);
    REQUIRE(magic_divide_exact_below(uint64_t{jmax} + 1, static_cast<uint32_t>(d)));
    REQUIRE_FALSE(magic_divide_exact_below(uint64_t{jmax} + 2, static_cast<uint32_t>(d)));
    // Around multiples of d (where a wrong quotient would first show), at both ends and at random.
    for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{jmax} / d, uint64_t{jmax} / d + 1, rng() % (jmax / d + 1)})
      for (int64_t off = -1; off <= 1; ++off) {
        const int64_t j = static_cast<int64_t>(k * d) + off;
        if (j >= 0 && j <= jmax) check(static_cast<uint32_t>(j), static_cast<uint32_t>(d), m);
      }
    for (int r = 0; r < 8; ++r) check(static_cast<uint32_t>(rng() % (uint64_t{jmax} + 1)), static_cast<uint32_t>(d), m);
    check(jmax, static_cast<uint32_t>(d), m);
  }
  CHECK(checked > 40000);
  // Past the bound it can be wrong, so the bound matters: d = 3, m = 0x55555556 = (2^32 + 2) / 3,
  // and j = 2^32 - 2 (j * d far past 2^32) comes out one too large.
  CHECK(magic_divide(0xfffffffeu, magic_divisor(3)) == 0xfffffffeu / 3 + 1);
}
