// The YAML model language: the example model's facts, and one test per kind of mistake, each
// pinned to the exact line and column the message must point at.
#include <doctest/doctest.h>

#include <string>

#include "dsl/model.hpp"

using namespace mk::dsl;

namespace {

ModelGraph tiny_llama() { return parse_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml"); }

const OpDecl* find_op(const ModelGraph& g, const std::string& name) {
  for (const OpDecl& op : g.ops)
    if (op.name == name) return &op;
  return nullptr;
}

// Parses a model that must be rejected and checks where and what the error says.
void check_error(const std::string& yaml, int line, int column, const std::string& text) {
  INFO("model:\n", yaml);
  try {
    parse_string(yaml, "bad.yaml");
  } catch (const Error& e) {
    INFO("error: ", e.what());
    CHECK(e.where.file == "bad.yaml");
    CHECK(e.where.line == line);
    CHECK(e.where.column == column);
    CHECK(e.message.find(text) != std::string::npos);
    CHECK(std::string(e.what()).find("bad.yaml:" + std::to_string(line) + ":") == 0);
    return;
  }
  FAIL("the model was accepted");
}

}  // namespace

TEST_CASE("dsl: tiny-llama tensors") {
  ModelGraph g = tiny_llama();
  CHECK(g.name == "tiny-llama");
  CHECK(g.layers == 3);
  // 2 weights + 2 activations at the top, 9 weights + 2 caches per layer.
  CHECK(g.tensors.size() == 4 + 3 * 11);

  const TensorDecl* wq = g.find_tensor("wq2");
  REQUIRE(wq);
  CHECK(wq->kind == TensorKind::weight);
  CHECK(wq->key == "model.layers.2.self_attn.q_proj.weight");
  CHECK(wq->shape == std::vector<int64_t>{256, 256});
  CHECK(wq->layer == 2);
  CHECK(wq->loc.line == 33);
  CHECK(wq->loc.column == 9);

  const TensorDecl* wk = g.find_tensor("wk0");
  REQUIRE(wk);
  CHECK(wk->shape == std::vector<int64_t>{64, 256});

  const TensorDecl* k1 = g.find_tensor("k1");
  REQUIRE(k1);
  CHECK(k1->kind == TensorKind::kv_cache);
  CHECK(k1->shape == std::vector<int64_t>{2, 32});
  CHECK(k1->layer == 1);

  const TensorDecl* next = g.find_tensor("next_token");
  REQUIRE(next);
  CHECK(next->kind == TensorKind::activation);
  CHECK(next->dtype == "i32");
  CHECK(next->layer == -1);
  CHECK(g.find_tensor("logits")->dtype == "f32");
  CHECK(g.find_tensor("embed")->shape == std::vector<int64_t>{512, 256});
  CHECK(g.find_tensor("wq3") == nullptr);
}

TEST_CASE("dsl: tiny-llama ops") {
  ModelGraph g = tiny_llama();
  // embed, 6 ops per layer, the final norm+matvec and argmax.
  CHECK(g.ops.size() == 1 + 3 * 6 + 2);
  CHECK(g.ops.front().kind == "embed");
  CHECK(g.ops.front().name == "x0");
  CHECK(g.ops.back().kind == "argmax");

  // The last op of layer 2 writes x{layer+1}.
  const OpDecl* x3 = find_op(g, "x3");
  REQUIRE(x3);
  CHECK(x3->kind == "matvec");
  CHECK(x3->layer == 2);
  CHECK(x3->field("in")->items == std::vector<std::string>{"act2"});
  CHECK(x3->field("residual")->items == std::vector<std::string>{"h2"});
  CHECK_FALSE(x3->field("in")->number.has_value());
  CHECK(x3->field("chunks")->number == 4);

  const OpDecl* qkv = find_op(g, "qkv1");
  REQUIRE(qkv);
  const Value* weight = qkv->field("weight");
  REQUIRE(weight);
  CHECK(weight->is_list);
  CHECK(weight->items == std::vector<std::string>{"wq1", "wk1", "wv1"});
  CHECK(qkv->field("missing") == nullptr);

  const OpDecl* attention = find_op(g, "attn_part0");
  REQUIRE(attention);
  const Value* kv_splits = attention->field("kv_splits");
  REQUIRE(kv_splits);
  CHECK(kv_splits->items == std::vector<std::string>{"kv_splits"});
  CHECK(kv_splits->number == 2);
  CHECK(kv_splits->loc.line == 48);

  // Outside the repeat block {layers} is the config value.
  const OpDecl* logits = find_op(g, "logits");
  REQUIRE(logits);
  CHECK(logits->layer == -1);
  CHECK(logits->field("in")->items == std::vector<std::string>{"x3"});
  CHECK(logits->loc.line == 55);
  CHECK(logits->loc.column == 5);
}

TEST_CASE("dsl: tiny-llama config") {
  ModelGraph g = tiny_llama();
  CHECK(g.number("hidden") == 256);
  CHECK(g.number("eps") == doctest::Approx(1e-5));
  CHECK(g.number("rope.theta") == 500000);
  CHECK(g.number("rope.original_max_position") == 8192);
  CHECK(g.text("rope.scaling", "none") == "llama3");
  CHECK(g.text("qk_norm", "none") == "none");
  CHECK(g.number("qk_norm", 0) == 0);
  CHECK(g.config.at("rope.scaling").loc.line == 15);

  // Lookups that fail point at the `model:` line.
  CHECK_THROWS_WITH_AS(g.number("missing"), doctest::Contains("config 'missing' is missing"),
                       Error);
  try {
    g.number("rope.scaling");
    FAIL("a text config was read as a number");
  } catch (const Error& e) {
    CHECK(e.where.line == 2);
    CHECK(e.message.find("not a number") != std::string::npos);
  }
}

TEST_CASE("dsl: op names, expressions and tied weights") {
  ModelGraph g = parse_string(R"(model: m
config: {hidden: 8, half: 0.5}
weights:
  a: {key: shared, shape: ["hidden/2", (hidden+8)*2/4]}
  b: {key: shared, shape: [hidden]}
ops:
  - {op: argmax, in: a}
  - {op: argmax, name: "pick{hidden-1}", in: b, split: hidden*half, scale: half, tag: "x{2*3}"}
  - repeat:
      count: 2
      as: i
      ops:
        - {op: argmax, in: "y{i}", split: i+1}
)");
  CHECK(g.layers == 2);
  CHECK(g.find_tensor("a")->shape == std::vector<int64_t>{4, 8});
  CHECK(g.find_tensor("b")->key == "shared");
  REQUIRE(g.ops.size() == 4);
  CHECK(g.ops[0].name == "argmax#0");
  CHECK(g.ops[1].name == "pick7");
  CHECK(g.ops[1].field("split")->number == 4);
  CHECK(g.ops[1].field("scale")->number == 0.5);
  CHECK(g.ops[1].field("tag")->items == std::vector<std::string>{"x6"});
  CHECK(g.ops[2].name == "argmax#2");
  CHECK(g.ops[3].field("in")->items == std::vector<std::string>{"y1"});
  CHECK(g.ops[3].field("split")->number == 2);
  CHECK(g.ops[3].layer == 1);
}

TEST_CASE("dsl: a missing file") {
  try {
    parse_file("/nonexistent/model.yaml");
    FAIL("a missing file was accepted");
  } catch (const Error& e) {
    CHECK(e.where.file == "/nonexistent/model.yaml");
    CHECK(e.where.line == 0);
    CHECK(std::string(e.what()).find("/nonexistent/model.yaml: cannot open") == 0);
  }
}

TEST_CASE("dsl error: YAML syntax") {
  check_error(R"(model: m
config: {hidden: 8
ops: []
)",
              3, 4, "YAML syntax error");
}

TEST_CASE("dsl error: empty document") {
  check_error("", 1, 1, "empty");
  check_error("# only a comment\n", 1, 1, "empty");
}

TEST_CASE("dsl error: two documents") {
  check_error(R"(model: m
config: {}
ops: []
---
model: n
)",
              4, 1, "expected one YAML document, found a second one here");
}

