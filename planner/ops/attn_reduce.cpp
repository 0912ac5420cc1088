#include "planner/op_def.hpp"
#include "schedules/ops/attention.hpp"
#include "schedules/ops/attn_reduce.hpp"

namespace mk::planner {
namespace {

constexpr FieldSpec kFields[] = {{"in", FieldKind::input, true}, {"out", FieldKind::output, true}};

uint64_t infer(OpCheck& c) {
  const TensorInfo& in = c.tensor("in");
  if (in.role != schedule::Role::activation || in.shape.size() != 4 || in.shape[3] < 3)
    c.fail("in", "'" + in.name + "' must be attention partials [kv_heads, kv_splits, rep, head_dim + 2]");
  const uint64_t heads = uint64_t{in.shape[0]} * in.shape[2];
  c.set_output({heads * (in.shape[3] - 2)});
  return heads;
}

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t begin, uint32_t end) {
  schedule::AttnReducePayload pl{};
  pl.in = op.inputs.front();
  pl.out = op.out;
  const std::vector<uint32_t>& s = p.tensors[pl.in].shape;
  pl.kv_heads = s[0];
  pl.kv_splits = s[1];
  pl.rep = s[2];
  pl.head_dim = s[3] - 2;
  pl.head_begin = begin;
  pl.head_end = end;
  TaskSpec t;
  t.write = {op.out, uint64_t{begin} * pl.head_dim, uint64_t{end} * pl.head_dim};
  const uint64_t group = uint64_t{pl.kv_splits} * pl.rep * s[3];  // partials of one kv head
  t.reads.push_back({pl.in, begin / pl.rep * group, ((end - 1) / pl.rep + 1) * group});
  set_payload(t.inst, schedule::Opcode::attn_reduce, pl);
  return t;
}

// At a short step a kv head has one split, whose attention task can write the normalised output
// itself: a task whose heads lie in one kv head is taken over by that head's split 0.
uint32_t short_taker_unit(const schedule::Instruction& task) {
  const auto& p = schedule::payload_as<schedule::AttnReducePayload>(task);
  const uint32_t g = p.head_begin / p.rep;
  return g == (p.head_end - 1) / p.rep ? g * p.kv_splits : schedule::kNone;
}

bool take_over(schedule::Instruction& taker, schedule::Instruction& task) {
  if (taker.opcode != static_cast<uint16_t>(schedule::Opcode::attention)) return false;
  auto& p = *reinterpret_cast<schedule::AttnReducePayload*>(task.payload);
  auto& a = *reinterpret_cast<schedule::AttentionPayload*>(taker.payload);
  if (a.reduce_out != schedule::kNone && a.reduce_out != p.out) return false;  // another op's taker already
  p.bypassed = 1;
  a.reduce_out = p.out;
  return true;
}

}  // namespace

const OpDef& op_def_attn_reduce() {
  static const OpDef def{"attn_reduce", kFields, infer, lower, short_taker_unit, take_over};
  return def;
}

}  // namespace mk::planner
