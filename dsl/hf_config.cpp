#include "dsl/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <sstream>

#include "common/checked_json.hpp"
#include "common/input_file.hpp"
#include "dsl/model.hpp"
#include "schedules/limits.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::dsl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The families planned from a config.json: the architecture class and its model_type.
struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr std::array<Family, 4> kFamilies = {{{"LlamaForCausalLM", "llama"},
                                              {"MistralForCausalLM", "mistral"},
                                              {"Qwen2ForCausalLM", "qwen2"},
                                              {"Qwen3ForCausalLM", "qwen3"}}};

// One field of every family, comma-separated.
std::string family_list(const char* Family::*field) {
  std::string out;
  for (const Family& k : kFamilies) out += (out.empty() ? "" : ", ") + std::string(k.*field);
  return out;
}

[[noreturn]] void fail(const std::string& file, const std::string& message) { throw Error({file, 0, 0}, message); }

json read_json(const fs::path& file) {
  std::string text;
  try {
    text = io::read_input_file(file, limits::kMaxTextBytes);
  } catch (const io::InputError& e) {
    const bool absent = e.problem == io::InputProblem::missing || e.problem == io::InputProblem::not_regular;
    fail(file.string(), absent ? std::string("no config.json here (a checkpoint folder holds one)") : e.what());
  }
  json j;
  try {
    j = io::parse_checked_json(text, limits::kMaxNesting);
  } catch (const io::JsonError& e) {
    fail(file.string(), e.what());
  }
  if (!j.is_object()) fail(file.string(), "expected a JSON object");
  return j;
}

// Field readers: a missing (or null) field gives nullopt; a present one of the wrong type fails.
class Fields {
 public:
  Fields(const json& j, std::string file, std::string prefix = "") : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const { return j_.at(key); }
  std::string name(const char* key) const { return "'" + prefix_ + key + "'"; }
  [[noreturn]] void fail_field(const char* key, const std::string& what) const { fail(file_, name(key) + " " + what); }

  std::optional<double> number(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!at(key).is_number()) fail_field(key, "must be a number, found " + at(key).dump());
    return at(key).get<double>();
  }
  std::optional<int64_t> integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!at(key).is_number_integer() || at(key).get<int64_t>() <= 0)
      fail_field(key, "must be a positive integer, found " + at(key).dump());
    return at(key).get<int64_t>();
  }
  int64_t required(const char* key) const {
    if (auto v = integer(key)) return *v;
    fail(file_, "missing " + name(key));
  }
  std::optional<bool> boolean(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!at(key).is_boolean()) fail_field(key, "must be true or false, found " + at(key).dump());
    return at(key).get<bool>();
  }
  std::optional<std::string> text(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!at(key).is_string()) fail_field(key, "must be a string, found " + at(key).dump());
    return at(key).get<std::string>();
  }

 private:
  const json& j_;
  std::string file_, prefix_;
};

struct Rope {
  std::optional<double> theta;
  std::string type = "default";  // as written
  std::string type_field;        // which field named it
  std::optional<double> factor, low, high, orig;
};

// transformers 5: rope_parameters {rope_type, rope_theta, factor, ...}; the Hub: rope_theta and
// rope_scaling {rope_type (or type), factor, ...} or null.
Rope read_rope(const json& j, const std::string& file) {
  Rope r;
  const Fields top(j, file);
  r.theta = top.number("rope_theta");
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!top.has(key)) continue;
    const json& p = top.at(key);
    if (!p.is_object()) top.fail_field(key, "must be an object or null, found " + p.dump());
    const Fields f(p, file, std::string(key) + ".");
    if (auto t = f.number("rope_theta")) r.theta = t;
    for (const char* type_key : {"rope_type", "type"})
      if (auto t = f.text(type_key)) r.type = *t, r.type_field = f.name(type_key);
    if (auto v = f.number("factor")) r.factor = v;
    if (auto v = f.number("low_freq_factor")) r.low = v;
    if (auto v = f.number("high_freq_factor")) r.high = v;
    if (auto v = f.number("original_max_position_embeddings")) r.orig = v;
  }
  return r;
}

}  // namespace

fs::path hf_config_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path / "config.json" : path;
}

bool is_hf_import(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || path.extension() == ".json";
}

