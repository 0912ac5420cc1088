// YAML -> ModelGraph. yaml-cpp is used only here; the rest of the toolchain sees ModelGraph.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

#include "common/input_file.hpp"
#include "dsl/expr.hpp"
#include "dsl/model.hpp"
#include "schedules/limits.hpp"

namespace mk::dsl {
namespace {

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = {
#define MK_OP(name, code, payload) #name,
#include "schedules/op_table.def"
#undef MK_OP
  };
  return names;
}

const std::vector<std::string> kTopKeys = {"model",       "config",    "weights",
                                           "activations", "kv_caches", "ops"};
const std::vector<std::string> kRepeatKeys = {"count",       "as",        "weights",
                                              "activations", "kv_caches", "ops"};

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& item : list) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string kind_of(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return "a scalar";
  return "nothing";
}

Location location(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null()) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

// One `key: value` of a YAML map, the key as written.
struct Entry {
  std::string key;
  Location key_loc;
  YAML::Node value;
};
using Entries = std::vector<Entry>;

const Entry* find(const Entries& entries, const std::string& key) {
  for (const Entry& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

// Walks one document. Context phrases such as " in weight 'wq0'" are passed down so that
// every message says which part of the model it is about.
class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}
  ModelGraph run(const YAML::Node& root);

 private:
  Location at(const YAML::Node& node) const { return location(file_, node.Mark()); }
  // An empty value (`key:`) has no useful position of its own; its key has.
  Location at(const Entry& e) const { return e.value.IsNull() ? e.key_loc : at(e.value); }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    throw Error(at(node), message);
  }
  std::string scalar(const YAML::Node& node, const std::string& what, const Location& loc) const;
  std::string scalar(const Entry& e) const { return scalar(e.value, "'" + e.key + "'", at(e)); }
  Entries entries(const YAML::Node& map, const std::string& what, const Location& loc) const;
  Entries entries(const Entry& e) const { return entries(e.value, "'" + e.key + "'", at(e)); }
  void check_keys(const Entries& entries, const std::vector<std::string>& allowed,
                  const std::string& where) const;
  const Entry& require(const Entries& entries, const Location& loc, const std::string& key,
                       const std::string& where) const;

  void parse_config(const Entry& entry, const std::string& prefix);
  void parse_declarations(const Entries& block, const Scope& scope, int layer);
  TensorDecl parse_tensor(const Entry& entry, TensorKind kind, const Scope& scope) const;
  std::vector<int64_t> parse_shape(const Entry& entry, const Scope& scope) const;
  void parse_ops(const Entry& entry, const Scope& scope, int layer);
  void parse_repeat(const Entry& entry, const Scope& outer);
  void parse_op(const Entries& entries, const YAML::Node& node, const Scope& scope, int layer);
  Value parse_value(const Entry& entry, const Scope& scope) const;
  std::string op_name(const OpDecl& op, const Entry* name, const Scope& scope) const;
  void add_tensor(TensorDecl tensor);
  void add_op(OpDecl op);

  std::string file_;
  ModelGraph graph_;
  std::map<std::string, Location> tensor_locs_, op_locs_;  // for "declared twice" messages
  bool seen_repeat_ = false;
  uint64_t config_entries_ = 0;
};

ModelGraph Parser::run(const YAML::Node& root) {
  graph_.file = file_;
  if (!root.IsDefined() || root.IsNull())
    throw Error({file_, 1, 1},
                "the model is empty; expected a map with 'model', 'config' and 'ops'");
  const std::string where = " at the top level";
  Entries top = entries(root, "the model", at(root));
  check_keys(top, kTopKeys, where);
  const Entry& model = require(top, at(root), "model", where);
  graph_.name = scalar(model);
  graph_.loc = model.key_loc;
  // Config first: everything else may refer to it, whatever the order in the file.
  parse_config(require(top, at(root), "config", where), "");
  Scope scope{&graph_.config, "", 0};
  parse_declarations(top, scope, -1);
  parse_ops(require(top, at(root), "ops", where), scope, -1);
  return std::move(graph_);
}

std::string Parser::scalar(const YAML::Node& node, const std::string& what,
                           const Location& loc) const {
  if (!node.IsScalar())
    throw Error(loc, "expected a scalar for " + what + ", got " + kind_of(node));
  return node.Scalar();
}

// yaml-cpp keeps repeated keys, so they are caught here rather than silently shadowed.
Entries Parser::entries(const YAML::Node& map, const std::string& what, const Location& loc) const {
  if (!map.IsMap()) throw Error(loc, "expected a map for " + what + ", got " + kind_of(map));
  Entries out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies: `it->first` lives in a proxy that dies at the end of the full expression.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) fail(key, "expected a scalar key in " + what);
    if (find(out, key.Scalar())) fail(key, "key '" + key.Scalar() + "' given twice in " + what);
    out.push_back({key.Scalar(), at(key), value});
  }
  return out;
}

