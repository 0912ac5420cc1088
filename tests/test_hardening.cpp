// No input crashes, hangs or corrupts (issue 8): one test case per class of mistake, each
// asserting the exact message. The suite also runs under ASan + UBSan (the asan-ubsan preset),
// which turns the memory classes (a reference into a temporary, into a growing vector) into
// failures of any test that parses or plans a model.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/input_file.hpp"
#include "common/output_file.hpp"
#include "device/bf16.hpp"
#include "device/runtime.hpp"
#include "device/weights.hpp"
#include "dsl/hf_config.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/limits.hpp"
#include "schedules/schedule.hpp"
#include "temp_dir.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using mk::test::TempDir;

namespace {

// The message of the exception `f` throws ("" and a failed check when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL_CHECK("no exception");
  return "";
}

std::string plan_error(const std::string& yaml) {
  return error_of([&] { mk::planner::plan(mk::dsl::parse_string(yaml, "m.yaml"), {4}); });
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void put_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

// A safetensors file from a header text and a data area of `data_bytes` zero bytes.
void put_safetensors(const fs::path& p, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  put_text(p, bytes + header + std::string(data_bytes, '\0'));
}

// The message of opening a checkpoint at `p` ("" when it opens).
std::string open_error(const fs::path& p) {
  return error_of([&] { mk::device::Checkpoint::open(p); });
}

std::vector<std::string> folder_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The smallest model: every op output inferred (not declared), so that each op's infer step
// adds a tensor while it still holds references to its inputs.
const std::string kSevenLines = R"(model: seven
config: {vocab: 16, hidden: 8}
weights:
  e: {key: e, shape: [vocab, hidden]}
ops:
  - {op: embed, table: e, out: x}
  - {op: argmax, in: x, out: t}
)";

// Every op kind, every output inferred.
const std::string kAllOpsInferred = R"(model: all
config: {vocab: 32, hidden: 16, kv: 1, hd: 8}
weights:
  e: {key: e, shape: [vocab, hidden]}
  w: {key: w, shape: [3*hd, hidden]}
  o: {key: o, shape: [hidden, hd]}
kv_caches:
  k: {shape: [kv, hd]}
  v: {shape: [kv, hd]}
ops:
  - {op: embed, table: e, out: x}
  - {op: matvec, in: x, weight: w, out: qkv}
  - {op: attention, qkv: qkv, k_cache: k, v_cache: v, out: p, kv_splits: 2}
  - {op: attn_reduce, in: p, out: a}
  - {op: matvec, in: a, weight: o, residual: x, out: h}
  - {op: matvec, in: h, weight: e, out: logits}
  - {op: argmax, in: logits, out: t}
)";

// A model with one matvec whose weight and chunking are given.
std::string matvec_model(const std::string& weights, const std::string& weight_field, const std::string& extra) {
  return "model: m\nconfig: {}\nweights:\n  e: {key: e, shape: [16, 8]}\n" + weights +
         "ops:\n  - {op: embed, table: e, out: x}\n  - {op: matvec, in: x, weight: " + weight_field +
         ", out: big" + extra + "}\n  - {op: argmax, in: big, out: t}\n";
}

}  // namespace

// ---- memory: references that outlive what they refer to ----------------------------------------

TEST_CASE("hardening: the YAML reader keeps no reference into a temporary (every key and value is read after its iterator moved on)") {
  // Under ASan a reference into yaml-cpp's iterator proxy is a stack-use-after-scope here.
  const mk::dsl::ModelGraph g = mk::dsl::parse_string(kAllOpsInferred, "m.yaml");
  REQUIRE(g.tensors.size() == 5);
  CHECK(g.tensors[1].name == "w");
  CHECK(g.tensors[1].loc.str() == "m.yaml:5:3");
  CHECK(g.tensors[1].shape == std::vector<int64_t>{24, 16});
  CHECK(g.config.at("hd").loc.str() == "m.yaml:2:44");
}

TEST_CASE("hardening: an op's infer step may hold references to its inputs while it declares its output") {
  // The seven-line model crashed mkplan: embed's infer returned table.shape[1] after the new
  // output had been pushed into the tensor vector. Outputs are now added after infer returns.
  for (const auto& [yaml, hidden] : {std::pair{kSevenLines, 8u}, std::pair{kAllOpsInferred, 16u}}) {
    const mk::planner::Plan p = mk::planner::plan(mk::dsl::parse_string(yaml, "m.yaml"), {4});
    const uint32_t x = p.program.find("x");
    REQUIRE(x != mk::schedule::kNone);
    CHECK(p.program.tensors[x].shape == std::vector<uint32_t>{hidden});
    CHECK(p.program.ops.front().units == hidden);
  }
}