TEST_CASE("dsl error: unknown top-level key") {
  check_error(R"(model: m
config: {hidden: 8}
opz: []
)",
              3, 1, "unknown key 'opz'");
}

TEST_CASE("dsl error: missing model") {
  check_error(R"(config: {hidden: 8}
ops: []
)",
              1, 1, "missing 'model'");
}

TEST_CASE("dsl error: model is not a scalar") {
  check_error(R"(model: [a, b]
config: {}
ops: []
)",
              1, 8, "expected a scalar for 'model'");
}

TEST_CASE("dsl error: config is a list") {
  check_error(R"(model: m
config: [1, 2]
ops: []
)",
              2, 9, "expected a map for 'config', got a list");
}

TEST_CASE("dsl error: ops is a map") {
  check_error(R"(model: m
config: {}
ops: {op: argmax}
)",
              3, 6, "expected a list for 'ops'");
}

TEST_CASE("dsl error: unknown op") {
  check_error(R"(model: m
config: {hidden: 8}
ops:
  - {op: conv, out: y}
)",
              4, 10, "unknown op 'conv'; expected one of embed, matvec");
}

TEST_CASE("dsl error: missing op") {
  check_error(R"(model: m
config: {hidden: 8}
ops:
  - {in: a, out: y}
)",
              4, 5, "missing 'op'");
}