void Parser::check_keys(const Entries& entries, const std::vector<std::string>& allowed,
                        const std::string& where) const {
  for (const Entry& e : entries)
    if (!contains(allowed, e.key))
      throw Error(e.key_loc,
                  "unknown key '" + e.key + "'" + where + "; expected one of " + join(allowed));
}

const Entry& Parser::require(const Entries& entries, const Location& loc, const std::string& key,
                             const std::string& where) const {
  if (const Entry* e = find(entries, key)) return *e;
  throw Error(loc, "missing '" + key + "'" + where);
}

void Parser::parse_config(const Entry& entry, const std::string& prefix) {
  for (const Entry& e :
       entries(entry.value, "'" + (prefix.empty() ? entry.key : prefix) + "'", at(entry))) {
    // Aliases let a few lines name exponentially many nested entries ("billion laughs"):
    // every entry walked counts, aliases expanded.
    if (++config_entries_ > limits::kMaxConfigEntries)
      throw Error(e.key_loc, "more than " + std::to_string(limits::kMaxConfigEntries) +
                                 " config entries (YAML aliases included)");
    if (!is_identifier(e.key))
      throw Error(e.key_loc, "config name '" + e.key + "' is not an identifier");
    std::string name = prefix.empty() ? e.key : prefix + "." + e.key;
    if (e.value.IsMap()) {
      parse_config(e, name);
    } else if (e.value.IsScalar()) {
      graph_.config[name] = {parse_number(e.value.Scalar()), e.value.Scalar(), at(e.value)};
    } else {
      throw Error(e.key_loc,
                  "config '" + name + "' must be a scalar or a map, not " + kind_of(e.value));
    }
  }
}

// Reads the weights/activations/kv_caches entries of a block (the top level or a repeat).
void Parser::parse_declarations(const Entries& block, const Scope& scope, int layer) {
  const std::vector<std::pair<std::string, TensorKind>> sections = {
      {"weights", TensorKind::weight},
      {"activations", TensorKind::activation},
      {"kv_caches", TensorKind::kv_cache}};
  for (const Entry& section : block) {
    for (const auto& [key, kind] : sections) {
      if (section.key != key) continue;
      for (const Entry& e : entries(section)) {
        TensorDecl tensor = parse_tensor(e, kind, scope);
        tensor.layer = layer;
        add_tensor(std::move(tensor));
      }
    }
  }
}

TensorDecl Parser::parse_tensor(const Entry& entry, TensorKind kind, const Scope& scope) const {
  TensorDecl t;
  t.kind = kind;
  t.loc = entry.key_loc;
  t.name = substitute(entry.key, scope, entry.key_loc);
  const char* noun = kind == TensorKind::weight       ? "weight"
                     : kind == TensorKind::activation ? "activation"
                                                      : "kv_cache";
  const std::string where = std::string(" in ") + noun + " '" + t.name + "'";
  Entries fields = entries(entry.value, std::string(noun) + " '" + t.name + "'", at(entry));
  switch (kind) {
    case TensorKind::weight:
      check_keys(fields, {"key", "shape", "dtype", "scale"}, where);
      break;
    case TensorKind::activation:
      check_keys(fields, {"shape", "dtype"}, where);
      break;
    case TensorKind::kv_cache:
      check_keys(fields, {"shape"}, where);
      break;
  }
  t.shape = parse_shape(require(fields, entry.key_loc, "shape", where), scope);
  if (kind == TensorKind::weight) {
    const Entry& key = require(fields, entry.key_loc, "key", where);
    t.key = substitute(scalar(key), scope, at(key));
  }
  // Caches are bf16; weights bf16 or float8 e4m3 with their scales; activations f32 or i32.
  t.dtype = kind == TensorKind::activation ? "f32" : "bf16";
  if (const Entry* dtype = find(fields, "dtype")) {
    t.dtype = scalar(*dtype);
    if (kind == TensorKind::activation && t.dtype != "f32" && t.dtype != "i32")
      fail(dtype->value, "unknown dtype '" + t.dtype + "'; expected f32 or i32");
    if (kind == TensorKind::weight && t.dtype != "bf16" && t.dtype != "f8e4m3")
      fail(dtype->value, "unknown weight dtype '" + t.dtype + "'; expected bf16 or f8e4m3");
  }
  const Entry* scale = find(fields, "scale");
  if (t.dtype == "f8e4m3" && !scale)
    throw Error(entry.key_loc, "an f8e4m3 weight needs 'scale: {key: ..., layout: tensor, row or block128}'" + where);
  if (scale) {
    if (t.dtype != "f8e4m3") throw Error(scale->key_loc, "'scale' is for f8e4m3 weights; this one is " + t.dtype + where);
    const std::string swhere = " in the scale of weight '" + t.name + "'";
    Entries sf = entries(*scale);
    check_keys(sf, {"key", "layout"}, swhere);
    const Entry& key = require(sf, scale->key_loc, "key", swhere);
    t.scale_key = substitute(scalar(key), scope, at(key));
    const Entry& layout = require(sf, scale->key_loc, "layout", swhere);
    t.scale_layout = scalar(layout);
    if (t.scale_layout != "tensor" && t.scale_layout != "row" && t.scale_layout != "block128")
      fail(layout.value, "unknown scale layout '" + t.scale_layout + "'; expected tensor, row or block128");
  }
  return t;
}

