// Checkpoint folders planned from their config.json (dsl/hf_config.cpp): the generated plans of
// real shapes equal the hand-written examples'; tiny configs of each family, with random weights,
// run on the emulator as the independent reference does (any GQA ratio, biases, head_dim 256);
// FP8 configs (compressed-tensors, fp8) give float8 projections with the scales their checkpoints
// store, and run so too; every unsupported config field is refused by name. Also the planner's own choices of split,
// chunks and kv_splits, biases in YAML and the unused-weight refusal.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>

#include "device/cuda_limits.hpp"
#include "device/runtime.hpp"
#include "device/weights.hpp"
#include "dsl/hf_config.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/reference.hpp"
#include "tests/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using mk::schedule::Schedule;

struct TempDir : mk::test::TempDir {
  TempDir() : mk::test::TempDir("mk_test_hf") {}
};

void write_config(const fs::path& dir, const std::string& json) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
}

mk::planner::Plan plan_of(const mk::dsl::ModelGraph& model, uint32_t sms) {
  mk::planner::PlanOptions o;
  o.sm_count = sms;
  return mk::planner::plan(model, o);
}

// The error importing a config.json gives ("" when it imports and plans).
std::string import_error(const std::string& json) {
  TempDir dir;
  write_config(dir.path, json);
  try {
    (void)plan_of(mk::dsl::import_hf_model(dir.path), 16);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string plan_error(const std::string& yaml, uint32_t sms = 16) {
  try {
    (void)plan_of(mk::dsl::parse_string(yaml, "m.yaml"), sms);
  } catch (const mk::dsl::Error& e) {
    return e.what();
  }
  return "";
}

// Llama-3.2-1B's config.json as published on the Hub.
const std::string kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                   "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0",
  "use_cache": true, "vocab_size": 128256})";

// Llama-3.1-8B's, Hub style (a separate lm_head).
const std::string kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000, "eos_token_id": 128001,
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                   "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

// Qwen3-4B's as transformers 5 saves it: rope_parameters and dtype.
const std::string kQwen3_4B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2560, "initializer_range": 0.02,
  "intermediate_size": 9728, "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 40960,
  "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": true, "dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

}  // namespace

TEST_CASE("hf import: the real shapes plan exactly as the hand-written examples at 132 SMs") {
  for (const auto& [example, json] : {std::pair{"llama-3.2-1b", kLlama32_1B}, {"llama-3.1-8b", kLlama31_8B}, {"qwen3-4b", kQwen3_4B}}) {
    CAPTURE(example);
    TempDir dir;
    write_config(dir.path, json);
    const mk::dsl::ModelGraph generated = mk::dsl::import_hf_model(dir.path);
    const mk::dsl::ModelGraph hand = mk::dsl::parse_file(fs::path(MK_SOURCE_DIR) / "examples" / (std::string(example) + ".yaml"));
    const std::vector<uint8_t> a = mk::schedule::serialize(plan_of(generated, 132).schedule);
    const std::vector<uint8_t> b = mk::schedule::serialize(plan_of(hand, 132).schedule);
    CHECK(a.size() == b.size());
    CHECK(a == b);
  }
}

TEST_CASE("hf import: the generated YAML reads back to the same plan, and config.json may be named directly") {
  TempDir dir;
  write_config(dir.path / "Qwen3-4B", kQwen3_4B);
  std::string yaml;
  const mk::dsl::ModelGraph from_folder = mk::dsl::import_hf_model(dir.path / "Qwen3-4B", &yaml);
  CHECK(from_folder.name == "Qwen3-4B");
  // Splits are left to the planner, except the argmax's: a task per chunk of the LM head's logits.
  CHECK(yaml.find("split:") == yaml.rfind("split:"));
  CHECK(yaml.find("out: logits, chunks: 32}") != std::string::npos);
  CHECK(yaml.find("{op: argmax, in: logits, out: next_token, split: 32}") != std::string::npos);
  const mk::dsl::ModelGraph from_file = mk::dsl::import_hf_model(dir.path / "Qwen3-4B" / "config.json");
  const mk::dsl::ModelGraph reread = mk::dsl::parse_string(yaml, "emitted.yaml");
  const auto bytes = [](const mk::dsl::ModelGraph& m) { return mk::schedule::serialize(plan_of(m, 40).schedule); };
  CHECK(bytes(from_folder) == bytes(reread));
  CHECK(bytes(from_file) == bytes(reread));
}

TEST_CASE("hf import: --sample ends the model with a sample op, greedy (argmax's tokens) until mkrun sets it") {
  TempDir dir;
  write_config(dir.path, R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 256, "intermediate_size": 384,
      "num_attention_heads": 10, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 320,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})");
  const mk::dsl::HfConfig config = mk::dsl::read_hf_config(dir.path);
  std::string yaml;
  const mk::dsl::ModelGraph sampled = mk::dsl::import_hf_model(config, &yaml, mk::dsl::NextToken::sample);
  CHECK(yaml.find("{op: sample, in: logits, out: next_token}") != std::string::npos);
  CHECK(yaml.find("op: argmax") == std::string::npos);
  const Schedule s = plan_of(sampled, 6).schedule, a = plan_of(mk::dsl::import_hf_model(config), 6).schedule;
  auto count = [](const Schedule& x, mk::schedule::Opcode op) {
    return std::count_if(x.instructions.begin(), x.instructions.end(), [&](const auto& i) { return i.opcode == uint16_t(op); });
  };
  CHECK(count(s, mk::schedule::Opcode::sample) == 1);
  CHECK(count(s, mk::schedule::Opcode::argmax) == 0);
  CHECK(count(a, mk::schedule::Opcode::argmax) > 1);  // a task per chunk of the logits
  mk::device::write_random_checkpoint(s, dir.path, 21);
  const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(dir.path);
  mk::device::RuntimeOptions opt;
  opt.max_context = 20;
  mk::device::GenerateOptions g;
  g.prompt = {3, 141, 59};
  g.tokens = 12;
  auto on_sample = mk::device::make_emulator_backend(s, ckpt, opt), on_argmax = mk::device::make_emulator_backend(a, ckpt, opt);
  CHECK(mk::device::generate(*on_sample, s, g, opt.max_context).tokens ==
        mk::device::generate(*on_argmax, a, g, opt.max_context).tokens);
}

