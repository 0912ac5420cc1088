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
#include "device/fp8.hpp"
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
// loads hit distinct banks: a weight row of K bf16 in 2K + 16 bytes (16 mod 128: the 8 rows an
// ldmatrix phase reads fill the 32 banks once), an input row of K f32 in 4K + 32 bytes (K + 8
// words, 8 mod 32: 8 banks apart), K a power of two of at least 64.
inline constexpr uint32_t kRowBlock = 64;
inline constexpr uint32_t kStageWeightBytes = 24 * 1024;
inline constexpr uint32_t kMaxColBlock = 2048;
inline constexpr uint32_t kRowGroups = kRowBlock / 16;                                   // of the mma's 16 rows
inline constexpr uint32_t kMaxTokenGroups = (kMaxCudaRows / 8 + kWarps - 1) / kWarps;  // a warp's, of 8 rows
inline constexpr uint32_t kMaxStagesRows = 8;

struct RowsLayout {
  uint32_t n;          // the step's rows computed
  uint32_t weights;    // weight rows a tile (up to kRowBlock, twice that for silu_mul)
  uint32_t kb;         // columns a stage, a power of two of at least 64 (for_chunks)
  uint32_t stage_bytes, stages;
  uint32_t eb;         // bytes a weight: 2 (bf16) or 1 (f8e4m3, whose row of K takes K + 16 bytes: 16 mod 64)
  __device__ uint32_t w_row_bytes() const { return eb * kb + 16; }
  __device__ uint32_t x_stride() const { return kb + 8; }  // f32
  __device__ uint32_t w_bytes() const { return weights * w_row_bytes(); }
  __device__ uint32_t x_bytes() const { return n * x_stride() * 4; }
  __device__ uint32_t norm_bytes(bool norm) const { return norm ? kb * 2 : 0; }
};

// Where the task's weight row i lies (of the concatenation; for silu_mul, of gate, or of up with
// `up`), or null past the task's rows; for float8 weights (eb 1), `scales` where its scales are.
__device__ inline const unsigned char* weight_row(const schedule::MatvecPayload& p, const TensorTable& mem, uint32_t i, bool up,
                                                  uint32_t eb, const float*& scales) {
  scales = mem.at<const float>(p.weight[0] + (eb == 1));  // rows past the task's: any scale (their weights are zeros)
  if (i >= p.row_end - p.row_begin) return nullptr;
  const schedule::MatvecWeightRow r = schedule::matvec_weight_row(p, p.row_begin + i, up);
  if (eb == 1) scales = mem.at<const float>(p.weight[r.weight] + 1) + schedule::matvec_scale_index(p, r.row, 0);
  return mem.at<const unsigned char>(p.weight[r.weight]) + uint64_t{r.row} * p.cols * eb;
}

// f(r, c) for this thread's share of `count` rows of 2^shift 16-byte chunks (chunk i = tid,
// tid + kThreads, ... as row i >> shift, chunk i & mask): shifts and masks, not divisions (a
// runtime division is ~20 instructions: docs/notes.md 126). The shift is read from shared memory
// at each use: held in registers across the column blocks, the stepping's constants made the
// products' loop spill (ptxas: 284 bytes of reloads).
template <class F>
__device__ __forceinline__ void for_chunks(uint32_t count, const volatile uint32_t* shift_at, F&& f) {
  const uint32_t shift = *shift_at, per_row = 1u << shift, mask = per_row - 1;
  const uint32_t dr = kThreads >> shift, dc = kThreads & mask;
  uint32_t r = threadIdx.x >> shift, c = threadIdx.x & mask;
  while (r < count) {
    f(r, c);
    r += dr, c += dc;
    if (c >= per_row) c -= per_row, ++r;
  }
}

// The A operand of mma_bf16 from float8 rows in shared memory (t8: row g at column 2q, rows
// `stride` bytes apart), each pair widened to bf16x2: as ldmatrix_x4 gives a bf16 tile.
__device__ __forceinline__ void f8_fragment(uint32_t (&a)[4], const unsigned char* t8, uint32_t stride) {
  a[0] = f8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(t8));
  a[1] = f8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(t8 + 8 * stride));
  a[2] = f8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(t8 + 8));
  a[3] = f8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(t8 + 8 * stride + 8));
}

