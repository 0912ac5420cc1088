#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

// The KV cache of earlier positions does not depend on this step, so it streams through the
// weight ring like weights, ahead of the waits (in a launch of several steps, once every SM has
// finished the step before, whose qkv wrote the previous position: kReadsEarlierSteps). A
// tile holds attention_tile_positions(hd) positions of k (first half of the stage) and of v
// (second half), a multiple of the 16 positions of one tensor-core step. The current position
// comes from qkv.
__device__ __host__ inline uint32_t attention_tile_positions(uint32_t hd) { return kStageBytes / 4 / hd / 16 * 16; }

struct AttentionTiles {
  static constexpr bool kReadsEarlierSteps = true;  // the previous position: the step before's qkv
  const uint16_t* k;  // the caches
  const uint16_t* v;
  uint32_t unit_begin, unit_end, S, A, pos, max_context, hd, per;  // A: the step's active splits

  __device__ uint32_t unit_tiles(uint32_t unit) const {
    const schedule::AttentionSplit sp = schedule::attention_split(unit % S, A, pos);
    return (sp.end - sp.begin + per - 1) / per;
  }
  __device__ uint32_t count() const {
    uint32_t n = 0;
    for (uint32_t u = unit_begin; u < unit_end; ++u) n += unit_tiles(u);
    return n;
  }
  __device__ WeightTile at(uint32_t j) const {
    uint32_t u = unit_begin;
    for (; u + 1 < unit_end && j >= unit_tiles(u); ++u) j -= unit_tiles(u);
    const schedule::AttentionSplit sp = schedule::attention_split(u % S, A, pos);
    const uint32_t first = sp.begin + j * per, n = min(per, sp.end - first);
    const uint64_t row = (uint64_t{u / S} * max_context + first) * hd;
    return WeightTile{k + row, n * hd * 2, 0, n, 0, hd, v + row, kStageBytes / 2};
  }
};

__device__ inline AttentionTiles gpu_tiles(const schedule::AttentionPayload& p, const schedule::StepContext& ctx,
                                           const TensorTable& mem) {
  return {mem.at<const uint16_t>(p.k_cache), mem.at<const uint16_t>(p.v_cache), p.unit_begin, p.unit_end, p.kv_splits,
          schedule::active_kv_splits(ctx, p.kv_splits), ctx.pos, ctx.max_context, p.head_dim, attention_tile_positions(p.head_dim)};
}

namespace detail {
// What the set-up needs that depends on the payload and the position only, prepared during the
// counter wait (gpu_prefetch) and read after the barrier that ends it: RoPE's cos and sin of
// each pair and the q and k norm weights in f32. In the body they cost a global round trip (the
// norm weights) and powf and sincosf per lane on the chain (bench/NOTES.md entry 56).
static __shared__ float2 rope_cs[schedule::kMaxHeadDim / 2];      // (cos, sin) of pair j
static __shared__ float norm_weights[2][schedule::kMaxHeadDim];  // q's, then k's (when normed)
}  // namespace detail

__device__ inline void gpu_prefetch(const schedule::AttentionPayload& p, uint32_t pos, const TensorTable& mem,
                                    uint32_t thread, uint32_t threads) {
  const uint32_t hd = p.head_dim;
  for (uint32_t j = thread; j < hd / 2; j += threads) {
    float sn, cn;
    sincosf(rope_angle(p, j, pos), &sn, &cn);
    detail::rope_cs[j] = make_float2(cn, sn);
  }
  for (uint32_t i = thread; i < 2 * hd; i += threads) {
    const uint32_t w = i < hd ? p.q_norm : p.k_norm;
    if (w != schedule::kNone) detail::norm_weights[i / hd][i % hd] = bf16_to_f32(mem.at<const uint16_t>(w)[i % hd]);
  }
}

