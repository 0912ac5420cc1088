#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/cuda_limits.hpp"
#include "device/memory.hpp"
#include "schedules/ops/embed.hpp"

namespace mk::device {

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::EmbedPayload& p, F&& f) {
  f(p.out, true, Tagging::either);  // tagged_field(0)
}

// Shared memory: a token per row.
inline uint32_t gpu_shared_bytes(const schedule::EmbedPayload&) { return 4 * kMaxCudaRows; }

namespace detail {
// kOne: a step of one row (gpu_run: its token read by every thread); else every row (gpu_rows).
template <bool kOne>
__device__ __forceinline__ void embed_body(const schedule::EmbedPayload& p, const schedule::StepContext& ctx,
                                           const TensorTable& mem, unsigned char* scratch) {
  if constexpr (kOne) {
    const uint16_t* table = mem.at<const uint16_t>(p.table);
    float* out = mem.at<float>(p.out);
    // Written by another SM's argmax in the same launch: read through L2 (block.cuh).
    const uint32_t token = static_cast<uint32_t>(__ldcg(schedule::history_at(ctx, ctx.segments[0].slot, ctx.pos)));
    const bool tagged = tagged_field(0);
    const uint32_t bit = detail::handoff.bit;
    for (uint32_t c = p.col_begin + threadIdx.x; c < p.col_end; c += kThreads) {
      const float v = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : __int_as_float(0x7fc00000);
      store_activation(out + c, v, tagged, bit);
    }
    return;
  }
  const uint16_t* table = mem.at<const uint16_t>(p.table);
  float* out = mem.at<float>(p.out);
  // Each row's token, written by another SM's argmax in the same launch: read through L2
  // (block.cuh), a thread a row, then the rows' columns by every thread.
  uint32_t* tokens = reinterpret_cast<uint32_t*>(scratch);
  for (uint32_t r = threadIdx.x; r < ctx.rows; r += kThreads) {
    const schedule::StepSegment& g = schedule::row_segment(ctx, r);
    tokens[r] = static_cast<uint32_t>(__ldcg(schedule::history_at(ctx, g.slot, schedule::row_position(ctx, g, r))));
  }
  block_sync();
  const bool tagged = tagged_field(0);
  const uint32_t bit = detail::handoff.bit, width = p.col_end - p.col_begin;
  for (uint32_t i = threadIdx.x; i < ctx.rows * width; i += kThreads) {
    const uint32_t r = i / width, c = p.col_begin + i % width, token = tokens[r];
    const float v = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : __int_as_float(0x7fc00000);
    store_activation(out + uint64_t{r} * p.hidden + c, v, tagged, bit);
  }
}
}  // namespace detail

__device__ inline void gpu_run(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  detail::embed_body<true>(p, ctx, mem, bc.scratch);
}
__device__ inline void gpu_rows(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc) {
  detail::embed_body<false>(p, ctx, mem, bc.scratch);
}

}  // namespace mk::device
