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

// HF rotate_half convention: pair (i, i + d/2), at position `pos`.
void rope(float* v, const schedule::AttentionPayload& p, uint32_t pos) {
  const uint32_t d = p.head_dim;
  for (uint32_t i = 0; i < d / 2; ++i) {
    const float a = rope_angle(p, i, pos), c = std::cos(a), s = std::sin(a);
    const float x = v[i], y = v[i + d / 2];
    v[i] = x * c - y * s;
    v[i + d / 2] = y * c + x * s;
  }
}

}  // namespace

// Per unit, per row: the row's own splits (active_kv_splits at its position), as a one-token
// step at that position computes them, positions in order. The segment's own positions come from
// its rows' qkv, each k normed and roped at its position and both rounded to bf16 as the cache
// stores them.
void cpu_run(const schedule::AttentionPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const uint32_t hd = p.head_dim, rep = p.heads / p.kv_heads, S = p.kv_splits;
  const uint64_t qkv_width = uint64_t{p.heads + 2 * p.kv_heads} * hd;
  const schedule::AttentionPartials layout = schedule::attention_partials(p);
  uint16_t* kc = mem.at<uint16_t>(p.k_cache);
  uint16_t* vc = mem.at<uint16_t>(p.v_cache);
  float* out = mem.at<float>(p.out);
  float* reduced = schedule::short_step(ctx) && p.reduce_out != schedule::kNone ? mem.at<float>(p.reduce_out) : nullptr;
  std::vector<float> q(hd), acc(hd), keys, values;

  for (uint32_t unit = p.unit_begin; unit < p.unit_end; ++unit) {
    const uint32_t g = unit / S, s = unit % S;
    for (uint32_t j = 0; j < ctx.segment_count; ++j) {
      const schedule::StepSegment& seg = ctx.segments[j];
      const uint32_t start = schedule::segment_start(ctx, seg);
      const uint64_t head_base = (uint64_t{seg.slot} * p.kv_heads + g) * ctx.max_context * hd;
      // The segment's k and v, [rows][hd], as the cache holds them.
      keys.assign(size_t{seg.rows} * hd, 0.0f);
      values.assign(size_t{seg.rows} * hd, 0.0f);
      for (uint32_t i = 0; i < seg.rows; ++i) {
        const float* qkv = mem.at<const float>(p.qkv) + (seg.row_begin + i) * qkv_width;
        float* k = keys.data() + size_t{i} * hd;
        float* v = values.data() + size_t{i} * hd;
        std::copy(qkv + (p.heads + g) * hd, qkv + (p.heads + g + 1) * hd, k);
        std::copy(qkv + (p.heads + p.kv_heads + g) * hd, qkv + (p.heads + p.kv_heads + g + 1) * hd, v);
        if (p.k_norm != schedule::kNone) rms_norm_head(k, mem.at<const uint16_t>(p.k_norm), hd, p.norm_eps);
        rope(k, p, start + i);
        for (uint32_t e = 0; e < hd; ++e) k[e] = round_bf16(k[e]), v[e] = round_bf16(v[e]);
      }
      for (uint32_t i = 0; i < seg.rows; ++i) {
        const uint32_t t = seg.row_begin + i, pos = start + i, A = schedule::active_kv_splits(ctx, pos, S);
        if (s >= A) {  // an inactive split: nothing to attend to; the row's partials zero
          std::fill(out + layout.at(t, g, s, 0), out + layout.at(t, g, s, 0) + rep * layout.record(), 0.0f);
          continue;
        }
        const bool last = s == A - 1;
        if (last)
          for (uint32_t e = 0; e < hd; ++e) {
            kc[head_base + kv_index(pos, e, hd)] = f32_to_bf16(keys[size_t{i} * hd + e]);
            vc[head_base + kv_index(pos, e, hd)] = f32_to_bf16(values[size_t{i} * hd + e]);
          }
        const auto [begin, end] = schedule::attention_split(s, A, pos);
        const float* qkv = mem.at<const float>(p.qkv) + t * qkv_width;
        for (uint32_t r = 0; r < rep; ++r) {
          const uint32_t h = g * rep + r;
          std::copy(qkv + h * hd, qkv + (h + 1) * hd, q.begin());
          if (p.q_norm != schedule::kNone) rms_norm_head(q.data(), mem.at<const uint16_t>(p.q_norm), hd, p.norm_eps);
          rope(q.data(), p, pos);
          float m = -INFINITY, l = 0;
          std::fill(acc.begin(), acc.end(), 0.0f);
          auto visit = [&](const float* key, const float* val) {
            float score = 0;
            for (uint32_t e = 0; e < hd; ++e) score += q[e] * key[e];
            score *= p.scale;
            const float m_new = std::max(m, score);
            const float correction = std::exp(m - m_new), w = std::exp(score - m_new);
            for (uint32_t e = 0; e < hd; ++e) acc[e] = acc[e] * correction + w * val[e];
            l = l * correction + w;
            m = m_new;
          };
          std::vector<float> key(hd), val(hd);
          for (uint32_t at = begin; at < end; ++at) {
            if (at >= start) {
              visit(keys.data() + size_t{at - start} * hd, values.data() + size_t{at - start} * hd);
              continue;
            }
            for (uint32_t e = 0; e < hd; ++e) {
              key[e] = bf16_to_f32(kc[head_base + kv_index(at, e, hd)]);
              val[e] = bf16_to_f32(vc[head_base + kv_index(at, e, hd)]);
            }
            visit(key.data(), val.data());
          }
          if (last) visit(keys.data() + size_t{i} * hd, values.data() + size_t{i} * hd);
          if (reduced)  // the only split: attn_reduce's output, normalised (and the partial, as at every step)
            for (uint32_t e = 0; e < hd; ++e) reduced[uint64_t{t} * p.heads * hd + uint64_t{h} * hd + e] = acc[e] / l;
          float* o = out + layout.at(t, g, s, r);
          for (uint32_t e = 0; e < hd; ++e) o[e] = acc[e];
          o[hd] = m;
          o[hd + 1] = l;
        }
      }
    }
  }
}

}  // namespace mk::device
