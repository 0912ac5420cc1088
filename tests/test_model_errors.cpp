// Models the YAML parser accepts but the planner must refuse: each case takes a small valid
// one-layer model, breaks one thing, and pins the error to the exact line and column of the
// offending YAML node and a distinctive part of its message.
#include <doctest/doctest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "planner/program.hpp"

namespace {

// A one-layer Llama-style model shaped like examples/tiny-llama.yaml. Line i of the file is
// kBase[i - 1]; every op sits on one line so that columns are easy to count.
const std::vector<std::string> kBase = {
    /*  1 */ "model: bad-base",
    /*  2 */ "config:",
    /*  3 */ "  hidden: 64",
    /*  4 */ "  inter: 128",
    /*  5 */ "  heads: 4",
    /*  6 */ "  kv_heads: 2",
    /*  7 */ "  head_dim: 16",
    /*  8 */ "  vocab: 96",
    /*  9 */ "  layers: 1",
    /* 10 */ "  eps: 1.0e-5",
    /* 11 */ "  kv_splits: 2",
    /* 12 */ "  rope: {theta: 500000, scaling: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, "
             "original_max_position: 8192}",
    /* 13 */ "weights:",
    /* 14 */ "  embed: {key: model.embed_tokens.weight, shape: [vocab, hidden]}",
    /* 15 */ "  final_norm: {key: model.norm.weight, shape: [hidden]}",
    /* 16 */ "activations:",
    /* 17 */ "  logits: {shape: [vocab]}",
    /* 18 */ "  next_token: {shape: [1], dtype: i32}",
    /* 19 */ "ops:",
    /* 20 */ "  - {op: embed, table: embed, out: x0, split: 4}",
    /* 21 */ "  - repeat:",
    /* 22 */ "      count: layers",
    /* 23 */ "      as: layer",
    /* 24 */ "      weights:",
    /* 25 */ "        attn_norm{layer}: {key: \"l{layer}.attn_norm\", shape: [hidden]}",
    /* 26 */ "        wq{layer}: {key: \"l{layer}.wq\", shape: [heads*head_dim, hidden]}",
    /* 27 */ "        wk{layer}: {key: \"l{layer}.wk\", shape: [kv_heads*head_dim, hidden]}",
    /* 28 */ "        wv{layer}: {key: \"l{layer}.wv\", shape: [kv_heads*head_dim, hidden]}",
    /* 29 */ "        wo{layer}: {key: \"l{layer}.wo\", shape: [hidden, heads*head_dim]}",
    /* 30 */ "        mlp_norm{layer}: {key: \"l{layer}.mlp_norm\", shape: [hidden]}",
    /* 31 */ "        wg{layer}: {key: \"l{layer}.wg\", shape: [inter, hidden]}",
    /* 32 */ "        wu{layer}: {key: \"l{layer}.wu\", shape: [inter, hidden]}",
    /* 33 */ "        wd{layer}: {key: \"l{layer}.wd\", shape: [hidden, inter]}",
    /* 34 */ "      kv_caches:",
    /* 35 */ "        k{layer}: {shape: [kv_heads, head_dim]}",
    /* 36 */ "        v{layer}: {shape: [kv_heads, head_dim]}",
    /* 37 */ "      ops:",
    /* 38 */ "        - {op: matvec, in: \"x{layer}\", norm: \"attn_norm{layer}\", weight: [\"wq{layer}\", \"wk{layer}\", "
             "\"wv{layer}\"], out: \"qkv{layer}\", split: 8, chunks: 2}",
    /* 39 */ "        - {op: attention, qkv: \"qkv{layer}\", k_cache: \"k{layer}\", v_cache: \"v{layer}\", out: "
             "\"attn_part{layer}\", kv_splits: kv_splits, split: 2, chunks: 2}",
    /* 40 */ "        - {op: attn_reduce, in: \"attn_part{layer}\", out: \"attn{layer}\", split: 2}",
    /* 41 */ "        - {op: matvec, in: \"attn{layer}\", weight: \"wo{layer}\", residual: \"x{layer}\", out: \"h{layer}\", "
             "split: 4}",
    /* 42 */ "        - {op: matvec, in: \"h{layer}\", norm: \"mlp_norm{layer}\", weight: [\"wg{layer}\", \"wu{layer}\"], "
             "act: silu_mul, out: \"act{layer}\", split: 4}",
    /* 43 */ "        - {op: matvec, in: \"act{layer}\", weight: \"wd{layer}\", residual: \"h{layer}\", out: "
             "\"x{layer+1}\", split: 4, chunks: 2}",
    /* 44 */ "  - {op: matvec, in: \"x{layers}\", norm: final_norm, weight: embed, out: logits, split: 4}",
    /* 45 */ "  - {op: argmax, in: logits, out: next_token}",
};

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// The base model with line `line` (1-based) replaced by `text`.
std::vector<std::string> with_line(int line, const std::string& text) {
  std::vector<std::string> lines = kBase;
  REQUIRE(line >= 1);
  REQUIRE(static_cast<size_t>(line) <= lines.size());
  lines[line - 1] = text;
  return lines;
}

// Plans a model that the parser must accept and the planner must refuse; checks the error's
// file, line, column and that its message contains every one of `parts`.
void check_planner_error(const std::vector<std::string>& lines, int line, int column,
                         std::initializer_list<std::string> parts, std::initializer_list<std::string> absent = {}) {
  const std::string yaml = join(lines);
  INFO("model:\n", yaml);
  mk::dsl::ModelGraph model;
  try {
    model = mk::dsl::parse_string(yaml, "bad.yaml");
  } catch (const std::exception& e) {
    const std::string why = std::string("the YAML parser refused the model (the case must reach the planner): ") + e.what();
    FAIL(why);
    return;
  }
  mk::planner::PlanOptions options;
  options.sm_count = 4;
  try {
    mk::planner::plan(model, options);
  } catch (const mk::dsl::Error& e) {
    const std::string what = e.what();
    INFO("error: ", what);
    CHECK(e.where.file == "bad.yaml");
    CHECK(e.where.line == line);
    CHECK(e.where.column == column);
    for (const std::string& part : parts) {
      INFO("expected message part: ", part);
      CHECK(e.message.find(part) != std::string::npos);
    }
    for (const std::string& part : absent) {
      INFO("message part that must not be there: ", part);
      CHECK(e.message.find(part) == std::string::npos);
    }
    CHECK(std::string(e.what()).rfind("bad.yaml:" + std::to_string(line) + ":" + std::to_string(column) + ": ", 0) == 0);
    return;
  } catch (const std::exception& e) {
    const std::string why = std::string("refused, but not with a located dsl::Error: ") + e.what();
    FAIL(why);
    return;
  }
  FAIL("the planner accepted the model");
}

}  // namespace

