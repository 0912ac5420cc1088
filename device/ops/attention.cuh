#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

// The KV cache of earlier positions does not depend on this step, so it streams through the
// weight ring like weights, ahead of the waits: a tile holds kAttnTilePositions(hd) positions
// of k (first half of the stage) and of v (second half). The current position comes from qkv.
__device__ __host__ inline uint32_t attention_tile_positions(uint32_t hd) { return kStageBytes / 4 / hd; }

// Positions [begin, end) of split s at this step (the current position excluded).
struct AttentionSplit {
  uint32_t begin, end;
};
__device__ inline AttentionSplit attention_split(uint32_t s, uint32_t S, uint32_t pos) {
  const uint32_t chunk = (pos + S - 1) / S;
  return {min(pos, s * chunk), min(pos, (s + 1) * chunk)};
}

struct AttentionTiles {
  const uint16_t* k;  // the caches
  const uint16_t* v;
  uint32_t unit_begin, unit_end, S, pos, max_context, hd, per;

  __device__ uint32_t unit_tiles(uint32_t unit) const {
    const AttentionSplit sp = attention_split(unit % S, S, pos);
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
    const AttentionSplit sp = attention_split(u % S, S, pos);
    const uint32_t first = sp.begin + j * per, n = min(per, sp.end - first);
    const uint64_t row = (uint64_t{u / S} * max_context + first) * hd;
    return WeightTile{k + row, n * hd * 2, 0, n, 0, hd, v + row, kStageBytes / 2};
  }
};

__device__ inline AttentionTiles gpu_tiles(const schedule::AttentionPayload& p, const schedule::StepContext& ctx,
                                           const TensorTable& mem) {
  return {mem.at<const uint16_t>(p.k_cache), mem.at<const uint16_t>(p.v_cache), p.unit_begin, p.unit_end, p.kv_splits,
          ctx.pos, ctx.max_context, p.head_dim, attention_tile_positions(p.head_dim)};
}

// Shared memory: cos/sin, q heads, current k and v (f32 and bf16), scores [rep][tile], and the
// softmax state m, l and the rescale factor per q head.
inline constexpr uint32_t kAttnBatchTiles = 4;  // ring tiles taken per softmax update

inline uint32_t gpu_shared_bytes(const schedule::AttentionPayload& p) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads;
  return (hd + rep * hd + 2 * hd + hd + rep * kAttnBatchTiles * attention_tile_positions(hd) + 3 * rep) * 4 + 64;
}

namespace detail {

// RMSNorm of one head held in shared memory, by one warp.
__device__ inline void warp_rms_norm(float* v, const uint16_t* w, uint32_t n, float eps) {
  float ss = 0;
  for (uint32_t i = threadIdx.x % 32; i < n; i += 32) ss += v[i] * v[i];
  const float inv = rsqrtf(warp_sum(ss) / n + eps);
  __syncwarp();
  for (uint32_t i = threadIdx.x % 32; i < n; i += 32) v[i] = v[i] * inv * bf16_to_f32(w[i]);
}

inline constexpr uint32_t kMaxPairsPerThread = (schedule::kMaxGroup * schedule::kMaxHeadDim / 2 + kThreads - 1) / kThreads;

// Online softmax over the rep q heads of one kv group, a block of positions at a time: scores
// (a warp per position, lanes across the head), then per head the running max and sum (a warp
// per head), then the outputs (a thread per pair of output elements, kept in registers).
struct GroupSoftmax {
  const float* q;  // [rep][hd], normed and roped
  float* score;    // [rep][kAttnBatchTiles * per]
  float* m;        // [rep] running max, then [rep] sum, then [rep] rescale factor
  uint32_t rep, hd, per;
  float scale;
  float acc[kMaxPairsPerThread][2];

  __device__ void reset() {
#pragma unroll
    for (uint32_t k = 0; k < kMaxPairsPerThread; ++k) acc[k][0] = acc[k][1] = 0;
    for (uint32_t r = threadIdx.x; r < rep; r += kThreads) m[r] = -INFINITY, m[rep + r] = 0;
  }

