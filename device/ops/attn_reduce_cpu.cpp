#include <cmath>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_run(const schedule::AttnReducePayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  if (p.bypassed && schedule::short_step(ctx)) return;  // the attention wrote the output
  const float* in = mem.at<const float>(p.in);
  float* out = mem.at<float>(p.out);
  const uint32_t hd = p.head_dim, S = p.kv_splits;
  const schedule::AttentionPartials layout{p.kv_heads, S, p.rep, hd};
  const uint64_t width = uint64_t{p.kv_heads} * p.rep * hd;  // elements of an output row
  for (uint32_t t = 0; t < ctx.rows; ++t) {
    const uint32_t A = schedule::active_kv_splits(ctx, schedule::row_position(ctx, schedule::row_segment(ctx, t), t), S);
    for (uint32_t h = p.head_begin; h < p.head_end; ++h) {
      const uint32_t g = h / p.rep, r = h % p.rep;
      auto part = [&](uint32_t s) { return in + layout.at(t, g, s, r); };
      float m = -INFINITY;
      for (uint32_t s = 0; s < A; ++s) m = std::max(m, part(s)[hd]);
      float l = 0;
      for (uint32_t s = 0; s < A; ++s) l += part(s)[hd + 1] == 0 ? 0 : std::exp(part(s)[hd] - m) * part(s)[hd + 1];
      for (uint32_t i = 0; i < hd; ++i) {
        float acc = 0;
        for (uint32_t s = 0; s < A; ++s)
          if (part(s)[hd + 1] != 0) acc += std::exp(part(s)[hd] - m) * part(s)[i];
        out[t * width + uint64_t{h} * hd + i] = acc / l;
      }
    }
  }
}

}  // namespace mk::device
