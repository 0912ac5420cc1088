#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>
#include <sstream>

#include "planner/op_def.hpp"
#include "schedules/limits.hpp"
#include "schedules/ops.hpp"

namespace mk::planner {
namespace {

using schedule::DType;
using schedule::Role;

constexpr FieldSpec kCommonFields[] = {{"split", FieldKind::number, false}, {"chunks", FieldKind::number, false}};

const FieldSpec* find_field(const OpDef& def, std::string_view key) {
  for (const FieldSpec& f : def.fields)
    if (key == f.name) return &f;
  for (const FieldSpec& f : kCommonFields)
    if (key == f.name) return &f;
  return nullptr;
}

std::string field_list(const OpDef& def) {
  std::string s;
  for (const FieldSpec& f : def.fields) s += std::string(s.empty() ? "" : ", ") + f.name;
  for (const FieldSpec& f : kCommonFields) s += std::string(", ") + f.name;
  return s;
}

template <class T>
std::string shape_str(const std::vector<T>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Field presence and YAML type, before any tensor is looked at.
void check_fields(const OpDef& def, const dsl::OpDecl& decl) {
  for (const auto& [key, value] : decl.fields) {
    const FieldSpec* spec = find_field(def, key);
    if (!spec)
      throw dsl::Error(value.loc, "op '" + decl.kind + "' has no field '" + key + "'; expected one of " + field_list(def));
    const bool list_ok = spec->kind == FieldKind::input_list;
    if (value.is_list && !list_ok) throw dsl::Error(value.loc, "field '" + key + "' takes one value, not a list");
    if (spec->kind == FieldKind::number && !value.number)
      throw dsl::Error(value.loc, "field '" + key + "' must be a number, got '" + value.items.front() + "'");
    if (value.is_list && value.items.empty()) throw dsl::Error(value.loc, "field '" + key + "' is an empty list");
  }
  for (const FieldSpec& f : def.fields)
    if (f.required && !decl.field(f.name))
      throw dsl::Error(decl.loc, "op '" + decl.kind + "' is missing required field '" + f.name + "'");
}

std::vector<std::string> input_names(const OpDef& def, const dsl::OpDecl& decl) {
  std::vector<std::string> names;
  for (const FieldSpec& f : def.fields)
    if (f.kind == FieldKind::input || f.kind == FieldKind::input_list)
      if (const dsl::Value* v = decl.field(f.name))
        for (const std::string& item : v->items) names.push_back(item);
  return names;
}

const dsl::Value& located(const dsl::OpDecl& decl, const char* field) {
  const dsl::Value* v = decl.field(field);
  return *v;
}

}  // namespace

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

uint32_t Program::find(std::string_view name) const {
  auto it = tensor_ids.find(name);
  return it == tensor_ids.end() ? schedule::kNone : it->second;
}

schedule::Opcode opcode_by_name(std::string_view name) {
#define MK_OP(op, code, payload) \
  if (name == #op) return schedule::Opcode::op;
#include "schedules/op_table.def"
#undef MK_OP
  return schedule::Opcode::noop;
}

const OpDef& op_def(schedule::Opcode op) {
  const OpDef* def = nullptr;
  schedule::visit_opcode(op, [&](auto tag) { def = &op_def_for(tag); });
  if (!def) throw std::logic_error("op_def: no definition for opcode");
  return *def;
}

// ---- OpCheck ----

void OpCheck::fail(const char* field, const std::string& message) const {
  const dsl::Value* v = field ? op_.decl->field(field) : nullptr;
  throw dsl::Error(v ? v->loc : op_.decl->loc, "op '" + op_.name + "': " + message);
}

const TensorInfo* OpCheck::optional_tensor(const char* field) const {
  const dsl::Value* v = op_.decl->field(field);
  if (!v) return nullptr;
  const uint32_t id = program_.find(v->items.front());
  if (id == schedule::kNone) throw dsl::Error(v->loc, "undefined tensor '" + v->items.front() + "'");
  return &program_.tensors[id];
}

const TensorInfo& OpCheck::tensor(const char* field) const {
  const TensorInfo* t = optional_tensor(field);
  if (!t) fail(nullptr, std::string("missing required field '") + field + "'");
  return *t;
}

std::vector<const TensorInfo*> OpCheck::tensor_list(const char* field) const {
  std::vector<const TensorInfo*> out;
  const dsl::Value* v = op_.decl->field(field);
  if (!v) fail(nullptr, std::string("missing required field '") + field + "'");
  for (const std::string& name : v->items) {
    const uint32_t id = program_.find(name);
    if (id == schedule::kNone) throw dsl::Error(v->loc, "undefined tensor '" + name + "'");
    out.push_back(&program_.tensors[id]);
  }
  return out;
}

uint32_t OpCheck::id(const TensorInfo& t) const { return static_cast<uint32_t>(&t - program_.tensors.data()); }

double OpCheck::number(const char* field, double fallback) const {
  const dsl::Value* v = op_.decl->field(field);
  return v ? *v->number : fallback;
}

std::string OpCheck::text(const char* field, const std::string& fallback) const {
  const dsl::Value* v = op_.decl->field(field);
  return v ? v->items.front() : fallback;
}

double OpCheck::config(const std::string& key, double fallback) const {
  return program_.model->number(key, fallback);
}

float OpCheck::positive_float(const char* field, const std::string& key, double fallback) const {
  const dsl::Value* v = field ? op_.decl->field(field) : nullptr;
  const double x = v ? *v->number : config(key, fallback);
  if (!(x >= std::numeric_limits<float>::min() && x <= std::numeric_limits<float>::max()))
    fail(field, (v ? std::string(field) : "config " + key) + " is " + dsl::show_number(x) +
                    "; it must be positive and fit a float32 (1.2e-38 to 3.4e38)");
  return static_cast<float>(x);
}

std::string OpCheck::config_text(const std::string& key, const std::string& fallback) const {
  return program_.model->text(key, fallback);
}

void OpCheck::set_output(const std::vector<uint64_t>& shape, DType dtype) {
  const dsl::Value& v = located(*op_.decl, "out");
  const std::string& name = v.items.front();
  uint64_t n = 1;
  for (uint64_t d : shape)
    if (d == 0 || d > limits::kMaxDimension || __builtin_mul_overflow(n, d, &n) || n > limits::kMaxElements)
      throw dsl::Error(v.loc, "op '" + op_.name + "' would produce " + shape_str(shape) + ", over the limits (each dimension 1 to " +
                                  std::to_string(limits::kMaxDimension) + ", at most " + std::to_string(limits::kMaxElements) +
                                  " elements)");
  const uint32_t id = program_.find(name);
  if (id == schedule::kNone) {
    pending_ = TensorInfo{};
    pending_.name = name;
    pending_.role = Role::activation;
    pending_.dtype = dtype;
    pending_.shape.assign(shape.begin(), shape.end());
    pending_.layer = op_.layer;
    pending_.loc = v.loc;
  } else {
    const TensorInfo& t = program_.tensors[id];
    if (t.elements() != n)
      throw dsl::Error(v.loc, "op '" + op_.name + "' produces " + shape_str(shape) + " but '" + name + "' is declared " +
                                  shape_str(t.shape) + " at " + t.loc.str());
    if (t.dtype != dtype)
      throw dsl::Error(v.loc, "op '" + op_.name + "' produces " + schedule::dtype_name(dtype) + " but '" + name +
                                  "' is declared " + schedule::dtype_name(t.dtype));
    op_.out = id;
  }
}

// ---- analyze ----

uint32_t auto_kv_splits(uint32_t sm_count, uint32_t kv_heads) {
  return std::clamp<uint32_t>(kv_heads ? sm_count / kv_heads : 1, 1, 64);
}

schedule::KvSplitPolicy kv_split_policy(const dsl::ModelGraph& m, uint32_t head_dim) {
  auto positions = [&](const char* key, uint32_t fallback, const char* zero) {
    const auto it = m.config.find(key);
    if (it == m.config.end()) return fallback;
    const std::optional<double> P = it->second.number;
    if (!P || !(*P >= 0 && *P <= limits::kMaxContext && *P == std::floor(*P)))
      throw dsl::Error(it->second.loc, std::string("config ") + key + " is '" + it->second.text +
                                           "'; expected a whole number of positions, 0 (" + zero + ") to " +
                                           std::to_string(limits::kMaxContext));
    return static_cast<uint32_t>(*P);
  };
  return {positions("kv_split_positions", kDefaultKvSplitPositions, "every KV split at every step"),
          positions("short_positions", head_dim ? std::max(1u, kShortStepBytes / (4 * head_dim)) : 0, "no short steps")};
}

uint32_t max_tokens(const dsl::ModelGraph& m) {
  const auto it = m.config.find("max_tokens");
  if (it == m.config.end()) return 1;
  const std::optional<double> T = it->second.number;
  if (!T || !(*T >= 1 && *T <= limits::kMaxStepTokens && *T == std::floor(*T)))
    throw dsl::Error(it->second.loc, "config max_tokens is '" + it->second.text + "'; expected a whole number of tokens a step, 1 to " +
                                         std::to_string(limits::kMaxStepTokens));
  return static_cast<uint32_t>(*T);
}

namespace {
// The head_dim an attention op's k cache gives (its rows), 0 when it names no cache of shape
// [kv_heads, head_dim].
uint32_t k_cache_head_dim(const Program& p, const dsl::OpDecl& decl) {
  const dsl::Value* k = decl.field("k_cache");
  if (!k || k->is_list) return 0;
  const uint32_t id = p.find(k->items.front());
  return id != schedule::kNone && p.tensors[id].shape.size() == 2 ? p.tensors[id].shape[1] : 0;
}
}  // namespace

uint32_t attention_head_dim(const Program& p) {
  uint32_t hd = 0;
  for (const OpInfo& op : p.ops)
    if (op.opcode == schedule::Opcode::attention && op.decl) hd = std::max(hd, k_cache_head_dim(p, *op.decl));
  return hd;
}

namespace {

// The scales of float8 weight w (declared as d), as the tensor after it: f32, of the shape its
// layout gives; read as one of its weight (no op names it).
TensorInfo scale_tensor(const TensorInfo& w, const dsl::TensorDecl& d) {
  if (w.shape.size() != 2) throw dsl::Error(d.loc, "f8e4m3 weight '" + d.name + "' must be 2-D [rows, cols] (a matvec's)");
  TensorInfo s;
  s.name = w.name + ".scale";
  s.key = d.scale_key;
  s.role = Role::weight;
  s.dtype = DType::f32;
  s.layer = w.layer;
  s.loc = w.loc;
  const uint32_t b = schedule::kScaleBlock;
  s.shape = d.scale_layout == "tensor" ? std::vector<uint32_t>{1}
            : d.scale_layout == "row"  ? std::vector<uint32_t>{w.shape[0]}
                                       : std::vector<uint32_t>{(w.shape[0] + b - 1) / b, (w.shape[1] + b - 1) / b};
  return s;
}

}  // namespace

Program analyze(const dsl::ModelGraph& model, uint32_t sm_count) {
  Program p;
  p.model = &model;
  p.sm_count = std::max<uint32_t>(sm_count, 1);
  kv_split_policy(model, 0);  // a bad value is refused here, at its line
  max_tokens(model);
  for (const dsl::TensorDecl& d : model.tensors) {
    TensorInfo t;
    t.name = d.name;
    t.key = d.key;
    t.layer = d.layer;
    t.loc = d.loc;
    if (d.shape.size() > schedule::kMaxRank) throw dsl::Error(d.loc, "'" + d.name + "' has more than 4 dimensions");
    uint64_t elements = 1;
    for (int64_t dim : d.shape) {
      if (dim <= 0 || static_cast<uint64_t>(dim) > limits::kMaxDimension)
        throw dsl::Error(d.loc, "dimension " + std::to_string(dim) + " of '" + d.name + "' is out of range (1 to " +
                                    std::to_string(limits::kMaxDimension) + ")");
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) || elements > limits::kMaxElements)
        throw dsl::Error(d.loc, "'" + d.name + "' has more than " + std::to_string(limits::kMaxElements) + " elements");
      t.shape.push_back(static_cast<uint32_t>(dim));
    }
    switch (d.kind) {
      case dsl::TensorKind::weight:
        t.role = Role::weight;
        t.dtype = d.dtype == "f8e4m3" ? DType::f8e4m3 : DType::bf16;
        t.scale_layout = d.scale_layout;
        break;
      case dsl::TensorKind::kv_cache: t.role = Role::kv_cache, t.dtype = DType::bf16; break;
      case dsl::TensorKind::activation:
        t.role = Role::activation;
        if (d.dtype == "f32") t.dtype = DType::f32;
        else if (d.dtype == "i32") t.dtype = DType::i32;
        else throw dsl::Error(d.loc, "activation '" + d.name + "' has dtype '" + d.dtype + "'; expected f32 or i32");
        break;
    }
    p.tensor_ids.emplace(t.name, static_cast<uint32_t>(p.tensors.size()));
    p.tensors.push_back(std::move(t));
    if (d.dtype == "f8e4m3") p.tensors.push_back(scale_tensor(p.tensors.back(), d));  // the next tensor (format.hpp)
  }