// Shared memory: q as the tensor cores take it (16 rows of bf16), q, k and v in f32,
// the current k and v in bf16, then each compute warp's output, max and sum per head (and the
// current position's score as one more slot), then each head's max and sum over them all.
namespace detail {
inline constexpr uint32_t kQRows = 16;  // rows 0-7: q in bf16 (hi), rows 8-15: what bf16 left (lo)
__device__ __host__ inline uint32_t q_stride(uint32_t hd) { return hd + 8; }  // bf16; odd 16-byte chunks: no bank conflicts
// The fragments' shapes: lane / 4 names one of 8 heads, rows g and g + 8 its hi and lo parts.
static_assert(schedule::kMaxGroup == 8 && kQRows == 2 * schedule::kMaxGroup, "m16n8k16 rows are 8 heads, hi and lo");
static_assert(schedule::kMaxHeadDim % 16 == 0, "head_dim steps of 16");
static_assert(schedule::kMaxGroup + 2 <= kWarps, "the set-up has a warp per q head, k and v");
}  // namespace detail

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::AttentionPayload& p, F&& f) {
  f(p.qkv, false, Tagging::either);  // tagged_field(0)
  f(p.out, true, Tagging::either);  // tagged_field(1): every split's rows written at every step
  f(p.reduce_out, true, Tagging::either);  // tagged_field(2)
}

inline uint32_t gpu_shared_bytes(const schedule::AttentionPayload& p) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads;
  return detail::kQRows * detail::q_stride(hd) * 2 +
         (rep * hd + 2 * hd + hd + kWarps * rep * hd + 2 * (kWarps + 1) * rep + 2 * rep) * 4;
}

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

// d += a b on the tensor cores: a 16x16 (row major), b 16x8 (column major), bf16 in, f32 sums.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x0, x1 as a pair of bf16 (x0 in the low half) and what that rounding left, as another pair:
// hi + lo holds each value to about 16 bits, so the tensor cores lose little against f32.
__device__ __forceinline__ void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - bf16_hi(hi)), "f"(x0 - bf16_lo(hi)));
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

  // With HD known, the step is unrolled without a bound check between a multiply and the next
  // loads, so they are issued ahead: one warp's block of 16 positions 527 -> 349 ns at head_dim
  // 64, 769 -> 486 at 128 (bench/probes/attend.cu, NOTES 97). The scores' k loop is unrolled
  // by two only, and their sum kept in one chain: unrolled whole and in two chains it took 305
  // and 379 ns, but the body needed registers that the kernel's loop then gave up to spills
  // (40 bytes, +1 to +6 % a step).
  template <uint32_t HD>
  __device__ __forceinline__ void add_hd(uint32_t q, uint32_t k, uint32_t v, uint32_t pos0, uint32_t valid, uint32_t hd_any) {
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
      mma(s0, a, b[0], b[1]);
      mma(s1, a, b[2], b[3]);
    }
    float sc[4] = {s0[0] + s0[2], s0[1] + s0[3], s1[0] + s1[2], s1[1] + s1[3]};
    if (2 * quad >= valid) sc[0] = -INFINITY;
    if (2 * quad + 1 >= valid) sc[1] = -INFINITY;
    if (2 * quad + 8 >= valid) sc[2] = -INFINITY;
    if (2 * quad + 9 >= valid) sc[3] = -INFINITY;
    // Online softmax: the head's max over the quad, the rescale only when some max moved.
    float mx = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);  // finite: position pos0 is valid
    const float c = exp2f(m - m_new);   // 0 on the first block (m = -inf)
    float pr[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) pr[i] = exp2f(sc[i] - m_new);
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
    split_bf16(pr[0], pr[1], p[0], p[1]);
    split_bf16(pr[2], pr[3], p[2], p[3]);
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
      mma(acc[t], p, b[0] & lo, b[1] & hi);
      mma(acc[t + 1], p, b[2] & lo, b[3] & hi);
    }
  }
};

// The instruction's trace record while tracing (else null), set by gpu_run, so that the body can
// mark its phases without another argument: the end of a unit's set-up, and warp 0 done with its
// tiles (the trace's phases: set-up, tiles, merge and signal; the last active unit's).
static __shared__ uint64_t* attention_trace;

