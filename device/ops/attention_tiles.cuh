// The attention's tensor-core step, shared by its one-row body (attention.cuh) and its body at a
// step of several rows (attention_rows.cuh): q as 16 rows of bf16 (8 heads or q rows, each as hi
// and lo), one warp's online softmax over blocks of 16 positions of k and v laid out as the cache
// is (kv_index), held in shared memory.
#pragma once
#include "device/cuda/async_copy.cuh"
#include "device/cuda/block.cuh"
#include "device/ops/attention_layout.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

namespace detail {
inline constexpr uint32_t kQRows = 16;  // rows 0-7: q in bf16 (hi), rows 8-15: what bf16 left (lo)
__device__ __host__ inline uint32_t q_stride(uint32_t hd) { return hd + 8; }  // bf16; odd 16-byte chunks: no bank conflicts
// The fragments' shapes: lane / 4 names one of 8 heads, rows g and g + 8 its hi and lo parts.
static_assert(schedule::kMaxGroup == 8 && kQRows == 2 * schedule::kMaxGroup, "m16n8k16 rows are 8 heads, hi and lo");
static_assert(schedule::kMaxHeadDim % 16 == 0, "head_dim steps of 16");
static_assert(schedule::kMaxGroup + 2 <= kWarps, "the set-up has a warp per q head, k and v");
}  // namespace detail