HfConfig read_hf_config(const fs::path& path) {
  const fs::path file = hf_config_file(path);
  const std::string where = file.string();
  const json j = read_json(file);
  const Fields f(j, where);
  HfConfig c;
  c.file = where;

  // The family: architectures[0], else model_type.
  if (f.has("architectures")) {
    const json& a = f.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      f.fail_field("architectures", "must be a list of class names, found " + a.dump());
    c.architecture = a[0].get<std::string>();
  } else if (auto t = f.text("model_type")) {
    const auto it = std::find_if(kFamilies.begin(), kFamilies.end(), [&](const Family& k) { return *t == k.model_type; });
    if (it == kFamilies.end())
      f.fail_field("model_type", "is '" + *t + "'; supported: " + family_list(&Family::model_type));
    c.architecture = it->architecture;
  } else {
    fail(where, "missing 'architectures' (and 'model_type'): cannot tell the model family");
  }
  if (std::none_of(kFamilies.begin(), kFamilies.end(), [&](const Family& k) { return c.architecture == k.architecture; }))
    f.fail_field("architectures", "is '" + c.architecture + "'; supported: " + family_list(&Family::architecture) +
                                      " (dense decoders)");
  const bool llama = c.architecture == "LlamaForCausalLM", qwen2 = c.architecture == "Qwen2ForCausalLM",
             qwen3 = c.architecture == "Qwen3ForCausalLM";

  // What the decode step does not implement, each refused by its field.
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"})
    if (f.has(key) && !(f.at(key).is_number() && f.at(key).get<double>() == 0))
      f.fail_field(key, "is " + f.at(key).dump() + ": mixture-of-experts models are not supported (dense decoders only)");
  if (f.has("quantization_config")) f.fail_field("quantization_config", "is set: quantized checkpoints are not supported (bf16, f16 or f32 weights)");
  for (const char* key : {"hidden_act", "hidden_activation"})
    if (auto act = f.text(key); act && *act != "silu") f.fail_field(key, "is '" + *act + "'; only silu is supported");
  if (auto b = f.boolean("mlp_bias"); b && *b) f.fail_field("mlp_bias", "is true: biases on the MLP projections are not supported");
  if (auto b = f.boolean("use_sliding_window"); b && *b)
    f.fail_field("use_sliding_window", "is true: sliding-window attention is not supported");
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array()) f.fail_field("layer_types", "must be a list, found " + lt.dump());
    for (const json& t : lt)
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        f.fail_field("layer_types", "holds " + t.dump() + ": only full_attention layers are supported");
  }
  // Mistral's window only matters past it: the plan is exact below, and mkrun refuses a longer
  // context. Qwen2/3 carry sliding_window but use it only with use_sliding_window (refused above).
  if (c.architecture == "MistralForCausalLM") c.sliding_window = f.integer("sliding_window");

  c.hidden = f.required("hidden_size");
  c.inter = f.required("intermediate_size");
  c.heads = f.required("num_attention_heads");
  c.layers = f.required("num_hidden_layers");
  c.vocab = f.required("vocab_size");
  c.kv_heads = f.integer("num_key_value_heads").value_or(c.heads);
  if (c.heads % c.kv_heads)
    f.fail_field("num_key_value_heads", "is " + std::to_string(c.kv_heads) + ", which does not divide num_attention_heads = " +
                                            std::to_string(c.heads));
  if (auto hd = f.integer("head_dim")) {
    c.head_dim = *hd;
  } else {
    if (c.hidden % c.heads)
      f.fail_field("hidden_size", "is " + std::to_string(c.hidden) + ", not a multiple of num_attention_heads = " +
                                      std::to_string(c.heads) + " (and there is no head_dim)");
    c.head_dim = c.hidden / c.heads;
  }
  if (c.head_dim % 8 || c.head_dim > schedule::kMaxScheduleHeadDim)
    f.fail_field(f.has("head_dim") ? "head_dim" : "hidden_size", "gives head_dim " + std::to_string(c.head_dim) +
                                                                    "; supported: a multiple of 8, at most " +
                                                                    std::to_string(schedule::kMaxScheduleHeadDim));
  if (auto eps = f.number("rms_norm_eps")) {
    if (!(*eps > 0)) f.fail_field("rms_norm_eps", "must be positive");
    c.eps = *eps;
  }
  c.tie_embeddings = f.boolean("tie_word_embeddings").value_or(false);
  c.qk_norm = qwen3;
  const bool attention_bias = f.boolean("attention_bias").value_or(false);
  c.qkv_bias = qwen2 || attention_bias;
  c.o_bias = (llama || qwen3) && attention_bias;
  for (const char* key : {"torch_dtype", "dtype"})
    if (auto d = f.text(key); d && *d != "bfloat16" && *d != "float16" && *d != "float32")
      f.fail_field(key, "is '" + *d + "'; supported: bfloat16, float16, float32 (converted to bfloat16 at load)");

  const Rope r = read_rope(j, where);
  if (r.theta) {
    if (!(*r.theta > 0)) fail(where, "rope theta must be positive, found " + show_number(*r.theta));
    c.rope_theta = *r.theta;
  }
  if (r.type == "llama3") {
    c.rope_scaling = "llama3";
    for (auto [v, key] : {std::pair{r.factor, "factor"}, {r.low, "low_freq_factor"}, {r.high, "high_freq_factor"},
                          {r.orig, "original_max_position_embeddings"}})
      if (!v) fail(where, "rope type llama3 needs '" + std::string(key) + "' in rope_scaling (or rope_parameters)");
    c.rope_factor = *r.factor;
    c.rope_low_freq_factor = *r.low;
    c.rope_high_freq_factor = *r.high;
    c.rope_original_max_position = *r.orig;
  } else if (r.type != "default") {
    fail(where, r.type_field + " is '" + r.type + "'; supported rope types: default, llama3");
  }
  return c;
}