std::vector<int64_t> Parser::parse_shape(const Entry& entry, const Scope& scope) const {
  const YAML::Node& node = entry.value;
  if (!node.IsSequence())
    throw Error(at(entry), "expected a list for 'shape', got " + kind_of(node));
  if (node.size() == 0) fail(node, "'shape' is empty; a single value has shape [1]");
  std::vector<int64_t> shape;
  for (const YAML::Node& item : node) {
    std::string text = substitute(scalar(item, "a dimension", at(item)), scope, at(item));
    int64_t dim = evaluate_integer(text, scope, at(item));
    if (dim <= 0)
      fail(item, "dimension '" + text + "' is " + std::to_string(dim) + "; it must be positive");
    shape.push_back(dim);
  }
  return shape;
}

void Parser::parse_ops(const Entry& entry, const Scope& scope, int layer) {
  if (!entry.value.IsSequence())
    throw Error(at(entry), "expected a list for 'ops', got " + kind_of(entry.value));
  for (const YAML::Node& item : entry.value) {
    Entries item_entries = entries(item, "an op", at(item));
    const Entry* repeat = find(item_entries, "repeat");
    if (!repeat) {
      parse_op(item_entries, item, scope, layer);
      continue;
    }
    if (!scope.variable.empty()) throw Error(repeat->key_loc, "nested repeat is not supported");
    for (const Entry& e : item_entries)
      if (e.key != "repeat") throw Error(e.key_loc, "unknown key '" + e.key + "' next to 'repeat'");
    parse_repeat(*repeat, scope);
  }
}

void Parser::parse_repeat(const Entry& entry, const Scope& outer) {
  const std::string where = " in repeat";
  Entries block = entries(entry);
  check_keys(block, kRepeatKeys, where);
  const Entry& count_entry = require(block, entry.key_loc, "count", where);
  Location count_loc = at(count_entry);
  int64_t count =
      evaluate_integer(substitute(scalar(count_entry), outer, count_loc), outer, count_loc);
  if (count <= 0 || count > limits::kMaxRepeat)
    throw Error(count_loc, "repeat count is " + std::to_string(count) + "; it must be 1 to " +
                               std::to_string(limits::kMaxRepeat));
  const Entry& as = require(block, entry.key_loc, "as", where);
  std::string variable = scalar(as);
  if (!is_identifier(variable))
    throw Error(at(as), "repeat variable '" + variable + "' is not an identifier");
  if (outer.config->count(variable))
    throw Error(at(as), "repeat variable '" + variable + "' hides the config value of that name");
  const Entry& ops = require(block, entry.key_loc, "ops", where);
  if (!seen_repeat_) graph_.layers = static_cast<int>(count);
  seen_repeat_ = true;
  for (int64_t i = 0; i < count; ++i) {
    Scope scope{outer.config, variable, i};
    parse_declarations(block, scope, static_cast<int>(i));
    parse_ops(ops, scope, static_cast<int>(i));
  }
}

void Parser::parse_op(const Entries& entries, const YAML::Node& node, const Scope& scope,
                      int layer) {
  const Entry& kind = require(entries, at(node), "op", " in an op");
  OpDecl op;
  op.loc = at(node);
  op.layer = layer;
  op.kind = substitute(scalar(kind), scope, at(kind));
  if (!contains(op_names(), op.kind))
    throw Error(at(kind), "unknown op '" + op.kind + "'; expected one of " + join(op_names()));
  const Entry* name = nullptr;
  for (const Entry& e : entries) {
    if (e.key == "op") continue;
    if (e.key == "name") {
      name = &e;
      continue;
    }
    std::string key = substitute(e.key, scope, e.key_loc);
    if (!op.fields.emplace(key, parse_value(e, scope)).second)
      throw Error(e.key_loc, "field '" + key + "' given twice");
  }
  op.name = op_name(op, name, scope);
  add_op(std::move(op));
}