TEST_CASE("model errors: the base model is valid and plans") {
  const mk::dsl::ModelGraph model = mk::dsl::parse_string(join(kBase), "bad.yaml");
  const mk::planner::Program program = mk::planner::analyze(model);
  CHECK(program.ops.size() == 9);
  for (uint32_t sms : {1u, 4u, 132u}) {
    mk::planner::PlanOptions options;
    options.sm_count = sms;
    const mk::planner::Plan p = mk::planner::plan(model, options);
    // embed 4 + qkv 8 + attention 2 + reduce 2 + o 4 + gate/up 4 + down 4 + head 4 + argmax 1
    // (its 96 logits are 24 units, but a task takes 1024 logits at least)
    CHECK(p.tasks.size() == 33);
    CHECK(p.schedule.instructions.size() == 33);
  }
}

TEST_CASE("model errors: unknown field on an op") {
  // The error points at the value of the misspelt key.
  check_planner_error(with_line(41, R"(        - {op: matvec, in: "attn{layer}", wieght: "wo{layer}", residual: "x{layer}", out: "h{layer}", split: 4})"),
                      41, 51, {"op 'matvec' has no field 'wieght'", "expected one of", "weight"});
}

TEST_CASE("model errors: missing required field") {
  check_planner_error(with_line(41, R"(        - {op: matvec, in: "attn{layer}", residual: "x{layer}", out: "h{layer}", split: 4})"),
                      41, 11, {"missing required field 'weight'"});
}

TEST_CASE("model errors: undefined tensor as an input") {
  check_planner_error(with_line(41, R"(        - {op: matvec, in: "attnX{layer}", weight: "wo{layer}", residual: "x{layer}", out: "h{layer}", split: 4})"),
                      41, 28, {"undefined tensor 'attnX0'"});
}

TEST_CASE("model errors: undefined tensor in a weight list") {
  // A list has one position: where the list starts.
  check_planner_error(
      with_line(38, R"(        - {op: matvec, in: "x{layer}", norm: "attn_norm{layer}", weight: ["wq{layer}", "wkk{layer}", "wv{layer}"], out: "qkv{layer}", split: 8, chunks: 2})"),
      38, 74, {"undefined tensor 'wkk0'"});
}

