#pragma once
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "device/bf16.hpp"
#include "device/fp8.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/magic_divide.hpp"
#include "device/memory.hpp"
#include "device/ops/matvec_rows.cuh"
#include "schedules/ops/matvec.hpp"

namespace mk::device {

// Scratch: the input vector (times the norm weight) as two planes of float4, one accumulator
// per output row (two for silu_mul), and kWarps floats of the input's sum of squares.
inline uint32_t gpu_shared_bytes(const schedule::MatvecPayload& p) {
  const uint32_t rows = p.row_end - p.row_begin;
  return (p.cols + 2 * rows + kWarps) * 4;
}

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::MatvecPayload& p, F&& f) {
  f(p.in, false, Tagging::always);  // load_input
  f(p.residual, false, Tagging::either);  // tagged_field(1)
  f(p.out, true, Tagging::either);  // tagged_field(2)
}

// The tile geometry's integer divisions (by the columns, the block, the rows a tile) cost a
// task ~0.45 us wherever they ran in its body (docs/notes.md 54-55); in gpu_prefetch they ran
// beside the counter wait, which the tagged hand-offs shortened to ~0.1 us. The executor works
// them out once per instruction on the host (gpu_prepare) into the payload's spare bytes of its
// device copy, where the producer and the body read them.
// A tile's row group j / blocks is magic_divide(j, magic): a multiply-high where a division is
// ~20 instructions, for every tile, in the producer and the consumers (docs/notes.md 113-114);
// gpu_prepare checks that it is exact for every tile of the task. block, blocks and per share a
// word, so that the geometry fits the 20 spare bytes: block / 8 (12 bits; 0 where blocks is 1,
// whose tiles are whole rows), blocks (12) and per (8: at most 255 rows a tile, which only rows
// of fewer than 33 columns would exceed).
struct MatvecGeometry {
  uint32_t tiles[3];  // per weight segment (MatvecTiles::Segment)
  uint32_t magic;     // 0 where blocks is 1
  uint32_t shape;     // block | blocks << 12 | per << 24
};
static_assert(sizeof(schedule::MatvecPayload) % 4 == 0 &&
                  sizeof(schedule::MatvecPayload) + sizeof(MatvecGeometry) <= schedule::kPayloadBytes,
              "the geometry fits the payload's spare bytes");

// Segment i of the task's rows: its first row `a` (into the task's weight rows), `n` rows;
// `first` walks the concatenation's row ends (silu_mul: gate and up over the same rows).
struct MatvecSegment {
  uint32_t a, n, end;
};
MK_HD inline MatvecSegment matvec_segment(const schedule::MatvecPayload& p, uint32_t i, uint32_t first) {
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  const uint32_t end = silu ? p.row_end : i < p.weight_count ? p.weight_row_end[i] : first;
  const uint32_t a = silu ? p.row_begin : (first > p.row_begin ? first : p.row_begin);
  const uint32_t b = silu ? (i < 2 ? p.row_end : a) : (end < p.row_end ? end : p.row_end);
  return {a, a < b ? b - a : 0, end};
}

// Host: the geometry into `spare` (the payload's bytes past MatvecPayload). A cut row's block is
// at most kMaxBlock columns and a tile holds at least one row, so block and per fit their fields
// by construction; blocks and the multiply-high's range are bounded by the scratch (the whole
// input and the task's accumulators in shared memory, which the executor checks first: some 58000
// columns and 29000 rows), far inside both, and checked here all the same, in case that changes.
inline void gpu_prepare(const schedule::MatvecPayload& p, unsigned char* spare) {
  const uint32_t eb = schedule::matvec_fp8(p) ? 1 : 2, chunk = 16 / eb;  // bytes an element; columns a 16-byte chunk
  const uint32_t max_block = kStageBytes / (4 * eb);  // columns of a cut row's block: four rows per tile
  const uint32_t cut = p.cols * eb * 2 <= kStageBytes ? 1 : (p.cols + max_block - 1) / max_block;
  const uint32_t block = (p.cols / cut + chunk - 1) / chunk * chunk;  // near-equal blocks, whole 16-byte chunks
  const uint32_t blocks = (p.cols + block - 1) / block, per = std::min(kStageBytes / (block * eb), 255u);
  if (blocks >= 1u << 12)
    throw std::runtime_error("a matvec of " + std::to_string(p.cols) + " columns is wider than the CUDA interpreter's tiles");
  MatvecGeometry g{{0, 0, 0}, 0, (blocks > 1 ? block / 8 : 0) | blocks << 12 | per << 24};
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  uint64_t tiles = 0;
  for (uint32_t i = 0, first = 0; i < 3; ++i) {
    const MatvecSegment seg = matvec_segment(p, i, first);
    g.tiles[i] = (seg.n + per - 1) / per * blocks;
    tiles += g.tiles[i];
    if (!silu) first = seg.end;
  }
  if (blocks > 1) {
    g.magic = magic_divisor(blocks);
    if (!magic_divide_exact_below(tiles, blocks))
      throw std::runtime_error("a matvec task of " + std::to_string(tiles) + " tiles is too large for the CUDA interpreter");
  }
  std::memcpy(spare, &g, sizeof g);
}

