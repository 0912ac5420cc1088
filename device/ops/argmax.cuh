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
  auto take = [&](float v, uint32_t i) {
    if (detail::argmax_better(v, i, best, index)) best = v, index = i;  // NaN never wins
  };
  // The logits arrive from L2 at one round trip per batch: 16-byte loads, eight in flight per
  // thread (60 KB per round trip; with 4-byte loads the 0.5 MB of Llama's logits took 34 round
  // trips, 24 us), then the comparisons. The tail past a multiple of four (or all of it, if
  // `in` is not 16-byte aligned) one float at a time.
  constexpr uint32_t kBatch = 8;
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const uint32_t n4 = aligned ? p.count / 4 : 0;
  const float4* in4 = reinterpret_cast<const float4*>(in);
  for (uint32_t base = 0; base < n4; base += kBatch * kThreads) {
    float4 v[kBatch];
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      v[k] = i < n4 ? __ldcg(in4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      if (i < n4) take(v[k].x, 4 * i), take(v[k].y, 4 * i + 1), take(v[k].z, 4 * i + 2), take(v[k].w, 4 * i + 3);
    }
  }
  for (uint32_t i = 4 * n4 + threadIdx.x; i < p.count; i += kThreads) take(load_activation(in + i), i);
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