TEST_CASE("model errors: matvec weight columns differ from the input length") {
  // The down projection reads h0 (64 elements) but wd0 has 128 columns.
  check_planner_error(with_line(43, R"(        - {op: matvec, in: "h{layer}", weight: "wd{layer}", residual: "h{layer}", out: "x{layer+1}", split: 4, chunks: 2})"),
                      43, 48, {"shape mismatch", "'wd0' has 128 columns", "'h0' has 64 elements"});
}

TEST_CASE("model errors: residual length differs from the output") {
  check_planner_error(with_line(43, R"(        - {op: matvec, in: "act{layer}", weight: "wd{layer}", residual: "act{layer}", out: "x{layer+1}", split: 4, chunks: 2})"),
                      43, 73, {"shape mismatch", "residual 'act0' has 128 elements, the output 64"});
}

TEST_CASE("model errors: declared output shape differs from the inferred one") {
  // logits is declared with 97 elements at 17:3; the LM head produces 96.
  check_planner_error(with_line(17, "  logits: {shape: [97]}"), 44, 73,
                      {"produces [96] but 'logits' is declared [97]", "bad.yaml:17:3"});
}

TEST_CASE("model errors: declared output dtype differs from the inferred one") {
  check_planner_error(with_line(17, "  logits: {shape: [vocab], dtype: i32}"), 44, 73,
                      {"produces f32 but 'logits' is declared i32"});
}

TEST_CASE("model errors: attention qkv length does not fit the caches") {
  // 8 extra q rows: qkv has 64 + 8 + 32 + 32 = 136 elements, not a multiple of head_dim 16.
  check_planner_error(with_line(26, R"(        wq{layer}: {key: "l{layer}.wq", shape: [heads*head_dim + 8, hidden]})"), 39, 32,
                      {"shape mismatch: 'qkv0' has 136 elements", "head_dim = 16"});
}

TEST_CASE("model errors: split larger than the units") {
  check_planner_error(
      with_line(38, R"(        - {op: matvec, in: "x{layer}", norm: "attn_norm{layer}", weight: ["wq{layer}", "wk{layer}", "wv{layer}"], out: "qkv{layer}", split: 129, chunks: 2})"),
      38, 141, {"split 129 is more than the op's 128 units of work"});
}

TEST_CASE("model errors: chunks do not divide the output") {
  check_planner_error(with_line(44, R"(  - {op: matvec, in: "x{layers}", norm: final_norm, weight: embed, out: logits, split: 4, chunks: 5})"),
                      44, 99, {"chunks 5 does not divide the 96 elements of 'logits'"});
}

TEST_CASE("model errors: non-integer and non-positive split") {
  check_planner_error(with_line(40, R"(        - {op: attn_reduce, in: "attn_part{layer}", out: "attn{layer}", split: 1.5})"), 40, 80,
                      {"split must be a positive integer", "1.5"});
  check_planner_error(with_line(40, R"(        - {op: attn_reduce, in: "attn_part{layer}", out: "attn{layer}", split: 0})"), 40, 80,
                      {"split must be a positive integer"});
}

TEST_CASE("model errors: a cycle between two ops") {
  // attn_reduce now reads h0, which the o projection computes from attn_reduce's output.
  check_planner_error(with_line(40, R"(        - {op: attn_reduce, in: "h{layer}", out: "attn{layer}", split: 2})"), 40, 11,
                      {"form a cycle", "'attn0'", "'h0'"});
}

TEST_CASE("model errors: a cycle is located at and names only the ops on it") {
  // The argmax is listed first and depends on the cycle a <-> b without being part of it.
  const std::vector<std::string> lines = {
      /*  1 */ "model: m",
      /*  2 */ "config: {hidden: 64, vocab: 64}",
      /*  3 */ "weights:",
      /*  4 */ "  w: {key: w, shape: [64, 64]}",
      /*  5 */ "  e: {key: e, shape: [64, 64]}",
      /*  6 */ "ops:",
      /*  7 */ "  - {op: argmax, in: logits, out: tok}",
      /*  8 */ "  - {op: embed, table: e, out: x0}",
      /*  9 */ "  - {op: matvec, in: b, weight: w, out: a}",
      /* 10 */ "  - {op: matvec, in: a, weight: w, out: b}",
      /* 11 */ "  - {op: matvec, in: b, weight: w, out: logits}",
  };
  check_planner_error(lines, 9, 5, {"form a cycle", "'a'", "'b'"}, {"'tok'", "'logits'"});
}

