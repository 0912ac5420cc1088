#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/attn_reduce.hpp"

namespace mk::device {

__device__ inline void gpu_run(const schedule::AttnReducePayload& p, const schedule::StepContext&, const TensorTable& mem,
                               BlockContext&) {
  const float* in = mem.at<const float>(p.in);
  float* out = mem.at<float>(p.out);
  const uint32_t hd = p.head_dim, S = p.kv_splits;
  for (uint32_t i = threadIdx.x; i < (p.head_end - p.head_begin) * hd; i += kThreads) {
    const uint32_t h = p.head_begin + i / hd, e = i % hd, g = h / p.rep, r = h % p.rep;
    auto part = [&](uint32_t s) { return in + ((uint64_t{g} * S + s) * p.rep + r) * (hd + 2); };
    float M = -INFINITY;
    for (uint32_t s = 0; s < S; ++s) M = fmaxf(M, load_activation(part(s) + hd));
    float L = 0, acc = 0;
    for (uint32_t s = 0; s < S; ++s) {
      const float l = load_activation(part(s) + hd + 1);
      if (l == 0) continue;
      const float w = expf(load_activation(part(s) + hd) - M);
      L += w * l;
      acc += w * load_activation(part(s) + e);
    }
    out[uint64_t{h} * hd + e] = acc / L;
  }
}

}  // namespace mk::device