// ---- sizes and counts: 64-bit, with explicit limits where they are read ------------------------

TEST_CASE("hardening: sizes and counts do not wrap at 32 bits; each has a limit checked where it is read") {
  SUBCASE("an output of 2^32 + 8 rows is refused, not planned as 8 rows") {
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [2147483652, 8]}\n  b: {key: b, shape: [2147483652, 8]}\n",
                                  "[a, b]", "")) ==
          "m.yaml:9:46: op 'big' would produce [4294967304], over the limits (each dimension 1 to 4294967295, at most "
          "1099511627776 elements)");
  }
  SUBCASE("a dimension beyond 32 bits") {
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [4294967296, 8]}\n", "a", "")) ==
          "m.yaml:5:3: dimension 4294967296 of 'a' is out of range (1 to 4294967295)");
  }
  SUBCASE("a tensor over the element limit (the product would wrap 64 bits at rank 4)") {
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [65536, 65536, 65536, 65536]}\n", "a", "")) ==
          "m.yaml:5:3: 'a' has more than 1099511627776 elements");
  }
  SUBCASE("split and chunks beyond 32 bits are refused before any conversion") {
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [16, 8]}\n", "a", ", split: 1e10")) ==
          "m.yaml:8:53: op 'big': split must be a positive integer, got 10000000000");
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [16, 8]}\n", "a", ", chunks: 4294967296")) ==
          "m.yaml:8:54: op 'big': chunks must be a positive integer, got 4294967296");
  }
  SUBCASE("tasks and counters in all") {
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [2097152, 8]}\n", "a", ", split: 2097152")) ==
          "m.yaml:8:53: op 'big': the model has more than 1048576 tasks in all");
    CHECK(plan_error(matvec_model("  a: {key: a, shape: [65536, 8]}\n", "a", ", chunks: 65536")) ==
          "m.yaml:8:54: op 'big': the model has more than 32768 chunks (counters) in all");
  }
  SUBCASE("the schedule reader applies the same limits to counts no section backs") {
    const mk::planner::Plan p = mk::planner::plan(mk::dsl::parse_string(kSevenLines, "m.yaml"), {2});
    std::vector<uint8_t> bytes = mk::schedule::serialize(p.schedule);
    const uint32_t counters = 40000;
    std::memcpy(bytes.data() + offsetof(mk::schedule::FileHeader, counter_count), &counters, 4);
    CHECK(error_of([&] { mk::schedule::deserialize(bytes, "s.bin"); }) ==
          "s.bin: header counter_count 40000 is implausibly large (the limit is 32768)");
  }
}

// ---- unbounded loops ---------------------------------------------------------------------------