__device__ inline const MatvecGeometry& matvec_geometry(const schedule::MatvecPayload& p) {
  return *reinterpret_cast<const MatvecGeometry*>(reinterpret_cast<const unsigned char*>(&p) + sizeof p);
}

// The task's weights as ring tiles, in order: each weight segment's rows, whole rows per tile
// where two rows fit a stage (Llama-3.1-8B's rows of 4096 stream at the SM's share as two whole
// rows, at 93 % as four pieces of 4 KB, docs/notes.md 59), else groups of four rows cut into
// near-equal column blocks of at most 2048 columns. Either way a bulk copy per row (piece): the
// SM's own loads and signals queue behind its copies in flight, and shorter copies let them
// through sooner (one 16 KB copy per tile instead: Llama-3.1-8B +50 us, Qwen3-4B +27, entry 64).
// A segment is (weight, its first row, rows, accumulator row); accumulator rows are output row -
// row_begin, plus `rows` for silu_mul's up projection. The consumers address tiles by index
// so that a warp can go straight to its own (a generator walked by every warp cost a division
// and spills per tile), from a description built once per instruction (rebuilt per tile, its
// loads slowed the producer); the producer, which takes every tile in turn, walks them (walk).
// Segments sit at the index of their weight (silu_mul: gate 0, up 1), empty ones with no
// tiles, and are only ever indexed by constants: a run-time index would put them in local memory.
struct MatvecTiles {
  struct Segment {
    const unsigned char* weight;  // at the segment's first row
    uint32_t rows, acc_row, tiles;
  };
  Segment seg[3];
  uint32_t cols, block, blocks, per;  // columns per tile, tiles per row group, rows per tile
  uint32_t magic;  // MatvecGeometry's
  uint32_t eb;     // bytes an element: 2 (bf16) or 1 (f8e4m3)

  __device__ uint32_t count() const { return seg[0].tiles + seg[1].tiles + seg[2].tiles; }

  // The producer's walk (walk_tiles): at's tiles in at's order, each segment's row groups in
  // turn and each group's column blocks (one block of `cols` where blocks is 1), by adding.
  template <class F>
  __device__ bool walk(F&& f) const {
#pragma unroll 1
    for (uint32_t i = 0; i < 3; ++i) {
      const Segment s = i == 0 ? seg[0] : i == 1 ? seg[1] : seg[2];  // selects: seg stays in registers
      const uint32_t step = blocks == 1 ? cols : block;
      const unsigned char* src = s.weight;
      for (uint32_t r = 0; r < s.rows; r += per, src += per * cols * eb) {
        const uint32_t rows = min(per, s.rows - r);
        for (uint32_t c = 0; c < cols; c += step)
          if (!f(tile(s, src, r, rows, c, min(step, cols - c)))) return false;
      }
    }
    return true;
  }

  __device__ WeightTile at(uint32_t j) const {
    Segment s = seg[0];
    if (j >= seg[0].tiles) {
      j -= seg[0].tiles;
      s = seg[1];
      if (j >= seg[1].tiles) {
        j -= seg[1].tiles;
        s = seg[2];
      }
    }
    const uint32_t g = blocks == 1 ? j : magic_divide(j, magic), r = g * per, rows = min(per, s.rows - r);
    const unsigned char* src = s.weight + uint64_t{r} * cols * eb;
    if (blocks == 1) return tile(s, src, r, rows, 0, cols);  // a copy per row
    const uint32_t c = (j - g * blocks) * block;
    return tile(s, src, r, rows, c, min(block, cols - c));
  }

