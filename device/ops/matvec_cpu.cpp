#include <algorithm>
#include <cmath>
#include <vector>

#include "device/bf16.hpp"
#include "device/fp8.hpp"
#include "device/ops/cpu_ops.hpp"

namespace mk::device {

// Each row of the step on its own, as a one-token step computes it: a step of T rows gives the
// bits of T one-token steps.
void cpu_run(const schedule::MatvecPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const uint32_t width = schedule::matvec_out_width(p);  // elements of an output row
  std::vector<float> x(p.cols);
  for (uint32_t t = 0; t < ctx.rows; ++t) {
    if (!schedule::row_needed(ctx, p.out, t)) continue;  // logits nobody reads
    const float* in = mem.at<const float>(p.in) + uint64_t{t} * p.cols;
    x.assign(in, in + p.cols);
    if (p.norm != schedule::kNone) {
      const uint16_t* w = mem.at<const uint16_t>(p.norm);
      float ss = 0;
      for (float v : x) ss += v * v;
      const float inv = 1.0f / std::sqrt(ss / p.cols + p.eps);
      for (uint32_t i = 0; i < p.cols; ++i) x[i] = x[i] * inv * bf16_to_f32(w[i]);
    }
    // Float8 weights: float(e4m3) * scale, the scale applied to each 128-column block's sum of
    // products (a block scale's extent; a row's or the tensor's scale is the same for every block).
    auto dot = [&](uint32_t weight, uint32_t row) {
      float acc = 0;
      if (!schedule::matvec_fp8(p)) {
        const uint16_t* w = mem.at<const uint16_t>(weight) + uint64_t{row} * p.cols;
        for (uint32_t i = 0; i < p.cols; ++i) acc += bf16_to_f32(w[i]) * x[i];
        return acc;
      }
      const uint8_t* w = mem.at<const uint8_t>(weight) + uint64_t{row} * p.cols;
      const float* scale = mem.at<const float>(weight + 1);
      for (uint32_t c0 = 0; c0 < p.cols; c0 += schedule::kScaleBlock) {
        float block = 0;
        for (uint32_t i = c0; i < std::min(p.cols, c0 + schedule::kScaleBlock); ++i) block += f8e4m3_to_f32(w[i]) * x[i];
        acc += block * scale[schedule::matvec_scale_index(p, row, c0)];
      }
      return acc;
    };
    float* out = mem.at<float>(p.out) + uint64_t{t} * width;
    const float* residual = p.residual == schedule::kNone ? nullptr : mem.at<const float>(p.residual) + uint64_t{t} * width;
    for (uint32_t r = p.row_begin; r < p.row_end; ++r) {
      float y;
      if (p.act == static_cast<uint32_t>(schedule::MatvecAct::silu_mul)) {
        const float g = dot(p.weight[0], r), u = dot(p.weight[1], r);
        y = g / (1.0f + std::exp(-g)) * u;
      } else {
        const schedule::MatvecWeightRow w = schedule::matvec_weight_row(p, r);
        y = dot(p.weight[w.weight], w.row);
        if (p.bias[w.weight] != schedule::kNone) y += bf16_to_f32(mem.at<const uint16_t>(p.bias[w.weight])[w.row]);
      }
      out[r] = residual ? residual[r] + y : y;
    }
  }
}

}  // namespace mk::device
