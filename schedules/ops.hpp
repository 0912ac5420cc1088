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

// The op's colour in pictures (DOT graphs, traces): each payload's kColour, next to its fields.
inline constexpr const char* op_colour(Opcode op) {
  switch (op) {
    case Opcode::noop: return "#999999";
#define MK_OP(name, code, payload) \
  case Opcode::name: return payload::kColour;
#include "schedules/op_table.def"
#undef MK_OP
  }
  return "#999999";
}

}  // namespace mk::schedule