Value Parser::parse_value(const Entry& entry, const Scope& scope) const {
  Value v;
  v.loc = at(entry);
  if (entry.value.IsScalar()) {
    v.items = {substitute(entry.value.Scalar(), scope, v.loc)};
    // Only the planner knows which fields are numbers; tensor names simply get none.
    v.number = try_evaluate(v.items[0], scope);
    return v;
  }
  if (!entry.value.IsSequence())
    throw Error(entry.key_loc, "field '" + entry.key + "' must be a scalar or a list, not " +
                                   kind_of(entry.value));
  v.is_list = true;
  for (const YAML::Node& item : entry.value)
    v.items.push_back(
        substitute(scalar(item, "an item of '" + entry.key + "'", at(item)), scope, at(item)));
  return v;
}

std::string Parser::op_name(const OpDecl& op, const Entry* name, const Scope& scope) const {
  if (name) return substitute(scalar(*name), scope, at(*name));
  const Value* out = op.field("out");
  if (out && !out->is_list) return out->items[0];
  return op.kind + "#" + std::to_string(graph_.ops.size());
}

void Parser::add_tensor(TensorDecl tensor) {
  if (graph_.tensors.size() >= limits::kMaxTensors)
    throw Error(tensor.loc, "more than " + std::to_string(limits::kMaxTensors) + " tensors");
  auto [first, fresh] = tensor_locs_.emplace(tensor.name, tensor.loc);
  if (!fresh)
    throw Error(tensor.loc, "tensor '" + tensor.name + "' declared twice (first at " +
                                first->second.str() + ")");
  graph_.tensors.push_back(std::move(tensor));
}

void Parser::add_op(OpDecl op) {
  if (graph_.ops.size() >= limits::kMaxOps)
    throw Error(op.loc, "more than " + std::to_string(limits::kMaxOps) + " ops");
  auto [first, fresh] = op_locs_.emplace(op.name, op.loc);
  if (!fresh)
    throw Error(op.loc,
                "op name '" + op.name + "' used twice (first at " + first->second.str() + ")");
  graph_.ops.push_back(std::move(op));
}

// The first pass over the text: checks the nesting depth (every recursive walk after it, in
// yaml-cpp and here, is bounded by it) and that the stream holds one document. It drives
// yaml-cpp's event parser a bounded number of times itself: YAML::LoadAll loops forever on some
// one-byte inputs (yaml-cpp 0.7 reports a new empty document at the same position again and
// again, e.g. for ",").
class Precheck : public YAML::EventHandler {
 public:
  explicit Precheck(std::string file) : file_(std::move(file)) {}

  void run(const std::string& yaml) {
    std::istringstream in(yaml);
    YAML::Parser parser(in);
    std::vector<YAML::Mark> starts;
    while (starts.size() < 3 && parser.HandleNextDocument(*this)) {
      if (!starts.empty() && starts.back().pos == document_start_.pos) {
        const size_t at = static_cast<size_t>(std::max(document_start_.pos, 0));
        throw Error(location(file_, document_start_),
                    "YAML syntax error: unexpected '" + std::string(1, at < yaml.size() ? yaml[at] : ' ') + "'");
      }
      starts.push_back(document_start_);
    }
    if (starts.size() > 1)
      throw Error(location(file_, starts[1]), "expected one YAML document, found a second one here");
  }

  void OnDocumentStart(const YAML::Mark& mark) override { document_start_ = mark, depth_ = 0; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void enter(const YAML::Mark& mark) {
    if (++depth_ > limits::kMaxNesting)
      throw Error(location(file_, mark), "YAML nested deeper than " + std::to_string(limits::kMaxNesting) + " levels");
  }
  std::string file_;
  YAML::Mark document_start_ = YAML::Mark::null_mark();
  int depth_ = 0;
};

}  // namespace

ModelGraph parse_string(const std::string& yaml, const std::string& file_name) {
  if (yaml.size() > limits::kMaxTextBytes)
    throw Error({file_name, 0, 0}, "the model is " + std::to_string(yaml.size()) + " bytes; the limit is " +
                                       std::to_string(limits::kMaxTextBytes));
  try {
    Precheck(file_name).run(yaml);
    return Parser(file_name).run(YAML::Load(yaml));
  } catch (const YAML::Exception& e) {
    throw Error(location(file_name, e.mark), "YAML syntax error: " + e.msg);
  }
}

ModelGraph parse_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = io::read_input_file(path, limits::kMaxTextBytes);
  } catch (const io::InputError& e) {
    throw Error({path.string(), 0, 0}, e.problem == io::InputProblem::too_large
                                           ? "the model file is larger than " + std::to_string(limits::kMaxTextBytes) + " bytes"
                                           : std::string("cannot open the model file"));
  }
  return parse_string(text, path.string());
}

}  // namespace mk::dsl
