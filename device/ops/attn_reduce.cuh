#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/attn_reduce.hpp"

namespace mk::device {

// No shared memory: each thread polls and combines its own values.
inline uint32_t gpu_shared_bytes(const schedule::AttnReducePayload&) { return 0; }

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::AttnReducePayload& p, F&& f) {
  f(p.in, false, Tagging::either);  // tagged_field(0): the partials, polled
  f(p.out, true, Tagging::either);  // tagged_field(1)
}

namespace detail {
// Out of line, as the attention's and the matvec's bodies are, so that its poll takes no part
// in the kernel loop's register allocation (inlined, a variant of it made the loop spill 12
// bytes instead of 8; docs/notes.md 117).
__device__ __noinline__ void attn_reduce_body(const schedule::AttnReducePayload& p, schedule::StepContext ctx, TensorTable mem) {
  const float* in = mem.at<const float>(p.in);
  float* out = mem.at<float>(p.out);
  const bool polled = tagged_field(0), tagged = tagged_field(1);
  const uint32_t bit = detail::handoff.bit;
  const uint32_t hd = p.head_dim, S = p.kv_splits, per_row = (p.head_end - p.head_begin) * hd;
  const schedule::AttentionPartials layout{p.kv_heads, S, p.rep, hd};
  const uint64_t width = uint64_t{p.kv_heads} * p.rep * hd;  // an output row
  const bool one = ctx.rows == 1;  // one row: no division by the row's length, no search for its segment
  const uint32_t A1 = schedule::active_kv_splits(ctx, ctx.pos, S);
  for (uint32_t i = threadIdx.x; i < ctx.rows * per_row; i += kThreads) {
    const uint32_t t = one ? 0 : i / per_row, in_row = one ? i : i % per_row;
    const uint32_t h = p.head_begin + in_row / hd, e = i % hd, g = h / p.rep, r = h % p.rep;
    const uint32_t A = one ? A1 : schedule::active_kv_splits(ctx, schedule::row_position(ctx, schedule::row_segment(ctx, t), t), S);
    const float* first = in + layout.at(t, g, 0, r);
    const uint64_t stride = layout.split_stride();  // from one split's partial to the next
    // All of a thread's loads are independent: issue them before using any (latency, not
    // bandwidth, is what this op costs). One pass over the splits, kBatch at a time, each split's
    // max, sum and value loaded together and folded in by an online rescale: a round of polling
    // is one L2 round trip per kBatch splits. Two passes (the maxima first, then the sums and
    // values with the max known) took two round trips per eight splits, four at 16 splits
    // (docs/notes.md 121). A batch is taken whole without a branch, the splits past A reading
    // split A - 1 again with weight 0: a remainder loop ran one dependent load at a time (docs/notes.md
    // 110). Up to kBatch splits the sums are those of two passes, bit for bit (one batch, and M
    // is -inf before it). Tagged partials (no counter to wait for) are polled: each value's
    // lowest bit says whether this step wrote it, and the thread loads all of its values again
    // while any is stale (handoff.cuh).
    constexpr uint32_t kBatch = 8;
    float M, L, acc;
    uint64_t start = 0;
    for (uint32_t round = 0;; ++round) {
      uint32_t stale = 0;
      M = -INFINITY, L = 0, acc = 0;
      for (uint32_t s0 = 0; s0 < A; s0 += kBatch) {
        float m[kBatch], l[kBatch], a[kBatch];
#pragma unroll
        for (uint32_t j = 0; j < kBatch; ++j) {
          const float* part = first + min(s0 + j, A - 1) * stride;
          m[j] = load_tagged(part + hd), l[j] = load_tagged(part + hd + 1), a[j] = load_tagged(part + e);
        }
        float mb = M;
#pragma unroll
        for (uint32_t j = 0; j < kBatch; ++j) {
          stale |= (__float_as_uint(m[j]) ^ bit) | (__float_as_uint(l[j]) ^ bit) | (__float_as_uint(a[j]) ^ bit);
          m[j] = untagged(m[j]);  // an empty split's max is -inf and its sum 0: exact again once untagged
          mb = fmaxf(mb, m[j]);
        }
        const float c = M == -INFINITY ? 0.0f : expf(M - mb);  // what was summed, to the new max
        L *= c, acc *= c;
#pragma unroll
        for (uint32_t j = 0; j < kBatch; ++j) {
          const float w = s0 + j >= A || untagged(l[j]) == 0 ? 0.0f : expf(m[j] - mb);
          L += w * l[j];
          acc += w * a[j];
        }
        M = mb;
      }
      if (!polled || !(stale & 1u)) break;
      if (!keep_polling(round, start, p.in, bit ^ 1u)) return;  // the launch aborts (handoff.failed)
    }
    store_activation(out + t * width + uint64_t{h} * hd + e, acc / L, tagged, bit);
  }
}
}  // namespace detail

__device__ inline void gpu_run(const schedule::AttnReducePayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext&) {
  if (p.bypassed && schedule::short_step(ctx)) return;  // the attention wrote the output
  detail::attn_reduce_body(p, ctx, mem);
}
__device__ inline void gpu_rows(const schedule::AttnReducePayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc) {
  if (p.bypassed && schedule::short_step(ctx)) return;
  detail::attn_reduce_body(p, ctx, mem);
}

}  // namespace mk::device
