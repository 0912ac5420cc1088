#pragma once
#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/rope.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::device {

// Shared memory: cos/sin, q heads, current k and v, then per-warp partials.
inline uint32_t gpu_shared_bytes(const schedule::AttentionPayload& p) {
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

// Lanes work in groups of hd/4 (rounded up to a power of two), one position per group, each
// lane holding 4 elements of k, v and of the REP accumulators (8-byte loads: with 1024 threads
// a lane has 64 registers, and 8 elements per lane spilled). A warp covers 32/group positions
// per step and keeps the next step's k and v in flight. Online softmax per q head; the
// groups of a warp are merged with shuffles, the result goes to part[warp].
template <uint32_t REP>
__device__ __noinline__ void attend_positions(const schedule::AttentionPayload& p, const float* q, const uint16_t* k_head,
                                              const uint16_t* v_head, const uint16_t* kcur16, const uint16_t* vcur16,
                                              uint32_t begin, uint32_t stop, bool last, float* part) {
  constexpr uint32_t kDepth = 2;  // steps of k and v in flight
  const uint32_t hd = p.head_dim, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t group_lanes = hd / 4;
  uint32_t width = 1;
  while (width < group_lanes) width *= 2;
  const uint32_t per_step = 32 / width, group = lane / width, sub = lane % width, e0 = sub * 4;
  const bool active = sub < group_lanes;
  const uint32_t current = stop - 1;  // meaningful when last
  float acc[REP][4], m[REP], l[REP];
#pragma unroll
  for (uint32_t r = 0; r < REP; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) acc[r][j] = 0;
  }
  auto fetch = [&](uint32_t pos, uint2& kr, uint2& vr) {
    kr = vr = make_uint2(0, 0);
    if (!active || pos >= stop) return;
    if (last && pos == current) {
      kr = *reinterpret_cast<const uint2*>(kcur16 + e0);
      vr = *reinterpret_cast<const uint2*>(vcur16 + e0);
    } else {  // written by earlier launches only: the read-only path is safe
      kr = __ldg(reinterpret_cast<const uint2*>(k_head + uint64_t{pos} * hd + e0));
      vr = __ldg(reinterpret_cast<const uint2*>(v_head + uint64_t{pos} * hd + e0));
    }
  };
  const uint32_t stride = kWarps * per_step;
  const uint32_t first = begin + warp * per_step + group;
  uint2 kq[kDepth], vq[kDepth];
#pragma unroll
  for (uint32_t d = 0; d < kDepth; ++d) fetch(first + d * stride, kq[d], vq[d]);
  uint32_t pos = first;
  for (uint32_t base = begin + warp * per_step; base < stop; base += stride, pos += stride) {
    const uint2 kr = kq[0], vr = vq[0];
#pragma unroll
    for (uint32_t d = 0; d + 1 < kDepth; ++d) kq[d] = kq[d + 1], vq[d] = vq[d + 1];
    fetch(pos + kDepth * stride, kq[kDepth - 1], vq[kDepth - 1]);
    const bool valid = active && pos < stop;
    const float v[4] = {bf16_lo(vr.x), bf16_hi(vr.x), bf16_lo(vr.y), bf16_hi(vr.y)};
#pragma unroll
    for (uint32_t r = 0; r < REP; ++r) {
      const float4 qv = *reinterpret_cast<const float4*>(q + r * hd + e0);
      float dot = active ? bf16_lo(kr.x) * qv.x + bf16_hi(kr.x) * qv.y + bf16_lo(kr.y) * qv.z + bf16_hi(kr.y) * qv.w : 0.0f;
      for (uint32_t o = width / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (valid) {
        const float score = dot * p.scale;
        const float m_new = fmaxf(m[r], score);
        const float correction = expf(m[r] - m_new), w = expf(score - m_new);
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) acc[r][j] = acc[r][j] * correction + w * v[j];
        l[r] = l[r] * correction + w;
        m[r] = m_new;
      }
    }
  }
  // Merge the groups of this warp (lanes with the same sub hold the same elements).
#pragma unroll
  for (uint32_t r = 0; r < REP; ++r) {
    float M = m[r];
    for (uint32_t o = width; o < 32; o *= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float f = m[r] == -INFINITY ? 0.0f : expf(m[r] - M);
    float lsum = l[r] * f;
    for (uint32_t o = width; o < 32; o *= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
      float a = acc[r][j] * f;
      for (uint32_t o = width; o < 32; o *= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
      acc[r][j] = a;
    }
    float* mine = part + (warp * REP + r) * (hd + 2);
    if (group == 0 && active)
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) mine[e0 + j] = acc[r][j];
    if (lane == 0) mine[hd] = M, mine[hd + 1] = lsum;
  }
}

}  // namespace detail

// One unit (kv head g, split s) at a time: q heads normed and roped into shared memory, the
// current k and v rounded to bf16 (and appended to the cache by the last split), then
// attend_positions over the split's positions, then the warps' partials merged.
namespace detail {

// Out of line, and given nothing by reference that the interpreter keeps in registers: inlined,
// its register pressure made every op spill; given the block context by reference, the ring's
// fields moved to local memory for every op.
__device__ __noinline__ void attention_body(const schedule::AttentionPayload& p, schedule::StepContext ctx, TensorTable mem,
                                            unsigned char* scratch) {
  const uint32_t hd = p.head_dim, half = hd / 2, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint32_t tid = threadIdx.x, warp = tid / 32;
  float* cs = reinterpret_cast<float*>(scratch);  // cos [half], sin [half]
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
  const uint32_t chunk = (ctx.pos + S - 1) / S;

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

    const uint32_t begin = min(ctx.pos, s * chunk), end = min(ctx.pos, (s + 1) * chunk);
    const uint32_t stop = last ? end + 1 : end;  // the last split also takes the current position
    const uint16_t* k_head = kc + head_base;
    const uint16_t* v_head = vc + head_base;
    switch (rep) {
      case 1: detail::attend_positions<1>(p, q, k_head, v_head, kcur16, vcur16, begin, stop, last, part); break;
      case 2: detail::attend_positions<2>(p, q, k_head, v_head, kcur16, vcur16, begin, stop, last, part); break;
      case 4: detail::attend_positions<4>(p, q, k_head, v_head, kcur16, vcur16, begin, stop, last, part); break;
      default: detail::attend_positions<8>(p, q, k_head, v_head, kcur16, vcur16, begin, stop, last, part); break;
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

}  // namespace detail

__device__ inline void gpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  detail::attention_body(p, ctx, mem, bc.scratch);
}

}  // namespace mk::device
