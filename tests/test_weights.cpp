// safetensors checkpoints: reading (single file, folder, shards), validation errors,
// check_weights against a schedule, writing and random checkpoints.
#include <doctest/doctest.h>

#include "tests/temp_dir.hpp"
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "device/bf16.hpp"
#include "device/fp8.hpp"
#include "device/weights.hpp"
#include "schedules/schedule.hpp"

namespace {

namespace fs = std::filesystem;
using mk::device::Checkpoint;
using mk::device::NewTensor;
using mk::device::WeightError;

struct TempDir : mk::test::TempDir {
  TempDir() : mk::test::TempDir("mk_test_weights") {}
};

void write_bytes(const fs::path& file, const std::vector<uint8_t>& bytes) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A safetensors file built by hand: little-endian length, header text, data.
std::vector<uint8_t> safetensors_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Deterministic, never-all-zero filler bytes.
std::vector<uint8_t> filler(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + 11) % 251 + 1);
  return v;
}

NewTensor random_tensor(const std::string& key, std::vector<uint64_t> shape, std::mt19937& rng) {
  NewTensor t{key, std::move(shape), {}};
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  // Every bit pattern, NaNs and infinities included: reading must be bit-exact.
  for (uint64_t i = 0; i < n; ++i) t.bf16.push_back(static_cast<uint16_t>(rng()));
  return t;
}

// The WeightError message of opening `path`; fails the test when opening succeeds.
std::string open_error(const fs::path& path) {
  try {
    Checkpoint::open(path);
  } catch (const WeightError& e) {
    return e.what();
  }
  FAIL("opening ", path.string(), " did not throw");
  return {};
}

std::string file_error(const TempDir& dir, const std::string& header, const std::vector<uint8_t>& data) {
  const fs::path file = dir.path / "bad.safetensors";
  write_bytes(file, safetensors_bytes(header, data));
  return open_error(file);
}

void check_contains(const std::string& message, const std::string& part) {
  INFO("message: ", message);
  CHECK(message.find(part) != std::string::npos);
}

void check_same_values(const Checkpoint& c, const NewTensor& t) {
  const mk::device::CheckpointTensor* got = c.find(t.key);
  REQUIRE(got != nullptr);
  CHECK(got->dtype == "BF16");
  CHECK(got->shape == t.shape);
  REQUIRE(got->bytes.size() == 2 * t.bf16.size());
  CHECK(std::memcmp(got->bytes.data(), t.bf16.data(), got->bytes.size()) == 0);  // little-endian host
  const std::vector<float> f = c.to_float(t.key);
  REQUIRE(f.size() == t.bf16.size());
  for (size_t i = 0; i < f.size(); ++i)
    CHECK(std::bit_cast<uint32_t>(f[i]) == std::bit_cast<uint32_t>(mk::device::bf16_to_f32(t.bf16[i])));
}

mk::schedule::Tensor weight(std::string name, std::string key, std::vector<uint32_t> shape) {
  mk::schedule::Tensor t;
  t.name = std::move(name);
  t.key = std::move(key);
  t.role = mk::schedule::Role::weight;
  t.dtype = mk::schedule::DType::bf16;
  t.shape = std::move(shape);
  return t;
}

const std::string kValidHeader =
    R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
    R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}})";

}  // namespace

