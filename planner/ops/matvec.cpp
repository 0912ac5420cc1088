#include "planner/op_def.hpp"
#include "schedules/ops/matvec.hpp"

namespace mk::planner {
namespace {

using schedule::MatvecAct;

constexpr double kEps = 1e-5;  // where neither the op nor the model's config gives eps

constexpr FieldSpec kFields[] = {
    {"in", FieldKind::input, true},       {"norm", FieldKind::input, false}, {"weight", FieldKind::input_list, true, true},
    {"residual", FieldKind::input, false}, {"act", FieldKind::text, false},   {"eps", FieldKind::number, false},
    {"out", FieldKind::output, true},     {"bias", FieldKind::input_list, false},
};

bool is_silu(const OpInfo& op) {
  const dsl::Value* act = op.decl->field("act");
  return act && act->items.front() == "silu_mul";
}

uint64_t infer(OpCheck& c) {
  const TensorInfo& in = c.tensor("in");
  if (in.role == schedule::Role::weight || in.dtype != schedule::DType::f32)
    c.fail("in", "input '" + in.name + "' must be an f32 activation");
  const uint64_t cols = in.elements();
  if (cols % 8) c.fail("in", "input '" + in.name + "' has " + std::to_string(cols) + " elements; a matvec input must be a multiple of 8 long");
  const std::string act = c.text("act", "none");
  if (act != "none" && act != "silu_mul") c.fail("act", "act is '" + act + "'; expected none or silu_mul");
  const auto weights = c.tensor_list("weight");
  if (weights.size() > 3) c.fail("weight", "at most 3 weights can be concatenated");
  if (act == "silu_mul" && weights.size() != 2) c.fail("weight", "act silu_mul needs two weights: [gate, up]");
  uint64_t rows = 0;
  for (const TensorInfo* w : weights) {
    if (w->role != schedule::Role::weight || w->shape.size() != 2)
      c.fail("weight", "'" + w->name + "' must be a 2-D weight [rows, cols]");
    if (w->shape[1] != cols)
      c.fail("weight", "shape mismatch: weight '" + w->name + "' has " + std::to_string(w->shape[1]) +
                           " columns but input '" + in.name + "' has " + std::to_string(cols) + " elements");
    if (act == "silu_mul" && w->shape != weights[0]->shape)
      c.fail("weight", "gate and up weights must have the same shape");
    rows = act == "silu_mul" ? w->shape[0] : rows + w->shape[0];
    if (w->dtype != weights[0]->dtype || w->scale_layout != weights[0]->scale_layout)
      c.fail("weight", "'" + w->name + "' and '" + weights[0]->name + "' differ in dtype or scale layout; the weights of one matvec share them");
  }
  if (weights[0]->dtype == schedule::DType::f8e4m3 && cols % 16)
    c.fail("in", "input '" + in.name + "' has " + std::to_string(cols) + " elements; with f8e4m3 weights a matvec input must be a multiple of 16 long");
  if (c.op().decl->field("bias")) {
    const auto biases = c.tensor_list("bias");
    if (act != "none") c.fail("bias", "bias is applied only without act (to each weight's rows)");
    if (biases.size() != weights.size())
      c.fail("bias", "bias has " + std::to_string(biases.size()) + " entries; expected one per weight (" +
                         std::to_string(weights.size()) + ")");
    for (size_t i = 0; i < biases.size(); ++i)
      if (biases[i]->role != schedule::Role::weight || biases[i]->shape.size() != 1 || biases[i]->shape[0] != weights[i]->shape[0])
        c.fail("bias", "shape mismatch: bias '" + biases[i]->name + "' must be a 1-D weight of " +
                           std::to_string(weights[i]->shape[0]) + " elements, the rows of weight '" + weights[i]->name + "'");
  }
  if (const TensorInfo* norm = c.optional_tensor("norm"); norm && norm->role != schedule::Role::weight)
    c.fail("norm", "norm '" + norm->name + "' must be a weight");
  if (const TensorInfo* res = c.optional_tensor("residual");
      res && (res->role != schedule::Role::activation || res->dtype != schedule::DType::f32))
    c.fail("residual", "residual '" + res->name + "' must be an f32 activation");
  if (const TensorInfo* norm = c.optional_tensor("norm"); norm && norm->elements() != cols)
    c.fail("norm", "shape mismatch: norm '" + norm->name + "' has " + std::to_string(norm->elements()) +
                       " elements, the input " + std::to_string(cols));
  if (const TensorInfo* res = c.optional_tensor("residual"); res && res->elements() != rows)
    c.fail("residual", "shape mismatch: residual '" + res->name + "' has " + std::to_string(res->elements()) +
                           " elements, the output " + std::to_string(rows));
  c.positive_float("eps", "eps", kEps);
  c.set_output({rows});
  return rows;
}

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t begin, uint32_t end) {
  auto id = [&](const char* field) {
    const dsl::Value* v = op.decl->field(field);
    return v ? p.find(v->items.front()) : schedule::kNone;
  };
  schedule::MatvecPayload pl{};
  pl.in = id("in");
  pl.norm = id("norm");
  pl.out = op.out;
  pl.residual = id("residual");
  const dsl::Value* eps = op.decl->field("eps");
  pl.eps = static_cast<float>(eps ? *eps->number : p.model->number("eps", kEps));
  const bool silu = is_silu(op);
  pl.act = static_cast<uint16_t>(silu ? MatvecAct::silu_mul : MatvecAct::none);
  pl.cols = static_cast<uint32_t>(p.tensors[pl.in].elements());
  const std::vector<std::string>& weights = op.decl->field("weight")->items;
  pl.weight_count = static_cast<uint32_t>(weights.size());
  const std::string& layout = p.tensors[p.find(weights[0])].scale_layout;
  pl.weight_format = static_cast<uint16_t>(layout == "tensor"     ? schedule::WeightFormat::f8_tensor
                                           : layout == "row"      ? schedule::WeightFormat::f8_row
                                           : layout == "block128" ? schedule::WeightFormat::f8_block128
                                                                  : schedule::WeightFormat::bf16);
  uint32_t rows = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    pl.weight[i] = p.find(weights[i]);
    const uint32_t r = p.tensors[pl.weight[i]].shape[0];
    rows = silu ? r : rows + r;
    pl.weight_row_end[i] = rows;
  }
  if (const dsl::Value* bias = op.decl->field("bias"))
    for (size_t i = 0; i < bias->items.size(); ++i) pl.bias[i] = p.find(bias->items[i]);
  pl.row_begin = begin;
  pl.row_end = end;

  TaskSpec t;
  t.write = {op.out, begin, end};
  t.reads.push_back({pl.in, 0, pl.cols});
  if (pl.residual != schedule::kNone) t.reads.push_back({pl.residual, begin, end});
  set_payload(t.inst, schedule::Opcode::matvec, pl);
  return t;
}

}  // namespace

const OpDef& op_def_matvec() {
  static const OpDef def{"matvec", kFields, infer, lower};
  return def;
}

}  // namespace mk::planner
