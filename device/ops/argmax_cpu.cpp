#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext&, const TensorTable& mem) {
  const float* in = mem.at<const float>(p.in);
  uint32_t best = 0;
  for (uint32_t i = 1; i < p.count; ++i)
    if (in[i] > in[best] || in[best] != in[best]) best = i;  // NaN never wins
  *mem.at<int32_t>(p.out) = static_cast<int32_t>(best);
}

}  // namespace mk::device