// d += (a b) scaled: the k-step's products (b as hi + lo) summed apart, then rows g (d[0], d[1])
// times s0 and g + 8 (d[2], d[3]) times s1: a block scale over a k-step inside its block.
__device__ __forceinline__ void mma_scaled(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&hi)[2], const uint32_t (&lo)[2],
                                           float s0, float s1) {
  float t[4] = {0, 0, 0, 0};
  mma_bf16(t, a, hi[0], hi[1]);
  mma_bf16(t, a, lo[0], lo[1]);
  d[0] = fmaf(t[0], s0, d[0]), d[1] = fmaf(t[1], s0, d[1]), d[2] = fmaf(t[2], s1, d[2]), d[3] = fmaf(t[3], s1, d[3]);
}

// Out of line, with its own register allocation (as every op body). kF8: the instance with float8
// weights (WeightKinds), whose body takes every kind of weights, chosen at run time (a copy a kind
// spilled: matvec.cuh, dot_rows_any). Float8 weights are staged as they are (half the bytes of
// bf16) and widened to bf16 (exactly) as the A operand's registers are loaded; block scales
// multiply each k-step's products (of 16 columns, inside one 128-column block), row scales the
// finished sums.
template <bool kF8>
__device__ __noinline__ void matvec_rows_body(const schedule::MatvecPayload& p, schedule::StepContext ctx, TensorTable mem,
                                              unsigned char* scratch, uint32_t scratch_bytes) {
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul), norm = p.norm != schedule::kNone;
  const uint32_t cols = p.cols, rows = p.row_end - p.row_begin, width = schedule::matvec_out_width(p);
  // Scratch: the weight rows' addresses, each input row's sum of squares and 1/rms, the step rows
  // it computes (all, or the LM head's rows that feed a token: StepContext::fed_logits), the stages.
  float* red = reinterpret_cast<float*>(scratch);                          // [kWarps][32][8]: k-split partial sums
  const unsigned char** wrow = reinterpret_cast<const unsigned char**>(red + kWarps * 32 * 8);  // [2 kRowBlock]
  const float** srow = reinterpret_cast<const float**>(wrow + 2 * kRowBlock);  // [2 kRowBlock]: float8 scales
  float* ss = reinterpret_cast<float*>(srow + 2 * kRowBlock);              // [kMaxCudaRows]
  float* inv = ss + kMaxCudaRows;                                          // [kMaxCudaRows]
  uint32_t* used = reinterpret_cast<uint32_t*>(inv + kMaxCudaRows);        // [kMaxCudaRows + 1]: count, then rows
  uint32_t* shifts = used + kMaxCudaRows + 1;                               // [2]: log2 of a stage's chunks a row (weights, input)
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
  // The tile's rows: row groups of 16 (gate's, then as many of up's for silu), zeros past the task's.
  const uint32_t rgroups = (rb_rows + 15) / 16, part = rgroups * 16;
  const bool f8 = kF8 && schedule::matvec_fp8(p);
  const bool block = kF8 && p.weight_format == static_cast<uint16_t>(schedule::WeightFormat::f8_block128);
  const bool late = f8 && !block;  // a row's or the tensor's scale, to the finished sums
  const uint32_t eb = f8 ? 1 : 2;
  RowsLayout L{n, silu ? 2 * part : part, 64, 0, 0, eb};
  const uint32_t fixed = static_cast<uint32_t>(stage0 - scratch);
  // The column block: a power of two of at least 64 (for_chunks), weights of about
  // kStageWeightBytes a stage (the power of two nearest it), not past the row's length rounded
  // up to one, and at least 4 stages in the scratch (their count is rounded down to a power of two).
  const uint32_t room = scratch_bytes - fixed, want = max(64u, kStageWeightBytes / (L.weights * eb));
  L.kb = 64;
  while (L.kb < kMaxColBlock && L.kb < cols && 3 * L.kb <= 2 * want) L.kb *= 2;  // up while 1.5 kb <= want
  for (;;) {
    L.stage_bytes = L.w_bytes() + L.x_bytes() + L.norm_bytes(norm);
    if (L.kb == 64 || 4 * L.stage_bytes <= room) break;
    L.kb /= 2;
  }
  L.stages = min(kMaxStagesRows, room / L.stage_bytes);
  if (L.stages < 2) __trap();  // the executor's shared memory is too small for this step's rows
  L.stages = 1u << (31 - __clz(L.stages));  // a power of two (2, 4 or 8)
  auto w_of = [&](uint32_t s) { return stage0 + s * L.stage_bytes; };
  auto x_of = [&](uint32_t s) { return reinterpret_cast<float*>(stage0 + s * L.stage_bytes + L.w_bytes()); };
  auto nw_of = [&](uint32_t s) { return reinterpret_cast<uint16_t*>(stage0 + s * L.stage_bytes + L.w_bytes() + L.x_bytes()); };
  const uint32_t KB = L.kb, wsb = L.w_row_bytes(), ws = wsb / 2, xs = L.x_stride();  // ws: in bf16
  for (uint32_t t = tid; t < n; t += kThreads) ss[t] = 0.0f;

  const float* in = mem.at<const float>(p.in);
  const uint32_t kblocks = (cols + KB - 1) / KB, bit = handoff.bit;
  if (tid == 0) shifts[0] = __ffs(KB * eb / 16) - 1, shifts[1] = __ffs(KB / 4) - 1;  // seen after the row block's barriers
  // Stage s's copies of column block kb: 16 bytes a thread a copy, the weight rows (zeros past the
  // task's rows and the columns), the input rows, the norm weight's columns. (Bulk copies on the
  // ring's mbarriers, issued by one warp, were slower here and wrong: H100, 2026-12-06.)
  auto issue = [&](uint32_t s, uint32_t kb) {
    const uint32_t c0 = kb * KB, valid = min(KB, cols - c0);
    unsigned char* w = w_of(s);
    for_chunks(L.weights, shifts, [&](uint32_t r, uint32_t c) {  // c: 16 bytes, 16 / eb columns
      const unsigned char* src = wrow[r];
      const bool ok = src && c * (16 / eb) < valid;  // else zeros, from an address inside the weights, not read
      cp_async16(w + r * wsb + c * 16, ok ? src + c0 * eb + c * 16 : mem.at<const unsigned char>(p.weight[0]), ok ? 16 : 0);
    });
    float* x = x_of(s);
    for_chunks(n, shifts + 1, [&](uint32_t t, uint32_t c) {
      const bool ok = c * 4 < valid;
      cp_async16(x + t * xs + c * 4, in + uint64_t{used[1 + t]} * cols + c0 + (ok ? c * 4 : 0), ok ? 16 : 0);
    });
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
      for_chunks(n, shifts + 1, [&](uint32_t t, uint32_t c) {
        if (c * 4 < valid) stale |= stale_bits(*reinterpret_cast<const float4*>(x + t * xs + c * 4), bit);
      });
      if (!block_any(stale)) return true;
      if (stale) keep_polling(round, start, p.in, bit ^ 1u);
      block_sync();
      if (handoff.failed) return false;
      for_chunks(n, shifts + 1, [&](uint32_t t, uint32_t c) {
        if (c * 4 < valid)
          *reinterpret_cast<float4*>(x + t * xs + c * 4) = load_tagged4(in + uint64_t{used[1 + t]} * cols + c0 + c * 4);
      });
    }
  };

  // The products: the mma's A is 16 weight rows (ldmatrix from the stage), its B 8 input rows (a
  // "token group"), so a step of up to 8 rows wastes nothing of a weight tile's loads. A warp takes
  // a token group against every weight row of the tile (the input's split into hi and lo done once
  // for all of them), its sums in registers across the columns; with fewer token groups than
  // warps (batches of sequences decoding) the warps share a group's k-steps, `ksplit` to a group,
  // and add their sums at the end; with more (up to kMaxCudaRows / 8), a warp takes two groups.
  const uint32_t tgroups = (n + 7) / 8;
  const uint32_t ksplit = tgroups >= kWarps ? 1 : kWarps / tgroups, share = ksplit > 1 ? warp / tgroups : 0;
  // The warp's j-th token group, or `tgroups` (none).
  auto tg_of = [&](uint32_t j) {
    if (ksplit > 1) return j == 0 && warp < tgroups * ksplit ? warp % tgroups : tgroups;
    return warp + j * kWarps < tgroups ? warp + j * kWarps : tgroups;
  };
  uint32_t tgs[kMaxTokenGroups];