namespace detail {

// RMSNorm of one head held in shared memory, by one warp; w in f32 (shared memory).
__device__ inline void warp_rms_norm(float* v, const float* w, uint32_t n, float eps) {
  float ss = 0;
  for (uint32_t i = threadIdx.x % 32; i < n; i += 32) ss += v[i] * v[i];
  const float inv = rsqrtf(warp_sum(ss) / n + eps);
  __syncwarp();
  for (uint32_t i = threadIdx.x % 32; i < n; i += 32) v[i] = v[i] * inv * w[i];
}

// Four 8x8 bf16 matrices from shared memory, lane l giving a row address of matrix l / 8;
// register k gets matrix k, lane l holding its row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1
// (transposed: rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4).
__device__ __forceinline__ void load_matrices(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void load_matrices_transposed(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// The mask that zeroes the bf16 halves of a fragment register whose rows (positions first,
// first + 1) are at or past `valid`: the stage holds stale bytes there, which could be NaN.
__device__ __forceinline__ uint32_t row_mask(uint32_t first, uint32_t valid) {
  return first + 1 < valid ? ~0u : first < valid ? 0xffffu : 0u;
}

// One warp's online softmax over some of a kv group's positions, 16 at a time, on the tensor
// cores. The scores are Q K^T with Q = 16 rows of bf16 (row r the hi part of q head r, row 8 + r
// its lo part, q pre-scaled into the log2 domain): lane l holds head g = l / 4 (rows g and g + 8)
// and positions 2 (l % 4), + 1, + 8, + 9 of the 16. Then P V with P split the same way (rows g
// and g + 8: hi and lo of head g's weights): acc[t] holds columns 8 t + 2 (l % 4), + 1 of rows g
// and g + 8, whose sum is head g's output.
struct WarpAttention {
  static constexpr uint32_t NT = schedule::kMaxHeadDim / 8;  // column tiles of 8 (a smaller head uses the first)
  float acc[NT][4];
  float m, l;  // head g's running max (log2 domain) and this lane's share of its sum

  __device__ void reset() {
#pragma unroll
    for (uint32_t t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0;
    m = -INFINITY, l = 0;
  }

  // Positions pos0 .. pos0 + valid - 1 (valid <= 16), k and v rows at shared addresses k, v
  // (the cache's layout: kv_index), q at shared address q (rows of q_stride(hd) bf16). The
  // benchmark's head sizes get a step of their own, unrolled without a branch (HD); others the
  // general one (HD 0).
  __device__ __forceinline__ void add(uint32_t q, uint32_t k, uint32_t v, uint32_t pos0, uint32_t valid, uint32_t hd) {
    if (hd == 64) add_hd<64>(q, k, v, pos0, valid, hd);
    else if (hd == 128) add_hd<128>(q, k, v, pos0, valid, hd);
    else add_hd<0>(q, k, v, pos0, valid, hd);
  }
  // The same, each lane's head (q row) attending only to the positions [lo, hi) of the block: the
  // rows of a step of several (attention_rows.cuh), each with its own range; a head may have none
  // in a block.
  __device__ __forceinline__ void add_masked(uint32_t q, uint32_t k, uint32_t v, uint32_t pos0, uint32_t valid, uint32_t hd,
                                             uint32_t lo, uint32_t hi) {
    if (hd == 64) add_hd<64, true>(q, k, v, pos0, valid, hd, lo, hi);
    else if (hd == 128) add_hd<128, true>(q, k, v, pos0, valid, hd, lo, hi);
    else add_hd<0, true>(q, k, v, pos0, valid, hd, lo, hi);
  }

  // With HD known, the step is unrolled without a bound check between a multiply and the next
  // loads, so they are issued ahead: one warp's block of 16 positions 527 -> 349 ns at head_dim
  // 64, 769 -> 486 at 128 (bench/probes/attend.cu, docs/notes.md 97). The scores' k loop is unrolled
  // by two only, and their sum kept in one chain: unrolled whole and in two chains it took 305
  // and 379 ns, but the body needed registers that the kernel's loop then gave up to spills
  // (40 bytes, +1 to +6 % a step).
  template <uint32_t HD, bool kMasked = false>
  __device__ __forceinline__ void add_hd(uint32_t q, uint32_t k, uint32_t v, uint32_t pos0, uint32_t valid, uint32_t hd_any,
                                         uint32_t lo_pos = 0, uint32_t hi_pos = 0) {
    const uint32_t hd = HD ? HD : hd_any;
    constexpr uint32_t NS = HD ? HD / 16 : NT / 2, NV = HD ? HD / 8 : NT;  // steps of 16 in k, column tiles of 8
    const uint32_t lane = threadIdx.x % 32, quad = lane % 4, mat = lane / 8, row = lane % 8;
    // Scores. A (q): matrices (rows 0-7, chunk 2s), (8-15, 2s), (0-7, 2s + 1), (8-15, 2s + 1);
    // B (k, a row per position): (positions 0-7, chunk 2s), (0-7, 2s + 1), (8-15, 2s), (8-15, 2s + 1).
    const uint32_t qrow = q + (row + (mat & 1) * 8) * q_stride(hd) * 2 + (mat / 2) * 16;
    const uint32_t kpos = row + (mat / 2) * 8, kswz = kv_chunk_swizzle(pos0 + kpos, hd);
    const uint32_t krow = k + kpos * hd * 2;
    float s0[4] = {}, s1[4] = {};
#pragma unroll 2
    for (uint32_t s = 0; s < NS; ++s) {
      if (!HD && s >= hd / 16) break;
      uint32_t a[4], b[4];
      load_matrices(qrow + s * 32, a);
      load_matrices(krow + (((2 * s + (mat & 1)) ^ kswz) * 16), b);
      mma_bf16(s0, a, b[0], b[1]);
      mma_bf16(s1, a, b[2], b[3]);
    }
    float sc[4] = {s0[0] + s0[2], s0[1] + s0[3], s1[0] + s1[2], s1[1] + s1[3]};
    if (2 * quad >= valid) sc[0] = -INFINITY;
    if (2 * quad + 1 >= valid) sc[1] = -INFINITY;
    if (2 * quad + 8 >= valid) sc[2] = -INFINITY;
    if (2 * quad + 9 >= valid) sc[3] = -INFINITY;
    if constexpr (kMasked) {
      const uint32_t off[4] = {2 * quad, 2 * quad + 1, 2 * quad + 8, 2 * quad + 9};
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i)
        if (pos0 + off[i] < lo_pos || pos0 + off[i] >= hi_pos) sc[i] = -INFINITY;
    }
    // Online softmax: the head's max over the quad, the rescale only when some max moved.
    float mx = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);  // finite unmasked: position pos0 is valid
    // Masked, a head with no position yet (m_new -inf) keeps its state: no weight, no rescale.
    const bool none = kMasked && m_new == -INFINITY;
    const float c = none ? 1.0f : exp2f(m - m_new);  // 0 on the first block (m = -inf)
    float pr[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) pr[i] = none ? 0.0f : exp2f(sc[i] - m_new);
    l = l * c + ((pr[0] + pr[1]) + (pr[2] + pr[3]));
    m = m_new;
    if (__any_sync(0xffffffffu, c != 1.0f)) {
#pragma unroll
      for (uint32_t t = 0; t < NV; ++t) {
        if (!HD && t >= hd / 8) break;
        acc[t][0] *= c, acc[t][1] *= c, acc[t][2] *= c, acc[t][3] *= c;
      }
    }
    uint32_t p[4];  // A (weights): rows g (hi) and g + 8 (lo), positions 2 quad, + 1, then + 8, + 9
    split_bf16x2(pr[0], pr[1], p[0], p[1]);
    split_bf16x2(pr[2], pr[3], p[2], p[3]);
    // B (v transposed): matrices (positions 0-7, chunk t), (8-15, t), (0-7, t + 1), (8-15, t + 1),
    // rows past `valid` zeroed by mask (no branch between the loads).
    const uint32_t vpos = row + (mat & 1) * 8, vswz = kv_chunk_swizzle(pos0 + vpos, hd);
    const uint32_t vrow = v + vpos * hd * 2;
    const uint32_t lo = row_mask(2 * quad, valid), hi = row_mask(2 * quad + 8, valid);
#pragma unroll
    for (uint32_t t = 0; t < NV; t += 2) {
      if (!HD && t >= hd / 8) break;
      uint32_t b[4];
      load_matrices_transposed(vrow + (((t + mat / 2) ^ vswz) * 16), b);
      mma_bf16(acc[t], p, b[0] & lo, b[1] & hi);
      mma_bf16(acc[t + 1], p, b[2] & lo, b[3] & hi);
    }
  }
};

}  // namespace detail
}  // namespace mk::device