namespace {

// A tiny config of one family, planned from config.json at `sms` SMs, random weights written
// beside it (`stored`: keys and the safetensors dtype each must have), then the emulator against
// the reference over a prompt and greedy steps.
void check_family(const std::string& json, uint32_t sms, uint64_t seed,
                  const std::vector<std::pair<std::string, std::string>>& stored = {}) {
  TempDir dir;
  write_config(dir.path, json);
  const mk::dsl::ModelGraph model = mk::dsl::import_hf_model(dir.path);
  const Schedule s = plan_of(model, sms).schedule;
  mk::device::write_random_checkpoint(s, dir.path, seed);
  {
    std::ifstream in(dir.path / "config.json");
    const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(kept == json);  // mkweights keeps the folder's config.json
  }
  const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(dir.path);
  // What the config says, read here straight from the JSON (the reference below is built from the
  // importer's own model, so it cannot catch the importer misreading a field).
  const nlohmann::json j = nlohmann::json::parse(json);
  const std::string arch = j["architectures"][0];
  const bool qwen2 = arch == "Qwen2ForCausalLM", qwen3 = arch == "Qwen3ForCausalLM", llama = arch == "LlamaForCausalLM";
  const bool attention_bias = j.value("attention_bias", false), tied = j.value("tie_word_embeddings", false);
  const int heads = j["num_attention_heads"];
  const mk::test::ReferenceConfig rc = mk::test::reference_config(model);
  CHECK(rc.hidden == j["hidden_size"].get<int>());
  CHECK(rc.inter == j["intermediate_size"].get<int>());
  CHECK(rc.heads == heads);
  CHECK(rc.kv_heads == j["num_key_value_heads"].get<int>());
  CHECK(rc.head_dim == j.value("head_dim", j["hidden_size"].get<int>() / heads));
  CHECK(rc.vocab == j["vocab_size"].get<int>());
  CHECK(rc.layers == j["num_hidden_layers"].get<int>());
  CHECK(rc.eps == j["rms_norm_eps"].get<double>());
  CHECK(rc.tie_embeddings == tied);
  CHECK(rc.qk_norm == qwen3);
  CHECK(rc.qkv_bias == (qwen2 || attention_bias));
  CHECK(rc.o_bias == ((llama || qwen3) && attention_bias));
  CHECK((ckpt.find("lm_head.weight") != nullptr) == !tied);
  CHECK((ckpt.find("model.layers.0.self_attn.q_proj.bias") != nullptr) == (qwen2 || attention_bias));
  CHECK((ckpt.find("model.layers.0.self_attn.o_proj.bias") != nullptr) == ((llama || qwen3) && attention_bias));
  CHECK((ckpt.find("model.layers.0.self_attn.q_norm.weight") != nullptr) == qwen3);
  for (const auto& [key, dtype] : stored) {
    CAPTURE(key);
    REQUIRE(ckpt.find(key) != nullptr);
    CHECK(ckpt.find(key)->stored_dtype == dtype);
  }
  const uint32_t vocab = static_cast<uint32_t>(s.tensors[s.logits_tensor].elements());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> prompt(7);
  for (int32_t& t : prompt) t = tok(rng);
  mk::device::RuntimeOptions opt;
  opt.max_context = 12;
  auto backend = mk::device::make_emulator_backend(s, ckpt, opt);
  mk::device::GenerateOptions g;
  g.prompt = prompt;
  g.tokens = 5;
  g.keep_logits = true;
  const mk::device::GenerateResult r = mk::device::generate(*backend, s, g, opt.max_context);
  REQUIRE(r.logits.size() == r.steps);
  std::vector<int32_t> fed = prompt;
  for (uint32_t pos = static_cast<uint32_t>(prompt.size()); pos < r.steps; ++pos) fed.push_back(r.tokens[pos - prompt.size()]);
  mk::test::ReferenceModel ref(ckpt, mk::test::reference_config(model), static_cast<int>(r.steps));
  for (uint32_t pos = 0; pos < r.steps; ++pos) {
    CAPTURE(pos);
    const std::vector<float> want = ref.step(fed[pos]);
    const double err = mk::test::rel_error(r.logits[pos], want);
    CAPTURE(err);
    CHECK(err < 1e-4);
  }
}

}  // namespace

TEST_CASE("hf import: tiny models of each family on the emulator match the reference (logits within 1e-4)") {
  SUBCASE("Llama, Hub style: 6 heads over 2 kv heads (ratio 3), llama3 RoPE, separate lm_head") {
    const std::string json = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 192, "intermediate_size": 256,
      "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 2, "vocab_size": 320,
      "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": false,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}, "torch_dtype": "bfloat16"})";
    for (uint32_t sms : {3u, 132u}) check_family(json, sms, 11);
  }
  SUBCASE("Llama with attention_bias (q, k, v and o biases) and head_dim 256") {
    const std::string json = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 384,
      "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 1, "vocab_size": 256,
      "rms_norm_eps": 1e-06, "attention_bias": true, "tie_word_embeddings": true})";
    check_family(json, 16, 12);
  }
  SUBCASE("Mistral, Hub style: no head_dim (hidden / heads), no GQA, a sliding window it does not reach") {
    const std::string json = R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 128,
      "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 384, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 4096, "hidden_act": "silu",
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
    for (uint32_t sms : {5u, 132u}) check_family(json, sms, 13);
  }
  SUBCASE("Qwen2, transformers 5 style: q/k/v biases, 12 heads over 2 kv heads (ratio 6), tied") {
    const std::string json = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 384,
      "intermediate_size": 512, "num_attention_heads": 12, "num_key_value_heads": 2, "num_hidden_layers": 2,
      "vocab_size": 300, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
      "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 28, "tie_word_embeddings": true,
      "dtype": "bfloat16"})";
    for (uint32_t sms : {7u, 132u}) check_family(json, sms, 14);
  }
  SUBCASE("Qwen2: 14 heads over 2 kv heads (ratio 7)") {
    const std::string json = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 448, "intermediate_size": 256,
      "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 200,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false})";
    check_family(json, 9, 15);
  }
  SUBCASE("Qwen3: q/k norm, head_dim given apart from hidden / heads, 10 heads over 2 kv heads (ratio 5)") {
    const std::string json = R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 256, "intermediate_size": 384,
      "num_attention_heads": 10, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 320,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
      "use_sliding_window": false, "sliding_window": null})";
    for (uint32_t sms : {4u, 132u}) check_family(json, sms, 16);
  }
}