TEST_CASE("weights: write_safetensors then open round-trips bf16 bits exactly") {
  TempDir dir;
  std::mt19937 rng(1234);
  // Written in non-sorted order: the header is sorted, the data keeps this order.
  const std::vector<NewTensor> tensors = {random_tensor("z.weight", {5, 7}, rng), random_tensor("a.norm", {13}, rng),
                                          random_tensor("m.cube", {2, 3, 4}, rng)};
  const fs::path file = dir.path / "x.safetensors";
  mk::device::write_safetensors(file, tensors);
  CHECK_FALSE(fs::exists(file.string() + ".tmp"));

  const std::vector<uint8_t> raw = read_bytes(file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[i];
  CHECK((8 + n) % 8 == 0);
  const std::string header(raw.begin() + 8, raw.begin() + 8 + static_cast<long>(n));
  CHECK(header.find("\"a.norm\"") < header.find("\"m.cube\""));
  CHECK(header.find("\"m.cube\"") < header.find("\"z.weight\""));
  CHECK(raw.size() == 8 + n + 2 * (35 + 13 + 24));

  const Checkpoint c = Checkpoint::open(file);
  CHECK(c.tensors().size() == 3);
  for (const NewTensor& t : tensors) check_same_values(c, t);
  CHECK(c.find("z.weight")->bytes.data() < c.find("a.norm")->bytes.data());  // data in given order
  CHECK(c.find("missing") == nullptr);
  CHECK_THROWS_AS(c.to_float("missing"), WeightError);
}

TEST_CASE("weights: a folder with model.safetensors opens, and the checkpoint survives a move") {
  TempDir dir;
  std::mt19937 rng(99);
  const NewTensor t = random_tensor("model.embed_tokens.weight", {8, 4}, rng);
  mk::device::write_safetensors(dir.path / "model.safetensors", {t});
  Checkpoint c = Checkpoint::open(dir.path);
  Checkpoint moved = std::move(c);
  check_same_values(moved, t);
  CHECK(moved.find(t.key)->file == dir.path / "model.safetensors");
}

TEST_CASE("weights: F32 and F16 tensors convert to float") {
  TempDir dir;
  const float f32[3] = {1.5f, -2.25f, 1e-3f};
  const uint16_t f16[4] = {0x3c00 /*1*/, 0xc000 /*-2*/, 0x0001 /*2^-24*/, 0x7bff /*65504*/};
  std::vector<uint8_t> data(12 + 8);
  std::memcpy(data.data(), f32, 12);
  std::memcpy(data.data() + 12, f16, 8);
  const fs::path file = dir.path / "mixed.safetensors";
  write_bytes(file, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                      R"("h":{"dtype":"F16","shape":[2,2],"data_offsets":[12,20]}})",
                                      data));
  const Checkpoint c = Checkpoint::open(file);
  CHECK(c.to_float("a") == std::vector<float>{1.5f, -2.25f, 1e-3f});
  CHECK(c.to_float("h") == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f});
  // What the device gets: bf16, rounded to nearest even (65504 rounds up to 65536).
  auto bf16_of = [&](const std::string& key) {
    const mk::device::CheckpointTensor* t = c.find(key);
    REQUIRE(t->dtype == "BF16");
    std::vector<float> v;
    for (size_t i = 0; i < t->bytes.size(); i += 2) v.push_back(mk::device::bf16_to_f32(uint16_t(t->bytes[i] | t->bytes[i + 1] << 8)));
    return v;
  };
  CHECK(bf16_of("a") == std::vector<float>{1.5f, -2.25f, mk::device::round_bf16(1e-3f)});
  CHECK(bf16_of("h") == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65536.0f});
  CHECK(c.find("a")->stored_dtype == "F32");
  CHECK(c.find("h")->stored_dtype == "F16");
}

TEST_CASE("weights: sharded folder with model.safetensors.index.json") {
  TempDir dir;
  std::mt19937 rng(7);
  const NewTensor a = random_tensor("a", {4, 4}, rng), b = random_tensor("b", {6}, rng),
                  c = random_tensor("c", {3, 5}, rng);
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  mk::device::write_safetensors(dir.path / s1, {a, b});
  mk::device::write_safetensors(dir.path / s2, {c});
  const fs::path index = dir.path / "model.safetensors.index.json";
  auto write_index = [&](const std::string& map) {
    std::ofstream(index) << R"({"metadata":{"total_size":106},"weight_map":{)" << map << "}}";
  };

  SUBCASE("loads every shard") {
    write_index(R"("a":")" + s1 + R"(","b":")" + s1 + R"(","c":")" + s2 + R"(")");
    const Checkpoint ck = Checkpoint::open(dir.path);
    CHECK(ck.tensors().size() == 3);
    check_same_values(ck, a);
    check_same_values(ck, b);
    check_same_values(ck, c);
    CHECK(ck.find("a")->file == dir.path / s1);
    CHECK(ck.find("c")->file == dir.path / s2);
  }
  SUBCASE("index naming a missing shard") {
    write_index(R"("a":")" + s1 + R"(","c":"model-00003-of-00003.safetensors")");
    const std::string e = open_error(dir.path);
    check_contains(e, "model.safetensors.index.json");
    check_contains(e, "shard 'model-00003-of-00003.safetensors'");
    check_contains(e, "not found");
  }
  SUBCASE("index listing a key its shard lacks") {
    write_index(R"("a":")" + s1 + R"(","c":")" + s1 + R"(")");
    check_contains(open_error(dir.path), "key 'c' is mapped to shard '" + s1 + "' but that file lacks it");
  }
  SUBCASE("a key present in two shards") {
    mk::device::write_safetensors(dir.path / s2, {c, a});
    write_index(R"("a":")" + s1 + R"(","c":")" + s2 + R"(")");
    const std::string e = open_error(dir.path);
    check_contains(e, "tensor 'a' is also in");
  }
  SUBCASE("bad index JSON") {
    std::ofstream(index) << R"({"weight_map": [)";
    check_contains(open_error(dir.path), "the index: not valid JSON: parse error at line 1, column 17");
    std::ofstream(index) << R"({"weights": {}})";
    check_contains(open_error(dir.path), "weight_map");
  }
}

