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

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t, uint32_t) {
  schedule::ArgmaxPayload pl{};
  pl.in = op.inputs.front();
  pl.out = op.out;
  pl.count = static_cast<uint32_t>(p.tensors[pl.in].elements());
  TaskSpec t;
  t.write = {op.out, 0, 1};
  t.reads.push_back({pl.in, 0, pl.count});
  set_payload(t.inst, schedule::Opcode::argmax, pl);
  return t;
}

}  // namespace

const OpDef& op_def_argmax() {
  static const OpDef def{"argmax", kTokenOpFields, infer_token_op, lower};
  return def;
}

}  // namespace mk::planner
