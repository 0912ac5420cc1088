// Every op payload, and the one dispatch over the op table: visit_opcode / visit_payload call a
// function with the op's payload type (or payload), so that a per-op hook is a function
// overloaded on the payload struct and no code outside the table lists the ops.
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

// One row of the op table, as a type: f(OpTag<Payload>{opcode, name}).
template <class P>
struct OpTag {
  using Payload = P;
  Opcode opcode;
  const char* name;
};

// Calls f(OpTag<payload>{...}) for the op `op`; false (and f not called) for noop or an opcode
// the table does not have.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class F>
MK_HD inline bool visit_opcode(Opcode op, F&& f) {
  switch (op) {
#define MK_OP(name, code, payload)                 \
  case Opcode::name:                               \
    f(OpTag<payload>{Opcode::name, #name});        \
    return true;
#include "schedules/op_table.def"
#undef MK_OP
    default: return false;
  }
}

// Calls f(payload) with the instruction's payload as its op's struct; false for noop or an
// unknown opcode.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class F>
MK_HD inline bool visit_payload(const Instruction& inst, F&& f) {
  return visit_opcode(static_cast<Opcode>(inst.opcode),
                      [&](auto tag) { f(payload_as<typename decltype(tag)::Payload>(inst)); });
}

inline const char* opcode_name(Opcode op) {
  const char* name = op == Opcode::noop ? "noop" : nullptr;
  visit_opcode(op, [&](auto tag) { name = tag.name; });
  return name;
}

// The op's colour in pictures (DOT graphs, traces): each payload's kColour, next to its fields.
inline const char* op_colour(Opcode op) {
  const char* colour = "#999999";
  visit_opcode(op, [&](auto tag) { colour = decltype(tag)::Payload::kColour; });
  return colour;
}

}  // namespace mk::schedule