// Out of line, and given nothing by reference that the interpreter keeps in registers: inlined,
// its register pressure made every op spill; given the block context by reference, the ring's
// fields moved to local memory for every op. One instance, one call site and no more arguments:
// each extra call site or argument cost the kernel's own loop registers (its spills rose from 40
// to 60 bytes and every matvec slowed). Returns the ring's tile counter after its tiles.
//
// Per active unit (a kv group's split): q's heads, k and v loaded, normed and roped, a warp each; then
// the split's tiles, each taken by the warps that own its ring stage (as the matvec's are), which
// deal its 16-position blocks, each warp keeping its own softmax state; then the warps' states
// merged in shared memory with the current position (last active split only), and the partial
// written (at a short step with reduce_out, the normalised output as well). An inactive unit
// writes its partial's rows as zeros: every row is written at every step, as a tagged tensor must
// be (handoff.cuh), so that attn_reduce can poll the partials instead of waiting for a counter
// whose release waits for this SM's copies in flight.
__device__ __noinline__ uint32_t attention_body(const schedule::AttentionPayload& p, schedule::StepContext ctx,
                                                TensorTable mem, unsigned char* scratch, WeightRing ring) {

  const uint32_t hd = p.head_dim, half = hd / 2, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32, per = attention_tile_positions(hd);
  constexpr uint32_t G = schedule::kMaxGroup, W = kWarps;
  uint16_t* qa = reinterpret_cast<uint16_t*>(scratch);  // [kQRows][q_stride(hd)]
  float* q = reinterpret_cast<float*>(qa + kQRows * q_stride(hd));  // [rep][hd]
  float* kcur = q + rep * hd;
  float* vcur = kcur + hd;
  uint16_t* kcur16 = reinterpret_cast<uint16_t*>(vcur + hd);  // the current k and v as stored
  uint16_t* vcur16 = kcur16 + hd;
  float* wo = reinterpret_cast<float*>(vcur16 + hd);  // [kWarps][rep][hd]: each warp's output
  float* wm = wo + W * rep * hd;                      // [kWarps + 1][rep]: its max (the current score last), then its weight
  float* wl = wm + (W + 1) * rep;                     // [kWarps + 1][rep]: its sum
  float* head_max = wl + (W + 1) * rep;               // [rep]
  float* head_sum = head_max + rep;                   // [rep]
  const float* qkv = mem.at<const float>(p.qkv);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);
  const uint32_t A = schedule::active_kv_splits(ctx, S);
  const float qscale = p.scale * 1.4426950408889634f;  // scores in the log2 domain: exp2f
  const uint32_t qa_addr = smem_addr(qa);
  uint32_t tile = ring.next_tile;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    float* part = out + (uint64_t{g} * S + s) * rep * (hd + 2);  // the split's partial: rows of hd + 2 per head
    if (s >= A) {  // an inactive split: no tiles; its rows zero (a tagged tensor is written at every step)
      for (uint32_t i = tid; i < rep * (hd + 2); i += kThreads) store_activation(part + i, 0.0f, tagged_field(1), handoff.bit);
      continue;
    }
    const bool last = s == A - 1;
    block_sync();  // the scratch may still be read by the previous unit's merge
    // The set-up, a warp per vector with no block barrier inside: warp r < rep loads q head r,
    // warp rep k and warp rep + 1 v; each normed (q, k) and roped (q, k) by its warp with the
    // tables of the wait, then q written for the tensor cores and k and v to the cache (last
    // split). Warps rep + 2 on zero the tensor-core rows of the heads past rep. (Five block
    // barriers before: bench/NOTES.md 54.)
    if (warp < rep + 2) {
      const bool is_q = warp < rep, is_k = warp == rep;
      float* v = is_q ? q + warp * hd : is_k ? kcur : vcur;
      const uint32_t from = is_q ? (g * rep + warp) * hd : is_k ? (p.heads + g) * hd : (p.heads + p.kv_heads + g) * hd;
      if (tagged_field(0)) warp_load_tagged(v, qkv + from, hd, p.qkv);  // handoff.cuh
      else
        for (uint32_t i = lane; i < hd; i += 32) v[i] = load_activation(qkv + from + i);
      __syncwarp();
      const uint32_t norm = is_q ? p.q_norm : is_k ? p.k_norm : schedule::kNone;
      if (norm != schedule::kNone) warp_rms_norm(v, norm_weights[is_q ? 0 : 1], hd, p.norm_eps);
      if (is_q || is_k) {  // RoPE, HF rotate_half pairs
        __syncwarp();
        for (uint32_t j = lane; j < half; j += 32) {
          const float2 cs = rope_cs[j];
          const float a = v[j], b = v[j + half];
          v[j] = a * cs.x - b * cs.y;
          v[j + half] = b * cs.x + a * cs.y;
        }
      }
      __syncwarp();
      if (is_q) {  // q for the tensor cores: row warp its hi part, row warp + G what bf16 left
        for (uint32_t e = 2 * lane; e < hd; e += 64) {
          uint32_t hi, lo;
          split_bf16(v[e] * qscale, v[e + 1] * qscale, hi, lo);
          *reinterpret_cast<uint32_t*>(qa + warp * q_stride(hd) + e) = hi;
          *reinterpret_cast<uint32_t*>(qa + (warp + G) * q_stride(hd) + e) = lo;
        }
      } else {  // the cache holds bf16; use the same values
        uint16_t* cur16 = is_k ? kcur16 : vcur16;
        uint16_t* cache = (is_k ? kc : vc) + uint64_t{g} * ctx.max_context * hd;
        for (uint32_t i = lane; i < hd; i += 32) {
          const uint16_t b = f32_to_bf16(v[i]);
          cur16[i] = b;
          if (last) cache[kv_index(ctx.pos, i, hd)] = b;
        }
      }
    } else if (warp < G + 2) {
      for (uint32_t e = 2 * lane; e < hd; e += 64) {
        const uint32_t r = warp - 2;  // rep <= r < G
        *reinterpret_cast<uint32_t*>(qa + r * q_stride(hd) + e) = 0;
        *reinterpret_cast<uint32_t*>(qa + (r + G) * q_stride(hd) + e) = 0;
      }
    }
    block_sync();
    if (detail::handoff.failed) return ring.next_tile;  // the launch aborts: its tiles stay unread
    if (last && warp < rep) {  // the current position's score, from f32 q
      float dot = 0;
      for (uint32_t i = lane; i < hd; i += 32) dot = fmaf(q[warp * hd + i], bf16_to_f32(kcur16[i]), dot);
      dot = warp_sum(dot);
      if (lane == 0) wm[W * rep + warp] = dot * qscale, wl[W * rep + warp] = 1;
    }
    trace_mark(attention_trace, 0);

    // The split's cached positions. Tile j of the unit is the launch's tile `tile + j`, in stage
    // (tile + j) % count. Owner o < n = min(tiles, count) takes tiles o, o + n, ... (one stage:
    // as the matvec's tiles are taken, one waiter per tile and one arrival for all kWarps, no
    // division per tile), and the owner's `share` warps deal each tile's 16-position blocks.
    // A unit of few tiles thus has several warps on each (every tile the first of its stage in
    // the unit, whose earlier occupant has been consumed, so that any warp may wait for it);
    // a long one a warp per stage. (Every warp waiting for every tile, blocks dealt across the
    // tiles: 16 times the loop's overhead at 8K; bench/NOTES.md entry 56.)
    const schedule::AttentionSplit sp = schedule::attention_split(s, A, ctx.pos);
    const uint32_t tiles = (sp.end - sp.begin + per - 1) / per, count = ring.count, n = min(tiles, count);
    WarpAttention wa;
    constexpr uint32_t NT = WarpAttention::NT;
    wa.reset();
    if (n > 0) {  // n <= count <= kWarps (the executor gives each stage a compute warp at least): share >= 1
      const uint32_t o = warp % n, h = warp / n, share = kWarps / n;
      if (h < share) {
        const uint32_t releases = WeightRing::releases(share, h), stage = (tile + o) % count;
        const uint32_t k = smem_addr(ring.stages + stage * kStageBytes), v = k + kStageBytes / 2;
        uint32_t parity = ((tile + o) / count) & 1;
        for (uint32_t j = o; j < tiles; j += n, parity ^= 1) {
          const uint32_t first = sp.begin + j * per, m = min(per, sp.end - first);
          mbar_wait(ring.full + stage, parity);
          for (uint32_t b = h; b * 16 < m; b += share)
            wa.add(qa_addr, k + b * 16 * hd * 2, v + b * 16 * hd * 2, first + b * 16, min(16u, m - b * 16), hd);
          ring_release(ring, stage, releases);
        }
      }
    }
    tile += tiles;
    trace_mark(attention_trace, 1);

    // Merge: each warp's output (hi and lo rows summed), max and sum in its slot; then per head
    // the max over the slots and each slot's weight, once; then per output element the slots
    // weighted, plus the current position (last split).
    const uint32_t head = lane / 4;
    wa.l += __shfl_xor_sync(0xffffffffu, wa.l, 1);
    wa.l += __shfl_xor_sync(0xffffffffu, wa.l, 2);
    if (head < rep) {
      if (lane % 4 == 0) wm[warp * rep + head] = wa.m, wl[warp * rep + head] = wa.l;
      float* oh = wo + (warp * rep + head) * hd + 2 * (lane % 4);
#pragma unroll
      for (uint32_t t = 0; t < NT; ++t) {
        if (t >= hd / 8) break;
        *reinterpret_cast<float2*>(oh + 8 * t) = make_float2(wa.acc[t][0] + wa.acc[t][2], wa.acc[t][1] + wa.acc[t][3]);
      }
    }
    block_sync();
    static_assert(kWarps + 1 <= 32, "a lane per slot");
    if (warp < rep) {  // head `warp`, slot `lane`: the head's max and sum, and the slot's weight, once
      const bool slot = lane < (last ? W + 1 : W);
      const float m = slot ? wm[lane * rep + warp] : -INFINITY, M = warp_max(m);
      const float f = m == -INFINITY ? 0.0f : exp2f(m - M);  // a warp that attended to nothing: weight 0
      const float sum = warp_sum(slot ? f * wl[lane * rep + warp] : 0.0f);
      if (slot) wm[lane * rep + warp] = f;
      if (lane == 0) head_max[warp] = M, head_sum[warp] = sum;
    }
    block_sync();
    // At a short step with reduce_out, the output normalised there first, rows of hd (decided
    // here, not held in a register through the tiles: that made the kernel and the matvec body
    // spill); then the partial, rows of hd + 2 per head: (output, max, sum), the max in the
    // natural log, written at every step (attn_reduce polls it where it is tagged).
    float* reduced = schedule::short_step(ctx) && p.reduce_out != schedule::kNone
                         ? mem.at<float>(p.reduce_out) + uint64_t{g} * rep * hd : nullptr;
    for (uint32_t i = tid; i < rep * hd; i += kThreads) {
      const uint32_t r = i / hd, e = i % hd;
      float acc = last ? wm[W * rep + r] * bf16_to_f32(vcur16[e]) : 0.0f;
      for (uint32_t w = 0; w < W; ++w) acc = fmaf(wm[w * rep + r], wo[(w * rep + r) * hd + e], acc);
      // reduce_out and the partials as the executor lays them out (tagged or not: handoff.cuh)
      if (reduced) store_activation(reduced + i, acc / head_sum[r], tagged_field(2), handoff.bit);
      float* row = part + r * (hd + 2);
      store_activation(row + e, acc, tagged_field(1), handoff.bit);
      if (e == 0)
        store_activation(row + hd, head_max[r] * 0.6931471805599453f, tagged_field(1), handoff.bit),
            store_activation(row + hd + 1, head_sum[r], tagged_field(1), handoff.bit);
    }
  }
  return tile;
}

}  // namespace detail

__device__ inline void gpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const uint32_t before = bc.ring.next_tile;
  if (threadIdx.x == 0) detail::attention_trace = bc.trace;
  bc.ring.next_tile = detail::attention_body(p, ctx, mem, bc.scratch, bc.ring);
  if (bc.ring.next_tile != before) bc.ring.pause();
}

}  // namespace mk::device
