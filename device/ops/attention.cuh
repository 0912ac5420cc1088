#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

inline constexpr uint32_t kAttnLaneElems = schedule::kMaxHeadDim / 32;  // head elements per lane

// Shared memory: cos/sin, q heads, current k and v, then per-warp partials.
inline uint32_t attention_shared_bytes(const schedule::AttentionPayload& p) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads;
  return (hd + rep * hd + 2 * hd + kWarps * rep * (hd + 2)) * 4;
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

}  // namespace detail

// One unit (kv head g, split s) at a time. Warps take positions round-robin; per position a
// warp computes the scores of all q heads of the group (lanes split head_dim) and keeps an
// online softmax per head; the warps' partials are then merged in shared memory.
__device__ inline void gpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  const uint32_t hd = p.head_dim, half = hd / 2, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* cs = reinterpret_cast<float*>(bc.scratch);  // cos [half], sin [half]
  float* q = cs + hd;                          // [rep][hd]
  float* kcur = q + rep * hd;
  float* vcur = kcur + hd;
  float* part = vcur + hd;  // [kWarps][rep][hd + 2]
  for (uint32_t i = tid; i < half; i += kThreads) {
    double s, c;
    sincos(rope_angle(p, i, ctx.pos), &s, &c);
    cs[i] = static_cast<float>(c);
    cs[half + i] = static_cast<float>(s);
  }
  const float* qkv = mem.at<const float>(p.qkv);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);
  const uint32_t chunk = (ctx.pos + S - 1) / S;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    const bool last = s == S - 1;
    block_sync();
    for (uint32_t i = tid; i < rep * hd; i += kThreads) q[i] = load_activation(qkv + g * rep * hd + i);
    for (uint32_t i = tid; i < hd; i += kThreads) {
      kcur[i] = load_activation(qkv + (p.heads + g) * hd + i);
      vcur[i] = load_activation(qkv + (p.heads + p.kv_heads + g) * hd + i);
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
      kcur[i] = bf16_to_f32(kb);
      vcur[i] = bf16_to_f32(vb);
      if (last) {
        kc[head_base + uint64_t{ctx.pos} * hd + i] = kb;
        vc[head_base + uint64_t{ctx.pos} * hd + i] = vb;
      }
    }
    block_sync();

    const uint32_t begin = min(ctx.pos, s * chunk), end = min(ctx.pos, (s + 1) * chunk);
    const uint32_t stop = last ? end + 1 : end;  // the last split also takes the current position
    float m[schedule::kMaxGroup], l[schedule::kMaxGroup], acc[schedule::kMaxGroup][kAttnLaneElems];
#pragma unroll
    for (uint32_t r = 0; r < schedule::kMaxGroup; ++r) {
      m[r] = -INFINITY;
      l[r] = 0;
#pragma unroll
      for (uint32_t j = 0; j < kAttnLaneElems; ++j) acc[r][j] = 0;
    }
    for (uint32_t pos = begin + warp; pos < stop; pos += kWarps) {
      const bool current = last && pos == end;
      float k[kAttnLaneElems], v[kAttnLaneElems];
#pragma unroll
      for (uint32_t j = 0; j < kAttnLaneElems; ++j) {
        const uint32_t e = lane + 32 * j;
        k[j] = v[j] = 0;
        if (e < hd) {
          k[j] = current ? kcur[e] : bf16_to_f32(kc[head_base + uint64_t{pos} * hd + e]);
          v[j] = current ? vcur[e] : bf16_to_f32(vc[head_base + uint64_t{pos} * hd + e]);
        }
      }
#pragma unroll
      for (uint32_t r = 0; r < schedule::kMaxGroup; ++r) {
        if (r >= rep) break;
        float dot = 0;
#pragma unroll
        for (uint32_t j = 0; j < kAttnLaneElems; ++j)
          if (lane + 32 * j < hd) dot += q[r * hd + lane + 32 * j] * k[j];
        const float score = warp_sum(dot) * p.scale;
        const float m_new = fmaxf(m[r], score);
        const float correction = expf(m[r] - m_new), w = expf(score - m_new);
#pragma unroll
        for (uint32_t j = 0; j < kAttnLaneElems; ++j) acc[r][j] = acc[r][j] * correction + w * v[j];
        l[r] = l[r] * correction + w;
        m[r] = m_new;
      }
    }
#pragma unroll
    for (uint32_t r = 0; r < schedule::kMaxGroup; ++r) {
      if (r >= rep) break;
      float* mine = part + (warp * rep + r) * (hd + 2);
#pragma unroll
      for (uint32_t j = 0; j < kAttnLaneElems; ++j)
        if (lane + 32 * j < hd) mine[lane + 32 * j] = acc[r][j];
      if (lane == 0) mine[hd] = m[r], mine[hd + 1] = l[r];
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