TEST_CASE("model errors: a tensor written by two ops") {
  // Named, so that the two writers do not also share the default op name (a parser error).
  check_planner_error(
      with_line(40, R"(        - {op: attn_reduce, name: "reduce{layer}", in: "attn_part{layer}", out: "h{layer}", split: 2})"), 41,
      91, {"tensor 'h0' is written by two ops", "'reduce0' at bad.yaml:40:11"});
}

TEST_CASE("model errors: an op writing a weight") {
  check_planner_error(with_line(20, "  - {op: embed, table: embed, out: final_norm, split: 4}"), 20, 36,
                      {"writes 'final_norm', which is a weight, not an activation"});
}

TEST_CASE("model errors: an op writing a kv cache") {
  check_planner_error(with_line(40, R"(        - {op: attn_reduce, in: "attn_part{layer}", out: "k{layer}", split: 2})"), 40, 58,
                      {"writes 'k0', which is a kv_cache, not an activation"});
}

TEST_CASE("model errors: an activation read but never written") {
  // The LM head writes logits2, so the declared `logits` the argmax reads has no producer.
  check_planner_error(with_line(44, R"(  - {op: matvec, in: "x{layers}", norm: final_norm, weight: embed, out: logits2, split: 4})"),
                      45, 22, {"activation 'logits' is read but no op writes it"});
}

TEST_CASE("model errors: an op reading its own output") {
  check_planner_error(with_line(40, R"(        - {op: attn_reduce, in: "attn{layer}", out: "attn{layer}", split: 2})"), 40, 33,
                      {"reads its own output 'attn0'"});
}

TEST_CASE("model errors: no argmax op") {
  std::vector<std::string> lines = kBase;
  lines.pop_back();
  check_planner_error(lines, 1, 1, {"has no argmax op"});
}

TEST_CASE("model errors: two argmax ops") {
  std::vector<std::string> lines = kBase;
  lines.push_back("  - {op: argmax, in: logits, out: second_token}");
  check_planner_error(lines, 46, 5, {"one argmax op; this is the second"});
}

TEST_CASE("model errors: a split argmax's workspace name already taken") {
  std::vector<std::string> lines = kBase;
  lines[17] += "\n  next_token.parts: {shape: [8], dtype: i32}";  // line 19, and the ops one line lower
  lines.back() = "  - {op: argmax, in: logits, out: next_token, split: 4}";  // at its split
  check_planner_error(lines, 46, 54, {"'next_token.parts'", "already has one of that name"});
  // Split in one task, the argmax needs no workspace: the name is free.
  lines.back() = "  - {op: argmax, in: logits, out: next_token, split: 1}";
  CHECK_NOTHROW(mk::planner::plan(mk::dsl::parse_string(join(lines), "bad.yaml")));
}

TEST_CASE("model errors: act other than silu_mul or none") {
  check_planner_error(
      with_line(42, R"(        - {op: matvec, in: "h{layer}", norm: "mlp_norm{layer}", weight: ["wg{layer}", "wu{layer}"], act: gelu, out: "act{layer}", split: 4})"),
      42, 106, {"act is 'gelu'; expected none or silu_mul"});
}

TEST_CASE("model errors: silu_mul with one weight") {
  check_planner_error(
      with_line(42, R"(        - {op: matvec, in: "h{layer}", norm: "mlp_norm{layer}", weight: "wg{layer}", act: silu_mul, out: "act{layer}", split: 4})"),
      42, 73, {"act silu_mul needs two weights"});
}

TEST_CASE("model errors: a list where one value is expected") {
  check_planner_error(with_line(41, R"(        - {op: matvec, in: ["attn{layer}"], weight: "wo{layer}", residual: "x{layer}", out: "h{layer}", split: 4})"),
                      41, 28, {"field 'in' takes one value, not a list"});
}

TEST_CASE("model errors: a number field given text") {
  check_planner_error(with_line(41, R"(        - {op: matvec, in: "attn{layer}", weight: "wo{layer}", residual: "x{layer}", out: "h{layer}", split: four})"),
                      41, 110, {"field 'split' must be a number, got 'four'"});
}

TEST_CASE("model errors: an empty weight list") {
  check_planner_error(with_line(41, R"(        - {op: matvec, in: "attn{layer}", weight: [], residual: "x{layer}", out: "h{layer}", split: 4})"),
                      41, 51, {"field 'weight' is an empty list"});
}

