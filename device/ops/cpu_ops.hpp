// The emulator's op bodies: plain C++, fp32 accumulation, one per op (device/ops/<op>_cpu.cpp).
#pragma once
#include "device/memory.hpp"
#include "schedules/ops.hpp"

namespace mk::device {

#define MK_OP(name, code, payload) void cpu_run(const schedule::payload&, const schedule::StepContext&, const TensorTable&);
#include "schedules/op_table.def"
#undef MK_OP

// out[h * hd + i] for q heads [head_begin, head_end): attention's split partials combined (the
// attn_reduce op, and a matvec whose input is partials).
void combine_attention_partials(const float* in, float* out, uint32_t splits, uint32_t rep, uint32_t hd, uint32_t head_begin,
                                uint32_t head_end);

// Runs one instruction's op body.
void cpu_execute(const schedule::Instruction&, const schedule::StepContext&, const TensorTable&);

}  // namespace mk::device
