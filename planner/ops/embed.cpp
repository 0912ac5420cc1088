#include "planner/op_def.hpp"
#include "schedules/ops/embed.hpp"

namespace mk::planner {
namespace {

constexpr FieldSpec kFields[] = {{"table", FieldKind::input, true}, {"out", FieldKind::output, true}};

uint64_t infer(OpCheck& c) {
  const TensorInfo& table = c.tensor("table");
  if (table.role != schedule::Role::weight || table.shape.size() != 2)
    c.fail("table", "table '" + table.name + "' must be a 2-D weight [vocab, hidden]");
  c.set_output({table.shape[1]});
  return table.shape[1];
}

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t begin, uint32_t end) {
  schedule::EmbedPayload pl{};
  pl.table = p.find(op.decl->field("table")->items.front());
  pl.out = op.out;
  pl.vocab = p.tensors[pl.table].shape[0];
  pl.hidden = p.tensors[pl.table].shape[1];
  pl.col_begin = begin;
  pl.col_end = end;
  TaskSpec t;
  t.write = {op.out, begin, end};
  set_payload(t.inst, schedule::Opcode::embed, pl);
  return t;
}

// Left out, 16 tasks at most: each copies a slice of one row, and more would only add hops.
uint64_t max_auto_split(uint64_t) { return 16; }

}  // namespace

const OpDef& op_def_embed() {
  static const OpDef def{"embed", kFields, infer, lower, nullptr, nullptr, nullptr, max_auto_split};
  return def;
}

}  // namespace mk::planner