TEST_CASE("hf import: every unsupported config field is refused by name") {
  const std::string base = R"("hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
    "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512)";
  auto with = [&](const std::string& arch, const std::string& extra) {
    return "{\"architectures\": [\"" + arch + "\"], " + base + (extra.empty() ? "" : ", " + extra) + "}";
  };
  CHECK(import_error(with("LlamaForCausalLM", "")) == "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("MixtralForCausalLM", "\"num_local_experts\": 8"), "'architectures' is 'MixtralForCausalLM'; supported: LlamaForCausalLM"},
      {with("LlamaForCausalLM", "\"num_local_experts\": 8"), "'num_local_experts' is 8: mixture-of-experts models are not supported"},
      {with("Qwen2ForCausalLM", "\"num_experts\": 60"), "'num_experts' is 60: mixture-of-experts"},
      {with("LlamaForCausalLM", "\"hidden_act\": \"gelu\""), "'hidden_act' is 'gelu'; only silu is supported"},
      {with("LlamaForCausalLM", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"),
       "'rope_scaling.rope_type' is 'yarn'; supported rope types: default, llama3"},
      {with("LlamaForCausalLM", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}"), "'rope_scaling.type' is 'linear'"},
      {with("Qwen3ForCausalLM", "\"rope_parameters\": {\"rope_type\": \"dynamic\", \"rope_theta\": 10000}"),
       "'rope_parameters.rope_type' is 'dynamic'"},
      {with("LlamaForCausalLM", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}"),
       "rope type llama3 needs 'low_freq_factor'"},
      {with("Qwen2ForCausalLM", "\"use_sliding_window\": true, \"sliding_window\": 4096"),
       "'use_sliding_window' is true: sliding-window attention is not supported"},
      {with("Qwen3ForCausalLM", "\"layer_types\": [\"full_attention\", \"sliding_attention\"]"),
       "'layer_types' holds \"sliding_attention\": only full_attention layers are supported"},
      {with("LlamaForCausalLM", "\"mlp_bias\": true"), "'mlp_bias' is true"},
      {with("LlamaForCausalLM", "\"quantization_config\": {\"quant_method\": \"gptq\"}"),
       "'quantization_config.quant_method' is 'gptq'; supported: compressed-tensors (float8 weights), fp8"},
      {with("LlamaForCausalLM", "\"torch_dtype\": \"int8\""), "'torch_dtype' is 'int8'; supported: bfloat16, float16, float32"},
      {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512, \"num_attention_heads\": 8, "
       "\"num_key_value_heads\": 3, \"num_hidden_layers\": 2, \"vocab_size\": 512}",
       "'num_key_value_heads' is 3, which does not divide num_attention_heads = 8"},
      {with("LlamaForCausalLM", "\"head_dim\": 512"), "'head_dim' gives head_dim 512; supported: a multiple of 8, at most 256"},
      {"{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": 512, \"num_attention_heads\": 8, "
       "\"num_hidden_layers\": 2, \"vocab_size\": 512}",
       "missing 'hidden_size'"},
      {with("LlamaForCausalLM", "\"rms_norm_eps\": \"small\""), "'rms_norm_eps' must be a number"},
      {"{\"model_type\": \"gemma\", " + base + "}", "'model_type' is 'gemma'; supported: llama, mistral, qwen2, qwen3"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"architectures\": ", "not valid JSON"},
      // The shared JSON checks (common/checked_json.hpp): 200,000 nested brackets crashed the reader.
      {"{\"architectures\": " + std::string(200000, '[') + std::string(200000, ']') + "}", "JSON nested deeper than 64 levels"},
      {with("LlamaForCausalLM", "\"vocab_size\": 7"), "JSON key 'vocab_size' given twice in one object"},
  };
  for (const auto& [json, message] : cases) {
    CAPTURE(json.substr(0, 200));
    const std::string e = import_error(json);
    CAPTURE(e);
    CHECK(e.find("config.json: ") != std::string::npos);
    CHECK(e.find(message) != std::string::npos);
  }
  TempDir empty;
  CHECK_THROWS_WITH_AS((void)mk::dsl::import_hf_model(empty.path), doctest::Contains("no config.json here"), mk::dsl::Error);
}

namespace {

// RedHatAI's Llama-3.x *-FP8-dynamic quantization_config as published: compressed-tensors, float8
// weights with a scale per output channel, activations quantized at run time, lm_head left out.
const std::string kCompressedTensorsFp8 = R"({"config_groups": {"group_0": {"input_activations": {"dynamic": true,
    "num_bits": 8, "strategy": "token", "symmetric": true, "type": "float"}, "output_activations": null,
    "targets": ["Linear"], "weights": {"dynamic": false, "num_bits": 8, "strategy": "channel", "symmetric": true,
    "type": "float", "group_size": null, "block_structure": null}}}, "format": "float-quantized", "ignore": ["lm_head"],
    "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"})";

// Qwen/Qwen3-4B-FP8's: transformers' fp8, 128 x 128 blocks.
const std::string kQwenFp8 =
    R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})";

// A tiny config.json of `arch` (2 layers, a separate lm_head unless tied) with `quant` as its
// quantization_config.
std::string fp8_config(const std::string& quant, bool tied = false, const std::string& arch = "LlamaForCausalLM") {
  return R"({"architectures": [")" + arch + R"("], "hidden_size": 256, "intermediate_size": 384,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 320,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": )" +
         (tied ? "true" : "false") + R"(, "torch_dtype": "bfloat16", "quantization_config": )" + quant + "}";
}

// compressed-tensors' quantization_config with its one group's weights as `weights`, `rest` (more
// fields, each with a trailing comma) at its top and `group` (the same) in the group.
std::string compressed_tensors(const std::string& weights, const std::string& rest = R"("ignore": ["lm_head"],)",
                               const std::string& group = R"("input_activations": {"dynamic": true, "num_bits": 8},)") {
  return R"({"config_groups": {"group_0": {"targets": ["Linear"], )" + group + R"( "weights": )" + weights + "}}, " + rest +
         R"( "format": "float-quantized", "quant_method": "compressed-tensors", "quantization_status": "compressed"})";
}
const std::string kChannel = R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false})";