std::string hf_model_yaml(const HfConfig& c, const std::string& name, NextToken next) {
  std::ostringstream y;
  y << "# " << c.architecture << ", generated by mkplan from " << c.file
    << ".\n# split, chunks and kv_splits are left to the planner (chosen for the SM count); write them to override.\n";
  y << "model: " << name << "\n";
  y << "config:\n";
  y << "  hidden: " << c.hidden << "\n  inter: " << c.inter << "\n  heads: " << c.heads << "\n  kv_heads: " << c.kv_heads
    << "\n  head_dim: " << c.head_dim << "\n  vocab: " << c.vocab << "\n  layers: " << c.layers << "\n  eps: " << show_number(c.eps)
    << "\n  tie_embeddings: " << (c.tie_embeddings ? 1 : 0) << "\n";
  if (c.qk_norm) y << "  qk_norm: 1\n";
  if (c.qkv_bias) y << "  attention_bias: 1\n";
  if (c.o_bias) y << "  o_bias: 1\n";
  y << "  rope: {theta: " << show_number(c.rope_theta);
  if (c.rope_scaling == "llama3")
    y << ", scaling: llama3, factor: " << show_number(c.rope_factor) << ", low_freq_factor: " << show_number(c.rope_low_freq_factor)
      << ", high_freq_factor: " << show_number(c.rope_high_freq_factor)
      << ", original_max_position: " << show_number(c.rope_original_max_position);
  y << "}\n\n";
  y << "weights:\n"
       "  embed: {key: model.embed_tokens.weight, shape: [vocab, hidden]}\n"
       "  final_norm: {key: model.norm.weight, shape: [hidden]}\n";
  if (!c.tie_embeddings) y << "  lm_head: {key: lm_head.weight, shape: [vocab, hidden]}\n";
  y << "\nactivations:\n"
       "  logits: {shape: [vocab]}\n"
       "  next_token: {shape: [1], dtype: i32}\n\n";
  const std::string L = "model.layers.{layer}.";
  y << "ops:\n"
       "  - {op: embed, table: embed, out: x0}\n"
       "  - repeat:\n"
       "      count: layers\n"
       "      as: layer\n"
       "      weights:\n";
  y << "        attn_norm{layer}: {key: \"" << L << "input_layernorm.weight\", shape: [hidden]}\n";
  y << "        wq{layer}: {key: \"" << L << "self_attn.q_proj.weight\", shape: [heads*head_dim, hidden]}\n";
  y << "        wk{layer}: {key: \"" << L << "self_attn.k_proj.weight\", shape: [kv_heads*head_dim, hidden]}\n";
  y << "        wv{layer}: {key: \"" << L << "self_attn.v_proj.weight\", shape: [kv_heads*head_dim, hidden]}\n";
  if (c.qkv_bias) {
    y << "        bq{layer}: {key: \"" << L << "self_attn.q_proj.bias\", shape: [heads*head_dim]}\n";
    y << "        bk{layer}: {key: \"" << L << "self_attn.k_proj.bias\", shape: [kv_heads*head_dim]}\n";
    y << "        bv{layer}: {key: \"" << L << "self_attn.v_proj.bias\", shape: [kv_heads*head_dim]}\n";
  }
  if (c.qk_norm) {
    y << "        q_norm{layer}: {key: \"" << L << "self_attn.q_norm.weight\", shape: [head_dim]}\n";
    y << "        k_norm{layer}: {key: \"" << L << "self_attn.k_norm.weight\", shape: [head_dim]}\n";
  }
  y << "        wo{layer}: {key: \"" << L << "self_attn.o_proj.weight\", shape: [hidden, heads*head_dim]}\n";
  if (c.o_bias) y << "        bo{layer}: {key: \"" << L << "self_attn.o_proj.bias\", shape: [hidden]}\n";
  y << "        mlp_norm{layer}: {key: \"" << L << "post_attention_layernorm.weight\", shape: [hidden]}\n";
  y << "        wg{layer}: {key: \"" << L << "mlp.gate_proj.weight\", shape: [inter, hidden]}\n";
  y << "        wu{layer}: {key: \"" << L << "mlp.up_proj.weight\", shape: [inter, hidden]}\n";
  y << "        wd{layer}: {key: \"" << L << "mlp.down_proj.weight\", shape: [hidden, inter]}\n";
  y << "      kv_caches:\n"
       "        k{layer}: {shape: [kv_heads, head_dim]}\n"
       "        v{layer}: {shape: [kv_heads, head_dim]}\n"
       "      ops:\n";
  y << "        - {op: matvec, in: \"x{layer}\", norm: \"attn_norm{layer}\", weight: [\"wq{layer}\", \"wk{layer}\", \"wv{layer}\"],\n"
    << (c.qkv_bias ? "           bias: [\"bq{layer}\", \"bk{layer}\", \"bv{layer}\"],\n" : "")
    << "           out: \"qkv{layer}\"}\n";
  y << "        - {op: attention, qkv: \"qkv{layer}\", "
    << (c.qk_norm ? "q_norm: \"q_norm{layer}\", k_norm: \"k_norm{layer}\", " : "")
    << "k_cache: \"k{layer}\", v_cache: \"v{layer}\",\n"
       "           out: \"attn_part{layer}\"}\n";
  y << "        - {op: attn_reduce, in: \"attn_part{layer}\", out: \"attn{layer}\"}\n";
  y << "        - {op: matvec, in: \"attn{layer}\", weight: \"wo{layer}\", " << (c.o_bias ? "bias: \"bo{layer}\", " : "")
    << "residual: \"x{layer}\", out: \"h{layer}\"}\n";
  y << "        - {op: matvec, in: \"h{layer}\", norm: \"mlp_norm{layer}\", weight: [\"wg{layer}\", \"wu{layer}\"], act: silu_mul,\n"
       "           out: \"act{layer}\"}\n";
  y << "        - {op: matvec, in: \"act{layer}\", weight: \"wd{layer}\", residual: \"h{layer}\", out: \"x{layer+1}\"}\n";
  // The LM head signals its logits in chunks, and the argmax takes each chunk as it completes, a
  // task per chunk: the most chunks, at most 96, that cut the logits into whole 16-byte pieces
  // (96 on Llama's 128256, 32 on Qwen's 151936); a task then reads a few KB, one round trip.
  int64_t chunks = 1;
  for (int64_t d = 96; d > 1 && chunks == 1; --d)
    if (c.vocab % (4 * d) == 0) chunks = d;
  const std::string split = chunks > 1 ? ", split: " + std::to_string(chunks) : "";
  y << "  - {op: matvec, in: \"x{layers}\", norm: final_norm, weight: " << (c.tie_embeddings ? "embed" : "lm_head")
    << ", out: logits" << (chunks > 1 ? ", chunks: " + std::to_string(chunks) : "") << "}\n";
  // The sample op is one task over the whole vocabulary (it waits for every chunk).
  if (next == NextToken::sample) y << "  - {op: sample, in: logits, out: next_token}\n";
  else y << "  - {op: argmax, in: logits, out: next_token" << split << "}\n";
  return y.str();
}