  // Resolve each op and find who writes what.
  const size_t n = model.ops.size();
  std::vector<OpInfo> ops(n);
  std::map<std::string, size_t, std::less<>> producer;
  for (size_t i = 0; i < n; ++i) {
    const dsl::OpDecl& decl = model.ops[i];
    OpInfo& op = ops[i];
    op.decl = &decl;
    op.name = decl.name;
    op.layer = decl.layer;
    op.opcode = opcode_by_name(decl.kind);
    if (op.opcode == schedule::Opcode::noop) throw dsl::Error(decl.loc, "unknown op '" + decl.kind + "'");
    const OpDef& def = op_def(op.opcode);
    check_fields(def, decl);
    for (const FieldSpec& f : def.fields)  // float8 weights only where the op reads them
      if (const dsl::Value* v = decl.field(f.name); v && !f.float8 && (f.kind == FieldKind::input || f.kind == FieldKind::input_list))
        for (const std::string& item : v->items)
          if (const uint32_t id = p.find(item); id != schedule::kNone && p.tensors[id].dtype == DType::f8e4m3)
            throw dsl::Error(v->loc, "'" + item + "' is an f8e4m3 weight; op '" + decl.kind + "' reads its '" + f.name +
                                         "' in bf16 (float8 weights are a matvec's 'weight')");
    const dsl::Value& out = located(decl, "out");
    const std::string& out_name = out.items.front();
    if (const uint32_t id = p.find(out_name); id != schedule::kNone && p.tensors[id].role != Role::activation)
      throw dsl::Error(out.loc, "op '" + op.name + "' writes '" + out_name + "', which is a " +
                                    schedule::role_name(p.tensors[id].role) + ", not an activation");
    auto [it, fresh] = producer.emplace(out_name, i);
    if (!fresh)
      throw dsl::Error(out.loc, "tensor '" + out_name + "' is written by two ops ('" + ops[it->second].name + "' at " +
                                    model.ops[it->second].loc.str() + " and '" + op.name + "')");
  }