  // A batch of up to kAttnBatchTiles blocks of positions: block b has n[b] k and v rows (bf16
  // [n][hd]) at k[b], v[b]; one softmax update for the batch. Every compute thread calls this.
  __device__ void add(const uint16_t* const* k, const uint16_t* const* v, const uint32_t* n, uint32_t blocks) {
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (hd % 16 == 0 && hd <= 512 && ((hd / 16) & (hd / 16 - 1)) == 0) {
    // Scores: a position per group of hd/16 lanes, each lane 16 elements of k (4 x 8 bytes),
    // q of up to four heads in registers; a few shuffles reduce each dot product.
    const uint32_t group = hd / 16, groups = 32 / group, sub = lane % group, slot = lane / group;
    for (uint32_t r0 = 0; r0 < rep; r0 += 4) {
      float qr[4][16];
#pragma unroll
      for (uint32_t r = 0; r < 4; ++r)
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) {
          const float4 v4 = r0 + r < rep ? *reinterpret_cast<const float4*>(q + (r0 + r) * hd + sub * 4 + j * 4 * group)
                                         : make_float4(0, 0, 0, 0);
          qr[r][4 * j] = v4.x, qr[r][4 * j + 1] = v4.y, qr[r][4 * j + 2] = v4.z, qr[r][4 * j + 3] = v4.w;
        }
      uint32_t total = 0;
      for (uint32_t b = 0; b < blocks; ++b) {
        for (uint32_t base = warp * groups; base < n[b]; base += kWarps * groups) {
          const uint32_t pos = base + slot;
          float dot[4] = {0, 0, 0, 0};
          if (pos < n[b]) {
            const uint16_t* row = k[b] + pos * hd + sub * 4;
#pragma unroll
            for (uint32_t j = 0; j < 4; ++j) {
              const uint2 kk = *reinterpret_cast<const uint2*>(row + j * 4 * group);
              const float k0 = bf16_lo(kk.x), k1 = bf16_hi(kk.x), k2 = bf16_lo(kk.y), k3 = bf16_hi(kk.y);
#pragma unroll
              for (uint32_t r = 0; r < 4; ++r)
                dot[r] = fmaf(k0, qr[r][4 * j], fmaf(k1, qr[r][4 * j + 1], fmaf(k2, qr[r][4 * j + 2], fmaf(k3, qr[r][4 * j + 3], dot[r]))));
            }
          }
#pragma unroll
          for (uint32_t r = 0; r < 4; ++r)
            for (uint32_t o = group / 2; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
          if (sub == 0 && pos < n[b])
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r)
              if (r0 + r < rep) score[(r0 + r) * kAttnBatchTiles * per + total + pos] = dot[r] * scale;
        }
        total += n[b];
      }
    }
    } else {  // other head sizes: a warp per position, lanes across the head
      uint32_t total = 0;
      for (uint32_t b = 0; b < blocks; ++b) {
        for (uint32_t pos = warp; pos < n[b]; pos += kWarps) {
          const uint32_t* row = reinterpret_cast<const uint32_t*>(k[b] + pos * hd);
          for (uint32_t r = 0; r < rep; ++r) {
            const float2* qr = reinterpret_cast<const float2*>(q + r * hd);
            float dot = 0;
            for (uint32_t e = lane; e < hd / 2; e += 32) {
              const uint32_t kk = row[e];
              const float2 qq = qr[e];
              dot = fmaf(bf16_lo(kk), qq.x, fmaf(bf16_hi(kk), qq.y, dot));
            }
            dot = warp_sum(dot);
            if (lane == 0) score[r * kAttnBatchTiles * per + total + pos] = dot * scale;
          }
        }
        total += n[b];
      }
    }
    uint32_t total = 0;
    for (uint32_t b = 0; b < blocks; ++b) total += n[b];
    block_sync();
    const uint32_t row_stride = kAttnBatchTiles * per;
    if (warp < rep) {  // warp r: the running max and sum of head r
      const uint32_t r = warp;
      float mx = -INFINITY;
      for (uint32_t i = lane; i < total; i += 32) mx = fmaxf(mx, score[r * row_stride + i]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m[r], m_new = fmaxf(m_old, mx);
      float sum = 0;
      for (uint32_t i = lane; i < total; i += 32) {
        const float e = expf(score[r * row_stride + i] - m_new);
        score[r * row_stride + i] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane has read m[r] before lane 0 writes it
      if (lane == 0) {
        const float c = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        m[r] = m_new;
        m[rep + r] = m[rep + r] * c + sum;
        m[2 * rep + r] = c;
      }
    }
    block_sync();
    const uint32_t pairs = rep * hd / 2;
#pragma unroll
    for (uint32_t k2 = 0; k2 < kMaxPairsPerThread; ++k2) {
      const uint32_t o = threadIdx.x + k2 * kThreads;
      if (o >= pairs) break;
      const uint32_t r = o / (hd / 2), e = o % (hd / 2);
      const float* pr = score + r * row_stride;
      float a0 = acc[k2][0] * m[2 * rep + r], a1 = acc[k2][1] * m[2 * rep + r];
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint32_t* vcol = reinterpret_cast<const uint32_t*>(v[b]) + e;
        for (uint32_t i = 0; i < n[b]; ++i) {
          const uint32_t vv = vcol[i * (hd / 2)];
          a0 = fmaf(pr[i], bf16_lo(vv), a0);
          a1 = fmaf(pr[i], bf16_hi(vv), a1);
        }
        pr += n[b];
      }
      acc[k2][0] = a0, acc[k2][1] = a1;
    }
  }

