// The matvec at a step of several rows (tokens): per task a small matrix product, out[t][r] =
// W[r] · x[t] for every row t of the step and the task's weight rows r, on the tensor cores. The
// step streams nothing through the weight ring: the task loads its weights and the input itself,
// 64 columns at a time, in a pipeline of cp.async stages in all of shared memory (BlockContext),
// so that each weight tile is read once per step for all the rows. The input is taken in f32 as
// a pair of bf16 (hi and what bf16 left, split_bf16x2): two products per tile, each accurate to
// about 16 bits, so the rows agree with the one-row body to f32 rounding, not bf16's.
#pragma once
#include "device/cuda/async_copy.cuh"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda_limits.hpp"
#include "device/memory.hpp"
#include "schedules/format.hpp"
#include "schedules/ops/matvec.hpp"

namespace mk::device {
namespace detail {

// The product's tiles: up to kRowBlock of the task's weight rows (and as many of up's, for
// silu_mul) by a block of columns, against every row of the input's same columns. The column
// block is sized per task so that a stage streams about kStageWeightBytes of weights (a task of
// few rows takes long blocks: a stage's copies in flight are what keeps the stream going; 64
// columns for 16 rows ran a 16-row task 6x slower than the one-row body on the H100), within what
// the input's rows leave of shared memory. Shared-memory rows are padded so that the fragments'
// loads hit distinct banks: a weight row of K bf16 in 2K + 16 bytes ((K + 8) / 2 words, 4 mod 32:
// the 8 rows a fragment reads start 4 banks apart), an input row of K f32 in 4K + 32 bytes (K + 8
// words, 8 mod 32: 8 banks apart), K a multiple of 64.
inline constexpr uint32_t kRowBlock = 64;
inline constexpr uint32_t kStageWeightBytes = 24 * 1024;
inline constexpr uint32_t kMaxColBlock = 2048;
inline constexpr uint32_t kMaxRowItems = (kRowBlock / 8) * (kMaxCudaRows / 16) / kWarps + 1;
inline constexpr uint32_t kMaxStagesRows = 8;

struct RowsLayout {
  uint32_t n, groups;  // the step's rows computed; groups of 16 of them (the mma's M)
  uint32_t weights;    // weight rows a tile (up to kRowBlock, twice that for silu_mul)
  uint32_t kb;         // columns a stage, a multiple of 64
  uint32_t stage_bytes, stages;
  __device__ uint32_t w_stride() const { return kb + 8; }  // bf16
  __device__ uint32_t x_stride() const { return kb + 8; }  // f32
  __device__ uint32_t w_bytes() const { return weights * w_stride() * 2; }
  __device__ uint32_t x_bytes() const { return n * x_stride() * 4; }
  __device__ uint32_t norm_bytes(bool norm) const { return norm ? kb * 2 : 0; }
};

// Where the task's weight row i lies (of the concatenation; for silu_mul, of gate at w = 0 and up
// at w = 1), or null past the task's rows.
__device__ inline const uint16_t* weight_row(const schedule::MatvecPayload& p, const TensorTable& mem, uint32_t i, bool silu,
                                             uint32_t w) {
  if (i >= p.row_end - p.row_begin) return nullptr;
  const uint32_t row = p.row_begin + i;
  if (silu) return mem.at<const uint16_t>(p.weight[w]) + uint64_t{row} * p.cols;
  uint32_t s = 0, first = 0;
  while (s + 1 < p.weight_count && row >= p.weight_row_end[s]) first = p.weight_row_end[s++];
  return mem.at<const uint16_t>(p.weight[s]) + uint64_t{row - first} * p.cols;
}

// Out of line, with its own register allocation (as every op body).
__device__ __noinline__ void matvec_rows_body(const schedule::MatvecPayload& p, schedule::StepContext ctx, TensorTable mem,
                                              unsigned char* scratch, uint32_t scratch_bytes) {
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul), norm = p.norm != schedule::kNone;
  const uint32_t cols = p.cols, rows = p.row_end - p.row_begin, width = schedule::matvec_out_width(p);
  // Scratch: the weight rows' addresses, each input row's sum of squares and 1/rms, the step rows
  // it computes (all, or the LM head's rows that feed a token: StepContext::fed_logits), the stages.
  float* red = reinterpret_cast<float*>(scratch);                          // [kWarps][32][8]: k-split partial sums
  const uint16_t** wrow = reinterpret_cast<const uint16_t**>(red + kWarps * 32 * 8);  // [2 kRowBlock]
  float* ss = reinterpret_cast<float*>(wrow + 2 * kRowBlock);              // [kMaxCudaRows]
  float* inv = ss + kMaxCudaRows;                                          // [kMaxCudaRows]
  uint32_t* used = reinterpret_cast<uint32_t*>(inv + kMaxCudaRows);        // [kMaxCudaRows + 1]: count, then rows
  unsigned char* stage0 = reinterpret_cast<unsigned char*>(used + kMaxCudaRows + 4);
  if (tid == 0) {
    uint32_t k = 0;
    for (uint32_t t = 0; t < ctx.rows; ++t)
      if (schedule::row_needed(ctx, p.out, t)) used[1 + k++] = t;
    used[0] = k;
  }
  block_sync();
  const uint32_t n = used[0];  // the rows computed; compact row t is the step's row used[1 + t]
  if (n == 0) return;          // a prompt chunk's LM head: no row needs its logits
  const uint32_t rb_rows = min(kRowBlock, rows);  // weight rows a row block (of gate's and of up's)
  RowsLayout L{n, (n + 15) / 16, silu ? 2 * rb_rows : rb_rows, 64, 0, 0};
  const uint32_t fixed = static_cast<uint32_t>(stage0 - scratch);
  // The column block: weights of about kStageWeightBytes a stage, up to the row's length, and at
  // least 3 stages in the scratch.
  const uint32_t room = scratch_bytes - fixed, cols64 = (cols + 63) / 64 * 64;
  L.kb = min(min(kMaxColBlock, cols64), max(64u, kStageWeightBytes / (L.weights * 2) / 64 * 64));
  for (;;) {
    L.stage_bytes = L.w_bytes() + L.x_bytes() + L.norm_bytes(norm);
    if (L.kb == 64 || 3 * L.stage_bytes <= room) break;
    L.kb -= 64;
  }
  L.stages = min(kMaxStagesRows, room / L.stage_bytes);
  if (L.stages < 2) __trap();  // the executor's shared memory is too small for this step's rows
  auto w_of = [&](uint32_t s) { return reinterpret_cast<uint16_t*>(stage0 + s * L.stage_bytes); };
  auto x_of = [&](uint32_t s) { return reinterpret_cast<float*>(stage0 + s * L.stage_bytes + L.w_bytes()); };
  auto nw_of = [&](uint32_t s) { return reinterpret_cast<uint16_t*>(stage0 + s * L.stage_bytes + L.w_bytes() + L.x_bytes()); };
  const uint32_t KB = L.kb, ws = L.w_stride(), xs = L.x_stride();
  for (uint32_t t = tid; t < n; t += kThreads) ss[t] = 0.0f;

