#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_execute(const schedule::Instruction& inst, const schedule::StepContext& ctx, const TensorTable& mem) {
  switch (static_cast<schedule::Opcode>(inst.opcode)) {
#define MK_OP(name, code, payload)                                          \
  case schedule::Opcode::name:                                              \
    cpu_run(schedule::payload_as<schedule::payload>(inst), ctx, mem); \
    break;
#include "schedules/op_table.def"
#undef MK_OP
    default: break;
  }
}

}  // namespace mk::device