#pragma unroll
  for (uint32_t j = 0; j < kMaxTokenGroups; ++j) tgs[j] = tg_of(j);
  // Lane l's row of an ldmatrix tile, and its column (ldmatrix_x4).
  const uint32_t lane_at = (lane % 16) * ws + lane / 16 * 8, up_at = part * ws;
  uint32_t kb_all = 0;  // column blocks issued in all (their stages in turn)
  for (uint32_t rb = 0; rb < rows; rb += kRowBlock) {
    block_sync();  // the last row block's readers of wrow are done
    for (uint32_t i = tid; i < L.weights; i += kThreads) {
      const float* scales;
      wrow[i] = weight_row(p, mem, i % part < rb_rows ? rb + i % part : rows, i / part == 1, eb, scales);
      srow[i] = scales;
    }
    block_sync();
    float acc[kMaxTokenGroups][kRowGroups][4], up[kMaxTokenGroups][kRowGroups][4];
#pragma unroll
    for (uint32_t j = 0; j < kMaxTokenGroups; ++j)
#pragma unroll
      for (uint32_t r = 0; r < kRowGroups; ++r)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) acc[j][r][e] = up[j][r][e] = 0.0f;
    // The stage of a column block: stages are a power of two, so a mask, not a division.
    const uint32_t first = kb_all, smask = L.stages - 1;
    for (uint32_t k = 0; k + 1 < L.stages && k < kblocks; ++k) issue((first + k) & smask, k);
    for (uint32_t kb = 0; kb < kblocks; ++kb) {
      const uint32_t s = (first + kb) & smask;
      // This block's copies landed (at most stages - 2 issued after it), and every thread's did.
      cp_async_wait(min(L.stages - 2, kblocks - 1 - kb));
      if (!check_input(s, kb)) return;  // the block barrier; or the launch aborts
      if (kb + L.stages - 1 < kblocks) issue((first + kb + L.stages - 1) & smask, kb + L.stages - 1);
      const float* x = x_of(s);
      const unsigned char* w = w_of(s);
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
#pragma unroll 2
      for (uint32_t ks = tgs[0] < tgroups ? share : KB / 16; ks < KB / 16; ks += ksplit) {
        const uint32_t k0 = ks * 16 + 2 * q;
        float n0 = 1, n1 = 1, n8 = 1, n9 = 1;  // the norm weight folded into the input
        if (norm) {
          const uint32_t a = *reinterpret_cast<const uint32_t*>(nw + k0), b = *reinterpret_cast<const uint32_t*>(nw + k0 + 8);
          n0 = bf16_lo(a), n1 = bf16_hi(a), n8 = bf16_lo(b), n9 = bf16_hi(b);
        }
        // B: lane (g, q) holds input row g of the group at columns 2q, 2q + 1 and 2q + 8, 2q + 9;
        // rows past the step's are zeros (not in shared memory).
        uint32_t hi[kMaxTokenGroups][2], lo[kMaxTokenGroups][2];
#pragma unroll
        for (uint32_t j = 0; j < kMaxTokenGroups; ++j) {
          const uint32_t tg = tgs[j], t = tg * 8 + g;
          if (tg >= tgroups) break;
          float2 v0 = make_float2(0.0f, 0.0f), v8 = v0;
          if (t < n) {
            v0 = *reinterpret_cast<const float2*>(x + t * xs + k0);
            v8 = *reinterpret_cast<const float2*>(x + t * xs + k0 + 8);
          }
          split_bf16x2(v0.x * n0, v0.y * n1, hi[j][0], lo[j][0]);
          split_bf16x2(v8.x * n8, v8.y * n9, hi[j][1], lo[j][1]);
        }
#pragma unroll
        for (uint32_t r = 0; r < kRowGroups; ++r) {
          if (r >= rgroups) break;
          uint32_t a[4], u[4];
          if (!f8) {
            const uint16_t* tile = reinterpret_cast<const uint16_t*>(w) + r * 16 * ws + lane_at + ks * 16;
            ldmatrix_x4(a, tile);
            if (silu) ldmatrix_x4(u, tile + up_at);
          } else {  // lane (g, q): rows g and g + 8, columns 2q, 2q + 1 and 2q + 8, 2q + 9 (ldmatrix_x4's a[0..3])
            const unsigned char* t8 = w + (r * 16 + g) * wsb + ks * 16 + 2 * q;
            f8_fragment(a, t8, wsb);
            if (silu) f8_fragment(u, t8 + part * wsb, wsb);
          }
          // Block scales: rows g and g + 8's of this k-step's 128-column block.
          float sa0 = 1, sa1 = 1, su0 = 1, su1 = 1;
          if (block) {
            const uint32_t cb = (kb * KB + ks * 16) >> 7, i0 = r * 16 + g;
            sa0 = __ldg(srow[i0] + cb), sa1 = __ldg(srow[i0 + 8] + cb);
            if (silu) su0 = __ldg(srow[part + i0] + cb), su1 = __ldg(srow[part + i0 + 8] + cb);
          }
#pragma unroll
          for (uint32_t j = 0; j < kMaxTokenGroups; ++j) {
            if (tgs[j] >= tgroups) break;
            if (block) {
              mma_scaled(acc[j][r], a, hi[j], lo[j], sa0, sa1);
              if (silu) mma_scaled(up[j][r], u, hi[j], lo[j], su0, su1);
            } else {
              mma_bf16(acc[j][r], a, hi[j][0], hi[j][1]);
              mma_bf16(acc[j][r], a, lo[j][0], lo[j][1]);
              if (silu) {
                mma_bf16(up[j][r], u, hi[j][0], hi[j][1]);
                mma_bf16(up[j][r], u, lo[j][0], lo[j][1]);
              }
            }
          }
        }
      }
    }
    kb_all += kblocks;
    // The k-split warps' sums to their group's first warp (share 0), which stores: a row group a round.
    const bool stores = tgs[0] < tgroups && share == 0;
    if (ksplit > 1)