TEST_CASE("dsl error: tensor declared twice") {
  check_error(R"(model: m
config: {hidden: 8}
weights:
  w: {key: a, shape: [hidden]}
activations:
  w: {shape: [1]}
ops: []
)",
              6, 3, "tensor 'w' declared twice (first at bad.yaml:4:3)");
}

TEST_CASE("dsl error: tensor declared in every repeat iteration") {
  check_error(R"(model: m
config: {hidden: 8}
ops:
  - repeat:
      count: 2
      as: i
      activations:
        t: {shape: [hidden]}
      ops: []
)",
              8, 9, "tensor 't' declared twice (first at bad.yaml:8:9)");
}

TEST_CASE("dsl error: unknown name in a shape") {
  check_error(R"(model: m
config: {hidden: 8}
activations:
  x: {shape: [hidden, foo*2]}
ops: []
)",
              4, 23, "unknown name 'foo' in expression 'foo*2'");
}

TEST_CASE("dsl error: non-integer substitution") {
  check_error(R"(model: m
config: {hidden: 8}
activations:
  x{hidden/3}: {shape: [1]}
ops: []
)",
              4, 3, "'{hidden/3}' in 'x{hidden/3}' is not an integer");
}

TEST_CASE("dsl error: unknown name in an op field substitution") {
  check_error(R"(model: m
config: {hidden: 8}
ops:
  - {op: argmax, in: "x{layer}"}
)",
              4, 22, "unknown name 'layer'");
}

TEST_CASE("dsl error: unclosed brace") {
  check_error(R"(model: m
config: {}
weights:
  w: {key: "a.{0", shape: [1]}
ops: []
)",
              4, 12, "unclosed '{'");
}

TEST_CASE("dsl error: shape is not a list") {
  check_error(R"(model: m
config: {hidden: 8}
activations:
  x: {shape: hidden}
ops: []
)",
              4, 14, "expected a list for 'shape'");
}

TEST_CASE("dsl error: non-positive dimension") {
  check_error(R"(model: m
config: {hidden: 8}
kv_caches:
  k: {shape: [hidden, hidden-8]}
ops: []
)",
              4, 23, "dimension 'hidden-8' is 0");
}

TEST_CASE("dsl error: fractional dimension") {
  check_error(R"(model: m
config: {hidden: 8}
activations:
  x: {shape: [hidden/3]}
ops: []
)",
              4, 15, "expression 'hidden/3' is not an integer");
}

TEST_CASE("dsl error: unknown key in a weight") {
  check_error(R"(model: m
config: {}
weights:
  w: {key: a, shape: [1], dtyp: bf16}
ops: []
)",
              4, 27, "unknown key 'dtyp' in weight 'w'; expected one of key, shape, dtype, scale");
}

TEST_CASE("dsl error: weight without a key") {
  check_error(R"(model: m
config: {}
weights:
  w:
    shape: [1]
ops: []
)",
              4, 3, "missing 'key' in weight 'w'");
}

TEST_CASE("dsl error: unknown activation dtype") {
  check_error(R"(model: m
config: {}
activations:
  x: {shape: [1], dtype: f16}
ops: []
)",
              4, 26, "unknown dtype 'f16'");
}

TEST_CASE("dsl error: duplicate op name") {
  check_error(R"(model: m
config: {}
ops:
  - {op: argmax, in: a, out: b}
  - {op: argmax, in: c, out: b}
)",
              5, 5, "op name 'b' used twice (first at bad.yaml:4:5)");
}

TEST_CASE("dsl error: key given twice") {
  check_error(R"(model: m
config: {}
ops:
  - op: argmax
    in: a
    in: b
)",
              6, 5, "key 'in' given twice");
}

TEST_CASE("dsl error: nested repeat") {
  check_error(R"(model: m
config: {}
ops:
  - repeat:
      count: 2
      as: i
      ops:
        - repeat: {count: 2, as: j, ops: []}
)",
              8, 11, "nested repeat");
}

TEST_CASE("dsl error: repeat count is not positive") {
  check_error(R"(model: m
config: {n: 0}
ops:
  - repeat: {count: n, as: i, ops: []}
)",
              4, 21, "repeat count is 0");
}

TEST_CASE("dsl error: field given as a map") {
  check_error(R"(model: m
config: {}
ops:
  - {op: argmax, in: {a: 1}, out: b}
)",
              4, 18, "field 'in' must be a scalar or a list");
}

TEST_CASE("dsl error: config name is not an identifier") {
  check_error(R"(model: m
config:
  rope: {the-ta: 1}
ops: []
)",
              3, 10, "config name 'the-ta' is not an identifier");
}
