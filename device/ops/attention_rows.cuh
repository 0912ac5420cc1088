// The attention at a step of several rows (format.hpp, StepSegment): every row as its one-token
// step does it (schedules/ops/attention.hpp), on the tensor cores of attention_tiles.cuh. The
// step streams nothing through the weight ring: per unit (kv head, split) and segment, the body
// takes the span of cached positions its active rows need in tiles of cp.async copies (two in
// flight), and the segment's own positions from k and v it computes from qkv (normed, roped,
// rounded to bf16 as the cache stores them; each row's last split appends its own to the cache).
// Its rows' q heads, 8 to a warp's item (hi and lo, as the one-row body's heads), each attend to
// their own range of positions (add_masked); the warps sharing an item deal the positions'
// blocks of 16 and merge their states at the end into the item's partial records.
#pragma once
#include "device/bf16.hpp"
#include "device/cuda/async_copy.cuh"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda_limits.hpp"
#include "device/memory.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/ops/attention_tiles.cuh"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {
namespace detail {

// One head of qkv (at element `at`) into the warp's f32 vector: polled where tagged, then normed
// (norm weight in f32, or null) and roped at `pos` (not for v). If the launch aborts the values
// are left as they are, with handoff.failed set: the caller checks it after its next barrier.
__device__ inline void rows_head(const schedule::AttentionPayload& p, const float* qkv, uint64_t at, float* v, const float* norm,
                                 uint32_t pos, bool rope, bool tagged) {
  const uint32_t hd = p.head_dim, half = hd / 2, lane = threadIdx.x % 32;
  if (tagged) warp_load_tagged(v, qkv + at, hd, p.qkv);
  else
    for (uint32_t i = lane; i < hd; i += 32) v[i] = load_activation(qkv + at + i);
  __syncwarp();
  if (norm) {
    float ss = 0;
    for (uint32_t i = lane; i < hd; i += 32) ss += v[i] * v[i];
    const float inv = rsqrtf(warp_sum(ss) / hd + p.norm_eps);
    __syncwarp();
    for (uint32_t i = lane; i < hd; i += 32) v[i] = v[i] * inv * norm[i];
    __syncwarp();
  }
  if (rope) {  // HF rotate_half pairs
    for (uint32_t j = lane; j < half; j += 32) {
      float sn, cs;
      sincosf(rope_angle(p, j, pos), &sn, &cs);
      const float a = v[j], b = v[j + half];
      v[j] = a * cs - b * sn;
      v[j + half] = b * cs + a * sn;
    }
    __syncwarp();
  }
}

__device__ __forceinline__ unsigned char* align16(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15});
}

