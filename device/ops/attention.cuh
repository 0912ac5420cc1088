#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

// Shared memory: cos/sin, q heads, current k and v, then per-warp partials.
inline uint32_t attention_shared_bytes(const schedule::AttentionPayload& p) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads;
  return (hd + rep * hd + 2 * hd + hd + kWarps * rep * (hd + 2)) * 4;
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

// Online-softmax state of one warp over the positions it attends to. Lanes work in groups of
// hd/4 (rounded up to a power of two), one position per group, each lane holding 4 elements
// of v and of the REP accumulators (with 1024 threads a lane has 64 registers).
template <uint32_t REP>
struct SoftmaxState {
  float acc[REP][4], m[REP], l[REP];
  uint32_t width, group, sub, e0;
  bool active;

  __device__ void init(uint32_t hd) {
    const uint32_t lane = threadIdx.x % 32, group_lanes = hd / 4;
    width = 1;
    while (width < group_lanes) width *= 2;
    group = lane / width;
    sub = lane % width;
    e0 = sub * 4;
    active = sub < group_lanes;
#pragma unroll
    for (uint32_t r = 0; r < REP; ++r) {
      m[r] = -INFINITY;
      l[r] = 0;
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) acc[r][j] = 0;
    }
  }

  // Positions [0, count) of a k block and a v block ([count][hd] bf16 each, in shared memory).
  // Each group takes kBatch positions at a time: their kBatch * REP dot products reduce in
  // independent shuffle chains, and one max and one correction cover the batch (a warp walking
  // one position at a time was bound by the latency of that chain).
  __device__ void attend(const uint16_t* k, const uint16_t* v, uint32_t count, const float* q, uint32_t hd, float scale) {
    constexpr uint32_t kBatch = REP <= 2 ? 4 : REP == 4 ? 2 : 1;  // as many as 64 registers allow
    const uint32_t groups = 32 / width;
    for (uint32_t base = 0; base < count; base += groups * kBatch) {
      float s[kBatch][REP];
      bool ok[kBatch];
#pragma unroll
      for (uint32_t t = 0; t < kBatch; ++t) {
        const uint32_t j = base + t * groups + group;
        ok[t] = active && j < count;
        const uint2 kr = ok[t] ? *reinterpret_cast<const uint2*>(k + j * hd + e0) : make_uint2(0, 0);
#pragma unroll
        for (uint32_t r = 0; r < REP; ++r) {
          const float4 qv = *reinterpret_cast<const float4*>(q + r * hd + e0);
          s[t][r] = bf16_lo(kr.x) * qv.x + bf16_hi(kr.x) * qv.y + bf16_lo(kr.y) * qv.z + bf16_hi(kr.y) * qv.w;
        }
      }
      for (uint32_t o = width / 2; o > 0; o /= 2)
#pragma unroll
        for (uint32_t t = 0; t < kBatch; ++t)
#pragma unroll
          for (uint32_t r = 0; r < REP; ++r) s[t][r] += __shfl_xor_sync(0xffffffffu, s[t][r], o);
      if (!ok[0]) continue;  // positions are taken in order: no later one is valid either
      uint2 vr[kBatch];
#pragma unroll
      for (uint32_t t = 0; t < kBatch; ++t)
        vr[t] = ok[t] ? *reinterpret_cast<const uint2*>(v + (base + t * groups + group) * hd + e0) : make_uint2(0, 0);
#pragma unroll
      for (uint32_t r = 0; r < REP; ++r) {
        float m_new = m[r];
#pragma unroll
        for (uint32_t t = 0; t < kBatch; ++t)
          if (ok[t]) m_new = fmaxf(m_new, s[t][r] * scale);
        const float correction = expf(m[r] - m_new);
        l[r] *= correction;
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) acc[r][e] *= correction;
#pragma unroll
        for (uint32_t t = 0; t < kBatch; ++t) {
          if (!ok[t]) continue;
          const float w = expf(s[t][r] * scale - m_new);
          l[r] += w;
          acc[r][0] += w * bf16_lo(vr[t].x);
          acc[r][1] += w * bf16_hi(vr[t].x);
          acc[r][2] += w * bf16_lo(vr[t].y);
          acc[r][3] += w * bf16_hi(vr[t].y);
        }
        m[r] = m_new;
      }
    }
  }

  // Merges the warp's groups (lanes with the same sub hold the same elements) into part[warp].
  __device__ void write(float* part, uint32_t hd) {
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (uint32_t r = 0; r < REP; ++r) {
      float M = m[r];
      for (uint32_t o = width; o < 32; o *= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
      const float f = m[r] == -INFINITY ? 0.0f : expf(m[r] - M);
      float lsum = l[r] * f;
      for (uint32_t o = width; o < 32; o *= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
      float* mine = part + (warp * REP + r) * (hd + 2);
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) {
        float a = acc[r][e] * f;
        for (uint32_t o = width; o < 32; o *= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (group == 0 && active) mine[e0 + e] = a;
      }
      if (lane == 0) mine[hd] = M, mine[hd + 1] = lsum;
    }
  }
};

// The cached positions [begin, end) of one unit as ring tiles: each tile half k, half v.
template <class F>
__device__ void unit_tiles(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                           uint32_t unit, F&& f) {
  const uint32_t S = p.kv_splits, g = unit / S, s = unit % S, hd = p.head_dim;
  const uint32_t chunk = (ctx.pos + S - 1) / S;
  const uint32_t begin = min(ctx.pos, s * chunk), end = min(ctx.pos, (s + 1) * chunk);
  const uint32_t per_tile = (kStageBytes / 2) / (hd * 2);
  const uint64_t head_base = uint64_t{g} * ctx.max_context * hd;
  const uint16_t* k = mem.at<const uint16_t>(p.k_cache) + head_base;
  const uint16_t* v = mem.at<const uint16_t>(p.v_cache) + head_base;
  for (uint32_t b = begin; b < end; b += per_tile) {
    const uint32_t n = min(per_tile, end - b);
    f(WeightTile{{k + uint64_t{b} * hd, v + uint64_t{b} * hd}, {n * hd * 2, n * hd * 2}, b, n, 0, hd});
  }
}

// One unit's attention on the compute warps: warp s consumes ring stage s's tiles into its
// softmax state; warp 0 also takes the current position (its k and v are not in the cache
// until this launch); each warp then writes its partial.
template <uint32_t REP>
__device__ __noinline__ void attend_unit(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                            uint32_t unit, bool last, const float* q, const uint16_t* kcur16, const uint16_t* vcur16,
                            float* part, WeightRing& ring) {
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SoftmaxState<REP> st;
  st.init(p.head_dim);
  uint32_t k = ring.next_tile;
  unit_tiles(p, ctx, mem, unit, [&](const WeightTile& t) {
    const uint32_t stage = k % ring.count;
    if (warp == stage) {
      mbar_wait(ring.full + stage, (k / ring.count) & 1);
      const uint16_t* tile = reinterpret_cast<const uint16_t*>(ring.stages + stage * kStageBytes);
      st.attend(tile, tile + kStageBytes / 4, t.count, q, p.head_dim, p.scale);
      __syncwarp();
      if (lane == 0) mbar_arrive(ring.empty + stage);
    }
    ++k;
  });
  ring.next_tile = k;
  if (last && warp == 0) st.attend(kcur16, vcur16, 1, q, p.head_dim, p.scale);
  st.write(part, p.head_dim);
}

}  // namespace detail