bool holds(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Imported {
  mk::dsl::ModelGraph model;
  std::string yaml;
};
Imported import_json(const std::string& json) {
  TempDir dir;
  write_config(dir.path, json);
  Imported out;
  out.model = mk::dsl::import_hf_model(dir.path, &out.yaml);
  return out;
}

// The projections of a layer: weight name, module after "model.layers.N.".
const std::vector<std::pair<std::string, std::string>> kProjections = {
    {"wq", "self_attn.q_proj"}, {"wk", "self_attn.k_proj"}, {"wv", "self_attn.v_proj"}, {"wo", "self_attn.o_proj"},
    {"wg", "mlp.gate_proj"},    {"wu", "mlp.up_proj"},      {"wd", "mlp.down_proj"}};

// Weight `name` of the parsed model: float8 with scales `scale_key` of `layout`, or bf16 without
// any (scale_key empty).
void check_weight(const mk::dsl::ModelGraph& m, const std::string& name, const std::string& scale_key,
                  const std::string& layout = "") {
  CAPTURE(name);
  const mk::dsl::TensorDecl* t = m.find_tensor(name);
  REQUIRE(t != nullptr);
  CHECK(t->kind == mk::dsl::TensorKind::weight);
  CHECK(t->dtype == (scale_key.empty() ? "bf16" : "f8e4m3"));
  CHECK(t->scale_key == scale_key);
  CHECK(t->scale_layout == (scale_key.empty() ? "" : layout));
}

// Every projection of both layers: float8 with "<module>.<suffix>" scales of `layout`, but those
// of `bf16` (weight names).
void check_projections(const mk::dsl::ModelGraph& m, const std::string& suffix, const std::string& layout,
                       const std::vector<std::string>& bf16 = {}) {
  for (int layer = 0; layer < 2; ++layer)
    for (const auto& [weight, module] : kProjections) {
      const bool kept = std::find(bf16.begin(), bf16.end(), weight) != bf16.end();
      const std::string key = "model.layers." + std::to_string(layer) + "." + module + "." + suffix;
      check_weight(m, weight + std::to_string(layer), kept ? "" : key, layout);
    }
}

// The generated declaration of projection `weight` (e.g. "wq"), float8 with scales of `layout`.
std::string fp8_line(const std::string& weight, const std::string& module, const std::string& shape,
                     const std::string& suffix, const std::string& layout) {
  const std::string key = "model.layers.{layer}." + module;
  return "        " + weight + "{layer}: {key: \"" + key + ".weight\", shape: [" + shape + "], dtype: f8e4m3, scale: {key: \"" +
         key + "." + suffix + "\", layout: " + layout + "}}\n";
}

}  // namespace

TEST_CASE("hf import: compressed-tensors FP8 configs (RedHatAI *-FP8) give float8 projections scaled by weight_scale") {
  SUBCASE("per channel, as published: scales by row; embeddings, norms and the ignored lm_head stay bf16") {
    const Imported im = import_json(fp8_config(kCompressedTensorsFp8));
    CHECK(holds(im.yaml, fp8_line("wq", "self_attn.q_proj", "heads*head_dim, hidden", "weight_scale", "row")));
    CHECK(holds(im.yaml, fp8_line("wk", "self_attn.k_proj", "kv_heads*head_dim, hidden", "weight_scale", "row")));
    CHECK(holds(im.yaml, fp8_line("wo", "self_attn.o_proj", "hidden, heads*head_dim", "weight_scale", "row")));
    CHECK(holds(im.yaml, fp8_line("wd", "mlp.down_proj", "hidden, inter", "weight_scale", "row")));
    CHECK(holds(im.yaml, "  lm_head: {key: lm_head.weight, shape: [vocab, hidden]}\n"));
    CHECK(holds(im.yaml, "  embed: {key: model.embed_tokens.weight, shape: [vocab, hidden]}\n"));
    check_projections(im.model, "weight_scale", "row");
    for (const char* bf16 : {"embed", "final_norm", "lm_head", "attn_norm0", "mlp_norm1"}) check_weight(im.model, bf16, "");
  }
  SUBCASE("per tensor: one scale a weight") {
    const std::string tensor = R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false})";
    const Imported im = import_json(fp8_config(compressed_tensors(tensor)));
    CHECK(holds(im.yaml, fp8_line("wu", "mlp.up_proj", "inter, hidden", "weight_scale", "tensor")));
    check_projections(im.model, "weight_scale", "tensor");
  }
  SUBCASE("128 x 128 blocks; no input_activations at all (weight-only)") {
    const std::string block = R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})";
    const std::string json = R"({"config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + block +
                             R"(}}, "ignore": ["lm_head"], "format": "float-quantized", "quant_method": "compressed-tensors"})";
    const Imported im = import_json(fp8_config(json));
    CHECK(holds(im.yaml, fp8_line("wg", "mlp.gate_proj", "inter, hidden", "weight_scale", "block128")));
    check_projections(im.model, "weight_scale", "block128");
  }
  SUBCASE("Qwen2: the q/k/v biases stay bf16") {
    const Imported im = import_json(fp8_config(kCompressedTensorsFp8, true, "Qwen2ForCausalLM"));
    check_projections(im.model, "weight_scale", "row");
    for (const char* bias : {"bq0", "bk0", "bv1"}) check_weight(im.model, bias, "");
  }
  SUBCASE("without quantization_config the YAML names no dtype or scale (as before)") {
    const Imported im = import_json(kLlama31_8B);
    CHECK(!holds(im.yaml, "dtype: f8e4m3"));
    CHECK(!holds(im.yaml, "scale:"));
    CHECK(!holds(im.yaml, "float8"));
    CHECK(holds(im.yaml, "        wq{layer}: {key: \"model.layers.{layer}.self_attn.q_proj.weight\", "
                         "shape: [heads*head_dim, hidden]}\n"));
    check_weight(im.model, "wq0", "");
  }
}