TEST_CASE("model errors: attention kv_splits out of range") {
  check_planner_error(
      with_line(39, R"(        - {op: attention, qkv: "qkv{layer}", k_cache: "k{layer}", v_cache: "v{layer}", out: "attn_part{layer}", kv_splits: 65, split: 2, chunks: 2})"),
      39, 124, {"kv_splits must be 1 to 64"});
}

// The planner must reject tensors of the wrong role in the matvec prologue/epilogue fields with
// a located model error, not leave it to the schedule validator (which throws a ScheduleError
// with no YAML position).
TEST_CASE("model errors: matvec norm that is an activation") {
  // x0 has the right length (64) but is an activation, not a bf16 norm weight.
  check_planner_error(
      with_line(38, R"(        - {op: matvec, in: "x{layer}", norm: "x{layer}", weight: ["wq{layer}", "wk{layer}", "wv{layer}"], out: "qkv{layer}", split: 8, chunks: 2})"),
      38, 46, {"x0", "weight"});
}

TEST_CASE("model errors: matvec residual that is a weight") {
  // mlp_norm0 has the right length (64) but is a weight, not an f32 activation.
  check_planner_error(
      with_line(41, R"(        - {op: matvec, in: "attn{layer}", weight: "wo{layer}", residual: "mlp_norm{layer}", out: "h{layer}", split: 4})"),
      41, 74, {"mlp_norm0", "activation"});
}

// Values the payload stores as float32: a positive double that rounds to zero (or overflows) in
// float32 is refused at the YAML, not left to the schedule validator after planning.
TEST_CASE("model errors: an attention eps that is not a positive float32") {
  for (const auto& [eps, shown] : {std::pair{"0", "eps is 0"}, {"1.0e-46", "eps is 1e-46"}})
    check_planner_error(
        with_line(39, std::string(R"(        - {op: attention, qkv: "qkv{layer}", k_cache: "k{layer}", v_cache: "v{layer}", out: "attn_part{layer}", eps: )") +
                          eps + ", kv_splits: kv_splits, split: 2, chunks: 2}"),
        39, 118, {shown, "must be positive and fit a float32"});
}

TEST_CASE("model errors: a config eps that float32 cannot hold") {
  check_planner_error(with_line(10, "  eps: 1.0e-51"), 38, 11, {"config eps is 1e-51", "float32"});
  check_planner_error(with_line(10, "  eps: 1.0e+39"), 38, 11, {"config eps is 1e+39", "float32"});
}

TEST_CASE("model errors: rope parameters that attention cannot use") {
  check_planner_error(with_line(12, "  rope: {theta: 1.0e-60, scaling: none}"), 39, 11, {"config rope.theta is 1e-60", "float32"});
  check_planner_error(with_line(12, "  rope: {theta: 500000, scaling: llama3, factor: 32, low_freq_factor: 4, high_freq_factor: 4, "
                                    "original_max_position: 8192}"),
                      39, 11, {"low_freq_factor must be less than rope.high_freq_factor"});
  check_planner_error(with_line(12, "  rope: {theta: 500000, scaling: llama3, factor: 0, low_freq_factor: 1, high_freq_factor: 4, "
                                    "original_max_position: 8192}"),
                      39, 11, {"config rope.factor is 0"});
}

TEST_CASE("model errors: a kv_split_positions or short_positions that is not a whole number of positions") {
  for (const std::string key : {"kv_split_positions", "short_positions"})
    for (const char* bad : {"-1", "1.5", "2.0e+9", "many"}) {
      CAPTURE(key);
      CAPTURE(bad);
      check_planner_error(with_line(11, "  " + key + ": " + bad), 11, static_cast<int>(key.size()) + 5,
                          {"config " + key + " is '" + std::string(bad) + "'", "a whole number of positions"});
    }
}