#pragma unroll
      for (uint32_t r = 0; r < kRowGroups; ++r) {
        if (r >= rgroups) break;
        block_sync();
        if (tgs[0] < tgroups && share > 0)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) red[(warp * 32 + lane) * 8 + e] = acc[0][r][e], red[(warp * 32 + lane) * 8 + 4 + e] = up[0][r][e];
        block_sync();
        if (stores)
          for (uint32_t h = 1; h < ksplit; ++h)
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
              const uint32_t w2 = warp + h * tgroups;
              acc[0][r][e] += red[(w2 * 32 + lane) * 8 + e];
              up[0][r][e] += red[(w2 * 32 + lane) * 8 + 4 + e];
            }
      }
    // The epilogue: lane (g, q) holds weight rows g and g + 8 of each row group, input rows 2q
    // and 2q + 1 of its token group.
    block_sync();  // the sums of squares complete
    if (rb == 0)
      for (uint32_t t = tid; t < n; t += kThreads) inv[t] = norm ? rsqrtf(ss[t] / cols + p.eps) : 1.0f;
    block_sync();
    float* out = mem.at<float>(p.out);
    const float* residual = p.residual == schedule::kNone ? nullptr : mem.at<const float>(p.residual);
    const bool out_tagged = tagged_field(2), residual_tagged = residual && tagged_field(1);
