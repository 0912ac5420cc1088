// Every op payload, and compile-time dispatch over the op table.
#pragma once
#include "schedules/ops/argmax.hpp"
#include "schedules/ops/attention.hpp"
#include "schedules/ops/attn_reduce.hpp"
#include "schedules/ops/embed.hpp"
#include "schedules/ops/matvec.hpp"
#include "schedules/ops/sample.hpp"

namespace mk::schedule {

#define MK_OP(name, code, payload) \
  static_assert(sizeof(payload) <= kPayloadBytes, #payload " does not fit in an instruction");
#include "schedules/op_table.def"
#undef MK_OP

inline constexpr const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::noop: return "noop";
#define MK_OP(name, code, payload) \
  case Opcode::name: return #name;
#include "schedules/op_table.def"
#undef MK_OP
  }
  return nullptr;
}

}  // namespace mk::schedule
