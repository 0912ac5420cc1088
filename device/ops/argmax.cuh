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

// Shared memory: block_argmax's kWarps values and indices.
inline uint32_t gpu_shared_bytes(const schedule::ArgmaxPayload&) { return 2 * kWarps * 4; }

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::ArgmaxPayload& p, F&& f) {
  f(p.in, false, Tagging::never);
  f(p.out, true, Tagging::never);
  f(p.parts, true, Tagging::never);
}

namespace detail {
// The best (value, index) of in[begin, end) by argmax_better; thread 0 gets it.
__device__ inline void argmax_range(const float* in, uint32_t begin, uint32_t end, float& best, uint32_t& index,
                                    unsigned char* scratch) {
  best = -INFINITY;
  index = 0xffffffffu;
  auto take = [&](float v, uint32_t i) {
    if (argmax_better(v, i, best, index)) best = v, index = i;
  };
  // The logits arrive from L2 at one round trip per batch: 16-byte loads, eight in flight per
  // thread (44 KB per round trip; with 4-byte loads the 0.5 MB of Llama's logits took 34 round
  // trips, 24 us), then the comparisons. The range starts on a multiple of four (the planner's
  // units); its tail past one (or all of it, if `in` is not 16-byte aligned) one float at a time.
  constexpr uint32_t kBatch = 8;
  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && begin % 4 == 0;
  const uint32_t first4 = begin / 4, end4 = aligned ? end / 4 : first4;
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
  for (uint32_t i = max(4 * end4, begin) + threadIdx.x; i < end; i += kThreads) take(load_activation(in + i), i);
  block_argmax(best, index, scratch);
}

// Row r's token: to out and, where the row's sequence is fed, to its history (by thread 0).
// kOne: the step's only row (no search for its segment).
template <bool kOne = false>
__device__ inline void write_token(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                   uint32_t r, uint32_t index) {
  const int32_t token = index == 0xffffffffu ? 0 : static_cast<int32_t>(index);
  mem.at<int32_t>(p.out)[r] = token;
  if (int32_t* next = schedule::next_token_of(ctx, kOne ? ctx.segments[0] : schedule::row_segment(ctx, r), r)) *next = token;
}
}  // namespace detail

namespace detail {
// Per row of the step: the best of the task's range; with several tasks, each row's best to its
// part (a record a row), one ticket a step, and the last task to take it combines every row's.
// kOne: a step of one row (gpu_run); the rows' (gpu_rows) runs out of the kernel's loop, with
// every op's at a step of several rows (kernel.cuh, execute<true>).
template <bool kOne>
__device__ __forceinline__ void argmax_body(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx,
                                            const TensorTable& mem, unsigned char* scratch) {
  int32_t* parts = p.tasks > 1 ? mem.at<int32_t>(p.parts) : nullptr;
  const uint32_t rows = kOne ? 1 : ctx.rows;
  for (uint32_t r = 0; r < rows; ++r) {
    if (!kOne && !schedule::row_needed(ctx, p.in, r)) continue;  // a token nobody reads, of logits not made
    float best;
    uint32_t index;
    argmax_range(mem.at<const float>(p.in) + uint64_t{r} * p.count, p.begin, p.end, best, index, scratch);
    if (threadIdx.x != 0) continue;
    if (parts) {
      parts[(uint64_t{r} * p.tasks + p.task) * 2] = __float_as_int(best);
      parts[(uint64_t{r} * p.tasks + p.task) * 2 + 1] = static_cast<int32_t>(index);
    } else {
      write_token<kOne>(p, ctx, mem, r, index);
    }
  }
  if (!parts) return;
  // The parts written before the ticket, and read after it: a fence on either side.
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = schedule::last_ticket(atomicAdd(ctx.counters + p.ticket, 1u), p.tasks, ctx.generation);
    __threadfence();
  }
  block_sync();
  if (!last) return;
  for (uint32_t r = 0; r < rows; ++r) {
    if (!kOne && !schedule::row_needed(ctx, p.in, r)) continue;
    float best = -INFINITY;
    uint32_t index = 0xffffffffu;
    const int32_t* row = parts + uint64_t{r} * p.tasks * 2;
    for (uint32_t t = threadIdx.x; t < p.tasks; t += kThreads) {
      const float v = __int_as_float(__ldcg(row + 2 * t));
      const uint32_t i = static_cast<uint32_t>(__ldcg(row + 2 * t + 1));
      if (argmax_better(v, i, best, index)) best = v, index = i;
    }
    block_argmax(best, index, scratch);
    if (threadIdx.x == 0) write_token<kOne>(p, ctx, mem, r, index);
  }
}
}  // namespace detail

__device__ inline void gpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  detail::argmax_body<true>(p, ctx, mem, bc.scratch);
}
__device__ inline void gpu_rows(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc) {
  detail::argmax_body<false>(p, ctx, mem, bc.scratch);
}

}  // namespace mk::device
