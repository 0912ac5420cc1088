#include "planner/op_def.hpp"
#include "schedules/ops/sample.hpp"

namespace mk::planner {
namespace {

// The sampling parameters are not fields: the file holds greedy ones and mkrun sets them
// (--temperature, --top-k, --top-p, --seed) in the loaded schedule.
TaskSpec lower(const Program& p, const OpInfo& op, uint32_t, uint32_t) {
  schedule::SamplePayload pl{};
  pl.in = op.inputs.front();
  pl.out = op.out;
  pl.count = static_cast<uint32_t>(p.tensors[pl.in].elements());
  pl.temperature = 0;  // greedy until set_sampling
  pl.top_k = 0;
  pl.top_p = 1;
  TaskSpec t;
  t.write = {op.out, 0, 1};
  t.reads.push_back({pl.in, 0, pl.count});
  set_payload(t.inst, schedule::Opcode::sample, pl);
  return t;
}

}  // namespace

const OpDef& op_def_sample() {
  static const OpDef def{"sample", kTokenOpFields, infer_token_op, lower};
  return def;
}

}  // namespace mk::planner