TEST_CASE("hf import: fp8 configs (Qwen *-FP8, DeepSeek style) give 128 x 128 blocks scaled by weight_scale_inv") {
  SUBCASE("Qwen3-4B-FP8 as published: tied, so no lm_head; q/k norms bf16") {
    std::string json = kQwen3_4B;
    json.insert(json.rfind('}'), ", \"quantization_config\": " + kQwenFp8);
    const Imported im = import_json(json);
    CHECK(holds(im.yaml, fp8_line("wq", "self_attn.q_proj", "heads*head_dim, hidden", "weight_scale_inv", "block128")));
    CHECK(!holds(im.yaml, "lm_head"));
    for (int layer : {0, 35}) {
      const std::string l = std::to_string(layer);
      check_weight(im.model, "wv" + l, "model.layers." + l + ".self_attn.v_proj.weight_scale_inv", "block128");
      check_weight(im.model, "wd" + l, "model.layers." + l + ".mlp.down_proj.weight_scale_inv", "block128");
      check_weight(im.model, "q_norm" + l, "");
    }
    check_weight(im.model, "embed", "");
  }
  SUBCASE("untied without modules_to_not_convert: the LM head stays bf16 (transformers' default skip)") {
    const Imported im = import_json(fp8_config(kQwenFp8));
    check_projections(im.model, "weight_scale_inv", "block128");
    check_weight(im.model, "lm_head", "");
    CHECK(holds(im.yaml, "  lm_head: {key: lm_head.weight, shape: [vocab, hidden]}\n"));
  }
  SUBCASE("without weight_block_size: one weight_scale a tensor (AutoFP8's)") {
    const Imported im = import_json(fp8_config(R"({"activation_scheme": "dynamic", "quant_method": "fp8"})"));
    CHECK(holds(im.yaml, fp8_line("wv", "self_attn.v_proj", "kv_heads*head_dim, hidden", "weight_scale", "tensor")));
    check_projections(im.model, "weight_scale", "tensor");
  }
}

TEST_CASE("hf import: FP8 ignore lists leave what they name bf16 (names, re: regexes); the LM head is float8 unless ignored") {
  SUBCASE("compressed-tensors: a name per layer, a regex for every layer's down_proj, lm_head") {
    const std::string ignore = R"("ignore": ["lm_head", "model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.o_proj",
                                             "re:.*mlp\\.down_proj$"],)";
    const Imported im = import_json(fp8_config(compressed_tensors(kChannel, ignore)));
    check_projections(im.model, "weight_scale", "row", {"wo", "wd"});
    check_weight(im.model, "lm_head", "");
    CHECK(holds(im.yaml, "        wo{layer}: {key: \"model.layers.{layer}.self_attn.o_proj.weight\", "
                         "shape: [hidden, heads*head_dim]}\n"));
  }
  SUBCASE("compressed-tensors: nothing ignored, so the untied LM head is float8 with the same layout") {
    const Imported im = import_json(fp8_config(compressed_tensors(kChannel, R"("ignore": [],)")));
    check_projections(im.model, "weight_scale", "row");
    check_weight(im.model, "lm_head", "lm_head.weight_scale", "row");
    CHECK(holds(im.yaml, "  lm_head: {key: lm_head.weight, shape: [vocab, hidden], dtype: f8e4m3, scale: {key: "
                       "\"lm_head.weight_scale\", layout: row}}\n"));
  }
  SUBCASE("compressed-tensors: a regex naming the LM head") {
    const Imported im = import_json(fp8_config(compressed_tensors(kChannel, R"("ignore": ["re:.*lm_head"],)")));
    check_weight(im.model, "lm_head", "");
    check_projections(im.model, "weight_scale", "row");
  }
  SUBCASE("fp8: modules_to_not_convert given without lm_head makes it float8; a plain name matches as a suffix") {
    const Imported im = import_json(fp8_config(
        R"({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": ["mlp.down_proj"]})"));
    check_projections(im.model, "weight_scale_inv", "block128", {"wd"});
    check_weight(im.model, "lm_head", "lm_head.weight_scale_inv", "block128");
  }
  SUBCASE("fp8: ignored_layers (AutoFP8) with exact names") {
    const Imported im = import_json(fp8_config(R"({"quant_method": "fp8",
        "ignored_layers": ["lm_head", "model.layers.0.mlp.gate_proj", "model.layers.1.mlp.gate_proj"]})"));
    check_projections(im.model, "weight_scale", "tensor", {"wg"});
    check_weight(im.model, "lm_head", "");
  }
}

TEST_CASE("hf import: tiny FP8 models of each format on the emulator match the reference (which dequantizes on its own)") {
  const std::string q = "model.layers.0.self_attn.q_proj.", down = "model.layers.1.mlp.down_proj.";
  SUBCASE("compressed-tensors per channel, the LM head float8 too") {
    for (uint32_t sms : {3u, 132u})
      check_family(fp8_config(compressed_tensors(kChannel, R"("ignore": [],)")), sms, 31,
                   {{q + "weight", "F8_E4M3"}, {q + "weight_scale", "F32"}, {"lm_head.weight", "F8_E4M3"},
                    {"lm_head.weight_scale", "F32"}, {"model.embed_tokens.weight", "BF16"}});
  }
  SUBCASE("compressed-tensors per tensor, down_proj left bf16") {
    const std::string tensor = R"({"num_bits": 8, "type": "float", "strategy": "tensor"})";
    check_family(fp8_config(compressed_tensors(tensor, R"("ignore": ["lm_head", "re:.*down_proj"],)")), 7, 32,
                 {{q + "weight", "F8_E4M3"}, {down + "weight", "BF16"}, {"lm_head.weight", "BF16"}});
  }
  SUBCASE("fp8 128 x 128 blocks (weight_scale_inv), Qwen3, tied") {
    check_family(fp8_config(kQwenFp8, true, "Qwen3ForCausalLM"), 5, 40,
                 {{down + "weight", "F8_E4M3"}, {down + "weight_scale_inv", "F32"},
                  {"model.layers.0.self_attn.q_norm.weight", "BF16"}});
  }
  SUBCASE("fp8 blocks, Qwen2 (biases bf16), the LM head float8 (modules_to_not_convert given)") {
    check_family(fp8_config(R"({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": []})", false,
                            "Qwen2ForCausalLM"),
                 9, 34, {{q + "weight", "F8_E4M3"}, {q + "bias", "BF16"}, {"lm_head.weight_scale_inv", "F32"}});
  }
}

