#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/argmax.hpp"

namespace mk::device {

namespace detail {
using schedule::argmax_better;

// The best (value, index) of every compute thread's, by argmax_better; thread 0 gets it.
// `scratch` holds kWarps values and kWarps indices.
__device__ inline void block_argmax(float& best, uint32_t& index, unsigned char* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const uint32_t oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (argmax_better(ov, oi, best, index)) best = ov, index = oi;
  }
  float* values = reinterpret_cast<float*>(scratch);
  uint32_t* indices = reinterpret_cast<uint32_t*>(values + kWarps);
  block_sync();  // the slots may still be read from an earlier call
  if (threadIdx.x % 32 == 0) values[threadIdx.x / 32] = best, indices[threadIdx.x / 32] = index;
  block_sync();
  if (threadIdx.x == 0)
    for (uint32_t w = 1; w < kWarps; ++w)
      if (argmax_better(values[w], indices[w], best, index)) best = values[w], index = indices[w];
}
}  // namespace detail

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::ArgmaxPayload& p, F&& f) {
  f(p.in, false, Tagging::never);
  f(p.out, true, Tagging::never);
  f(p.parts, true, Tagging::never);
}

__device__ inline void gpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const float* in = mem.at<const float>(p.in);
  float best = -INFINITY;
  uint32_t index = 0xffffffffu;
  auto take = [&](float v, uint32_t i) {
    if (detail::argmax_better(v, i, best, index)) best = v, index = i;
  };
  // The logits arrive from L2 at one round trip per batch: 16-byte loads, eight in flight per
  // thread (44 KB per round trip; with 4-byte loads the 0.5 MB of Llama's logits took 34 round
  // trips, 24 us), then the comparisons. The range starts on a multiple of four (the planner's
  // units); its tail past one (or all of it, if `in` is not 16-byte aligned) one float at a time.
  constexpr uint32_t kBatch = 8;
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && p.begin % 4 == 0;
  const uint32_t first4 = p.begin / 4, end4 = aligned ? p.end / 4 : first4;
  const float4* in4 = reinterpret_cast<const float4*>(in);
  for (uint32_t base = first4; base < end4; base += kBatch * kThreads) {
    float4 v[kBatch];
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      v[k] = i < end4 ? __ldcg(in4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + threadIdx.x;
      if (i < end4) take(v[k].x, 4 * i), take(v[k].y, 4 * i + 1), take(v[k].z, 4 * i + 2), take(v[k].w, 4 * i + 3);
    }
  }
  for (uint32_t i = max(4 * end4, p.begin) + threadIdx.x; i < p.end; i += kThreads) take(load_activation(in + i), i);
  detail::block_argmax(best, index, bc.scratch);

  // Several tasks: this one's best to its part, then the ticket; the last to take it combines
  // the parts (written by their tasks before their tickets: a fence between, as after it).
  __shared__ bool last;
  if (p.tasks > 1) {
    int32_t* parts = mem.at<int32_t>(p.parts);
    if (threadIdx.x == 0) {
      parts[2 * p.task] = __float_as_int(best);
      parts[2 * p.task + 1] = static_cast<int32_t>(index);
      __threadfence();
      last = schedule::last_ticket(atomicAdd(ctx.counters + p.ticket, 1u), p.tasks, ctx.generation);
      __threadfence();
    }
    block_sync();
    if (!last) return;
    best = -INFINITY, index = 0xffffffffu;
    for (uint32_t t = threadIdx.x; t < p.tasks; t += kThreads)
      take(__int_as_float(__ldcg(parts + 2 * t)), static_cast<uint32_t>(__ldcg(parts + 2 * t + 1)));
    detail::block_argmax(best, index, bc.scratch);
  }
  if (threadIdx.x == 0) {
    const int32_t token = index == 0xffffffffu ? 0 : static_cast<int32_t>(index);
    *mem.at<int32_t>(p.out) = token;
    if (ctx.next_tokens) ctx.next_tokens[0] = token;
  }
}

}  // namespace mk::device
