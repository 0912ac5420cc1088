#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/argmax.hpp"

namespace mk::device {

namespace detail {
// (value, index) order: larger value first, then lower index.
__device__ __forceinline__ bool argmax_better(float v, uint32_t i, float bv, uint32_t bi) {
  return v > bv || (v == bv && i < bi);
}
}  // namespace detail

__device__ inline void gpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const float* in = mem.at<const float>(p.in);
  float best = -INFINITY;
  uint32_t index = 0xffffffffu;
  // Eight independent loads in flight per thread, then the comparisons.
  constexpr uint32_t kBatch = 8;
  for (uint32_t base = 0; base < p.count; base += kBatch * kThreads) {
    float v[kBatch];
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      v[k] = i < p.count ? load_activation(in + i) : -INFINITY;
    }
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      if (i < p.count && detail::argmax_better(v[k], i, best, index)) best = v[k], index = i;  // NaN never wins
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const uint32_t oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (detail::argmax_better(ov, oi, best, index)) best = ov, index = oi;
  }
  float* values = reinterpret_cast<float*>(bc.scratch);
  uint32_t* indices = reinterpret_cast<uint32_t*>(values + kWarps);
  if (threadIdx.x % 32 == 0) values[threadIdx.x / 32] = best, indices[threadIdx.x / 32] = index;
  block_sync();
  if (threadIdx.x == 0) {
    for (uint32_t w = 1; w < kWarps; ++w)
      if (detail::argmax_better(values[w], indices[w], best, index)) best = values[w], index = indices[w];
    const int32_t token = index == 0xffffffffu ? 0 : static_cast<int32_t>(index);
    *mem.at<int32_t>(p.out) = token;
    if (ctx.next_tokens) ctx.next_tokens[0] = token;
  }
}

}  // namespace mk::device