TEST_CASE("weights: missing file or folder") {
  TempDir dir;
  check_contains(open_error(dir.path / "nope.safetensors"), "no such file or folder");
  const std::string e = open_error(dir.path);  // an empty folder
  check_contains(e, dir.path.string());
  check_contains(e, "neither model.safetensors.index.json nor model.safetensors");
}

TEST_CASE("weights: truncated files are rejected wherever they are cut") {
  TempDir dir;
  const std::vector<uint8_t> full = safetensors_bytes(kValidHeader, filler(24));
  const fs::path file = dir.path / "t.safetensors";
  write_bytes(file, full);
  CHECK(Checkpoint::open(file).tensors().size() == 2);  // the uncut file is fine

  const size_t header_end = 8 + kValidHeader.size();
  struct Cut {
    size_t length;
    const char* expect;
  };
  const Cut cuts[] = {{0, "shorter than the 8-byte header length"},
                      {5, "shorter than the 8-byte header length"},
                      {8, "header length"},
                      {8 + 10, "exceeds"},
                      {header_end - 1, "exceeds"},
                      {header_end, "outside the data area"},
                      {header_end + 13, "outside the data area"},
                      {full.size() - 1, "outside the data area of 23 bytes"}};
  for (const Cut& cut : cuts) {
    CAPTURE(cut.length);
    write_bytes(file, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(cut.length)));
    const std::string e = open_error(file);
    check_contains(e, file.string());
    check_contains(e, cut.expect);
  }
}

TEST_CASE("weights: header length beyond the file, bad JSON, ill-typed header") {
  TempDir dir;
  const fs::path file = dir.path / "h.safetensors";
  std::vector<uint8_t> bytes = safetensors_bytes(kValidHeader, filler(24));
  bytes[7] = 0x10;  // a header length of about 2^60
  write_bytes(file, bytes);
  check_contains(open_error(file), "header length 1152921504606847");

  check_contains(file_error(dir, R"({"w":{"dtype":"BF16",)", filler(4)), "the JSON header: not valid JSON: parse error at line 1");
  check_contains(file_error(dir, "[1,2,3]", filler(4)), "JSON header must be an object");
  check_contains(file_error(dir, R"({"w":{"shape":[2],"data_offsets":[0,4]}})", filler(4)),
                 "tensor 'w': missing field 'dtype'");
  check_contains(file_error(dir, R"({"w":{"dtype":"BF16","shape":"2","data_offsets":[0,4]}})", filler(4)),
                 "tensor 'w': shape must be an array");
  check_contains(file_error(dir, R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[-1,3]}})", filler(4)),
                 "tensor 'w': data_offsets must be two non-negative integers");
  check_contains(file_error(dir, R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,4]}})", filler(4)),
                 "dtype must be a string");
  check_contains(file_error(dir, R"({"w":[1]})", filler(4)), "tensor 'w': expected an object");
}