TEST_CASE("model errors: float8 weights plan, count one byte an element, and are refused where an op reads bf16") {
  const std::string f8 = R"(, dtype: f8e4m3, scale: {key: "l{layer}.wq_scale", layout: row}})";
  auto line26 = [&](const std::string& tail) {
    return R"(        wq{layer}: {key: "l{layer}.wq", shape: [heads*head_dim, hidden])" + tail;
  };
  SUBCASE("the three q, k, v weights of one matvec float8 alike: planned, the scales the tensor after each") {
    std::vector<std::string> lines = with_line(26, line26(f8));
    lines[26] = R"(        wk{layer}: {key: "l{layer}.wk", shape: [kv_heads*head_dim, hidden], dtype: f8e4m3, scale: {key: "l{layer}.wk_scale", layout: row}})";
    lines[27] = R"(        wv{layer}: {key: "l{layer}.wv", shape: [kv_heads*head_dim, hidden], dtype: f8e4m3, scale: {key: "l{layer}.wv_scale", layout: row}})";
    const mk::dsl::ModelGraph model = mk::dsl::parse_string(join(lines), "f8.yaml");
    mk::planner::PlanOptions options;
    options.sm_count = 4;
    const mk::planner::Plan p = mk::planner::plan(model, options);
    const mk::schedule::Schedule& s = p.schedule;
    const uint32_t wq = s.tensor_id("wq0");
    REQUIRE(wq != mk::schedule::kNone);
    CHECK(s.tensors[wq].dtype == mk::schedule::DType::f8e4m3);
    CHECK(s.tensors[wq + 1].name == "wq0.scale");
    CHECK(s.tensors[wq + 1].key == "l0.wq_scale");
    CHECK(s.tensors[wq + 1].dtype == mk::schedule::DType::f32);
    CHECK(s.tensors[wq + 1].shape == std::vector<uint32_t>{64});
    // The qkv tasks stream half the bytes of the bf16 model's.
    const mk::planner::Plan bf16 = mk::planner::plan(mk::dsl::parse_string(join(kBase), "bad.yaml"), options);
    double f8_bytes = 0, bf16_bytes = 0;
    for (const mk::planner::Task& t : p.tasks)
      if (t.spec.inst.opcode == uint16_t(mk::schedule::Opcode::matvec) && p.program.ops[t.op].name == "qkv0") f8_bytes += mk::planner::task_bytes(t);
    for (const mk::planner::Task& t : bf16.tasks)
      if (t.spec.inst.opcode == uint16_t(mk::schedule::Opcode::matvec) && bf16.program.ops[t.op].name == "qkv0") bf16_bytes += mk::planner::task_bytes(t);
    CHECK(bf16_bytes == 2 * f8_bytes);
    CHECK(f8_bytes == 128.0 * 64);
  }
  SUBCASE("one float8 weight beside bf16 ones in one matvec") {
    check_planner_error(with_line(26, line26(f8)), 38, 74, {"'wk0' and 'wq0' differ in dtype or scale layout"});
  }
  SUBCASE("a float8 table for the embed op") {
    std::vector<std::string> lines = with_line(14, R"(  embed: {key: model.embed_tokens.weight, shape: [vocab, hidden], dtype: f8e4m3, scale: {key: s, layout: tensor}})");
    check_planner_error(lines, 20, 24, {"'embed' is an f8e4m3 weight", "op 'embed' reads its 'table' in bf16"});
  }
  SUBCASE("a float8 norm weight (1-D)") {
    check_planner_error(with_line(25, R"(        attn_norm{layer}: {key: "l{layer}.attn_norm", shape: [hidden], dtype: f8e4m3, scale: {key: s, layout: tensor}})"),
                        25, 9, {"f8e4m3 weight 'attn_norm0' must be 2-D"});
  }
}

TEST_CASE("model errors: the YAML of a float8 weight is checked where it is written") {
  auto parse_error = [](const std::string& line26) {
    try {
      mk::dsl::parse_string(join(with_line(26, line26)), "bad.yaml");
    } catch (const mk::dsl::Error& e) {
      CHECK(e.where.line == 26);
      return e.message;
    }
    FAIL("parsed");
    return std::string();
  };
  const std::string head = R"(        wq{layer}: {key: "l{layer}.wq", shape: [heads*head_dim, hidden])";
  CHECK(parse_error(head + ", dtype: f8e5m2}").find("unknown weight dtype 'f8e5m2'; expected bf16 or f8e4m3") != std::string::npos);
  CHECK(parse_error(head + ", dtype: f8e4m3}").find("needs 'scale: {key: ..., layout: tensor, row or block128}'") != std::string::npos);
  CHECK(parse_error(head + ", scale: {key: s, layout: row}}").find("'scale' is for f8e4m3 weights; this one is bf16") != std::string::npos);
  CHECK(parse_error(head + ", dtype: f8e4m3, scale: {key: s, layout: column}}").find("unknown scale layout 'column'") != std::string::npos);
  CHECK(parse_error(head + ", dtype: f8e4m3, scale: {layout: row}}").find("missing 'key'") != std::string::npos);
  CHECK(parse_error(head + ", dtype: f8e4m3, scale: {key: s, layout: row, block: 64}}").find("unknown key 'block'") != std::string::npos);
}
