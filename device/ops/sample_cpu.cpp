#include <cmath>
#include <vector>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

// The same rules as device/ops/sample.cuh (see schedules/ops/sample.hpp): thresholds by
// bisection over order keys, sums in double, the draw by Gumbel-max.
namespace {
// One row: its logits `in`, its position `pos` (the draw's), its token to *out.
int32_t sample_row(const schedule::SamplePayload& p, const float* in, uint32_t pos) {
  namespace sd = schedule::sample_detail;
  uint32_t best = 0;
  float best_value = -INFINITY;
  for (uint32_t i = 0; i < p.count; ++i)
    if (in[i] > best_value) best_value = in[i], best = i;  // NaN never wins
  if (!(p.temperature > 0) || p.top_k == 1 || best_value == -INFINITY || best_value == INFINITY)
    return static_cast<int32_t>(best);
  const float m = best_value, inv_t = 1.0f / p.temperature;
  // kept: finite logits (and +inf never occurs with m finite... guard anyway) above both thresholds.
  uint32_t key_min = sd::order_key(-INFINITY) + 1;  // -inf never kept
  auto kept = [&](uint32_t i) { return !std::isnan(in[i]) && sd::order_key(in[i]) >= key_min; };
  if (p.top_k > 1 && p.top_k < p.count) {
    // The largest key t with count(key >= t) >= top_k: the k-th largest value.
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      uint32_t n = 0;
      for (uint32_t i = 0; i < p.count; ++i) n += !std::isnan(in[i]) && sd::order_key(in[i]) >= cand;
      if (n >= p.top_k) t = cand;
    }
    if (t > key_min) key_min = t;
  }
  if (p.top_p < 1) {
    auto weight = [&](uint32_t i) { return static_cast<double>(std::exp((in[i] - m) * inv_t)); };
    double z = 0;
    for (uint32_t i = 0; i < p.count; ++i)
      if (kept(i)) z += weight(i);
    const double need = static_cast<double>(p.top_p) * z;
    // The largest logit key t with mass(kept, key >= t) >= top_p * z.
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      double s = 0;
      for (uint32_t i = 0; i < p.count; ++i)
        if (kept(i) && sd::order_key(in[i]) >= cand) s += weight(i);
      if (s >= need) t = cand;
    }
    if (t > key_min) key_min = t;
  }
  const uint64_t seed = (uint64_t{p.seed_hi} << 32) | p.seed_lo;
  float top = -INFINITY;
  best = 0xffffffffu;
  for (uint32_t i = 0; i < p.count; ++i) {
    if (!kept(i)) continue;
    const float g = -std::log(-std::log(sd::uniform(seed, pos, i)));
    const float v = in[i] * inv_t + g;
    if (best == 0xffffffffu || v > top) top = v, best = i;
  }
  return static_cast<int32_t>(best == 0xffffffffu ? 0 : best);
}
}  // namespace

// Each row of the step on its own, with its sequence's parameters (or the op's), its draw keyed
// by its own position.
void cpu_run(const schedule::SamplePayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  for (uint32_t t = 0; t < ctx.rows; ++t) {
    if (!schedule::row_needed(ctx, p.in, t)) continue;  // a token nobody reads, of logits not made
    const schedule::StepSegment& g = schedule::row_segment(ctx, t);
    const int32_t token = sample_row(schedule::slot_sampling(p, ctx, g), mem.at<const float>(p.in) + uint64_t{t} * p.count,
                                     schedule::row_position(ctx, g, t));
    mem.at<int32_t>(p.out)[t] = token;
    if (int32_t* next = schedule::next_token_of(ctx, g, t)) *next = token;
  }
}

}  // namespace mk::device
