#include <cmath>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void combine_attention_partials(const float* in, float* out, uint32_t S, uint32_t rep, uint32_t hd, uint32_t head_begin,
                                uint32_t head_end) {
  for (uint32_t h = head_begin; h < head_end; ++h) {
    const uint32_t g = h / rep, r = h % rep;
    auto part = [&](uint32_t s) { return in + ((uint64_t{g} * S + s) * rep + r) * (hd + 2); };
    float m = -INFINITY;
    for (uint32_t s = 0; s < S; ++s) m = std::max(m, part(s)[hd]);
    float l = 0;
    for (uint32_t s = 0; s < S; ++s) l += part(s)[hd + 1] == 0 ? 0 : std::exp(part(s)[hd] - m) * part(s)[hd + 1];
    for (uint32_t i = 0; i < hd; ++i) {
      float acc = 0;
      for (uint32_t s = 0; s < S; ++s)
        if (part(s)[hd + 1] != 0) acc += std::exp(part(s)[hd] - m) * part(s)[i];
      out[uint64_t{h} * hd + i] = acc / l;
    }
  }
}

void cpu_run(const schedule::AttnReducePayload& p, const schedule::StepContext&, const TensorTable& mem) {
  combine_attention_partials(mem.at<const float>(p.in), mem.at<float>(p.out), p.kv_splits, p.rep, p.head_dim, p.head_begin,
                             p.head_end);
}

}  // namespace mk::device