  // The partial: out[r] = (acc [hd], m, l), rows of hd + 2.
  __device__ void write(float* out) const {
    const uint32_t pairs = rep * hd / 2;
#pragma unroll
    for (uint32_t k = 0; k < kMaxPairsPerThread; ++k) {
      const uint32_t o = threadIdx.x + k * kThreads;
      if (o >= pairs) break;
      const uint32_t r = o / (hd / 2), e = o % (hd / 2);
      out[r * (hd + 2) + 2 * e] = acc[k][0];
      out[r * (hd + 2) + 2 * e + 1] = acc[k][1];
    }
    for (uint32_t r = threadIdx.x; r < rep; r += kThreads) out[r * (hd + 2) + hd] = m[r], out[r * (hd + 2) + hd + 1] = m[rep + r];
  }
};

// Out of line, and given nothing by reference that the interpreter keeps in registers: inlined,
// its register pressure made every op spill; given the block context by reference, the ring's
// fields moved to local memory for every op. Returns the ring's tile counter after its tiles.
__device__ __noinline__ uint32_t attention_body(const schedule::AttentionPayload& p, schedule::StepContext ctx,
                                                TensorTable mem, unsigned char* scratch, WeightRing ring) {
  const uint32_t hd = p.head_dim, half = hd / 2, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32, per = attention_tile_positions(hd);
  float* cs = reinterpret_cast<float*>(scratch);  // cos [half], sin [half]
  float* q = cs + hd;                             // [rep][hd]
  float* kcur = q + rep * hd;
  float* vcur = kcur + hd;
  uint16_t* kcur16 = reinterpret_cast<uint16_t*>(vcur + hd);  // the current k and v as stored
  uint16_t* vcur16 = kcur16 + hd;
  float* score = reinterpret_cast<float*>(vcur16 + hd);  // [rep][kAttnBatchTiles * per]
  float* state = score + rep * kAttnBatchTiles * per;    // [3][rep]
  for (uint32_t i = tid; i < half; i += kThreads) sincosf(rope_angle(p, i, ctx.pos), cs + half + i, cs + i);
  const float* qkv = mem.at<const float>(p.qkv);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);
  GroupSoftmax sm{q, score, state, rep, hd, per, p.scale, {}};
  uint32_t tile = ring.next_tile;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    const bool last = s == S - 1;
    block_sync();
    // q heads, k and v of this group in one batch of loads (q, kcur, vcur are contiguous).
    for (uint32_t i = tid; i < (rep + 2) * hd; i += kThreads) {
      const uint32_t from = i < rep * hd       ? g * rep * hd + i
                            : i < (rep + 1) * hd ? (p.heads + g) * hd + i - rep * hd
                                                 : (p.heads + p.kv_heads + g) * hd + i - (rep + 1) * hd;
      q[i] = load_activation(qkv + from);
    }
    sm.reset();
    block_sync();
    if (warp < rep && p.q_norm != schedule::kNone) warp_rms_norm(q + warp * hd, mem.at<const uint16_t>(p.q_norm), hd, p.norm_eps);
    if (warp == rep && p.k_norm != schedule::kNone) warp_rms_norm(kcur, mem.at<const uint16_t>(p.k_norm), hd, p.norm_eps);
    block_sync();
    for (uint32_t i = tid; i < (rep + 1) * half; i += kThreads) {  // RoPE, HF rotate_half pairs
      float* v = i < rep * half ? q + (i / half) * hd : kcur;
      const uint32_t j = i % half;
      const float a = v[j], b = v[j + half];
      v[j] = a * cs[j] - b * cs[half + j];
      v[j + half] = b * cs[j] + a * cs[half + j];
    }
    block_sync();
    const uint64_t head_base = uint64_t{g} * ctx.max_context * hd;
    for (uint32_t i = tid; i < hd; i += kThreads) {  // the cache holds bf16; use the same values
      const uint16_t kb = f32_to_bf16(kcur[i]), vb = f32_to_bf16(vcur[i]);
      kcur16[i] = kb;
      vcur16[i] = vb;
      if (last) {
        kc[head_base + uint64_t{ctx.pos} * hd + i] = kb;
        vc[head_base + uint64_t{ctx.pos} * hd + i] = vb;
      }
    }
    block_sync();

