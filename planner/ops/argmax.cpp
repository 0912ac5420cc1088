#include <algorithm>

#include "planner/op_def.hpp"
#include "schedules/ops/argmax.hpp"

namespace mk::planner {

const FieldSpec kTokenOpFields[2] = {{"in", FieldKind::input, true}, {"out", FieldKind::output, true}};

uint64_t infer_token_op(OpCheck& c) {
  const TensorInfo& in = c.tensor("in");
  if (in.role == schedule::Role::weight || in.dtype != schedule::DType::f32)
    c.fail("in", "'" + in.name + "' must be an f32 activation (the logits)");
  c.set_output({1}, schedule::DType::i32);
  return 1;
}

namespace {

// A unit is four logits (one 16-byte load), so that every task's range starts aligned.
constexpr uint32_t kUnitElements = 4;

uint64_t infer(OpCheck& c) {
  infer_token_op(c);
  return (c.tensor("in").elements() + kUnitElements - 1) / kUnitElements;
}

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t unit_begin, uint32_t unit_end) {
  schedule::ArgmaxPayload pl{};
  pl.in = op.inputs.front();
  pl.out = op.out;
  pl.count = static_cast<uint32_t>(p.tensors[pl.in].elements());
  pl.begin = unit_begin * kUnitElements;
  pl.end = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{unit_end} * kUnitElements, pl.count));
  pl.tasks = op.split;
  // The task owning units from unit_begin: plan.cpp's unit_bound(i) = floor(i units / split),
  // inverted (split <= units, so the bounds are distinct).
  pl.task = static_cast<uint32_t>((uint64_t{unit_begin} * op.split + op.units - 1) / op.units);
  pl.parts = op.workspace;
  pl.ticket = op.ticket;
  TaskSpec t;
  t.write = {op.out, 0, 1};
  t.reads.push_back({pl.in, pl.begin, pl.end});
  set_payload(t.inst, schedule::Opcode::argmax, pl);
  return t;
}

uint64_t workspace(uint32_t split) { return uint64_t{2} * split; }  // per task: its best value's bits and index

// Left out, a task per 1024 logits at least: fewer, and the ticket's round trips cost more than
// the reads they spread.
uint64_t max_auto_split(uint64_t units) { return (units + 255) / 256; }

}  // namespace

const OpDef& op_def_argmax() {
  static const OpDef def{"argmax", kTokenOpFields, infer, lower, nullptr, nullptr, workspace, max_auto_split};
  return def;
}

}  // namespace mk::planner
