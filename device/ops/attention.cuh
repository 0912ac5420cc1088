#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/ops/attention_rows.cuh"
#include "device/ops/attention_tiles.cuh"
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
  const uint16_t* k;  // the caches, at the step's slot
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

// A step of one row (the producer streams only for those): that row's slot and position.
__device__ inline AttentionTiles gpu_tiles(const schedule::AttentionPayload& p, const schedule::StepContext& ctx,
                                           const TensorTable& mem) {
  const uint64_t slot = uint64_t{ctx.segments[0].slot} * p.kv_heads * ctx.max_context * p.head_dim;
  return {mem.at<const uint16_t>(p.k_cache) + slot, mem.at<const uint16_t>(p.v_cache) + slot, p.unit_begin, p.unit_end,
          p.kv_splits, schedule::active_kv_splits(ctx, ctx.pos, p.kv_splits), ctx.pos, ctx.max_context, p.head_dim,
          attention_tile_positions(p.head_dim)};
}

namespace detail {
// What the set-up needs that depends on the payload and the position only, prepared during the
// counter wait (gpu_prefetch) and read after the barrier that ends it: RoPE's cos and sin of
// each pair and the q and k norm weights in f32. In the body they cost a global round trip (the
// norm weights) and powf and sincosf per lane on the chain (docs/notes.md entry 56).
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
  const uint64_t slot = uint64_t{ctx.segments[0].slot} * p.kv_heads * ctx.max_context * hd;  // the row's sequence
  uint16_t* kc = mem.at<uint16_t>(p.k_cache) + slot;
  uint16_t* vc = mem.at<uint16_t>(p.v_cache) + slot;
  float* out = mem.at<float>(p.out);
  const uint32_t A = schedule::active_kv_splits(ctx, ctx.pos, S);
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
    // barriers before: docs/notes.md 54.)
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
          split_bf16x2(v[e] * qscale, v[e + 1] * qscale, hi, lo);
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
    // tiles: 16 times the loop's overhead at 8K; docs/notes.md entry 56.)
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
// A step of several rows (attention_rows.cuh).
__device__ inline void gpu_rows(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc) {
  detail::attention_rows_body(p, ctx, mem, bc.scratch, bc.scratch_bytes);
}

}  // namespace mk::device