  // Dataflow edges and a topological order that keeps the listed order where it can.
  std::vector<std::vector<size_t>> users(n);
  std::vector<size_t> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const OpDef& def = op_def(ops[i].opcode);
    std::set<size_t> preds;
    for (const FieldSpec& f : def.fields) {
      if (f.kind != FieldKind::input && f.kind != FieldKind::input_list) continue;
      const dsl::Value* v = model.ops[i].field(f.name);
      if (!v) continue;
      for (const std::string& name : v->items) {
        if (auto it = producer.find(name); it != producer.end()) {
          if (it->second == i) throw dsl::Error(v->loc, "op '" + ops[i].name + "' reads its own output '" + name + "'");
          preds.insert(it->second);
          continue;
        }
        const uint32_t id = p.find(name);
        if (id == schedule::kNone) throw dsl::Error(v->loc, "undefined tensor '" + name + "'");
        if (p.tensors[id].role == Role::activation)
          throw dsl::Error(v->loc, "activation '" + name + "' is read but no op writes it");
      }
    }
    for (size_t pr : preds) users[pr].push_back(i);
    pending[i] = preds.size();
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!pending[i]) ready.push(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != n) {
    // Every op left waits on another op left; walk back through those until one repeats.
    std::vector<std::vector<size_t>> waiting_on(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t u : users[i])
        if (pending[i] && pending[u]) waiting_on[u].push_back(i);
    size_t at = 0;
    while (!pending[at]) ++at;
    std::vector<size_t> seen(n, n), path;
    while (seen[at] == n) {
      seen[at] = path.size();
      path.push_back(at);
      at = waiting_on[at].front();
    }
    std::vector<size_t> cycle(path.begin() + static_cast<std::ptrdiff_t>(seen[at]), path.end());
    std::sort(cycle.begin(), cycle.end());
    std::string names;
    for (size_t i : cycle) names += (names.empty() ? "'" : ", '") + ops[i].name + "'";
    throw dsl::Error(model.ops[cycle.front()].loc, "the ops " + names + " form a cycle through their inputs and outputs");
  }