  // Columns c to c + n of the `rows` rows of segment s from row r (src: the weight at row r), as
  // at and walk give them: a copy per row (piece) of n columns.
  // (The ring counts in bf16 elements: a float8 row's stride in them is half its columns.)
  __device__ __forceinline__ WeightTile tile(const Segment& s, const unsigned char* src, uint32_t r, uint32_t rows, uint32_t c,
                                             uint32_t n) const {
    return WeightTile{reinterpret_cast<const uint16_t*>(src + c * eb), n * eb, s.acc_row + r, rows, c, n, nullptr, 0, rows,
                      cols * eb / 2};
  }
};

// The weights do not depend on the step. No division: the geometry is the executor's.
__device__ inline MatvecTiles matvec_tiles(const schedule::MatvecPayload& p, const TensorTable& mem) {
  const MatvecGeometry& g = matvec_geometry(p);
  MatvecTiles t;
  t.cols = p.cols;
  t.eb = schedule::matvec_fp8(p) ? 1 : 2;
  t.block = (g.shape & 0xfff) * 8;
  t.blocks = g.shape >> 12 & 0xfff;
  t.per = g.shape >> 24;
  t.magic = g.magic;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  const uint32_t rows = p.row_end - p.row_begin;
  uint32_t first = 0;
#pragma unroll
  for (uint32_t i = 0; i < 3; ++i) {
    const MatvecSegment seg = matvec_segment(p, i, first);
    t.seg[i].weight = seg.n ? mem.at<const unsigned char>(p.weight[i]) + uint64_t{silu ? seg.a : seg.a - first} * p.cols * t.eb
                            : nullptr;
    t.seg[i].rows = seg.n;
    t.seg[i].acc_row = silu ? i * rows : seg.a - p.row_begin;
    t.seg[i].tiles = g.tiles[i];
    if (!silu) first = seg.end;
  }
  return t;
}

// (Streamed only at a step of one row: the producer streams nothing for a step of several.)
__device__ inline MatvecTiles gpu_tiles(const schedule::MatvecPayload& p, const schedule::StepContext&, const TensorTable& mem) {
  return matvec_tiles(p, mem);
}

namespace detail {
// The task's tiles (the executor's geometry, the weights' addresses from the tensor table), set
// during its counter wait by the first prefetching thread (gpu_prefetch) and read by the body
// after the barrier that ends the wait.
static __shared__ MatvecTiles task_tiles;
}  // namespace detail

// During the wait: the task's tile geometry, and the norm weight and this task's rows of each
// bias asked of L2, read after the wait (see ring.cuh).
__device__ inline void gpu_prefetch(const schedule::MatvecPayload& p, uint32_t, const TensorTable& mem, uint32_t thread,
                                    uint32_t threads) {
  if (thread == 0) detail::task_tiles = matvec_tiles(p, mem);
  if (p.norm != schedule::kNone) prefetch_lines(mem.at<const uint16_t>(p.norm), uint64_t{p.cols} * 2, thread, threads);
  uint32_t first = 0;
  for (uint32_t i = 0; i < p.weight_count && i < 3; first = p.weight_row_end[i++]) {
    const uint32_t a = max(first, p.row_begin), b = min(p.weight_row_end[i], p.row_end);
    if (p.bias[i] != schedule::kNone && a < b)
      prefetch_lines(mem.at<const uint16_t>(p.bias[i]) + (a - first), uint64_t{b - a} * 2, thread, threads);
  }
}

