#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/attn_reduce.hpp"

namespace mk::device {

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::AttnReducePayload& p, F&& f) {
  f(p.in, false, Tagging::never);
  f(p.out, true, Tagging::either);  // tagged_field(1)
}

__device__ inline void gpu_run(const schedule::AttnReducePayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext&) {
  if (p.bypassed && schedule::short_step(ctx)) return;  // the attention wrote the output
  const float* in = mem.at<const float>(p.in);
  float* out = mem.at<float>(p.out);
  const bool tagged = tagged_field(1);  // handoff.cuh
  const uint32_t bit = detail::handoff.bit;
  const uint32_t hd = p.head_dim, S = p.kv_splits, A = schedule::active_kv_splits(ctx, S);
  for (uint32_t i = threadIdx.x; i < (p.head_end - p.head_begin) * hd; i += kThreads) {
    const uint32_t h = p.head_begin + i / hd, e = i % hd, g = h / p.rep, r = h % p.rep;
    const float* first = in + (uint64_t{g} * S * p.rep + r) * (hd + 2);
    const uint64_t stride = uint64_t{p.rep} * (hd + 2);  // from one split's partial to the next
    // All of a thread's loads are independent: issue them before using any (latency, not
    // bandwidth, is what this op costs). Eight splits at a time without a branch, those past A
    // reading split A - 1 again (the max stays, the weight is 0): `#pragma unroll 8` over
    // s < A ran the remainder of a count that is not a multiple of 8 (5 to 7 splits at 257-448
    // positions on Llama-3.1-8B and Qwen3-4B) one dependent load at a time: 1.5-4 % of those
    // steps (bench/NOTES.md 110).
    float M = -INFINITY, L = 0, acc = 0;
    for (uint32_t s0 = 0; s0 < A; s0 += 8) {
#pragma unroll
      for (uint32_t j = 0; j < 8; ++j) M = fmaxf(M, load_activation(first + min(s0 + j, A - 1) * stride + hd));
    }
    for (uint32_t s0 = 0; s0 < A; s0 += 8) {
#pragma unroll
      for (uint32_t j = 0; j < 8; ++j) {
        const float* part = first + min(s0 + j, A - 1) * stride;
        const float m = load_activation(part + hd), l = load_activation(part + hd + 1), a = load_activation(part + e);
        const float w = s0 + j >= A || l == 0 ? 0.0f : expf(m - M);
        L += w * l;
        acc += w * a;
      }
    }
    if (tagged) store_tagged(out + uint64_t{h} * hd + e, acc / L, bit);
    else out[uint64_t{h} * hd + e] = acc / L;
  }
}

}  // namespace mk::device