  // Chunks left out of a matvec that an attention op reads as its qkv: one per head (the
  // attention's units wait for their kv group's heads only), taken from the kv cache's head_dim.
  std::map<std::string, uint32_t, std::less<>> qkv_head_dim;
  for (const dsl::OpDecl& decl : model.ops) {
    if (opcode_by_name(decl.kind) != schedule::Opcode::attention) continue;
    const dsl::Value* qkv = decl.field("qkv");
    if (!qkv || qkv->is_list) continue;
    if (const uint32_t hd = k_cache_head_dim(p, decl)) qkv_head_dim.emplace(qkv->items.front(), hd);
  }

  // Infer shapes in dataflow order, then split into units. Sizes are 64-bit and bounded here,
  // where they are computed, so every count downstream fits its field.
  uint64_t tasks = 0, counters = 0;
  for (size_t i : order) {
    OpInfo op = ops[i];
    OpCheck check(p, op);
    const OpDef& def = op_def(op.opcode);
    const uint64_t units = def.infer(check);
    if (TensorInfo out = check.take_pending_output(); !out.name.empty()) {
      op.out = static_cast<uint32_t>(p.tensors.size());
      p.tensor_ids.emplace(out.name, op.out);
      p.tensors.push_back(std::move(out));
    }
    if (units == 0 || units > limits::kMaxUnits)
      check.fail(nullptr, "the op has " + std::to_string(units) + " units of work; the limit is " + std::to_string(limits::kMaxUnits));
    op.units = static_cast<uint32_t>(units);
    for (const std::string& name : input_names(def, *op.decl))
      if (const uint32_t id = p.find(name); p.tensors[id].role == Role::activation || p.tensors[id].role == Role::io)
        if (std::find(op.inputs.begin(), op.inputs.end(), id) == op.inputs.end()) op.inputs.push_back(id);
    // Left out, split gives every SM a task where the op has the work for it (an op may cap it:
    // OpDef::max_auto_split), and chunks tracks the output as one piece, but per head for
    // attention's qkv input and per kv head for attention's output.
    const uint64_t out_elems = p.tensors[op.out].elements();
    double auto_split = std::min<double>(op.units, p.sm_count), auto_chunks = 1;
    if (def.max_auto_split) auto_split = std::min(auto_split, static_cast<double>(def.max_auto_split(op.units)));
    if (op.opcode == schedule::Opcode::attention) auto_chunks = p.tensors[op.out].shape.front();
    if (auto it = qkv_head_dim.find(p.tensors[op.out].name); it != qkv_head_dim.end() && out_elems % it->second == 0)
      auto_chunks = static_cast<double>(out_elems / it->second);
    const double split = check.number("split", auto_split), chunks = check.number("chunks", auto_chunks);
    // Range first: converting a double outside uint32_t is undefined.
    if (!(split >= 1 && split <= 0xffffffffu) || split != std::floor(split))
      check.fail("split", "split must be a positive integer, got " + dsl::show_number(split));
    if (!(chunks >= 1 && chunks <= 0xffffffffu) || chunks != std::floor(chunks))
      check.fail("chunks", "chunks must be a positive integer, got " + dsl::show_number(chunks));
    op.split = static_cast<uint32_t>(split);
    op.chunks = static_cast<uint32_t>(chunks);
    if (op.split > op.units)
      check.fail("split", "split " + std::to_string(op.split) + " is more than the op's " + std::to_string(op.units) +
                              " units of work");
    if (out_elems % op.chunks)
      check.fail("chunks", "chunks " + std::to_string(op.chunks) + " does not divide the " + std::to_string(out_elems) +
                               " elements of '" + p.tensors[op.out].name + "'");
    if ((tasks += op.split) > limits::kMaxTasks)
      check.fail("split", "the model has more than " + std::to_string(limits::kMaxTasks) + " tasks in all");
    if ((counters += op.chunks) > limits::kMaxCounters)
      check.fail("chunks", "the model has more than " + std::to_string(limits::kMaxCounters) + " chunks (counters) in all");
    if (def.workspace && op.split > 1) {
      TensorInfo w;
      w.name = p.tensors[op.out].name + ".parts";
      if (p.find(w.name) != schedule::kNone)
        check.fail("split", "the split op's workspace is the tensor '" + w.name + "'; the model already has one of that name");
      w.dtype = schedule::DType::i32;
      w.shape = {static_cast<uint32_t>(def.workspace(op.split))};
      w.layer = op.layer;
      w.loc = op.decl->loc;
      op.workspace = static_cast<uint32_t>(p.tensors.size());
      p.tensor_ids.emplace(w.name, op.workspace);
      p.tensors.push_back(std::move(w));
    }
    p.ops.push_back(std::move(op));
  }
  // Ticket counters after every chunk counter (plan.cpp's derive_counters numbers them alike).
  for (OpInfo& op : p.ops)
    if (op.workspace != schedule::kNone) {
      if (counters >= limits::kMaxCounters)
        throw dsl::Error(op.decl->loc, "the model has more than " + std::to_string(limits::kMaxCounters) + " counters in all");
      op.ticket = static_cast<uint32_t>(counters++);
    }

