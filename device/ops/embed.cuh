#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/embed.hpp"

namespace mk::device {

__device__ inline void gpu_run(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext&) {
  const uint16_t* table = mem.at<const uint16_t>(p.table);
  float* out = mem.at<float>(p.out);
  // Written by another SM's argmax in the same launch: read through L2 (block.cuh).
  const uint32_t token = static_cast<uint32_t>(__ldcg(ctx.tokens));
  for (uint32_t c = p.col_begin + threadIdx.x; c < p.col_end; c += kThreads)
    out[c] = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : __int_as_float(0x7fc00000);
}

}  // namespace mk::device