  const float* in = mem.at<const float>(p.in);
  const uint32_t kblocks = (cols + KB - 1) / KB, bit = handoff.bit, x_chunks = n * (KB / 4);
  // Stage s's copies of column block kb: the weight rows (zeros past the task's rows and the
  // columns), the input rows, the norm weight's columns.
  // Stage s's copies of column block kb: 16 bytes a thread a copy, the weight rows (zeros past the
  // task's rows and the columns), the input rows, the norm weight's columns. (Bulk copies on the
  // ring's mbarriers, issued by one warp, were slower here and wrong: H100, 2026-12-06.)
  auto issue = [&](uint32_t s, uint32_t kb) {
    const uint32_t c0 = kb * KB, valid = min(KB, cols - c0);
    uint16_t* w = w_of(s);
    for (uint32_t i = tid; i < L.weights * (KB / 8); i += kThreads) {
      const uint32_t r = i / (KB / 8), c = i % (KB / 8) * 8;
      const uint16_t* src = wrow[r];
      const bool ok = src && c < valid;  // else zeros, from an address inside the weights, not read
      cp_async16(w + r * ws + c, ok ? src + c0 + c : mem.at<const uint16_t>(p.weight[0]), ok ? 16 : 0);
    }
    float* x = x_of(s);
    for (uint32_t i = tid; i < x_chunks; i += kThreads) {
      const uint32_t t = i / (KB / 4), c = i % (KB / 4) * 4;
      cp_async16(x + t * xs + c, in + uint64_t{used[1 + t]} * cols + c0 + (c < valid ? c : 0), c < valid ? 16 : 0);
    }
    if (norm)
      for (uint32_t i = tid; i < KB / 8; i += kThreads)
        cp_async16(nw_of(s) + i * 8, mem.at<const uint16_t>(p.norm) + c0 + (i * 8 < valid ? i * 8 : 0), i * 8 < valid ? 16 : 0);
    cp_async_commit();
  };
  // The input as staged is each value with its step's bit (handoff.cuh): any value of another
  // step, and the block loads the stage's input again, polling, until every one is this step's.
  auto check_input = [&](uint32_t s, uint32_t kb) {
    const uint32_t c0 = kb * KB, valid = min(KB, cols - c0);
    float* x = x_of(s);
    uint64_t start = 0;
    for (uint32_t round = 0;; ++round) {
      uint32_t stale = 0;
      for (uint32_t i = tid; i < x_chunks; i += kThreads) {
        const uint32_t t = i / (KB / 4), c = i % (KB / 4) * 4;
        if (c < valid) stale |= stale_bits(*reinterpret_cast<const float4*>(x + t * xs + c), bit);
      }
      if (!block_any(stale)) return true;
      if (stale) keep_polling(round, start, p.in, bit ^ 1u);
      block_sync();
      if (handoff.failed) return false;
      for (uint32_t i = tid; i < x_chunks; i += kThreads) {
        const uint32_t t = i / (KB / 4), c = i % (KB / 4) * 4;
        if (c < valid) *reinterpret_cast<float4*>(x + t * xs + c) = load_tagged4(in + uint64_t{used[1 + t]} * cols + c0 + c);
      }
    }
  };