namespace detail {

// Sums a0..a3 over the warp in 6 shuffles; lane 8*i ends with the sum of a_i.
__device__ __forceinline__ float warp_sum4(float a0, float a1, float a2, float a3) {
  const uint32_t lane = threadIdx.x % 32;
  const bool up = lane & 16;
  float keep0 = up ? a2 : a0, keep1 = up ? a3 : a1;
  keep0 += __shfl_xor_sync(0xffffffffu, up ? a0 : a2, 16);
  keep1 += __shfl_xor_sync(0xffffffffu, up ? a1 : a3, 16);
  const bool up8 = lane & 8;
  float v = up8 ? keep1 : keep0;
  v += __shfl_xor_sync(0xffffffffu, up8 ? keep0 : keep1, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v;
}

// NR rows (NR <= 4) of a tile against x, lane chunks (8 columns each) first, first + step, ...:
// all NR + 2 loads of a chunk issued before the first use (a row tested per chunk serialised
// them: docs/notes.md entry 53).
template <uint32_t NR>
__device__ __forceinline__ void dot_rows(const uint4* row, uint32_t n8, const float4* xlo, const float4* xhi, uint32_t first,
                                         uint32_t step, float (&a)[4]) {
#pragma unroll 2
  for (uint32_t c = first; c < n8; c += step) {
    uint4 w[NR];
#pragma unroll
    for (uint32_t r = 0; r < NR; ++r) w[r] = row[r * n8 + c];
    const float4 xa = xlo[c], xb = xhi[c];
#pragma unroll
    for (uint32_t r = 0; r < NR; ++r) a[r] += dot8(w[r], xa, xb);
  }
}

// One tile by one warp: lane chunks (8 columns each) lane, lane + 32, ..., four rows at a time,
// so each slice of x is read from shared memory once per four rows. x is held as two planes
// (columns 8c..8c+3 at xlo[c], 8c+4..8c+7 at xhi[c]): 16-byte reads, no bank conflicts. The
// stride is a constant: a warp's slice of a tile shared with others (a stride of 32 times their
// number, known at run time) took 0.95 us a tile against 0.85 (docs/notes.md 95).
__device__ __forceinline__ void consume_tile(const WeightTile& t, const uint16_t* w, const float4* xlo, const float4* xhi,
                                             float* acc) {
  const uint32_t lane = threadIdx.x % 32, n8 = t.cols / 8, c0 = t.col0 / 8, first = lane, step = 32;
  const uint4* tile = reinterpret_cast<const uint4*>(w);
  for (uint32_t r0 = 0; r0 < t.rows; r0 += 4) {
    const uint32_t nr = min(4u, t.rows - r0);
    const uint4* row = tile + r0 * n8;
    float a[4] = {0, 0, 0, 0};
    switch (nr) {
      case 4: dot_rows<4>(row, n8, xlo + c0, xhi + c0, first, step, a); break;
      case 3: dot_rows<3>(row, n8, xlo + c0, xhi + c0, first, step, a); break;
      case 2: dot_rows<2>(row, n8, xlo + c0, xhi + c0, first, step, a); break;
      default: dot_rows<1>(row, n8, xlo + c0, xhi + c0, first, step, a); break;
    }
    const float s = warp_sum4(a[0], a[1], a[2], a[3]);
    if (lane % 8 == 0 && lane / 8 < nr) atomicAdd(acc + t.acc_row + r0 + lane / 8, s);
  }
}

// The scales of the task's accumulator row `acc_row` (silu_mul: gate's rows, then up's): where
// that weight row's are in its scale tensor (the tensor after the weight: format.hpp).
__device__ inline const float* scale_row(const schedule::MatvecPayload& p, const TensorTable& mem, uint32_t acc_row) {
  const uint32_t rows = p.row_end - p.row_begin;
  const bool up = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul) && acc_row >= rows;
  const schedule::MatvecWeightRow w = schedule::matvec_weight_row(p, p.row_begin + acc_row - (up ? rows : 0), up);
  return mem.at<const float>(p.weight[w.weight] + 1) + schedule::matvec_scale_index(p, w.row, 0);
}

// dot_rows in the instance with float8 weights (WeightKinds<true>): bf16 rows (16 bytes a lane
// chunk of 8 columns) or float8 ones (8 bytes), as the tile's weight is, so that x is read as for
// bf16 either way; with block scales each chunk's sum times the scale of its 128-column block (c0:
// the tile's first chunk). One loop for every kind, chosen at run time: a copy a kind in the body
// (as templates) made it spill 208 bytes, and every other body with it (docs/notes.md 130).
template <uint32_t NR>
__device__ __forceinline__ void dot_rows_any(const unsigned char* row, uint32_t n8, const float4* xlo, const float4* xhi,
                                             uint32_t first, uint32_t step, uint32_t c0, bool f8, bool block,
                                             const float* const (&srow)[4], float (&a)[4]) {
#pragma unroll 1
  for (uint32_t c = first; c < n8; c += step) {
    float d[NR];
    const float4 xa = xlo[c], xb = xhi[c];
    if (f8) {
      uint2 w[NR];
#pragma unroll
      for (uint32_t r = 0; r < NR; ++r) w[r] = reinterpret_cast<const uint2*>(row)[r * n8 + c];
#pragma unroll
      for (uint32_t r = 0; r < NR; ++r) d[r] = dot8_f8(w[r], xa, xb);
    } else {
      uint4 w[NR];
#pragma unroll
      for (uint32_t r = 0; r < NR; ++r) w[r] = reinterpret_cast<const uint4*>(row)[r * n8 + c];
#pragma unroll
      for (uint32_t r = 0; r < NR; ++r) d[r] = dot8(w[r], xa, xb);
    }
#pragma unroll
    for (uint32_t r = 0; r < NR; ++r) a[r] = block ? fmaf(d[r], __ldg(srow[r] + ((c0 + c) >> 4)), a[r]) : a[r] + d[r];
  }
}

// consume_tile in the instance with float8 weights: the tile's rows as its weight's kind is.
__device__ __forceinline__ void consume_tile_any(const WeightTile& t, const unsigned char* w, const float4* xlo, const float4* xhi,
                                                 float* acc, const schedule::MatvecPayload& p, const TensorTable& mem) {
  const bool f8 = schedule::matvec_fp8(p), block = p.weight_format == static_cast<uint16_t>(schedule::WeightFormat::f8_block128);
  const uint32_t lane = threadIdx.x % 32, n8 = t.cols / 8, c0 = t.col0 / 8, first = lane, step = 32, row_bytes = t.cols * (f8 ? 1 : 2);
  for (uint32_t r0 = 0; r0 < t.rows; r0 += 4) {
    const uint32_t nr = min(4u, t.rows - r0);
    const unsigned char* row = w + r0 * row_bytes;
    const float* srow[4] = {nullptr, nullptr, nullptr, nullptr};
    if (block)
#pragma unroll
      for (uint32_t k = 0; k < 4; ++k) srow[k] = k < nr ? scale_row(p, mem, t.acc_row + r0 + k) : nullptr;
    float a[4] = {0, 0, 0, 0};
    switch (nr) {
      case 4: dot_rows_any<4>(row, n8, xlo + c0, xhi + c0, first, step, c0, f8, block, srow, a); break;
      case 3: dot_rows_any<3>(row, n8, xlo + c0, xhi + c0, first, step, c0, f8, block, srow, a); break;
      case 2: dot_rows_any<2>(row, n8, xlo + c0, xhi + c0, first, step, c0, f8, block, srow, a); break;
      default: dot_rows_any<1>(row, n8, xlo + c0, xhi + c0, first, step, c0, f8, block, srow, a); break;
    }
    const float s = warp_sum4(a[0], a[1], a[2], a[3]);
    if (lane % 8 == 0 && lane / 8 < nr) atomicAdd(acc + t.acc_row + r0 + lane / 8, s);
  }
}

// The input into the planes (times the norm weight), kBatch float4 loads in flight per thread;
// adds the thread's share of the input's sum of squares to ss (norm only). As many in flight as
// the registers hold without spilling (`-Xptxas -v`): three with a norm weight beside each, four
// without. Down's 32 KB input on Llama-3.2-1B is two round trips, not three. A matvec's input is
// always tagged (handoff.cuh): returns bit 0 set if any value the thread loaded is not this
// step's (`bit`); the caller decides for the whole block at its barrier whether to load again.
template <uint32_t kBatch, bool kNorm>
__device__ __forceinline__ uint32_t load_input(const float* in, const uint2* norm4, uint32_t cols, uint32_t bit,
                                               float4* xlo, float4* xhi, float& ss) {
  const uint32_t tid = threadIdx.x;
  uint32_t stale = 0;
  for (uint32_t base = 0; base < cols / 4; base += kBatch * kThreads) {
    float4 v[kBatch];
    uint2 nw[kBatch];
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + tid;
      if (i < cols / 4) {
        v[k] = load_tagged4(in + 4 * i);
        if (kNorm) nw[k] = __ldg(norm4 + i);
      }
    }
#pragma unroll
    for (uint32_t k = 0; k < kBatch; ++k) {
      const uint32_t i = base + k * kThreads + tid;
      if (i >= cols / 4) break;
      float4 x = v[k];
      stale |= stale_bits(x, bit);
      if (kNorm) {
        ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
        x = make_float4(x.x * bf16_lo(nw[k].x), x.y * bf16_hi(nw[k].x), x.z * bf16_lo(nw[k].y), x.w * bf16_hi(nw[k].y));
      }
      (i % 2 ? xhi : xlo)[i / 2] = x;
    }
  }
  return stale;
}

