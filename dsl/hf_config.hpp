// Hugging Face config.json -> a model YAML. The families a dense decode step covers:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM
// (per-head q/k RMSNorm). config.json is read as published on the Hub (rope_theta,
// rope_scaling, torch_dtype, head_dim left out) and as transformers 5 saves it (rope_parameters,
// dtype). FP8 checkpoints are read as published: quantization_config of compressed-tensors
// (float-quantized, RedHat / neuralmagic *-FP8) or of transformers' fp8 (Qwen *-FP8, DeepSeek
// style), their projections float8 e4m3 with f32 scales beside them. Anything the toolchain cannot
// run (mixture of experts, a sliding window in use, a rope type other than default and llama3, an
// activation other than silu, other quantizations: int8, int4, float8 activations or KV cache) is
// refused with one dsl::Error located at config.json that names the field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "dsl/model.hpp"

namespace mk::dsl {

// Float8 (e4m3) weights, from quantization_config: which projections are stored so and where
// their scales are. Embeddings, norms and biases stay bf16; activations are computed in f32.
struct HfQuant {
  bool enabled = false;
  std::string method;        // compressed-tensors or fp8 (quant_method as written)
  std::string layout;        // the scales' layout (dsl weight `scale:`): tensor, row or block128
  std::string scale_suffix;  // the scale's key after the module's "<module>.": weight_scale or weight_scale_inv
  // Each projection of every layer, and the LM head, float8 unless the ignore list names it (fp8:
  // the LM head only where modules_to_not_convert is given, as transformers reads it).
  bool q = false, k = false, v = false, o = false, gate = false, up = false, down = false, lm_head = false;
};

struct HfConfig {
  std::string file;          // the config.json read (error messages name it)
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, layers = 0;
  double eps = 1e-6;
  bool tie_embeddings = false;
  bool qk_norm = false;    // Qwen3
  bool qkv_bias = false;   // Qwen2, or attention_bias
  bool o_bias = false;     // attention_bias (Llama, Qwen3): o_proj has one too
  double rope_theta = 10000;
  std::string rope_scaling = "none";  // none or llama3
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_max_position = 8192;
  std::optional<int64_t> sliding_window;  // Mistral: contexts up to it are exact
  HfQuant quant;                          // enabled only with a quantization_config
};

// `path` is a checkpoint folder (its config.json) or a config.json file.
HfConfig read_hf_config(const std::filesystem::path& path);

// The config.json a path names: path/config.json for a folder, else path itself.
std::filesystem::path hf_config_file(const std::filesystem::path& path);

// Whether mkplan should import `path` rather than parse it as YAML: a folder, or a .json file.
bool is_hf_import(const std::filesystem::path& path);

// How the generated model picks its next token: argmax (greedy), or a sample op, whose
// temperature, top-k and top-p mkrun sets (greedy until it does).
enum class NextToken { argmax, sample };

// The model as YAML, in the form of examples/*.yaml: split, chunks and kv_splits left to the
// planner. `name` is the model's name.
std::string hf_model_yaml(const HfConfig&, const std::string& name, NextToken = NextToken::argmax);

// hf_model_yaml + parse_string: the model of a config read by read_hf_config, named after its
// folder. `yaml`, when given, receives the generated text. The second form reads it first.
ModelGraph import_hf_model(const HfConfig&, std::string* yaml = nullptr, NextToken = NextToken::argmax);
ModelGraph import_hf_model(const std::filesystem::path& path, std::string* yaml = nullptr);

// The values of config.json that a schedule bakes in, each only when the file gives it (a
// config.json written by mkweights has none): what mkrun checks a checkpoint folder against.
struct HfPlannedValues {
  std::optional<double> eps, rope_theta;
  std::optional<std::string> rope_scaling;  // none or llama3 (or the unknown type as written)
  std::optional<double> rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;
  std::optional<int64_t> vocab;
  std::optional<bool> tie_embeddings;
  std::optional<int64_t> sliding_window;
};
HfPlannedValues read_hf_planned_values(const std::filesystem::path& config_json);

}  // namespace mk::dsl