  // Work items: (weight row group of 8, input row group of 16), dealt to the warps in turn; each
  // warp keeps its items' sums in registers across the columns.
  const uint32_t row_groups = (rb_rows + 7) / 8, items = row_groups * L.groups;
  // Fewer items than warps (few rows, few weight rows: batches of sequences decoding): the warps
  // share an item's k-steps, `ksplit` to an item, and add their sums at the end, so that every
  // warp works (an item a warp left 9 of 11 warps idle and ran a 16-row task compute-bound).
  const uint32_t ksplit = items >= kWarps ? 1 : kWarps / items, share = warp / items;
  const bool idle = ksplit > 1 && warp >= items * ksplit;
  // The warp's j-th item, or `items` (none).
  auto item_of = [&](uint32_t j) { return ksplit > 1 ? (j == 0 && !idle ? warp % items : items) : warp + j * kWarps; };
  uint32_t kb_all = 0;  // column blocks issued in all (their stages in turn)
  for (uint32_t rb = 0; rb < rows; rb += kRowBlock) {
    block_sync();  // the last row block's readers of wrow are done
    for (uint32_t i = tid; i < L.weights; i += kThreads) wrow[i] = weight_row(p, mem, rb + i % rb_rows, silu, i / rb_rows);
    block_sync();
    float acc[kMaxRowItems][4], up[kMaxRowItems][4];
#pragma unroll
    for (uint32_t j = 0; j < kMaxRowItems; ++j)
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) acc[j][e] = up[j][e] = 0.0f;
    const uint32_t first = kb_all;
    for (uint32_t k = 0; k + 1 < L.stages && k < kblocks; ++k) issue((first + k) % L.stages, k);
    for (uint32_t kb = 0; kb < kblocks; ++kb) {
      const uint32_t s = (first + kb) % L.stages;
      // This block's copies landed (at most stages - 2 issued after it), and every thread's did.
      cp_async_wait(min(L.stages - 2, kblocks - 1 - kb));
      if (!check_input(s, kb)) return;  // the block barrier; or the launch aborts
      if (kb + L.stages - 1 < kblocks) issue((first + kb + L.stages - 1) % L.stages, kb + L.stages - 1);
      const float* x = x_of(s);
      const uint16_t* w = w_of(s);
      const uint16_t* nw = nw_of(s);
      if (norm && rb == 0)  // the input rows' sums of squares, once: a warp per row
        for (uint32_t t = warp; t < n; t += kWarps) {
          float sum = 0;
          for (uint32_t c = 2 * lane; c < KB; c += 64) {
            const float2 v = *reinterpret_cast<const float2*>(x + t * xs + c);
            sum += v.x * v.x + v.y * v.y;
          }
          sum = warp_sum(sum);
          if (lane == 0) ss[t] += sum;
        }
#pragma unroll 4
      for (uint32_t ks = ksplit > 1 ? share : 0; ks < KB / 16; ks += ksplit) {
        const uint32_t k0 = ks * 16 + 2 * q;
        float n0 = 1, n1 = 1, n8 = 1, n9 = 1;  // the norm weight folded into the input
        if (norm) {
          const uint32_t a = *reinterpret_cast<const uint32_t*>(nw + k0), b = *reinterpret_cast<const uint32_t*>(nw + k0 + 8);
          n0 = bf16_lo(a), n1 = bf16_hi(a), n8 = bf16_lo(b), n9 = bf16_hi(b);
        }
#pragma unroll
        for (uint32_t j = 0; j < kMaxRowItems; ++j) {
          const uint32_t item = item_of(j);
          if (item >= items) break;
          const uint32_t rg = item % row_groups, tg = item / row_groups, t0 = tg * 16 + g;
          // Input rows past the step's are zeros (not in shared memory).
          const float2 zero = make_float2(0.0f, 0.0f);
          const float* x0 = x + t0 * xs + k0;
          const bool lo_ok = t0 < n, hi_ok = t0 + 8 < n;
          const float2 a0 = lo_ok ? *reinterpret_cast<const float2*>(x0) : zero;
          const float2 a1 = hi_ok ? *reinterpret_cast<const float2*>(x0 + 8 * xs) : zero;
          const float2 a2 = lo_ok ? *reinterpret_cast<const float2*>(x0 + 8) : zero;
          const float2 a3 = hi_ok ? *reinterpret_cast<const float2*>(x0 + 8 * xs + 8) : zero;
          uint32_t hi[4], lo[4];
          split_bf16x2(a0.x * n0, a0.y * n1, hi[0], lo[0]);
          split_bf16x2(a1.x * n0, a1.y * n1, hi[1], lo[1]);
          split_bf16x2(a2.x * n8, a2.y * n9, hi[2], lo[2]);
          split_bf16x2(a3.x * n8, a3.y * n9, hi[3], lo[3]);
          // Weight rows past the task's (a group of 8 cut short) read the zeros copied there, or
          // the next group's rows: their sums are never stored.
          const uint16_t* wr = w + min(rg * 8 + g, L.weights / (silu ? 2 : 1) - 1) * ws + k0;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(wr), b1 = *reinterpret_cast<const uint32_t*>(wr + 8);
          mma_bf16(acc[j], hi, b0, b1);
          mma_bf16(acc[j], lo, b0, b1);
          if (silu) {
            const uint16_t* ur = wr + rb_rows * ws;
            const uint32_t u0 = *reinterpret_cast<const uint32_t*>(ur), u1 = *reinterpret_cast<const uint32_t*>(ur + 8);
            mma_bf16(up[j], hi, u0, u1);
            mma_bf16(up[j], lo, u0, u1);
          }
        }
      }
    }
    kb_all += kblocks;
    // The k-split warps' sums to their item's first warp (share 0), which stores.
    if (ksplit > 1) {
      block_sync();
      if (!idle && share > 0)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) red[(warp * 32 + lane) * 8 + e] = acc[0][e], red[(warp * 32 + lane) * 8 + 4 + e] = up[0][e];
      block_sync();
      if (!idle && share == 0)
        for (uint32_t h = 1; h < ksplit; ++h)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t w2 = warp + h * items;
            acc[0][e] += red[(w2 * 32 + lane) * 8 + e];
            up[0][e] += red[(w2 * 32 + lane) * 8 + 4 + e];
          }
    }
    const bool stores = !idle && (ksplit == 1 || share == 0);
    // The epilogue: lane (g, q) holds rows g and g + 8 of its input group, weight rows 2q and
    // 2q + 1 of its group.
    block_sync();  // the sums of squares complete
    if (rb == 0)
      for (uint32_t t = tid; t < n; t += kThreads) inv[t] = norm ? rsqrtf(ss[t] / cols + p.eps) : 1.0f;
    block_sync();
    float* out = mem.at<float>(p.out);
    const float* residual = p.residual == schedule::kNone ? nullptr : mem.at<const float>(p.residual);
    const bool out_tagged = tagged_field(2), residual_tagged = residual && tagged_field(1);
    // The residuals first, every load issued before any is used (a poll each, in turn, would be
    // a round trip each); the rare value not yet this step's polled after.
    float res[kMaxRowItems][4];
