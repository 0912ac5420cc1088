#include <cmath>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const float* in = mem.at<const float>(p.in);
  // The lowest index of the largest value; NaN never wins (all NaN gives 0).
  uint32_t best = 0;
  float best_value = -INFINITY;
  for (uint32_t i = 0; i < p.count; ++i)
    if (in[i] > best_value) best_value = in[i], best = i;
  *mem.at<int32_t>(p.out) = static_cast<int32_t>(best);
  if (ctx.next_tokens) ctx.next_tokens[0] = static_cast<int32_t>(best);
}

}  // namespace mk::device
