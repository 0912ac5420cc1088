#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_execute(const schedule::Instruction& inst, const schedule::StepContext& ctx, const TensorTable& mem) {
  schedule::visit_payload(inst, [&](const auto& p) { cpu_run(p, ctx, mem); });
}

}  // namespace mk::device
