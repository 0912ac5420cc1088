// float8 e4m3 <-> float, host and device: the "e4m3fn" bytes of FP8 checkpoints (1 sign bit,
// 4 exponent bits of bias 7, 3 mantissa bits; no infinities; S.1111.111 is NaN; the largest
// magnitude 448, the smallest 2^-9). The groundwork of FP8 weights: decoding is exact, encoding
// rounds to nearest even and saturates to +-448, as the GPU's cvt.rn.satfinite does.
#pragma once
#include <cmath>
#include <cstdint>

#include "device/bf16.hpp"

namespace mk::device {

MK_HD inline bool f8e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }

MK_HD inline float f8e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t{b & 0x80u} << 24, e = (b >> 3) & 15u, m = b & 7u;
  if (f8e4m3_is_nan(b)) return bits_f32(sign | 0x7fc00000u);
  if (e == 0) return bits_f32(f32_bits(static_cast<float>(m) * 0.001953125f) | sign);  // subnormal: m * 2^-9, exact
  return bits_f32(sign | (e + 120u) << 23 | m << 20);  // (1 + m/8) * 2^(e - 7): exponent rebiased, mantissa's top 3 bits
}

MK_HD inline uint8_t f32_to_f8e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;  // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;  // 448 and above (infinity too): 448
  if (a < 0x3c800000u)                       // below 2^-6: subnormal, m = |f| * 2^9 rounded
    return sign | static_cast<uint8_t>(rintf(bits_f32(a) * 512.0f));  // 8 is 2^-6, the smallest normal
  uint32_t e = (a >> 23) - 120, m = (a >> 20) & 7u;  // e >= 1: 2^-6 <= |f| < 448
  const uint32_t rest = a & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {
    if (++m == 8) m = 0, ++e;
  }
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<uint8_t>(e << 3 | m);
}

#if defined(__CUDACC__)
// Two e4m3 (the lower byte the lower element) as two floats, exactly: the hardware's conversion
// to f16x2 (sm_89 on), which holds every e4m3 value, then each half to f32.
__device__ __forceinline__ float2 f8x2_to_float2(uint16_t two) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(two));
  float lo, hi;
  asm("{\n .reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}" : "=f"(lo), "=f"(hi) : "r"(h));
  return make_float2(lo, hi);
}
// The same as a bf16x2, the lower element in the low half: exact (e4m3's 3 mantissa bits and
// exponents 2^-9 to 2^8 fit bf16's), the tensor cores' A operand.
__device__ __forceinline__ uint32_t f8x2_to_bf16x2(uint16_t two) {
  const float2 f = f8x2_to_float2(two);
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f.y), "f"(f.x));
  return r;
}
// Dot product of 8 e4m3 weights (8 bytes, the first column in the lowest) with 8 floats.
__device__ __forceinline__ float dot8_f8(uint2 w, float4 a, float4 b) {
  const float2 w0 = f8x2_to_float2(static_cast<uint16_t>(w.x)), w1 = f8x2_to_float2(static_cast<uint16_t>(w.x >> 16));
  const float2 w2 = f8x2_to_float2(static_cast<uint16_t>(w.y)), w3 = f8x2_to_float2(static_cast<uint16_t>(w.y >> 16));
  float s = w0.x * a.x;
  s = fmaf(w0.y, a.y, s);
  s = fmaf(w1.x, a.z, s);
  s = fmaf(w1.y, a.w, s);
  s = fmaf(w2.x, b.x, s);
  s = fmaf(w2.y, b.y, s);
  s = fmaf(w3.x, b.z, s);
  s = fmaf(w3.y, b.w, s);
  return s;
}
#endif

}  // namespace mk::device