// The producer warp streams the weight tiles into the ring; compute warp s consumes stage s's
// tiles (warps past the ring's stages have none), adding into shared accumulators. The norm
// is folded in: x is held as in * norm_weight, and the sum of squares scales the finished
// rows, so no barrier stands between the input load and the first tile.
//
// Out of line, like the attention's body, with everything the kernel keeps in registers passed
// by value: inlined, the body shared the kernel's registers (128 then) with the interpreter's loop
// state, and moving it out gave it a register allocation of its own (Llama-3.2-1B 1128 -> 1094
// us, docs/notes.md); and given nothing it does not use (the step's context). Returns the
// ring's tile counter after its tiles. kF8: the instance with float8 weights (WeightKinds), whose
// body takes every kind of weights (consume_tile_any).
template <bool kF8>
__device__ __noinline__ uint32_t matvec_body(const schedule::MatvecPayload& p, TensorTable mem, unsigned char* scratch,
                                             WeightRing ring_state, uint64_t* trace) {
  BlockContext bc{scratch, ring_state, trace};
  const uint32_t cols = p.cols, rows = p.row_end - p.row_begin, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const bool silu = p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul);
  const bool norm = p.norm != schedule::kNone;
  float4* xlo = reinterpret_cast<float4*>(bc.scratch);
  float4* xhi = xlo + cols / 8;
  float* acc = reinterpret_cast<float*>(xhi + cols / 8);
  float* partial = acc + 2 * rows;
  bc.ring.pause();  // until the input is in (ring.cuh)
  const uint2* norm4 = norm ? reinterpret_cast<const uint2*>(mem.at<const uint16_t>(p.norm)) : nullptr;
  // The residual is loaded now, with the input: one round trip to L2 fewer after the weights.
  // Tagged (handoff.cuh), it is checked with the input.
  constexpr uint32_t kResidualRows = 1;  // rows per thread kept in a register; more load late
  const float* residual = p.residual == schedule::kNone ? nullptr : mem.at<const float>(p.residual);
  const bool residual_tagged = residual && tagged_field(1);
  float res[kResidualRows] = {0};