// Out of line, with its own register allocation (as every op body).
__device__ __noinline__ void attention_rows_body(const schedule::AttentionPayload& p, schedule::StepContext ctx, TensorTable mem,
                                                 unsigned char* scratch, uint32_t scratch_bytes) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint64_t qkv_width = uint64_t{p.heads + 2 * p.kv_heads} * hd;
  const schedule::AttentionPartials layout = schedule::attention_partials(p);
  const float qscale = p.scale * 1.4426950408889634f;  // scores in the log2 domain: exp2f
  const float* qkv = mem.at<const float>(p.qkv);
  float* out = mem.at<float>(p.out);
  float* reduced = schedule::short_step(ctx) && p.reduce_out != schedule::kNone ? mem.at<float>(p.reduce_out) : nullptr;
  const bool qkv_tagged = tagged_field(0), out_tagged = tagged_field(1), reduced_tagged = tagged_field(2);
  const uint32_t bit = handoff.bit, qs = q_stride(hd);

  // Scratch: a warp's f32 head, each row's range and whether the unit's split is active for it,
  // the norm weights in f32; then per unit and segment the segment's k and v in bf16, the pass's
  // q items, and the tiles of cached positions (the warps' states merge there at the end).
  float* vec = reinterpret_cast<float*>(scratch);                 // [kWarps][hd]
  uint32_t* lo = reinterpret_cast<uint32_t*>(vec + kWarps * hd);  // [kMaxCudaRows]
  uint32_t* hi = lo + kMaxCudaRows;                               // [kMaxCudaRows]
  uint32_t* act = hi + kMaxCudaRows;                              // [kMaxCudaRows]
  float* norm_w = reinterpret_cast<float*>(act + kMaxCudaRows);   // [2][hd]: q's, k's
  unsigned char* free0 = align16(reinterpret_cast<unsigned char*>(norm_w + 2 * hd));
  for (uint32_t i = tid; i < 2 * hd; i += kThreads) {
    const uint32_t w = i < hd ? p.q_norm : p.k_norm;
    if (w != schedule::kNone) norm_w[i] = bf16_to_f32(mem.at<const uint16_t>(w)[i % hd]);
  }
  float* my = vec + warp * hd;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    for (uint32_t j = 0; j < ctx.segment_count; ++j) {
      const schedule::StepSegment seg = ctx.segments[j];
      const uint32_t start = schedule::segment_start(ctx, seg), nr = seg.rows;
      const uint64_t head_base = (uint64_t{seg.slot} * p.kv_heads + g) * ctx.max_context * hd;
      uint16_t* kc = mem.at<uint16_t>(p.k_cache) + head_base;
      uint16_t* vc = mem.at<uint16_t>(p.v_cache) + head_base;
      block_sync();  // the scratch's readers of the last unit or segment are done
      for (uint32_t i = tid; i < nr; i += kThreads) {
        const uint32_t pos = start + i, A = schedule::active_kv_splits(ctx, pos, S);
        const schedule::AttentionSplit sp = schedule::attention_split(s, A, pos);
        act[i] = s < A;
        lo[i] = sp.begin;
        hi[i] = s + 1 == A ? pos + 1 : sp.end;  // the row's last split: its own position too
      }
      block_sync();
      // The active rows are the last ones (a row's split count grows with its position).
      uint32_t i0 = 0, LO = 0xffffffffu, HI = 0;
      while (i0 < nr && !act[i0]) ++i0;
      for (uint32_t i = i0; i < nr; ++i) LO = min(LO, lo[i]), HI = max(HI, hi[i]);
      // The inactive rows' records of this split: zeros (every row is written at every step).
      for (uint32_t i = tid; i < i0 * rep * layout.record(); i += kThreads) {
        const uint32_t t = seg.row_begin + i / (rep * layout.record()), k = i % (rep * layout.record());
        store_activation(out + layout.at(t, g, s, 0) + k, 0.0f, out_tagged, bit);
      }
      if (i0 == nr) continue;
      const uint32_t C0 = LO, C1 = min(HI, start), N0 = max(LO, start), N1 = HI;

      // The segment's k and v, [position - start][hd] as the cache lays them out, a warp a row.
      uint16_t* newk = reinterpret_cast<uint16_t*>(free0);
      uint16_t* newv = newk + (nr + 16) * hd;  // 16 rows of slack: a block past the last reads there
      for (uint32_t pos = N0 + warp; pos < N1; pos += kWarps) {
        const uint32_t i = pos - start, t = seg.row_begin + i;
        const bool last = act[i] && hi[i] == pos + 1;  // this split appends the row's k and v
        for (uint32_t which = 0; which < 2; ++which) {
          const uint32_t index = (which == 0 ? p.heads + g : p.heads + p.kv_heads + g) * hd;
          const float* norm = which == 0 && p.k_norm != schedule::kNone ? norm_w + hd : nullptr;
          rows_head(p, qkv, t * qkv_width + index, my, norm, pos, which == 0, qkv_tagged);
          uint16_t* dst = which == 0 ? newk : newv;
          uint16_t* cache = which == 0 ? kc : vc;
          for (uint32_t e = lane; e < hd; e += 32) {
            const uint16_t b = f32_to_bf16(my[e]);
            dst[kv_index(pos, e, hd) - uint64_t{start} * hd] = b;
            if (last) cache[kv_index(pos, e, hd)] = b;
          }
          __syncwarp();
        }
      }
      uint16_t* qa = reinterpret_cast<uint16_t*>(align16(reinterpret_cast<unsigned char*>(newv + (nr + 16) * hd)));
      const uint32_t items = ((nr - i0) * rep + 7) / 8, max_items = min(items, kWarps);
      unsigned char* tiles = align16(reinterpret_cast<unsigned char*>(qa + max_items * kQRows * qs));
      const uint32_t room = static_cast<uint32_t>(scratch + scratch_bytes - tiles);
      const uint32_t TP = min(256u, room / (2 * 2 * hd * 2) / 16 * 16);  // positions a tile, two tiles
      uint16_t* tk[2] = {reinterpret_cast<uint16_t*>(tiles), reinterpret_cast<uint16_t*>(tiles) + 2 * TP * hd};
      if (TP == 0 || room < (kWarps * 8 * hd + 2 * kWarps * 8) * 4) __trap();  // the executor's shared memory is too small

      for (uint32_t base = 0; base < items; base += kWarps) {
        const uint32_t I = min(kWarps, items - base), sharers = kWarps / I;
        block_sync();  // the new k and v written; the last pass's readers of qa and the tiles done
        if (handoff.failed) return;  // a tagged input's poll timed out: the launch aborts
        // The pass's q rows: item it's row k is the active row (it*8 + k) / rep's head % rep.
        for (uint32_t k = warp; k < I * 8; k += kWarps) {
          const uint32_t qr = (base + k / 8) * 8 + k % 8, ar = qr / rep, r = qr % rep;
          uint16_t* rows = qa + (k / 8) * kQRows * qs;
          if (ar < nr - i0) {
            const uint32_t i = i0 + ar, t = seg.row_begin + i;
            const float* norm = p.q_norm != schedule::kNone ? norm_w : nullptr;
            rows_head(p, qkv, t * qkv_width + uint64_t{g * rep + r} * hd, my, norm, start + i, true, qkv_tagged);
          }
          for (uint32_t e = 2 * lane; e < hd; e += 64) {
            uint32_t h2 = 0, l2 = 0;
            if (ar < nr - i0) split_bf16x2(my[e] * qscale, my[e + 1] * qscale, h2, l2);
            *reinterpret_cast<uint32_t*>(rows + (k % 8) * qs + e) = h2;
            *reinterpret_cast<uint32_t*>(rows + (k % 8 + 8) * qs + e) = l2;
          }
          __syncwarp();
        }
        // Each lane's q row (lane / 4 of its warp's item) and its range.
        const uint32_t it = warp % I, share = warp / I, qr = (base + it) * 8 + lane / 4, ar = qr / rep;
        const bool working = share < sharers;
        const uint32_t rlo = ar < nr - i0 ? lo[i0 + ar] : 0, rhi = ar < nr - i0 ? hi[i0 + ar] : 0;
        const uint32_t qaddr = smem_addr(qa + it * kQRows * qs);
        WarpAttention wa;
        wa.reset();
        // The cached positions [C0, C1), a tile of TP at a time, the next one's copies in flight.
        const uint32_t tiles_n = C1 > C0 ? (C1 - C0 + TP - 1) / TP : 0;
        auto issue = [&](uint32_t tt) {
          uint16_t* k = tk[tt % 2];
          uint16_t* v = k + TP * hd;
          const uint32_t p0 = C0 + tt * TP;
          for (uint32_t i = tid; i < TP * hd / 8; i += kThreads) {
            const uint32_t pp = i / (hd / 8), c = i % (hd / 8) * 8, ok = p0 + pp < C1 ? 16 : 0;
            const uint64_t src = uint64_t{ok ? p0 + pp : C0} * hd + c;
            cp_async16(k + pp * hd + c, kc + src, ok);
            cp_async16(v + pp * hd + c, vc + src, ok);
          }
          cp_async_commit();
        };
        if (tiles_n) issue(0);
        block_sync();  // the q rows written
        if (handoff.failed) {
          cp_async_wait(0);
          return;
        }
        for (uint32_t tt = 0; tt < tiles_n; ++tt) {
          if (tt + 1 < tiles_n) issue(tt + 1);
          cp_async_wait(tt + 1 < tiles_n ? 1 : 0);
          block_sync();
          const uint32_t p0 = C0 + tt * TP, count = min(TP, C1 - p0);
          const uint32_t k = smem_addr(tk[tt % 2]), v = k + TP * hd * 2;
          if (working)
            for (uint32_t b = share; b * 16 < count; b += sharers)
              wa.add_masked(qaddr, k + b * 16 * hd * 2, v + b * 16 * hd * 2, p0 + b * 16, min(16u, count - b * 16), hd, rlo, rhi);
          block_sync();  // done with the tile before its buffer is copied into again
        }
        // The segment's own positions [N0, N1), from the k and v computed above.
        if (working)
          for (uint32_t b = share; N0 + b * 16 < N1; b += sharers) {
            const uint32_t pos0 = N0 + b * 16, off = (pos0 - start) * hd * 2;
            wa.add_masked(qaddr, smem_addr(newk) + off, smem_addr(newv) + off, pos0, min(16u, N1 - pos0), hd, rlo, rhi);
          }
        // Merge: each warp's state (its item's 8 q rows) in the tiles' space, then per q row the
        // states of its item's warps weighted by their maxima, into the partial records.
        float* wo = reinterpret_cast<float*>(tiles);  // [kWarps][8][hd]
        float* wm = wo + kWarps * 8 * hd;              // [kWarps][8]
        float* wl = wm + kWarps * 8;                   // [kWarps][8]
        wa.l += __shfl_xor_sync(0xffffffffu, wa.l, 1);
        wa.l += __shfl_xor_sync(0xffffffffu, wa.l, 2);
        block_sync();
        {
          const uint32_t row8 = lane / 4;
          if (lane % 4 == 0) wm[warp * 8 + row8] = working ? wa.m : -INFINITY, wl[warp * 8 + row8] = working ? wa.l : 0.0f;
          float* oh = wo + (warp * 8 + row8) * hd + 2 * (lane % 4);
#pragma unroll
          for (uint32_t t = 0; t < WarpAttention::NT; ++t) {
            if (t >= hd / 8) break;
            *reinterpret_cast<float2*>(oh + 8 * t) = make_float2(wa.acc[t][0] + wa.acc[t][2], wa.acc[t][1] + wa.acc[t][3]);
          }
        }
        block_sync();
        for (uint32_t i = tid; i < I * 8 * hd; i += kThreads) {
          const uint32_t it2 = i / (8 * hd), k = i / hd % 8, e = i % hd, qr2 = (base + it2) * 8 + k, ar2 = qr2 / rep;
          if (ar2 >= nr - i0) continue;
          float M = -INFINITY;
          for (uint32_t h = 0; h < sharers; ++h) M = fmaxf(M, wm[(it2 + h * I) * 8 + k]);
          float L = 0, a = 0;
          for (uint32_t h = 0; h < sharers; ++h) {
            const uint32_t w = it2 + h * I;
            const float f = wm[w * 8 + k] == -INFINITY ? 0.0f : exp2f(wm[w * 8 + k] - M);
            L += f * wl[w * 8 + k];
            a += f * wo[(w * 8 + k) * hd + e];
          }
          const uint32_t t = seg.row_begin + i0 + ar2, r = qr2 % rep;
          float* rec = out + layout.at(t, g, s, r);
          if (reduced) store_activation(reduced + uint64_t{t} * p.heads * hd + uint64_t{g * rep + r} * hd + e, a / L, reduced_tagged, bit);
          store_activation(rec + e, a, out_tagged, bit);
          if (e == 0)
            store_activation(rec + hd, M * 0.6931471805599453f, out_tagged, bit), store_activation(rec + hd + 1, L, out_tagged, bit);
        }
      }
    }
  }
}

}  // namespace detail
}  // namespace mk::device