TEST_CASE("weights: a file that is not a safetensors file says so; a truncated one keeps its precise message") {
  TempDir dir;
  const fs::path config = dir.path / "config.json";
  const std::string text = "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 2048\n}\n";
  write_bytes(config, std::vector<uint8_t>(text.begin(), text.end()));
  CHECK(open_error(config) == config.string() +
                                  ": not a safetensors file (expected an 8-byte header length, then a JSON header starting "
                                  "with '{'); give a checkpoint folder or its .safetensors file");
  const fs::path schedule = dir.path / "s.bin";
  const std::string magic = "MKSCHED";
  std::vector<uint8_t> bytes(magic.begin(), magic.end());
  bytes.resize(64, 0x11);
  write_bytes(schedule, bytes);
  check_contains(open_error(schedule), "s.bin: not a safetensors file");
  // A real file cut inside its header: the length is plausible and the header starts with '{'.
  const std::vector<uint8_t> full = safetensors_bytes(kValidHeader, filler(24));
  const fs::path cut = dir.path / "cut.safetensors";
  write_bytes(cut, std::vector<uint8_t>(full.begin(), full.begin() + 20));
  check_contains(open_error(cut), "header length " + std::to_string(kValidHeader.size()) + " exceeds the 12 bytes after the length field");
}

TEST_CASE("weights: unknown dtype, offsets out of range, size mismatch, overlap") {
  TempDir dir;
  const std::string e1 = file_error(dir, R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,4]}})", filler(4));
  check_contains(e1, "tensor 'w': unknown dtype 'Q4'");

  const std::string e2 = file_error(dir, R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}})", filler(12));
  check_contains(e2, "tensor 'w': data_offsets [8, 16] outside the data area of 12 bytes");
  check_contains(file_error(dir, R"({"w":{"dtype":"BF16","shape":[0],"data_offsets":[9,4]}})", filler(12)),
                 "end before begin");

  const std::string e3 = file_error(dir, R"({"x":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,10]}})", filler(32));
  check_contains(e3, (dir.path / "bad.safetensors").string() +
                         ": tensor 'x': data_offsets [0, 10] give 10 bytes but BF16 [4, 4] needs 32");
  check_contains(file_error(dir, R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                            filler(8)),
                 "needs more than 2^64");

  const std::string e4 = file_error(dir,
                                    R"({"p":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
                                    R"("q":{"dtype":"BF16","shape":[4],"data_offsets":[4,12]}})",
                                    filler(12));
  check_contains(e4, "tensors 'p' and 'q' overlap");
}

TEST_CASE("weights: check_weights reports missing key, wrong dtype, wrong shape") {
  TempDir dir;
  std::mt19937 rng(5);
  mk::schedule::Schedule s;
  s.tensors.push_back(weight("layers.0.wq", "model.layers.0.self_attn.q_proj.weight", {4, 6}));
  mk::schedule::Tensor act;  // not a weight: never looked up
  act.name = "x";
  act.shape = {6};
  s.tensors.push_back(act);
  auto error_of = [&](const fs::path& path) -> std::string {
    const Checkpoint c = Checkpoint::open(path);
    try {
      mk::device::check_weights(s, c);
    } catch (const WeightError& e) {
      return e.what();
    }
    return "";
  };
  const fs::path file = dir.path / "model.safetensors";

  SUBCASE("matching checkpoint passes") {
    mk::device::write_safetensors(file, {random_tensor("model.layers.0.self_attn.q_proj.weight", {4, 6}, rng)});
    CHECK(error_of(dir.path) == "");
  }
  SUBCASE("missing key") {
    mk::device::write_safetensors(file, {random_tensor("model.layers.0.self_attn.k_proj.weight", {4, 6}, rng)});
    const std::string e = error_of(dir.path);
    check_contains(e, dir.path.string());
    check_contains(e, "missing key 'model.layers.0.self_attn.q_proj.weight' (schedule tensor 'layers.0.wq', "
                      "expected BF16 [4, 6])");
  }
  SUBCASE("wrong dtype") {
    write_bytes(file, safetensors_bytes(
                          R"({"model.layers.0.self_attn.q_proj.weight":{"dtype":"I32","shape":[4,6],"data_offsets":[0,96]}})",
                          filler(96)));
    const std::string e = error_of(file);
    check_contains(e, file.string());
    check_contains(e, "key 'model.layers.0.self_attn.q_proj.weight' (schedule tensor 'layers.0.wq') is I32 [4, 6], "
                      "expected BF16 [4, 6] (F16 and F32 are converted at load)");
  }
  SUBCASE("F32 and F16 weights are accepted: converted to bf16 at load") {
    for (const char* dtype : {"F32", "F16"}) {
      const bool f32 = dtype[1] == '3';
      write_bytes(file, safetensors_bytes(std::string(R"({"model.layers.0.self_attn.q_proj.weight":{"dtype":")") + dtype +
                                              R"(","shape":[4,6],"data_offsets":[0,)" + (f32 ? "96" : "48") + "]}}",
                                          filler(f32 ? 96 : 48)));
      CHECK(error_of(file) == "");
    }
  }
  SUBCASE("wrong shape") {
    mk::device::write_safetensors(file, {random_tensor("model.layers.0.self_attn.q_proj.weight", {6, 4}, rng)});
    check_contains(error_of(dir.path), "(schedule tensor 'layers.0.wq') is BF16 [6, 4], expected BF16 [4, 6]");
    mk::device::write_safetensors(file, {random_tensor("model.layers.0.self_attn.q_proj.weight", {4, 6, 1}, rng)});
    check_contains(error_of(dir.path), "is BF16 [4, 6, 1], expected BF16 [4, 6]");
  }
}