ModelGraph import_hf_model(const HfConfig& config, std::string* yaml, NextToken next) {
  const fs::path file = config.file;
  const fs::path folder = fs::absolute(file).lexically_normal().parent_path();
  const std::string text = hf_model_yaml(config, folder.filename().empty() ? "model" : folder.filename().string(), next);
  if (yaml) *yaml = text;
  return parse_string(text, "<model generated from " + file.string() + ">");
}

ModelGraph import_hf_model(const fs::path& path, std::string* yaml) { return import_hf_model(read_hf_config(path), yaml); }

HfPlannedValues read_hf_planned_values(const fs::path& config_json) {
  const std::string where = config_json.string();
  const json j = read_json(config_json);
  const Fields f(j, where);
  HfPlannedValues v;
  v.eps = f.number("rms_norm_eps");
  v.vocab = f.integer("vocab_size");
  v.tie_embeddings = f.boolean("tie_word_embeddings");
  if (f.has("rope_theta") || f.has("rope_parameters") || f.has("rope_scaling") || f.has("model_type")) {
    const Rope r = read_rope(j, where);
    v.rope_theta = r.theta.value_or(10000);
    v.rope_scaling = r.type == "default" ? "none" : r.type;
    if (r.type == "llama3") {
      v.rope_factor = r.factor;
      v.rope_low_freq_factor = r.low;
      v.rope_high_freq_factor = r.high;
      v.rope_original_max_position = r.orig;
    }
  }
  const std::optional<std::string> type = f.text("model_type");
  if (type && *type == "mistral") v.sliding_window = f.integer("sliding_window");
  return v;
}

}  // namespace mk::dsl
