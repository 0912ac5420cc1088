// bfloat16 <-> float conversion, host and device.
#pragma once
#include <cstdint>
#include <cstring>

#include "schedules/format.hpp"

namespace mk::device {

// A float's bits, and the float of bits (memcpy: the same on host and device); the narrow
// formats here (bf16, and device/fp8.hpp's e4m3) are built from them.
MK_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
MK_HD inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

MK_HD inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t{h} << 16); }

// Round to nearest even; NaN stays NaN.
MK_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

MK_HD inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace mk::device