#pragma unroll
  for (uint32_t k = 0; k < kResidualRows; ++k)
    if (residual && tid + k * kThreads < rows)
      res[k] = residual_tagged ? load_tagged(residual + p.row_begin + tid + k * kThreads)
                               : load_activation(residual + p.row_begin + tid + k * kThreads);
  const float* in = mem.at<const float>(p.in);
  for (uint32_t i = tid; i < 2 * rows; i += kThreads) acc[i] = 0;
  // The input and the residual, loaded again by the whole block while any thread finds a value
  // not yet this step's (handoff.cuh): the check is the reduction of the barrier the block needs
  // before its tiles anyway, not a branch per thread (docs/notes.md 105).
  const uint32_t bit = detail::handoff.bit;
  float ss;
  uint64_t start = 0;
  for (uint32_t round = 0;; ++round) {
    ss = 0;
    const uint32_t stale_in = norm ? load_input<3, true>(in, norm4, cols, bit, xlo, xhi, ss)
                                   : load_input<4, false>(in, norm4, cols, bit, xlo, xhi, ss);
    const uint32_t stale_res = residual_tagged && tid < rows ? (__float_as_uint(res[0]) ^ bit) & 1u : 0u;
    if (norm) {
      ss = warp_sum(ss);
      if (lane == 0) partial[warp] = ss;
    }
    if (!block_any(stale_in | stale_res)) break;
    if (stale_in | stale_res) keep_polling(round, start, stale_in ? p.in : p.residual, bit ^ 1u);
    block_sync();  // every thread sees handoff.failed alike
    if (detail::handoff.failed) return bc.ring.next_tile;  // the launch aborts: its tiles stay unread
    if (stale_res) res[0] = load_tagged(residual + p.row_begin + tid);
  }
  bc.ring.resume();
  bc.mark(0);

  // Tile j of this task is tile next_tile + j of the launch: ring stage (next_tile + j) % count,
  // which warp `stage` takes, with all of the tile's kWarps arrivals.
  WeightRing& ring = bc.ring;
  const MatvecTiles all = task_tiles;  // gpu_prefetch's, from the wait
  const uint32_t tiles = all.count(), count = ring.count;
  if (warp < count) {
    const uint32_t stage = warp;
    uint32_t j = (stage + count - ring.next_tile % count) % count;  // my first tile
    uint32_t parity = ((ring.next_tile + j) / count) & 1;
    for (; j < tiles; j += count, parity ^= 1) {
      const WeightTile t = all.at(j);
      mbar_wait(ring.full + stage, parity);
      if constexpr (!kF8)
        detail::consume_tile(t, reinterpret_cast<const uint16_t*>(ring.stages + stage * kStageBytes), xlo, xhi, acc);
      else
        detail::consume_tile_any(t, ring.stages + stage * kStageBytes, xlo, xhi, acc, p, mem);
      ring_release(ring, stage, kWarps);
    }
  }
  ring.next_tile += tiles;
  block_sync();
  ring.pause();
  bc.mark(1);

  float inv = 1.0f;
  if (norm) {
    float total = 0;
    for (uint32_t w = 0; w < kWarps; ++w) total += partial[w];  // a broadcast read, same order in every thread
    inv = rsqrtf(total / cols + p.eps);
  }
  float* out = mem.at<float>(p.out);
  // Read again here rather than kept from the input phase: a register live across the tile
  // loop above costs its consumers (spills).
  const bool out_tagged = tagged_field(2), residual_tagged2 = residual && tagged_field(1);
  const uint32_t out_bit = detail::handoff.bit;
  // A row's (or the tensor's) float8 scale, to the finished sums.
  const bool late = kF8 && schedule::matvec_fp8(p) && p.weight_format != static_cast<uint16_t>(schedule::WeightFormat::f8_block128);
  for (uint32_t i = tid, k = 0; i < rows; i += kThreads, ++k) {
    const float sg = late ? *scale_row(p, mem, i) : 1.0f, su = late && silu ? *scale_row(p, mem, rows + i) : 1.0f;
    const float a = acc[i] * inv * sg;
    const float y = silu ? a / (1.0f + expf(-a)) * (acc[rows + i] * inv * su) : a;
    const float r = !residual                ? 0.0f
                    : k < kResidualRows      ? res[k]
                    : residual_tagged2       ? poll_tagged(residual + p.row_begin + i, p.residual)
                                             : load_activation(residual + p.row_begin + i);
    float b = 0.0f;  // the bias of this row's weight, if any (act none only)
    if (!silu) {
      const schedule::MatvecWeightRow w = schedule::matvec_weight_row(p, p.row_begin + i);
      if (p.bias[w.weight] != schedule::kNone) b = bf16_to_f32(mem.at<const uint16_t>(p.bias[w.weight])[w.row]);
    }
    store_activation(out + p.row_begin + i, r + (y + b), out_tagged, out_bit);
  }
  return bc.ring.next_tile;
}

}  // namespace detail

// The executor runs a schedule with float8 weights on the instances with WeightKinds<true>.
template <bool kF8>
__device__ inline void gpu_run(const schedule::MatvecPayload& p, const schedule::StepContext&, const TensorTable& mem,
                               BlockContext& bc, WeightKinds<kF8>) {
  bc.ring.next_tile = detail::matvec_body<kF8>(p, mem, bc.scratch, bc.ring, bc.trace);
}
// A step of several rows (matvec_rows.cuh).
template <bool kF8>
__device__ inline void gpu_rows(const schedule::MatvecPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc, WeightKinds<kF8>) {
  detail::matvec_rows_body<kF8>(p, ctx, mem, bc.scratch, bc.scratch_bytes);
}

}  // namespace mk::device