TEST_CASE("weights: write_random_checkpoint is deterministic, writes tied keys once") {
  mk::schedule::Schedule s;
  s.tensors.push_back(weight("embed", "model.embed_tokens.weight", {32, 16}));
  s.tensors.push_back(weight("layers.0.attn_norm", "model.layers.0.input_layernorm.weight", {16}));
  s.tensors.push_back(weight("layers.0.wq", "model.layers.0.self_attn.q_proj.weight", {16, 64}));
  s.tensors.push_back(weight("lm_head", "model.embed_tokens.weight", {32, 16}));  // tied
  TempDir a, b, c;
  mk::device::write_random_checkpoint(s, a.path / "ckpt", 42);
  mk::device::write_random_checkpoint(s, b.path, 42);
  mk::device::write_random_checkpoint(s, c.path, 43);
  const std::vector<uint8_t> bytes_a = read_bytes(a.path / "ckpt" / "model.safetensors");
  CHECK(bytes_a == read_bytes(b.path / "model.safetensors"));
  CHECK(bytes_a != read_bytes(c.path / "model.safetensors"));

  std::ifstream cfg(a.path / "ckpt" / "config.json");
  const std::string config((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  check_contains(config, "\"mk_generated\": true");
  check_contains(config, "\"seed\": 42");

  const Checkpoint ck = Checkpoint::open(a.path / "ckpt");
  CHECK(ck.tensors().size() == 3);
  CHECK_NOTHROW(mk::device::check_weights(s, ck));

  // The distributions: norms near 1, embeddings std ~1, matrices std ~1/sqrt(cols).
  auto mean_std = [&](const std::string& key) {
    const std::vector<float> v = ck.to_float(key);
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += double{x} * x;
    const double mean = sum / v.size();
    return std::pair{mean, std::sqrt(sq / v.size() - mean * mean)};
  };
  const auto [norm_mean, norm_std] = mean_std("model.layers.0.input_layernorm.weight");
  CHECK(norm_mean == doctest::Approx(1.0).epsilon(0.1));
  CHECK(norm_std > 0.03);
  CHECK(norm_std < 0.3);
  const auto [embed_mean, embed_std] = mean_std("model.embed_tokens.weight");
  CHECK(std::abs(embed_mean) < 0.2);
  CHECK(embed_std == doctest::Approx(1.0).epsilon(0.15));
  const auto [wq_mean, wq_std] = mean_std("model.layers.0.self_attn.q_proj.weight");
  CHECK(std::abs(wq_mean) < 0.05);
  CHECK(wq_std == doctest::Approx(1.0 / 8.0).epsilon(0.15));
  for (float x : ck.to_float("model.layers.0.self_attn.q_proj.weight"))
    CHECK(mk::device::round_bf16(x) == x);
}

TEST_CASE("weights: write_random_checkpoint rejects a key shared by tensors of different shapes") {
  mk::schedule::Schedule s;
  s.tensors.push_back(weight("embed", "model.embed_tokens.weight", {32, 16}));
  s.tensors.push_back(weight("lm_head", "model.embed_tokens.weight", {16, 32}));
  TempDir dir;
  try {
    mk::device::write_random_checkpoint(s, dir.path, 1);
    FAIL("no error");
  } catch (const WeightError& e) {
    check_contains(e.what(), "key 'model.embed_tokens.weight' is shared by schedule tensors 'embed' [32, 16] and "
                             "'lm_head' [16, 32]");
  }
}

TEST_CASE("weights: write_safetensors rejects inconsistent input") {
  TempDir dir;
  const fs::path file = dir.path / "w.safetensors";
  CHECK_THROWS_WITH_AS(mk::device::write_safetensors(file, {NewTensor{"a", {2, 2}, {1, 2, 3}}}),
                       doctest::Contains("shape [2, 2] does not match 3 values"), WeightError);
  CHECK_THROWS_WITH_AS(mk::device::write_safetensors(file, {NewTensor{"a", {1}, {1}}, NewTensor{"a", {1}, {2}}}),
                       doctest::Contains("given twice"), WeightError);
  CHECK_FALSE(fs::exists(file));
}

TEST_CASE("weights: float8 weights and their scales are checked as the schedule declares them") {
  TempDir dir;
  mk::schedule::Schedule s;
  s.tensors.push_back(weight("wq", "q.weight", {4, 16}));
  s.tensors.back().dtype = mk::schedule::DType::f8e4m3;
  s.tensors.push_back(weight("wq.scale", "q.weight_scale", {4}));
  s.tensors.back().dtype = mk::schedule::DType::f32;
  const fs::path file = dir.path / "model.safetensors";
  std::vector<uint8_t> q(64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7 % 0x7f);  // finite: never S.1111.111
  const std::vector<uint8_t> scales = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40};  // 1, 2, 3, 4
  auto write = [&](const std::string& qdtype, const std::vector<uint8_t>& qbytes, const std::string& sdtype,
                   const std::string& sshape, const std::vector<uint8_t>& sbytes) {
    write_bytes(file, safetensors_bytes(R"({"q.weight":{"dtype":")" + qdtype + R"(","shape":[4,16],"data_offsets":[0,64]},)" +
                                            R"("q.weight_scale":{"dtype":")" + sdtype + R"(","shape":)" + sshape +
                                            R"(,"data_offsets":[64,)" + std::to_string(64 + sbytes.size()) + "]}}",
                                        [&] {
                                          std::vector<uint8_t> d = qbytes;
                                          d.insert(d.end(), sbytes.begin(), sbytes.end());
                                          return d;
                                        }()));
  };
  auto error_of = [&] {
    const Checkpoint c = Checkpoint::open(file);
    try {
      mk::device::check_weights(s, c);
    } catch (const WeightError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SUBCASE("F8_E4M3 with F32 scales of [rows] or [rows, 1]: accepted, read as stored and as floats") {
    for (const char* shape : {"[4]", "[4,1]"}) {
      write("F8_E4M3", q, "F32", shape, scales);
      CHECK(error_of() == "");
      const Checkpoint c = Checkpoint::open(file);
      const auto bytes = c.data("q.weight", mk::schedule::DType::f8e4m3);
      CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == q);
      const auto sb = c.data("q.weight_scale", mk::schedule::DType::f32);
      REQUIRE(sb.size() == 16);
      float f[4];
      std::memcpy(f, sb.data(), 16);
      CHECK(f[0] == 1.0f);
      CHECK(f[3] == 4.0f);
      CHECK(c.to_float("q.weight")[9] == mk::device::f8e4m3_to_f32(q[9]));
    }
  }
  SUBCASE("BF16 scales are read as floats") {
    write("F8_E4M3", q, "BF16", "[4]", {0x80, 0x3f, 0, 0x40, 0x40, 0x40, 0x80, 0x40});
    CHECK(error_of() == "");
    const Checkpoint c = Checkpoint::open(file);
    const auto sb = c.data("q.weight_scale", mk::schedule::DType::f32);
    float f[4];
    std::memcpy(f, sb.data(), 16);
    CHECK(f[2] == 3.0f);
  }
  SUBCASE("a float8 NaN byte is refused, naming the element") {
    std::vector<uint8_t> bad = q;
    bad[37] = 0xff;
    write("F8_E4M3", bad, "F32", "[4]", scales);
    check_contains(error_of(), "key 'q.weight': element 37 is a float8 NaN (byte 0xff)");
    bad[37] = 0x7f;
    write("F8_E4M3", bad, "F32", "[4]", scales);
    check_contains(error_of(), "element 37 is a float8 NaN (byte 0x7f)");
  }
  SUBCASE("e5m2 weights are refused as such") {
    write("F8_E5M2", q, "F32", "[4]", scales);
    check_contains(error_of(), "is F8_E5M2 [4, 16], expected F8_E4M3 [4, 16] (e5m2 weights are not supported: e4m3 only)");
  }
  SUBCASE("bf16 bytes where float8 ones are declared") {
    write_bytes(file, safetensors_bytes(R"({"q.weight":{"dtype":"BF16","shape":[4,16],"data_offsets":[0,128]},)"
                                        R"("q.weight_scale":{"dtype":"F32","shape":[4],"data_offsets":[128,144]}})",
                                        filler(144)));
    check_contains(error_of(), "is BF16 [4, 16], expected F8_E4M3 [4, 16]");
  }
  SUBCASE("a scale that is not finite, or of the wrong count") {
    std::vector<uint8_t> inf = scales;
    inf[14] = 0x80, inf[15] = 0x7f;  // +inf
    write("F8_E4M3", q, "F32", "[4]", inf);
    check_contains(error_of(), "key 'q.weight_scale': scale 3 is inf; scales must be finite");
    write("F8_E4M3", q, "F32", "[2,2]", scales);
    check_contains(error_of(), "is F32 [2, 2], expected F32 [4]");
  }
}

TEST_CASE("weights: a random float8 checkpoint spans e4m3's range under scales of each layout") {
  for (const std::vector<uint32_t>& scale_shape : {std::vector<uint32_t>{1}, {200}, {2, 3}}) {
    CAPTURE(scale_shape.size());
    mk::schedule::Schedule s;
    s.tensors.push_back(weight("w", "w.weight", {200, 272}));
    s.tensors.back().dtype = mk::schedule::DType::f8e4m3;
    s.tensors.push_back(weight("w.scale", "w.weight_scale", scale_shape));
    s.tensors.back().dtype = mk::schedule::DType::f32;
    TempDir dir;
    mk::device::write_random_checkpoint(s, dir.path, 7);
    const Checkpoint c = Checkpoint::open(dir.path);
    CHECK_NOTHROW(mk::device::check_weights(s, c));
    CHECK(c.find("w.weight")->stored_dtype == "F8_E4M3");
    CHECK(c.find("w.weight_scale")->stored_dtype == "F32");
    const std::vector<float> q = c.to_float("w.weight"), sc = c.to_float("w.weight_scale");
    REQUIRE(sc.size() == s.tensors[1].elements());
    // Each scale's largest value is e4m3's largest, 448; the dequantized matrix has std ~ 1/sqrt(cols).
    std::vector<float> amax(sc.size(), 0.0f);
    double sq = 0;
    for (uint32_t r = 0; r < 200; ++r)
      for (uint32_t k = 0; k < 272; ++k) {
        const size_t i = sc.size() == 1 ? 0 : sc.size() == 200 ? r : r / 128 * 3 + k / 128;
        amax[i] = std::max(amax[i], std::fabs(q[size_t{r} * 272 + k]));
        sq += double(q[size_t{r} * 272 + k]) * sc[i] * q[size_t{r} * 272 + k] * sc[i];
      }
    for (float m : amax) CHECK(m == 448.0f);
    const double std_dev = std::sqrt(sq / (200.0 * 272));
    CHECK(std_dev == doctest::Approx(1 / std::sqrt(272.0)).epsilon(0.05));
  }
}
