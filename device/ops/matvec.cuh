#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "schedules/ops/matvec.hpp"

namespace mk::device {

// Scratch: the (normed) input vector, one accumulator per output row (two for silu_mul), and
// kWarps floats for the norm's reduction.
inline uint32_t matvec_shared_bytes(const schedule::MatvecPayload& p) {
  const uint32_t rows = p.row_end - p.row_begin;
  return (p.cols + 2 * rows + kWarps) * 4;
}

// The task's weights as ring tiles, in order: each weight segment's rows, whole rows per tile
// while a row fits a stage, else each row in stage-sized pieces. Accumulator rows: output row
// - row_begin, plus `rows` for silu_mul's up projection.
template <class F>
__device__ void gpu_weight_tiles(const schedule::MatvecPayload& p, const TensorTable& mem, F&& f) {
  const uint32_t cols = p.cols, rows = p.row_end - p.row_begin, row_bytes = cols * 2;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  auto segment = [&](const uint16_t* weight, uint32_t first_row, uint32_t count, uint32_t acc_row) {
    if (row_bytes <= kStageBytes) {
      const uint32_t per_tile = kStageBytes / row_bytes;
      for (uint32_t r = 0; r < count; r += per_tile) {
        const uint32_t n = min(per_tile, count - r);
        f(WeightTile{weight + uint64_t{first_row + r} * cols, n * row_bytes, acc_row + r, n, 0, cols});
      }
    } else {
      const uint32_t piece = kStageBytes / 2;
      for (uint32_t r = 0; r < count; ++r)
        for (uint32_t c = 0; c < cols; c += piece) {
          const uint32_t n = min(piece, cols - c);
          f(WeightTile{weight + uint64_t{first_row + r} * cols + c, n * 2, acc_row + r, 1, c, n});
        }
    }
  };
  if (silu) {
    segment(mem.at<const uint16_t>(p.weight[0]), p.row_begin, rows, 0);
    segment(mem.at<const uint16_t>(p.weight[1]), p.row_begin, rows, rows);
    return;
  }
  uint32_t first = 0;
  for (uint32_t i = 0; i < p.weight_count; ++i) {
    const uint32_t end = p.weight_row_end[i];
    const uint32_t a = max(first, p.row_begin), b = min(end, p.row_end);
    if (a < b) segment(mem.at<const uint16_t>(p.weight[i]), a - first, b - a, a - p.row_begin);
    first = end;
  }
}

// The producer warp streams the weight tiles into the ring; compute warp s consumes the tiles
// of stage s (a warp-wide dot product per tile row, added into a shared accumulator), then
// the epilogue applies silu_mul and the residual.
__device__ inline void gpu_run(const schedule::MatvecPayload& p, const schedule::StepContext&, const TensorTable& mem,
                               BlockContext& bc) {
  const uint32_t cols = p.cols, rows = p.row_end - p.row_begin, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  float* x = reinterpret_cast<float*>(bc.scratch);
  float* acc = x + cols;
  float* partial = acc + 2 * rows;
  const float* in = mem.at<const float>(p.in);
  // 16-byte loads, unrolled so that a thread's loads are all in flight at once.
  const float4* in4 = reinterpret_cast<const float4*>(in);
  float4* x4w = reinterpret_cast<float4*>(x);
#pragma unroll 4
  for (uint32_t i = tid; i < cols / 4; i += kThreads) x4w[i] = __ldcg(in4 + i);
  block_sync();  // the norm below reads elements other threads loaded
  for (uint32_t i = tid; i < 2 * rows; i += kThreads) acc[i] = 0;
  // The residual is loaded now, with the input, rather than after the weights: one round trip
  // to L2 fewer on the critical path. Thread i keeps the residual of its epilogue rows.
  constexpr uint32_t kResidualRows = 2;  // rows per thread kept in registers (res[0], res[1]); more load late
  const float* residual = p.residual == schedule::kNone ? nullptr : mem.at<const float>(p.residual);
  float res[kResidualRows] = {0, 0};
#pragma unroll
  for (uint32_t k = 0; k < kResidualRows; ++k)
    if (residual && tid + k * kThreads < rows) res[k] = load_activation(residual + p.row_begin + tid + k * kThreads);
  if (p.norm != schedule::kNone) {
    float ss = 0;
    for (uint32_t i = tid; i < cols; i += kThreads) ss += x[i] * x[i];
    const float inv = rsqrtf(block_sum(ss, partial) / cols + p.eps);
    const uint16_t* w = mem.at<const uint16_t>(p.norm);
    for (uint32_t i = tid; i < cols; i += kThreads) x[i] = x[i] * inv * bf16_to_f32(w[i]);
  }
  block_sync();
  bc.mark(0);

  WeightRing& ring = bc.ring;
  uint32_t k = ring.next_tile;
  gpu_weight_tiles(p, mem, [&](const WeightTile& t) {
    const uint32_t stage = k % ring.count;
    if (warp == stage) {
      mbar_wait(ring.full + stage, (k / ring.count) & 1);
      const uint16_t* w = reinterpret_cast<const uint16_t*>(ring.stages + stage * kStageBytes);
      const float4* x4 = reinterpret_cast<const float4*>(x + t.col0);
      const uint32_t chunks = t.cols / 8;
      for (uint32_t r = 0; r < t.rows; ++r) {
        const uint4* row = reinterpret_cast<const uint4*>(w + r * t.cols);
        float s = 0;
#pragma unroll 4
        for (uint32_t c = lane; c < chunks; c += 32) s += dot8(row[c], x4[2 * c], x4[2 * c + 1]);
        s = warp_sum(s);
        if (lane == 0) atomicAdd(acc + t.acc_row + r, s);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(ring.empty + stage);
    }
    ++k;
  });
  ring.next_tile = k;
  block_sync();
  ring.hush();
  bc.mark(1);

  float* out = mem.at<float>(p.out);
  for (uint32_t i = tid, k = 0; i < rows; i += kThreads, ++k) {
    const float a = acc[i];
    const float y = silu ? a / (1.0f + expf(-a)) * acc[rows + i] : a;
    const float r = !residual ? 0.0f : k == 0 ? res[0] : k == 1 ? res[1] : load_activation(residual + p.row_begin + i);
    out[p.row_begin + i] = r + y;
  }
}

}  // namespace mk::device
