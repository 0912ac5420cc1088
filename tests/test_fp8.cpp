// float8 e4m3 (device/fp8.hpp): every one of the 256 bytes decoded against the format's formula,
// and the encoder against a brute-force nearest-value search over every finite byte.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "device/fp8.hpp"

namespace {

using mk::device::f32_to_f8e4m3;
using mk::device::f8e4m3_to_f32;

// The format's definition, in double: sign, 4 exponent bits of bias 7, 3 mantissa bits.
double by_formula(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return s ? -v : v;
}

// The nearest finite e4m3 value to x, ties to the even mantissa, beyond +-448 saturated: by
// trying every byte.
uint8_t nearest(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  int best = -1;
  double best_d = INFINITY;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f || std::signbit(x) != bool(b & 0x80)) continue;
    const double d = std::fabs(by_formula(static_cast<uint8_t>(b)) - double(x));
    if (d < best_d || (d == best_d && (b & 1) == 0)) best = b, best_d = d;
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

TEST_CASE("fp8 e4m3: every byte decodes to the format's value; only S.1111.111 is NaN") {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    CAPTURE(b);
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      CHECK(std::isnan(f));
      CHECK(mk::device::f8e4m3_is_nan(static_cast<uint8_t>(b)));
      ++nans;
      continue;
    }
    CHECK(!mk::device::f8e4m3_is_nan(static_cast<uint8_t>(b)));
    CHECK(double(f) == by_formula(static_cast<uint8_t>(b)));
    CHECK(std::signbit(f) == bool(b & 0x80));  // -0 included
    CHECK(f32_to_f8e4m3(f) == b);              // and back
  }
  CHECK(nans == 2);
  CHECK(f8e4m3_to_f32(0x7e) == 448.0f);
  CHECK(f8e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(f8e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));
}

TEST_CASE("fp8 e4m3: encoding rounds to the nearest value, ties to even, and saturates") {
  // Every midpoint between neighbours, and a float either side of it.
  std::vector<float> xs;
  for (int b = 0; b < 0x7e; ++b) {
    const double lo = by_formula(static_cast<uint8_t>(b)), hi = by_formula(static_cast<uint8_t>(b + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    REQUIRE(double(mid) == (lo + hi) / 2);  // exact in float
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) xs.push_back(x), xs.push_back(-x);
  }
  // Random floats over the whole range, past 448 and below 2^-9 too.
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f), mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mantissa(rng), static_cast<int>(std::floor(exponent(rng))));
    xs.push_back(i % 2 ? x : -x);
  }
  for (const float x : {0.0f, -0.0f, 448.0f, 464.0f, 479.9f, 480.0f, 1e30f, std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -10), std::ldexp(1.1f, -10),
                        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(x);
  for (const float x : xs) {
    CAPTURE(x);
    CHECK(int(f32_to_f8e4m3(x)) == int(nearest(x)));
  }
  CHECK(f32_to_f8e4m3(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(f32_to_f8e4m3(-1e30f) == 0xfe);
  CHECK(f32_to_f8e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half the smallest: ties to even (zero)
  CHECK(f32_to_f8e4m3(std::ldexp(3.0f, -10)) == 0x02);  // 1.5 smallest: ties to even (2)
}