  // A weight no op reads is a mistake in the model (a bias declared and never applied reads
  // as a correct model and gives wrong logits).
  std::set<std::string, std::less<>> read;
  for (const OpInfo& op : p.ops)
    for (const std::string& name : input_names(op_def(op.opcode), *op.decl)) read.insert(name);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorInfo& t = p.tensors[i];
    if (i > 0 && p.tensors[i - 1].dtype == DType::f8e4m3) continue;  // scales: read with their weight
    if (t.role == Role::weight && !read.count(t.name))
      throw dsl::Error(t.loc, "weight '" + t.name + "' (key '" + t.key + "') is declared but no op reads it");
  }

  // The argmax (or sample) op marks the step's outputs: its input is the logits, its output the token.
  for (const OpInfo& op : p.ops) {
    if (op.opcode != schedule::Opcode::argmax && op.opcode != schedule::Opcode::sample) continue;
    if (p.token != schedule::kNone)
      throw dsl::Error(op.decl->loc, "a model has one argmax op; this is the second (argmax and sample both produce the token)");
    p.token = op.out;
    p.logits = op.inputs.front();
  }
  if (p.token == schedule::kNone)
    throw dsl::Error(dsl::Location{model.file, 1, 1}, "the model has no argmax op (nor sample op; it produces each step's token)");
  p.tensors[p.token].role = Role::io;
  p.tensors[p.logits].role = Role::io;
  return p;
}

}  // namespace mk::planner