TEST_CASE("hf import: FP8 configs the toolchain cannot run are refused by the field that says so") {
  const std::string group = "'quantization_config.config_groups.group_0.";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fp8_config(R"({"quant_method": "awq", "bits": 4})"),
       "'quantization_config.quant_method' is 'awq'; supported: compressed-tensors (float8 weights), fp8"},
      {fp8_config(R"({"bits": 4})"), "missing 'quantization_config.quant_method'"},
      {fp8_config(R"("fp8")"), "'quantization_config' must be an object, found \"fp8\""},
      // fp8
      {fp8_config(R"({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]})"),
       "'quantization_config.fmt' is 'e5m2'; supported: e4m3"},
      {fp8_config(R"({"quant_method": "fp8", "activation_scheme": "static"})"),
       "'quantization_config.activation_scheme' is 'static': static activation scales (float8 activations) are not supported"},
      {fp8_config(R"({"quant_method": "fp8", "weight_block_size": [64, 64]})"),
       "'quantization_config.weight_block_size' is [64,64]; supported: [128, 128]"},
      {fp8_config(R"({"quant_method": "fp8", "modules_to_not_convert": []})", true),
       "'quantization_config.modules_to_not_convert' does not name lm_head, but tie_word_embeddings is true"},
      {fp8_config(R"({"quant_method": "fp8", "modules_to_not_convert": "lm_head"})"),
       "'quantization_config.modules_to_not_convert' must be a list of module names, found \"lm_head\""},
      // compressed-tensors
      {fp8_config(compressed_tensors(kChannel, "", R"("input_activations": {"dynamic": false, "num_bits": 8},)")),
       group + "input_activations.dynamic' is false: static activation scales (float8 activations) are not supported"},
      {fp8_config(compressed_tensors(R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128})")),
       group + "weights.strategy' is 'group'; supported: channel, tensor, block (128 x 128)"},
      {fp8_config(compressed_tensors(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 64]})")),
       group + "weights.block_structure' is [64,64]; supported: [128, 128]"},
      {fp8_config(compressed_tensors(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})")),
       group + "weights.num_bits' is 4; supported: 8 (float8 e4m3)"},
      {fp8_config(compressed_tensors(R"({"num_bits": 8, "type": "int", "strategy": "channel"})")),
       group + "weights.type' is 'int'; supported: float"},
      {fp8_config(compressed_tensors(R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": false})")),
       group + "weights.symmetric' is false"},
      {fp8_config(compressed_tensors(kChannel, R"("ignore": ["lm_head", "model.layers.0.mlp.down_proj"],)")),
       "'quantization_config.ignore' holds 'model.layers.0.mlp.down_proj', which leaves model.layers.0.mlp.down_proj "
       "unquantized but not model.layers.1.mlp.down_proj"},
      {fp8_config(compressed_tensors(kChannel, R"("ignore": ["re:.*layers\\.1\\.self_attn"],)")),
       "'quantization_config.ignore' holds 're:.*layers\\.1\\.self_attn', which leaves model.layers.1.self_attn.q_proj "
       "unquantized but not model.layers.0.self_attn.q_proj"},
      {fp8_config(compressed_tensors(kChannel, R"("ignore": ["re:(lm_head"],)")),
       "'quantization_config.ignore' holds 're:(lm_head', which is not a regular expression"},
      {fp8_config(std::string(kCompressedTensorsFp8).replace(kCompressedTensorsFp8.find("[\"lm_head\"]"), 11, "[]"), true),
       "'quantization_config.ignore' does not name lm_head, but tie_word_embeddings is true: the tied table is read in bf16"},
      {fp8_config(compressed_tensors(kChannel, R"("ignore": ["lm_head"], "kv_cache_scheme": {"num_bits": 8, "type": "float"},)")),
       "'quantization_config.kv_cache_scheme' is set: a quantized KV cache is not supported"},
      {fp8_config(compressed_tensors(kChannel, "", R"("output_activations": {"num_bits": 8, "type": "float"},)")),
       group + "output_activations' is set"},
      {fp8_config(compressed_tensors(kChannel, R"("ignore": ["lm_head"], "sparsity_config": {"format": "sparse-24-bitmask"},)")),
       "'quantization_config.sparsity_config' is {\"format\":\"sparse-24-bitmask\"}: sparse checkpoints are not supported"},
      {fp8_config(R"({"config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + kChannel +
                  R"(}}, "format": "naive-quantized", "quant_method": "compressed-tensors"})"),
       "'quantization_config.format' is 'naive-quantized'; supported: float-quantized"},
      {fp8_config(R"({"config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + kChannel +
                  R"(}}, "format": "float-quantized", "quantization_status": "frozen", "quant_method": "compressed-tensors"})"),
       "'quantization_config.quantization_status' is 'frozen'; supported: compressed"},
      {fp8_config(R"({"config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + kChannel +
                  R"(}, "group_1": {"targets": ["Linear"], "weights": )" + kChannel +
                  R"(}}, "format": "float-quantized", "quant_method": "compressed-tensors"})"),
       "'quantization_config.config_groups' holds 2 groups; supported: exactly one"},
      {fp8_config(R"({"config_groups": {"group_0": {"targets": ["re:.*q_proj"], "weights": )" + kChannel +
                  R"(}}, "format": "float-quantized", "quant_method": "compressed-tensors"})"),
       group + "targets' is [\"re:.*q_proj\"]; supported: a list holding \"Linear\""},
      {fp8_config(R"({"config_groups": {"group_0": {"targets": ["Linear"]}}, "format": "float-quantized",
                      "quant_method": "compressed-tensors"})"),
       group + "weights' is missing"},
  };
  for (const auto& [json, message] : cases) {
    CAPTURE(json);
    const std::string e = import_error(json);
    CAPTURE(e);
    CHECK(e.find("config.json: ") != std::string::npos);
    CHECK(e.find(message) != std::string::npos);
  }
}

