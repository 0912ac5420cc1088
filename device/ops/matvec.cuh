#pragma once
#include "device/cuda/block.cuh"
#include "device/memory.hpp"
#include "schedules/ops/matvec.hpp"

namespace mk::device {

// Shared memory: the (normed) input vector, then 2 * kWarps floats of partial sums.
inline uint32_t matvec_shared_bytes(const schedule::MatvecPayload& p) { return (p.cols + 2 * kWarps) * 4; }

// Each row is handled by W warps (W = the largest power of two with rows * W <= kWarps), each
// lane reading 16 bytes of weights at a time; the input vector sits in shared memory.
__device__ inline void gpu_run(const schedule::MatvecPayload& p, const schedule::StepContext&, const TensorTable& mem,
                               unsigned char* smem) {
  const uint32_t cols = p.cols, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* x = reinterpret_cast<float*>(smem);
  float* partial = x + cols;
  const float* in = mem.at<const float>(p.in);
  for (uint32_t i = tid; i < cols; i += kThreads) x[i] = load_activation(in + i);
  if (p.norm != schedule::kNone) {
    float ss = 0;
    for (uint32_t i = tid; i < cols; i += kThreads) ss += x[i] * x[i];
    const float inv = rsqrtf(block_sum(ss, partial) / cols + p.eps);
    const uint16_t* w = mem.at<const uint16_t>(p.norm);
    for (uint32_t i = tid; i < cols; i += kThreads) x[i] = x[i] * inv * bf16_to_f32(w[i]);
  }
  __syncthreads();

  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  const uint32_t rows = p.row_end - p.row_begin;
  uint32_t W = 1;
  while (W < 32 && rows * W * 2 <= kWarps) W *= 2;
  const uint32_t rows_per_pass = kWarps / W, chunks = cols / 8, slice = warp % W;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float* out = mem.at<float>(p.out);

  for (uint32_t r0 = 0; r0 < rows; r0 += rows_per_pass) {
    const uint32_t local = r0 + warp / W;
    float acc0 = 0, acc1 = 0;
    if (local < rows) {
      const uint32_t r = p.row_begin + local;
      const uint16_t *w0, *w1 = nullptr;
      if (silu) {
        w0 = mem.at<const uint16_t>(p.weight[0]) + uint64_t{r} * cols;
        w1 = mem.at<const uint16_t>(p.weight[1]) + uint64_t{r} * cols;
      } else {
        uint32_t i = 0, first = 0;
        while (r >= p.weight_row_end[i]) first = p.weight_row_end[i++];
        w0 = mem.at<const uint16_t>(p.weight[i]) + uint64_t{r - first} * cols;
      }
#pragma unroll 4
      for (uint32_t c = slice * 32 + lane; c < chunks; c += 32 * W) {
        const float4 a = x4[2 * c], b = x4[2 * c + 1];
        acc0 += dot8(load_weights16(w0 + 8 * c), a, b);
        if (silu) acc1 += dot8(load_weights16(w1 + 8 * c), a, b);
      }
      acc0 = warp_sum(acc0);
      acc1 = warp_sum(acc1);
    }
    if (W > 1) {
      __syncthreads();
      if (lane == 0) partial[warp] = acc0, partial[kWarps + warp] = acc1;
      __syncthreads();
      if (slice == 0 && lane == 0) {
        acc0 = acc1 = 0;
        for (uint32_t k = 0; k < W; ++k) acc0 += partial[warp + k], acc1 += partial[kWarps + warp + k];
      }
    }
    if (slice == 0 && lane == 0 && local < rows) {
      const uint32_t r = p.row_begin + local;
      const float y = silu ? acc0 / (1.0f + expf(-acc0)) * acc1 : acc0;
      out[r] = p.residual == schedule::kNone ? y : load_activation(mem.at<const float>(p.residual) + r) + y;
    }
  }
}

}  // namespace mk::device