#pragma unroll
    for (uint32_t j = 0; j < kMaxTokenGroups; ++j) {
      const uint32_t tg = stores ? tgs[j] : tgroups;
      if (tg >= tgroups) break;
      // The residuals first, every load issued before any is used (a poll each, in turn, would
      // be a round trip each); the rare value not yet this step's polled after.
      float res[kRowGroups][4];
#pragma unroll
      for (uint32_t r = 0; r < kRowGroups; ++r)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
          const uint32_t t = tg * 8 + 2 * q + (e & 1), o = rb + r * 16 + g + (e >= 2 ? 8 : 0);
          const uint64_t at = uint64_t{t < n ? used[1 + t] : 0} * width + p.row_begin + o;
          res[r][e] = !residual || r >= rgroups || t >= n || o >= rows ? 0.0f
                      : residual_tagged                                ? load_tagged(residual + at)
                                                                       : load_activation(residual + at);
        }
#pragma unroll
      for (uint32_t r = 0; r < kRowGroups; ++r) {
        if (r >= rgroups) break;
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
          const uint32_t t = tg * 8 + 2 * q + (e & 1), o = rb + r * 16 + g + (e >= 2 ? 8 : 0);
          if (t >= n || o >= rows) continue;
          // Row (or tensor) scales of float8 weights, to the finished sums.
          const float sg = late ? *srow[o - rb] : 1.0f, su = late && silu ? *srow[part + o - rb] : 1.0f;
          const float a = acc[j][r][e] * inv[t] * sg;
          float y = silu ? a / (1.0f + expf(-a)) * (up[j][r][e] * inv[t] * su) : a;
          const uint32_t row = p.row_begin + o;
          if (!silu) {  // the bias of this row's weight, if any
            const schedule::MatvecWeightRow w = schedule::matvec_weight_row(p, row);
            if (p.bias[w.weight] != schedule::kNone) y += bf16_to_f32(mem.at<const uint16_t>(p.bias[w.weight])[w.row]);
          }
          const uint64_t at = uint64_t{used[1 + t]} * width + row;
          float rv = res[r][e];
          if (residual_tagged && !fresh(rv)) rv = poll_tagged(residual + at, p.residual);
          store_activation(out + at, rv + y, out_tagged, handoff.bit);
        }
      }
    }
  }
  cp_async_wait(0);
}

}  // namespace detail
}  // namespace mk::device