// The ring tiles of every unit of the task, in unit order (what the producer warp streams).
template <class F>
__device__ void gpu_weight_tiles(const schedule::AttentionPayload& p, const schedule::StepContext& ctx,
                                 const TensorTable& mem, F&& f) {
  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) detail::unit_tiles(p, ctx, mem, unit, f);
}

// One unit (kv head g, split s) at a time: q heads normed and roped into shared memory, the
// current k and v rounded to bf16 (and appended to the cache by the last split), then
// attend_unit over the split's cached positions (streamed through the ring) and the current
// one, then the warps' partials merged.
__device__ inline void gpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const uint32_t hd = p.head_dim, half = hd / 2, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32;
  float* cs = reinterpret_cast<float*>(bc.scratch);  // cos [half], sin [half]
  float* q = cs + hd;                          // [rep][hd]
  float* kcur = q + rep * hd;
  float* vcur = kcur + hd;
  uint16_t* kcur16 = reinterpret_cast<uint16_t*>(vcur + hd);  // the current k and v as stored
  uint16_t* vcur16 = kcur16 + hd;
  float* part = reinterpret_cast<float*>(vcur16 + hd);  // [kWarps][rep][hd + 2]
  for (uint32_t i = tid; i < half; i += kThreads) {
    sincosf(rope_angle(p, i, ctx.pos), cs + half + i, cs + i);
  }
  const float* qkv = mem.at<const float>(p.qkv);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);

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
    block_sync();
    if (warp < rep && p.q_norm != schedule::kNone)
      detail::warp_rms_norm(q + warp * hd, mem.at<const uint16_t>(p.q_norm), hd, p.norm_eps);
    if (warp == rep && p.k_norm != schedule::kNone)
      detail::warp_rms_norm(kcur, mem.at<const uint16_t>(p.k_norm), hd, p.norm_eps);
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

    switch (rep) {
      case 1: detail::attend_unit<1>(p, ctx, mem, unit, last, q, kcur16, vcur16, part, bc.ring); break;
      case 2: detail::attend_unit<2>(p, ctx, mem, unit, last, q, kcur16, vcur16, part, bc.ring); break;
      case 4: detail::attend_unit<4>(p, ctx, mem, unit, last, q, kcur16, vcur16, part, bc.ring); break;
      default: detail::attend_unit<8>(p, ctx, mem, unit, last, q, kcur16, vcur16, part, bc.ring); break;
    }
    block_sync();
    // Merge the warps: out = (sum_w e^(m_w - M) acc_w, M, sum_w e^(m_w - M) l_w).
    for (uint32_t i = tid; i < rep * (hd + 2); i += kThreads) {
      const uint32_t r = i / (hd + 2), e = i % (hd + 2);
      float M = -INFINITY;
      for (uint32_t w = 0; w < kWarps; ++w) M = fmaxf(M, part[(w * rep + r) * (hd + 2) + hd]);
      float value = M;
      if (e != hd) {
        value = 0;
        if (M != -INFINITY)
          for (uint32_t w = 0; w < kWarps; ++w) {
            const float* other = part + (w * rep + r) * (hd + 2);
            if (other[hd] != -INFINITY) value += expf(other[hd] - M) * other[e];
          }
      }
      out[((uint64_t{g} * S + s) * rep + r) * (hd + 2) + e] = value;
    }
  }
}

}  // namespace mk::device
