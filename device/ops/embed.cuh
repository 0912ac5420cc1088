#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/embed.hpp"

namespace mk::device {

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::EmbedPayload& p, F&& f) {
  f(p.out, true, Tagging::either);  // tagged_field(0)
}

__device__ inline void gpu_run(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext&) {
  const uint16_t* table = mem.at<const uint16_t>(p.table);
  float* out = mem.at<float>(p.out);
  // Written by another SM's argmax in the same launch: read through L2 (block.cuh).
  const uint32_t token = static_cast<uint32_t>(__ldcg(ctx.tokens));
  const bool tagged = tagged_field(0);
  const uint32_t bit = detail::handoff.bit;
  for (uint32_t c = p.col_begin + threadIdx.x; c < p.col_end; c += kThreads) {
    const float v = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : __int_as_float(0x7fc00000);
    store_activation(out + c, v, tagged, bit);
  }
}

}  // namespace mk::device