#pragma unroll
    for (uint32_t j = 0; j < kMaxRowItems; ++j)
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t item = stores ? item_of(j) : items, rg = item % row_groups, tg = item / row_groups;
        const uint32_t t = tg * 16 + g + (e >= 2 ? 8 : 0), o = rb + rg * 8 + 2 * q + (e & 1);
        const uint64_t at = uint64_t{t < n ? used[1 + t] : 0} * width + p.row_begin + o;
        res[j][e] = !residual || item >= items || t >= n || o >= rows ? 0.0f
                    : residual_tagged                               ? load_tagged(residual + at)
                                                                    : load_activation(residual + at);
      }
#pragma unroll
    for (uint32_t j = 0; j < kMaxRowItems; ++j) {
      const uint32_t item = stores ? item_of(j) : items;
      if (item >= items) break;
      const uint32_t rg = item % row_groups, tg = item / row_groups;
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t t = tg * 16 + g + (e >= 2 ? 8 : 0), o = rb + rg * 8 + 2 * q + (e & 1);
        if (t >= n || o >= rows) continue;
        const float a = acc[j][e] * inv[t];
        float y = silu ? a / (1.0f + expf(-a)) * (up[j][e] * inv[t]) : a;
        const uint32_t row = p.row_begin + o;
        if (!silu) {  // the bias of this row's weight, if any
          uint32_t s = 0, firstrow = 0;
          while (row >= p.weight_row_end[s]) firstrow = p.weight_row_end[s++];
          if (p.bias[s] != schedule::kNone) y += bf16_to_f32(mem.at<const uint16_t>(p.bias[s])[row - firstrow]);
        }
        const uint64_t at = uint64_t{used[1 + t]} * width + row;
        float r = res[j][e];
        if (residual_tagged && !fresh(r)) r = poll_tagged(residual + at, p.residual);
        store_activation(out + at, r + y, out_tagged, handoff.bit);
      }
    }
  }
  cp_async_wait(0);
}

}  // namespace detail
}  // namespace mk::device