TEST_CASE("hf import: the planned values mkrun checks are read from either style of config.json") {
  TempDir dir;
  write_config(dir.path, kLlama32_1B);
  mk::dsl::HfPlannedValues v = mk::dsl::read_hf_planned_values(dir.path / "config.json");
  CHECK((v.eps && *v.eps == 1e-5));
  CHECK((v.rope_theta && *v.rope_theta == 500000));
  CHECK((v.rope_scaling && *v.rope_scaling == "llama3"));
  CHECK((v.rope_factor && *v.rope_factor == 32));
  CHECK((v.vocab && *v.vocab == 128256));
  CHECK((v.tie_embeddings && *v.tie_embeddings == true));
  CHECK(!v.sliding_window);
  write_config(dir.path, kQwen3_4B);
  v = mk::dsl::read_hf_planned_values(dir.path / "config.json");
  CHECK((v.rope_theta && *v.rope_theta == 1e6));
  CHECK((v.rope_scaling && *v.rope_scaling == "none"));
  write_config(dir.path, R"({"mk_generated": true, "seed": 3})");
  v = mk::dsl::read_hf_planned_values(dir.path / "config.json");
  CHECK(!v.eps);
  CHECK(!v.rope_theta);
  CHECK(!v.vocab);
}

namespace {

// A small model in YAML whose matvec and attention fields can be varied.
std::string tiny_yaml(const std::string& qkv_extra, const std::string& attn_extra, const std::string& extra_weights = "",
                      int heads = 8, int kv_heads = 2, int head_dim = 32) {
  return "model: t\n"
         "config: {hidden: 256, inter: 512, heads: " + std::to_string(heads) + ", kv_heads: " + std::to_string(kv_heads) +
         ", head_dim: " + std::to_string(head_dim) + ", vocab: 512, eps: 1.0e-5, rope: {theta: 10000}}\n"
         "weights:\n"
         "  embed: {key: e, shape: [vocab, hidden]}\n"
         "  n1: {key: n1, shape: [hidden]}\n"
         "  wq: {key: wq, shape: [heads*head_dim, hidden]}\n"
         "  wk: {key: wk, shape: [kv_heads*head_dim, hidden]}\n"
         "  wv: {key: wv, shape: [kv_heads*head_dim, hidden]}\n"
         "  bq: {key: bq, shape: [heads*head_dim]}\n"
         "  bk: {key: bk, shape: [kv_heads*head_dim]}\n"
         "  bv: {key: bv, shape: [kv_heads*head_dim]}\n"
         "  wo: {key: wo, shape: [hidden, heads*head_dim]}\n" +
         extra_weights +
         "kv_caches:\n"
         "  k: {shape: [kv_heads, head_dim]}\n"
         "  v: {shape: [kv_heads, head_dim]}\n"
         "ops:\n"
         "  - {op: embed, table: embed, out: x}\n"
         "  - {op: matvec, in: x, norm: n1, weight: [wq, wk, wv], out: qkv" + qkv_extra + "}\n"
         "  - {op: attention, qkv: qkv, k_cache: k, v_cache: v, out: part" + attn_extra + "}\n"
         "  - {op: attn_reduce, in: part, out: attn}\n"
         "  - {op: matvec, in: attn, weight: wo, residual: x, out: h}\n"
         "  - {op: matvec, in: h, weight: embed, out: logits}\n"
         "  - {op: argmax, in: logits, out: tok}\n";
}

const mk::planner::OpInfo& op_named(const mk::planner::Plan& p, const std::string& name) {
  for (const mk::planner::OpInfo& op : p.program.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + name);
}

}  // namespace

TEST_CASE("planner: split, chunks and kv_splits left out are chosen from the SM count and the op's shape") {
  const std::string yaml = tiny_yaml(", bias: [bq, bk, bv]", "");
  const mk::dsl::ModelGraph m = mk::dsl::parse_string(yaml, "m.yaml");
  for (uint32_t sms : {1u, 6u, 40u, 132u}) {
    CAPTURE(sms);
    const mk::planner::Plan p = plan_of(m, sms);
    CHECK(op_named(p, "x").split == std::min(16u, sms));                    // embed: at most 16 tasks
    CHECK(op_named(p, "qkv").split == std::min(384u, sms));                 // matvec: one task per SM
    CHECK(op_named(p, "qkv").chunks == 12u);                                // one per head (8 + 2 + 2)
    const uint32_t kv_splits = std::clamp(sms / 2, 1u, 64u);
    CHECK(op_named(p, "part").units == 2 * kv_splits);                     // kv_splits: about one unit per SM
    CHECK(op_named(p, "part").split == std::min(2 * kv_splits, sms));
    CHECK(op_named(p, "part").chunks == 2u);                                // per kv head
    CHECK(op_named(p, "attn").split == std::min(8u, sms));                  // attn_reduce: a head per task
    CHECK(op_named(p, "h").chunks == 1u);
    CHECK(op_named(p, "tok").split == 1u);                                 // argmax: 1024 logits a task at least
  }
  // Written values win.
  const mk::planner::Plan p =
      plan_of(mk::dsl::parse_string(tiny_yaml(", bias: [bq, bk, bv], split: 5, chunks: 3", ", kv_splits: 3, split: 2, chunks: 1"), "m.yaml"), 132);
  CHECK(op_named(p, "qkv").split == 5u);
  CHECK(op_named(p, "qkv").chunks == 3u);
  CHECK(op_named(p, "part").units == 6u);
  CHECK(op_named(p, "part").split == 2u);
  CHECK(op_named(p, "part").chunks == 1u);
}

TEST_CASE("planner: a declared weight that no op reads is refused at its declaration") {
  // The biases of tiny_yaml are declared; without `bias:` nothing reads them.
  const std::string e = plan_error(tiny_yaml("", ""));
  CHECK(e.find("m.yaml:9:3: weight 'bq' (key 'bq') is declared but no op reads it") != std::string::npos);
  CHECK(plan_error(tiny_yaml(", bias: [bq, bk, bv]", "")) == "");
}

