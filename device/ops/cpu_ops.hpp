// The emulator's op bodies: plain C++, fp32 accumulation, one per op (device/ops/<op>_cpu.cpp).
#pragma once
#include "device/memory.hpp"
#include "schedules/ops.hpp"

namespace mk::device {

#define MK_OP(name, code, payload) void cpu_run(const schedule::payload&, const schedule::StepContext&, const TensorTable&);
#include "schedules/op_table.def"
#undef MK_OP

// Runs one instruction's op body.
void cpu_execute(const schedule::Instruction&, const schedule::StepContext&, const TensorTable&);

}  // namespace mk::device
