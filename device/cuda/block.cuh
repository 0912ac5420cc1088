// Block-level helpers shared by the CUDA op bodies. The interpreter runs kThreads threads.
#pragma once
#include <cstdint>

namespace mk::device {

inline constexpr uint32_t kThreads = 1024;
inline constexpr uint32_t kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds kWarps floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < kWarps ? scratch[lane] : 0.0f;
  return warp_sum(total);
}

// Activations written by other SMs in this launch: read through L2, never a stale L1 line.
__device__ __forceinline__ float load_activation(const float* p) { return __ldcg(p); }

// Weights are read-only for the whole launch: the non-coherent read-only path is safe.
__device__ __forceinline__ uint4 load_weights16(const uint16_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// Dot product of 8 bf16 weights with 8 floats.
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  float s = bf16_lo(w.x) * a.x;
  s = fmaf(bf16_hi(w.x), a.y, s);
  s = fmaf(bf16_lo(w.y), a.z, s);
  s = fmaf(bf16_hi(w.y), a.w, s);
  s = fmaf(bf16_lo(w.z), b.x, s);
  s = fmaf(bf16_hi(w.z), b.y, s);
  s = fmaf(bf16_lo(w.w), b.z, s);
  s = fmaf(bf16_hi(w.w), b.w, s);
  return s;
}

}  // namespace mk::device
