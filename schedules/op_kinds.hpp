// The ops of a schedule grouped for pictures: one kind per op outside the repeated block, and
// one per position in the block (the same op in every layer: "qkv{0..15}"). Used by the DOT
// graph (a block drawn once) and the trace (one colour and one legend entry per kind).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace mk::schedule {

struct OpKind {
  std::string label;       // the op's name, or "qkv{0..15}" for a block position
  Opcode opcode = Opcode::noop;
  std::string colour;      // op_colour(opcode), shaded apart from other kinds of the same opcode
  int position = -1;       // index within the block, -1 outside it
  std::vector<uint32_t> ops;  // its ops, in layer order
};

struct OpKinds {
  std::vector<OpKind> kinds;  // in op order of first appearance
  std::vector<uint32_t> kind_of;  // per op
  // Every layer holds the same opcodes in the same order: the block can be drawn once.
  bool repeated = false;
  int first_layer = -1, last_layer = -1;  // of the block, -1 without one
};

OpKinds op_kinds(const std::vector<Op>& ops);

// "qkv{0..15}" for names qkv0 ... qkv15 (the common prefix and suffix kept); the name for one.
std::string name_range(const std::vector<std::string>& names);

// Shade i of n of `hex` (#rrggbb): lightness and hue moved so that kinds i and i + 1 differ
// clearly; `hex` itself for n == 1.
std::string shade(const std::string& hex, size_t i, size_t n);

}  // namespace mk::schedule