TEST_CASE("planner: matvec biases are checked against their weights") {
  CHECK(plan_error(tiny_yaml(", bias: [bq, bk]", "")).find("bias has 2 entries; expected one per weight (3)") != std::string::npos);
  CHECK(plan_error(tiny_yaml(", bias: [bq, bv, bk]", "", "", 8, 2, 32)) == "");  // bk and bv have the same shape
  CHECK(plan_error(tiny_yaml(", bias: [bk, bq, bv]", ""))
            .find("shape mismatch: bias 'bk' must be a 1-D weight of 256 elements, the rows of weight 'wq'") != std::string::npos);
  CHECK(plan_error(tiny_yaml(", bias: [bq, bk, undefined_b]", "")).find("undefined tensor 'undefined_b'") != std::string::npos);
  const std::string silu = tiny_yaml(", bias: [bq, bk, bv]", "", "  wg: {key: wg, shape: [512, hidden]}\n  wu: {key: wu, shape: [512, hidden]}\n  bg: {key: bg, shape: [512]}\n  bu: {key: bu, shape: [512]}\n") +
                           "  - {op: matvec, in: h, weight: [wg, wu], act: silu_mul, bias: [bg, bu], out: a}\n"
                           "  - {op: matvec, in: a, weight: embed, out: logits2}\n";
  CHECK(plan_error(silu).find("bias is applied only without act") != std::string::npos);
}

TEST_CASE("planner: any number of q heads per kv head, head_dim up to 256") {
  for (auto [heads, kv] : {std::pair{6, 2}, {12, 2}, {14, 2}, {5, 1}, {9, 3}, {16, 1}, {32, 2}}) {
    CAPTURE(heads);
    CAPTURE(kv);
    CHECK(plan_error(tiny_yaml(", bias: [bq, bk, bv]", "", "", heads, kv, 32)) == "");
  }
  CHECK(plan_error(tiny_yaml(", bias: [bq, bk, bv]", "", "", 2, 1, 256)) == "");
  CHECK(plan_error(tiny_yaml(", bias: [bq, bk, bv]", "", "", 1, 1, 264)).find("head_dim must be a multiple of 8, at most 256") !=
        std::string::npos);
}

TEST_CASE("CUDA backend limits: more than 8 q heads per kv head, head_dim above 128 or not a multiple of 16 are refused before any allocation") {
  auto schedule_of = [](int heads, int kv, int hd) {
    return plan_of(mk::dsl::parse_string(tiny_yaml(", bias: [bq, bk, bv]", "", "", heads, kv, hd), "m.yaml"), 8).schedule;
  };
  for (auto [heads, kv, hd] : {std::tuple{6, 2, 32}, {12, 2, 128}, {14, 2, 64}, {8, 1, 128}})
    CHECK_NOTHROW(mk::device::check_cuda_limits(schedule_of(heads, kv, hd)));
  CHECK_THROWS_WITH(mk::device::check_cuda_limits(schedule_of(9, 1, 32)),
                    doctest::Contains("this schedule has 9 heads over 1 kv heads (9 per kv head), head_dim 32 (run it with --backend emulator)"));
  CHECK_THROWS_WITH(mk::device::check_cuda_limits(schedule_of(2, 1, 256)), doctest::Contains("a multiple of 16, at most 128"));
  CHECK_THROWS_WITH(mk::device::check_cuda_limits(schedule_of(2, 1, 40)), doctest::Contains("head_dim 40"));
}

namespace {

// Rewrites a bf16 checkpoint folder's model.safetensors with every tensor in F32 or F16.
void rewrite_as(const mk::device::Checkpoint& bf16, const fs::path& file, bool f32) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& [key, t] : bf16.tensors()) {
    const std::vector<float> v = bf16.to_float(key);
    const uint64_t begin = data.size();
    for (float x : v) {
      uint8_t b[4];
      if (f32) {
        std::memcpy(b, &x, 4);
        data.insert(data.end(), b, b + 4);
      } else {
        const _Float16 h = static_cast<_Float16>(x);
        std::memcpy(b, &h, 2);
        data.insert(data.end(), b, b + 2);
      }
    }
    header[key] = {{"dtype", f32 ? "F32" : "F16"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << text;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::vector<std::vector<float>> run_logits(const Schedule& s, const mk::device::Checkpoint& ckpt, const std::vector<int32_t>& prompt) {
  mk::device::RuntimeOptions opt;
  opt.max_context = static_cast<uint32_t>(prompt.size()) + 3;
  auto backend = mk::device::make_emulator_backend(s, ckpt, opt);
  mk::device::GenerateOptions g;
  g.prompt = prompt;
  g.tokens = 4;
  g.keep_logits = true;
  return mk::device::generate(*backend, s, g, opt.max_context).logits;
}

}  // namespace

TEST_CASE("hf import: F32 and F16 checkpoints run as their bf16 conversion does") {
  TempDir dir;
  write_config(dir.path, R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 200,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false, "torch_dtype": "float32"})");
  const Schedule s = plan_of(mk::dsl::import_hf_model(dir.path), 6).schedule;
  mk::device::write_random_checkpoint(s, dir.path, 21);
  const std::vector<int32_t> prompt = {5, 190, 33, 7, 128};
  std::vector<std::vector<float>> want;
  {
    const mk::device::Checkpoint bf16 = mk::device::Checkpoint::open(dir.path);
    want = run_logits(s, bf16, prompt);
    rewrite_as(bf16, dir.path / "model.f32", true);
    rewrite_as(bf16, dir.path / "model.f16", false);
  }
  // bf16 values are exact in f32: the same logits, bit for bit.
  fs::rename(dir.path / "model.f32", dir.path / "model.safetensors");
  {
    const mk::device::Checkpoint f32 = mk::device::Checkpoint::open(dir.path);
    REQUIRE(f32.find("model.embed_tokens.weight"));
    CHECK(f32.find("model.embed_tokens.weight")->stored_dtype == "F32");
    CHECK(run_logits(s, f32, prompt) == want);
  }
  // In f16 they are exact too, but for the few below f16's normal range (rounded there): close.
  fs::rename(dir.path / "model.f16", dir.path / "model.safetensors");
  const mk::device::Checkpoint f16 = mk::device::Checkpoint::open(dir.path);
  REQUIRE(f16.find("model.layers.0.self_attn.q_proj.bias"));
  CHECK(f16.find("model.layers.0.self_attn.q_proj.bias")->stored_dtype == "F16");
  const std::vector<std::vector<float>> got = run_logits(s, f16, prompt);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(mk::test::rel_error(got[i], want[i]) < 1e-5);
  }
}