TEST_CASE("hardening: no input makes a reader loop or block: YAML documents, repeat counts, alias expansion bounded; regular files only") {
  // yaml-cpp 0.7's LoadAll reports an endless run of empty documents for these.
  CHECK(error_of([] { mk::dsl::parse_string(",", "bad.yaml"); }) == "bad.yaml:1:1: YAML syntax error: unexpected ','");
  CHECK(error_of([] { mk::dsl::parse_string("[a,\nb],", "bad.yaml"); }) ==
        "bad.yaml:2:3: YAML syntax error: unexpected ','");
  CHECK(error_of([] { mk::dsl::parse_string("model: m\n---\nmodel: n\n", "bad.yaml"); }) ==
        "bad.yaml:2:1: expected one YAML document, found a second one here");
  CHECK(error_of([] {
          mk::dsl::parse_string("model: m\nconfig: {}\nops:\n  - repeat: {count: 1000000000000000, as: i, ops: []}\n",
                                "bad.yaml");
        }) == "bad.yaml:4:21: repeat count is 1000000000000000; it must be 1 to 4096");
  // Inputs that never end or block: every reader takes regular files only, checked before opening.
  CHECK(error_of([] { mk::dsl::parse_file("/dev/zero"); }) == "/dev/zero: cannot open the model file");
  CHECK(error_of([] { mk::schedule::read_file("/dev/zero"); }) == "/dev/zero: not a regular file");
  TempDir dir;
  REQUIRE(mkfifo((dir.path / "model.safetensors.index.json").c_str(), 0600) == 0);
  CHECK(open_error(dir.path) ==
        (dir.path / "model.safetensors.index.json").string() + ": not a regular file");
  TempDir dir2;
  REQUIRE(mkfifo((dir2.path / "model.safetensors").c_str(), 0600) == 0);
  CHECK(open_error(dir2.path) ==
        (dir2.path / "model.safetensors").string() + ": not a regular file");
  // The one reader behind them all (common/input_file.hpp): each problem named, none blocks.
  TempDir dir3;
  REQUIRE(mkfifo((dir3.path / "prompt.fifo").c_str(), 0600) == 0);
  auto problem_of = [](const std::filesystem::path& p, uint64_t limit) {
    try {
      (void)mk::io::read_input_file(p, limit);
    } catch (const mk::io::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(problem_of(dir3.path / "prompt.fifo", 1000) == "not a regular file");
  CHECK(problem_of("/dev/zero", 1000) == "not a regular file");
  CHECK(problem_of(dir3.path / "absent.txt", 1000) == "cannot open");
  std::ofstream(dir3.path / "five.txt") << "12345";
  CHECK(problem_of(dir3.path / "five.txt", 4) == "larger than the limit of 4 bytes");
  CHECK(mk::io::read_input_file(dir3.path / "five.txt", 5) == "12345");
  REQUIRE(mkfifo((dir3.path / "config.json").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(mk::dsl::import_hf_model(dir3.path), doctest::Contains("no config.json here"));
  TempDir dir4;  // the tokenizer's files too
  REQUIRE(mkfifo((dir4.path / "tokenizer.json").c_str(), 0600) == 0);
  CHECK(error_of([&] { mk::tok::Tokenizer::load(dir4.path); }) == (dir4.path / "tokenizer.json").string() + ": not a regular file");
  // "Billion laughs": ten levels of ten aliases name 10^10 config entries in eleven lines. The
  // walk stops at the limit, inside the innermost alias (l0).
  std::string laughs = "model: m\nconfig:\n  l0: &l0 {a: 1}\n";
  for (int level = 1; level <= 10; ++level) {
    laughs += "  l" + std::to_string(level) + ": &l" + std::to_string(level) + " {";
    for (int i = 0; i < 10; ++i) laughs += (i ? ", k" : "k") + std::to_string(i) + ": *l" + std::to_string(level - 1);
    laughs += "}\n";
  }
  CHECK(error_of([&] { mk::dsl::parse_string(laughs + "ops: []\n", "bad.yaml"); }) ==
        "bad.yaml:3:12: more than 65536 config entries (YAML aliases included)");
}

// ---- nesting: every recursive reader has a depth limit -----------------------------------------

TEST_CASE("hardening: deep nesting is refused by every recursive reader, not a stack overflow") {
  SUBCASE("YAML") {
    std::string deep = "model: m\nconfig: ";
    for (int i = 0; i < 10000; ++i) deep += "{a: ";
    // The document's top-level map is the first level: the 64th '{' is the 65th level.
    CHECK(error_of([&] { mk::dsl::parse_string(deep, "bad.yaml"); }) ==
          "bad.yaml:2:" + std::to_string(9 + 4 * 63) + ": YAML nested deeper than 64 levels");
    std::string lists = "model: m\nops: ";
    for (int i = 0; i < 100000; ++i) lists += "[";
    // yaml-cpp marks a flow list opened right after another one at half its column.
    CHECK(error_of([&] { mk::dsl::parse_string(lists, "bad.yaml"); }) == "bad.yaml:2:38: YAML nested deeper than 64 levels");
  }
  SUBCASE("expressions: parentheses and unary signs") {
    const std::string parens = std::string(100000, '(') + "1" + std::string(100000, ')');
    const std::string signs = std::string(100000, '-') + "1";
    for (const std::string& expr : {parens, signs}) {
      const std::string yaml = "model: m\nconfig: {}\nweights:\n  e: {key: e, shape: [\"" + expr + "\"]}\nops: []\n";
      CHECK(error_of([&] { mk::dsl::parse_string(yaml, "bad.yaml"); }) ==
            "bad.yaml:4:23: nested deeper than 64 levels in expression '" + expr + "'");
    }
  }
  SUBCASE("JSON in a safetensors header and in an index") {
    TempDir dir;
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    put_safetensors(dir.path / "x.safetensors", "{\"a\": " + deep + "}", 0);
    CHECK(open_error(dir.path / "x.safetensors") ==
          (dir.path / "x.safetensors").string() + ": the JSON header: JSON nested deeper than 64 levels");
    put_text(dir.path / "model.safetensors.index.json", "{\"weight_map\": " + deep + "}");
    CHECK(open_error(dir.path) ==
          (dir.path / "model.safetensors.index.json").string() + ": the index: JSON nested deeper than 64 levels");
  }
}

// ---- checkpoints: duplicate keys, overlapping tensors, shards outside the folder ---------------

TEST_CASE("hardening: a checkpoint with a key twice, overlapping tensors or a shard outside its folder is refused") {
  TempDir dir;
  const fs::path file = dir.path / "x.safetensors";
  SUBCASE("a tensor key twice in a header") {
    put_safetensors(file,
                    R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
                    8);
    CHECK(open_error(file) == file.string() + ": the JSON header: JSON key 'a' given twice in one object");
  }
  SUBCASE("a field twice in one tensor entry") {
    put_safetensors(file, R"({"a":{"dtype":"BF16","shape":[2],"shape":[1],"data_offsets":[0,4]}})", 4);
    CHECK(open_error(file) ==
          file.string() + ": the JSON header: JSON key 'shape' given twice in one object");
  }
  SUBCASE("overlapping tensors, an empty one between them") {
    put_safetensors(file,
                    R"({"a":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[0],"data_offsets":[4,4]},)"
                    R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
                    16);
    CHECK(open_error(file) ==
          file.string() + ": tensors 'a' and 'c' overlap in the data area");
  }
  SUBCASE("a short tensor between two that overlap") {
    put_safetensors(file,
                    R"({"a":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]},)"
                    R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
                    16);
    CHECK(open_error(file) ==
          file.string() + ": tensors 'a' and 'b' overlap in the data area");
  }
  SUBCASE("a key twice in an index's weight_map") {
    put_text(dir.path / "model.safetensors.index.json", R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})");
    CHECK(open_error(dir.path) ==
          (dir.path / "model.safetensors.index.json").string() + ": the index: JSON key 'a' given twice in one object");
  }
  SUBCASE("shard names that leave the folder") {
    mk::device::write_safetensors(dir.path / "outside.safetensors", {{"a", {2}, {1, 2}}});
    fs::create_directories(dir.path / "ckpt");
    for (const std::string& shard : {std::string("../outside.safetensors"), (dir.path / "outside.safetensors").string(),
                                     std::string("sub/../../outside.safetensors")}) {
      put_text(dir.path / "ckpt" / "model.safetensors.index.json", R"({"weight_map": {"a": ")" + shard + R"("}})");
      CHECK(open_error(dir.path / "ckpt") ==
            (dir.path / "ckpt" / "model.safetensors.index.json").string() + ": weight_map: shard '" + shard +
                "' is not a file name inside the checkpoint folder");
    }
  }
}

// ---- outputs: one helper, never half written, never in place of a device ------------------------

TEST_CASE("hardening: every output goes through OutputFile") {
  TempDir dir;
  const fs::path out = dir.path / "out.bin";
  SUBCASE("the destination keeps its contents until commit; an abandoned output leaves nothing behind") {
    put_text(out, "old");
    {
      mk::io::OutputFile f(out);
      f.write("new contents");
      CHECK(read_text(out) == "old");
    }
    CHECK(read_text(out) == "old");
    CHECK(folder_entries(dir.path) == std::vector<std::string>{"out.bin"});
    mk::io::write_file(out, std::string_view("new"));
    CHECK(read_text(out) == "new");
    CHECK(folder_entries(dir.path) == std::vector<std::string>{"out.bin"});
  }
  SUBCASE("a full disk is an error, and the old file and no temporary remain") {
    put_text(out, "old");
    // RLIMIT_FSIZE makes writes past 4 KiB fail with EFBIG, as a full disk fails them with ENOSPC.
    struct rlimit old_limit {};
    getrlimit(RLIMIT_FSIZE, &old_limit);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 4096;
    setrlimit(RLIMIT_FSIZE, &small);
    const std::string message = error_of([&] { mk::io::write_file(out, std::string(100000, 'x')); });
    setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    CHECK(message == out.string() + ": write failed: File too large");
    CHECK(read_text(out) == "old");
    CHECK(folder_entries(dir.path) == std::vector<std::string>{"out.bin"});
  }
  SUBCASE("a device is written straight into, never replaced") {
    CHECK(error_of([] { mk::io::write_file("/dev/full", std::string_view("x")); }) ==
          "/dev/full: write failed: No space left on device");
    mk::io::write_file("/dev/null", std::string_view("x"));
    struct stat st {};
    REQUIRE(stat("/dev/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
  }
  SUBCASE("a FIFO is written straight into") {
    const fs::path fifo = dir.path / "pipe";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    std::string got;
    std::thread reader([&] { got = read_text(fifo); });
    mk::io::write_file(fifo, std::string_view("through the pipe"));
    reader.join();
    CHECK(got == "through the pipe");
    CHECK(folder_entries(dir.path) == std::vector<std::string>{"pipe"});
  }
  SUBCASE("no symlink is followed at a temporary's name; a destination symlink keeps pointing at the new file") {
    put_text(dir.path / "victim", "victim");
    fs::create_symlink(dir.path / "victim", dir.path / "out.bin.tmp");  // the old fixed temporary name
    mk::io::write_file(out, std::string_view("data"));
    CHECK(read_text(dir.path / "victim") == "victim");
    CHECK(read_text(out) == "data");
    fs::create_symlink(out, dir.path / "link");
    mk::io::write_file(dir.path / "link", std::string_view("through the link"));
    CHECK(fs::is_symlink(dir.path / "link"));
    CHECK(read_text(out) == "through the link");
    CHECK(folder_entries(dir.path) == std::vector<std::string>{"link", "out.bin", "out.bin.tmp", "victim"});
  }
  SUBCASE("a folder, or a folder that does not exist, is refused by name") {
    CHECK(error_of([&] { mk::io::write_file(dir.path, std::string_view("x")); }) == dir.path.string() + ": is a folder");
    CHECK(error_of([&] { mk::io::write_file(dir.path / "no" / "x.bin", std::string_view("x")); }) ==
          (dir.path / "no" / "x.bin").string() + ": cannot create a file in " + (dir.path / "no").string() +
              ": No such file or directory");
  }
}

TEST_CASE("hardening: no output overwrites one of the command's inputs unless forced (check_outputs)") {
  TempDir dir;
  const fs::path model = dir.path / "my.yaml", out = dir.path / "s.bin";
  put_text(model, "model");
  const std::vector<mk::io::NamedPath> inputs = {{"the model", model}};
  auto refusal = [&](const std::vector<mk::io::NamedPath>& outputs, bool force = false) {
    return error_of([&] { mk::io::check_outputs(outputs, inputs, force); });
  };
  SUBCASE("the same path, a symbolic link to it, a hard link: refused, naming both") {
    CHECK(refusal({{"-o", model}}) == "-o " + model.string() + " would overwrite the model " + model.string() +
                                          "; choose another output path, or pass --force to overwrite it");
    CHECK(refusal({{"-o", dir.path / "." / "my.yaml"}}) ==
          "-o " + (dir.path / "." / "my.yaml").string() + " would overwrite the model " + model.string() +
              "; choose another output path, or pass --force to overwrite it");
    fs::create_symlink(model, dir.path / "link.bin");
    CHECK(refusal({{"-o", out}, {"--dot", dir.path / "link.bin"}}) ==
          "--dot " + (dir.path / "link.bin").string() + " would overwrite the model " + model.string() +
              " (the same file); choose another output path, or pass --force to overwrite it");
    fs::create_hard_link(model, dir.path / "hard.bin");
    CHECK(refusal({{"-o", dir.path / "hard.bin"}}) != "");
    CHECK(read_text(model) == "model");
  }
  SUBCASE("--force lets an output replace an input; other files and devices pass") {
    using mk::io::check_outputs;
    CHECK_NOTHROW(check_outputs({{"-o", model}}, inputs, true));
    CHECK_NOTHROW(check_outputs({{"-o", out}, {"--dot", dir.path / "d.dot"}, {"--emit-yaml", ""}}, inputs, false));
    put_text(out, "an older schedule");  // an existing output that is no input is replaced as before
    CHECK_NOTHROW(check_outputs({{"-o", out}}, inputs, false));
    CHECK_NOTHROW(check_outputs({{"-o", "/dev/null"}}, {{"the model", "/dev/null"}}, false));
    // An input that does not exist cannot be lost (reading it fails on its own).
    CHECK_NOTHROW(check_outputs({{"-o", out}}, {{"the model", dir.path / "gone.yaml"}}, false));
  }
  SUBCASE("two outputs that are the same file are refused, even with --force") {
    const std::string twice = refusal({{"-o", out}, {"--dot", dir.path / "." / "s.bin"}}, true);
    CHECK(twice == "-o " + out.string() + " and --dot " + (dir.path / "." / "s.bin").string() +
                       " are the same file; choose two different output paths");
  }
}

// ---- non-finite logits stop the run ------------------------------------------------------------

TEST_CASE("hardening: NaN or Inf logits stop generate() with the step named") {
  CHECK(error_of([] {
          const std::vector<float> l = {0.0f, 1.0f, std::numeric_limits<float>::infinity()};
          mk::device::check_finite_logits(l, 4, 9);
        }) == "step 5 of 9 (position 4) produced a non-finite logit (inf at vocabulary index 2): the weights or the "
              "computation hold NaN or Inf, so its token would be meaningless");

  // End to end on the emulator: a NaN in the final norm makes every logit NaN at every step; the
  // prompt's last position is checked, before any token is generated.
  const mk::planner::Plan p = mk::planner::plan(mk::dsl::parse_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml"), {4});
  TempDir dir;
  mk::device::write_random_checkpoint(p.schedule, dir.path, 1);
  const mk::device::Checkpoint good = mk::device::Checkpoint::open(dir.path);
  std::vector<mk::device::NewTensor> tensors;
  for (const auto& [key, t] : good.tensors()) {
    mk::device::NewTensor n{key, t.shape, std::vector<uint16_t>(t.bytes.size() / 2)};
    std::memcpy(n.bf16.data(), t.bytes.data(), t.bytes.size());
    if (key == "model.norm.weight") n.bf16[3] = 0x7fc0;  // bf16 NaN
    tensors.push_back(std::move(n));
  }
  TempDir bad_dir;
  mk::device::write_safetensors(bad_dir.path / "model.safetensors", tensors);
  const mk::device::Checkpoint bad = mk::device::Checkpoint::open(bad_dir.path);
  auto backend = mk::device::make_emulator_backend(p.schedule, bad, mk::device::RuntimeOptions{8});
  mk::device::GenerateOptions g;
  g.prompt = {1, 2};
  g.tokens = 3;
  CHECK(error_of([&] { mk::device::generate(*backend, p.schedule, g, 8); }) ==
        "step 2 of 4 (position 1) produced a non-finite logit (nan at vocabulary index 0): the weights or the "
        "computation hold NaN or Inf, so its token would be meaningless");
}

// ---- memory the context needs ------------------------------------------------------------------

TEST_CASE("hardening: an enormous context says how much memory it needs instead of failing to allocate") {
  const mk::planner::Plan p = mk::planner::plan(mk::dsl::parse_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml"), {4});
  // 6 caches of [2, 32] bf16: 768 bytes per position.
  CHECK(mk::device::state_bytes(p.schedule, 1001) - mk::device::state_bytes(p.schedule, 1000) == 768);
  const uint64_t need = mk::device::state_bytes(p.schedule, 1u << 30);
  CHECK(need == 768ull * (1u << 30) + mk::device::state_bytes(p.schedule, 0));
  CHECK(error_of([&] { mk::device::check_context_memory(p.schedule, 1u << 30, 1ull << 30, "host memory"); }) ==
        "a context of 1073741824 positions needs " + std::to_string(need) + " bytes (" +
            std::to_string(need / (1ull << 30)) + ".0 GiB) of host memory for the KV caches and activations, more than "
            "the 1073741824 bytes (1.0 GiB) there is; lower --max-context");
  CHECK(error_of([&] { mk::device::check_context_memory(p.schedule, 4000000000u, ~0ull, "host memory"); }) ==
        "a context of 4000000000 positions is outside 1 to 1073741824; lower --max-context");
}
