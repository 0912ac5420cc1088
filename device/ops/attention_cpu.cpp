#include <algorithm>
#include <cmath>
#include <vector>

#include "device/bf16.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/ops/cpu_ops.hpp"
#include "device/rope.hpp"

namespace mk::device {
namespace {

void rms_norm_head(float* v, const uint16_t* w, uint32_t n, float eps) {
  float ss = 0;
  for (uint32_t i = 0; i < n; ++i) ss += v[i] * v[i];
  const float inv = 1.0f / std::sqrt(ss / n + eps);
  for (uint32_t i = 0; i < n; ++i) v[i] = v[i] * inv * bf16_to_f32(w[i]);
}

// HF rotate_half convention: pair (i, i + d/2).
void rope(float* v, const std::vector<float>& cos_t, const std::vector<float>& sin_t, uint32_t d) {
  for (uint32_t i = 0; i < d / 2; ++i) {
    const float a = v[i], b = v[i + d / 2];
    v[i] = a * cos_t[i] - b * sin_t[i];
    v[i + d / 2] = b * cos_t[i] + a * sin_t[i];
  }
}

}  // namespace

void cpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads, S = p.kv_splits;
  std::vector<float> cos_t(hd / 2), sin_t(hd / 2);
  for (uint32_t i = 0; i < hd / 2; ++i) {
    const float a = rope_angle(p, i, ctx.pos);
    cos_t[i] = std::cos(a);
    sin_t[i] = std::sin(a);
  }
  const float* qkv = mem.at<const float>(p.qkv);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);
  const uint32_t A = schedule::active_kv_splits(ctx, S);
  float* reduced = schedule::short_step(ctx) && p.reduce_out != schedule::kNone ? mem.at<float>(p.reduce_out) : nullptr;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    float* part = out + (uint64_t{g} * S + s) * rep * (hd + 2);  // rows of hd + 2 per head
    if (s >= A) {  // an inactive split: nothing to attend to; its partial's rows zero
      std::fill(part, part + rep * (hd + 2), 0.0f);
      continue;
    }
    const bool last = s == A - 1;
    // The current position's k and v, stored in bf16 like every cached position.
    std::vector<float> k(qkv + (p.heads + g) * hd, qkv + (p.heads + g + 1) * hd);
    std::vector<float> v(qkv + (p.heads + p.kv_heads + g) * hd, qkv + (p.heads + p.kv_heads + g + 1) * hd);
    if (p.k_norm != schedule::kNone) rms_norm_head(k.data(), mem.at<const uint16_t>(p.k_norm), hd, p.norm_eps);
    rope(k.data(), cos_t, sin_t, hd);
    for (uint32_t i = 0; i < hd; ++i) k[i] = round_bf16(k[i]), v[i] = round_bf16(v[i]);
    const uint64_t head_base = uint64_t{g} * ctx.max_context * hd;
    if (last)
      for (uint32_t i = 0; i < hd; ++i) {
        kc[head_base + kv_index(ctx.pos, i, hd)] = f32_to_bf16(k[i]);
        vc[head_base + kv_index(ctx.pos, i, hd)] = f32_to_bf16(v[i]);
      }
    const auto [begin, end] = schedule::attention_split(s, A, ctx.pos);

    for (uint32_t r = 0; r < rep; ++r) {
      const uint32_t h = g * rep + r;
      std::vector<float> q(qkv + h * hd, qkv + (h + 1) * hd);
      if (p.q_norm != schedule::kNone) rms_norm_head(q.data(), mem.at<const uint16_t>(p.q_norm), hd, p.norm_eps);
      rope(q.data(), cos_t, sin_t, hd);
      float m = -INFINITY, l = 0;
      std::vector<float> acc(hd, 0.0f);
      auto visit = [&](const float* key, const float* val) {
        float score = 0;
        for (uint32_t i = 0; i < hd; ++i) score += q[i] * key[i];
        score *= p.scale;
        const float m_new = std::max(m, score);
        const float correction = std::exp(m - m_new), w = std::exp(score - m_new);
        for (uint32_t i = 0; i < hd; ++i) acc[i] = acc[i] * correction + w * val[i];
        l = l * correction + w;
        m = m_new;
      };
      std::vector<float> key(hd), val(hd);
      for (uint32_t pos = begin; pos < end; ++pos) {
        for (uint32_t i = 0; i < hd; ++i) {
          key[i] = bf16_to_f32(kc[head_base + kv_index(pos, i, hd)]);
          val[i] = bf16_to_f32(vc[head_base + kv_index(pos, i, hd)]);
        }
        visit(key.data(), val.data());
      }
      if (last) visit(k.data(), v.data());
      if (reduced)  // the only split: attn_reduce's output, normalised (and the partial, as at every step)
        for (uint32_t i = 0; i < hd; ++i) reduced[uint64_t{h} * hd + i] = acc[i] / l;
      float* o = part + r * (hd + 2);
      for (uint32_t i = 0; i < hd; ++i) o[i] = acc[i];
      o[hd] = m;
      o[hd + 1] = l;
    }
  }
}

}  // namespace mk::device