    // The split's positions in batches of ring tiles, then (last split) the current position.
    const AttentionSplit sp = attention_split(s, S, ctx.pos);
    const uint32_t batch = min(kAttnBatchTiles, max(1u, ring.count / 2));
    const uint16_t* kb[kAttnBatchTiles];
    const uint16_t* vb[kAttnBatchTiles];
    uint32_t nb[kAttnBatchTiles];
    for (uint32_t first = sp.begin; first < sp.end;) {
      uint32_t blocks = 0;
      for (; blocks < batch && first < sp.end; ++blocks, first += per) {
        const uint32_t stage = (tile + blocks) % ring.count;
        mbar_wait(ring.full + stage, ((tile + blocks) / ring.count) & 1);
        kb[blocks] = reinterpret_cast<const uint16_t*>(ring.stages + stage * kStageBytes);
        vb[blocks] = kb[blocks] + kStageBytes / 4;
        nb[blocks] = min(per, sp.end - first);
      }
      sm.add(kb, vb, nb, blocks);
      block_sync();  // every thread is done with the stages
      for (uint32_t b = 0; b < blocks; ++b, ++tile) {
        const uint32_t stage = tile % ring.count;
        if (warp % ring.count == stage && warp / ring.count < ring.share && tid % 32 == 0) mbar_arrive(ring.empty + stage);
      }
    }
    if (last) {
      const uint16_t* kc1[1] = {kcur16};
      const uint16_t* vc1[1] = {vcur16};
      const uint32_t one[1] = {1};
      sm.add(kc1, vc1, one, 1);
    }
    block_sync();
    sm.write(out + (uint64_t{g} * S + s) * rep * (hd + 2));
  }
  return tile;
}

}  // namespace detail

__device__ inline void gpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const uint32_t before = bc.ring.next_tile;
  bc.ring.next_tile = detail::attention_body(p, ctx, mem, bc.scratch, bc.ring);
  if (bc.ring.next_tile != before) bc.ring.hush();
}

}  // namespace mk::device
