#include "dsl/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <regex>
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

// What quantization_config's messages offer instead of an unsupported method.
constexpr const char* kQuantMethods = "supported: compressed-tensors (float8 weights), fp8";

// The projections a layer's block holds: module name after "model.layers.N." and HfQuant's flag.
struct Projection {
  const char* module;
  bool HfQuant::*flag;
};
constexpr std::array<Projection, 7> kProjections = {{{"self_attn.q_proj", &HfQuant::q},
                                                     {"self_attn.k_proj", &HfQuant::k},
                                                     {"self_attn.v_proj", &HfQuant::v},
                                                     {"self_attn.o_proj", &HfQuant::o},
                                                     {"mlp.gate_proj", &HfQuant::gate},
                                                     {"mlp.up_proj", &HfQuant::up},
                                                     {"mlp.down_proj", &HfQuant::down}}};

// One entry of a list of modules left unquantized (compressed-tensors' ignore, fp8's
// modules_to_not_convert or ignored_layers), matched against full module names
// ("model.layers.0.mlp.down_proj", "lm_head") as the library that wrote the checkpoint does, so
// that the dtypes planned are those stored.
struct IgnoreEntry {
  std::string field;  // the list, as messages name it
  std::string text;   // as written
  std::optional<std::regex> regex;
  bool loose = false;  // fp8 (transformers' should_convert_module): any entry is a regex, and a suffix too

  bool matches(const std::string& module) const {
    if (loose && module.size() >= text.size() && module.compare(module.size() - text.size(), text.size(), text) == 0)
      return true;
    // Python's re.match: anchored at the start only ("re:.*self_attn" names every attention projection).
    if (regex) return std::regex_search(module, *regex, std::regex_constants::match_continuous);
    return module == text;
  }
};

std::vector<IgnoreEntry> read_ignore(const Fields& f, const char* key, bool loose) {
  std::vector<IgnoreEntry> out;
  if (!f.has(key)) return out;
  const json& list = f.at(key);
  if (!list.is_array()) f.fail_field(key, "must be a list of module names, found " + list.dump());
  for (const json& e : list) {
    if (!e.is_string()) f.fail_field(key, "must be a list of module names, found " + e.dump());
    IgnoreEntry entry{f.name(key), e.get<std::string>(), std::nullopt, loose};
    const bool re = entry.text.starts_with("re:");
    if (re || loose) {
      try {
        entry.regex.emplace(re ? entry.text.substr(3) : entry.text, std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        f.fail_field(key, "holds '" + entry.text + "', which is not a regular expression this reader understands");
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

const IgnoreEntry* ignored_by(const std::vector<IgnoreEntry>& ignore, const std::string& module) {
  for (const IgnoreEntry& e : ignore)
    if (e.matches(module)) return &e;
  return nullptr;
}

// A field's value as messages show it: 'text' for a string, else its JSON, or "missing".
std::string shown(const Fields& f, const char* key) {
  if (!f.has(key)) return "missing";
  return f.at(key).is_string() ? "'" + f.at(key).get<std::string>() + "'" : f.at(key).dump();
}

// A JSON object under `key` (required), with the Fields that read it.
const json& object_at(const Fields& f, const char* key) {
  if (!f.has(key)) f.fail_field(key, "is missing");
  if (!f.at(key).is_object()) f.fail_field(key, "must be an object, found " + f.at(key).dump());
  return f.at(key);
}

// compressed-tensors, format float-quantized: one config group of float8 weights (per channel,
// per tensor or in 128 x 128 blocks), activations unquantized or quantized at run time (which
// this toolchain, computing them in f32, does not need), the KV cache unquantized.
void read_compressed_tensors(const Fields& f, const std::string& file, HfQuant& q) {
  const auto fmt = f.text("format");
  if (fmt != "float-quantized")
    f.fail_field("format", "is " + shown(f, "format") + "; supported: float-quantized (float8 weights)");
  if (auto status = f.text("quantization_status"); status && *status != "compressed")
    f.fail_field("quantization_status", "is '" + *status + "'; supported: compressed (the weights stored in float8)");
  if (f.has("kv_cache_scheme")) f.fail_field("kv_cache_scheme", "is set: a quantized KV cache is not supported (it is bf16)");
  if (f.has("transform_config")) f.fail_field("transform_config", "is set: transformed (rotated) weights are not supported");
  if (f.has("sparsity_config")) {
    const json& sp = f.at("sparsity_config");
    const bool dense = sp.is_object() && (sp.empty() || (sp.contains("format") && sp.at("format") == "dense"));
    if (!dense) f.fail_field("sparsity_config", "is " + sp.dump() + ": sparse checkpoints are not supported");
  }

  const json& groups = object_at(f, "config_groups");
  if (groups.size() != 1)
    f.fail_field("config_groups", "holds " + std::to_string(groups.size()) +
                                      " groups; supported: exactly one (one scheme for every projection)");
  const std::string group = "quantization_config.config_groups." + groups.begin().key() + ".";
  if (!groups.begin().value().is_object()) fail(file, "'" + group.substr(0, group.size() - 1) + "' must be an object");
  const Fields g(groups.begin().value(), file, group);
  const json* targets = g.has("targets") ? &g.at("targets") : nullptr;
  if (!targets || !targets->is_array() || std::find(targets->begin(), targets->end(), json("Linear")) == targets->end())
    g.fail_field("targets", "is " + shown(g, "targets") + "; supported: a list holding \"Linear\" (every projection)");
  if (auto gfmt = g.text("format"); gfmt && *gfmt != "float-quantized")
    g.fail_field("format", "is '" + *gfmt + "'; supported: float-quantized (float8 weights)");
  if (g.has("output_activations")) g.fail_field("output_activations", "is set: quantized outputs are not supported");
  if (g.has("input_activations")) {
    // Quantized at run time (dynamic), activations need nothing from the checkpoint; static ones
    // come with input scales for float8 matrix products, which this toolchain does not do.
    const Fields a(object_at(g, "input_activations"), file, group + "input_activations.");
    if (!(a.has("dynamic") && a.at("dynamic") == json(true)))
      a.fail_field("dynamic", "is " + shown(a, "dynamic") +
                                  ": static activation scales (float8 activations) are not supported; supported: true");
  }

  const Fields w(object_at(g, "weights"), file, group + "weights.");
  if (!(w.has("num_bits") && w.at("num_bits") == json(8)))
    w.fail_field("num_bits", "is " + shown(w, "num_bits") + "; supported: 8 (float8 e4m3)");
  if (w.text("type") != "float")
    w.fail_field("type", "is " + shown(w, "type") + "; supported: float (float8 e4m3; integer weights are not supported)");
  if (w.boolean("symmetric") == false) w.fail_field("symmetric", "is false: weights with zero points are not supported");
  if (w.has("dynamic") && w.at("dynamic") != json(false))
    w.fail_field("dynamic", "is " + w.at("dynamic").dump() + ": weights quantized at run time are not supported");
  const std::string strategy = w.text("strategy").value_or("");
  if (strategy == "channel") {
    q.layout = "row";
  } else if (strategy == "tensor") {
    q.layout = "tensor";
  } else if (strategy == "block") {
    if (!(w.has("block_structure") && w.at("block_structure") == json({128, 128})))
      w.fail_field("block_structure", "is " + shown(w, "block_structure") + "; supported: [128, 128]");
    q.layout = "block128";
  } else {
    w.fail_field("strategy", "is " + shown(w, "strategy") + "; supported: channel, tensor, block (128 x 128)");
  }
  q.scale_suffix = "weight_scale";
}

// transformers' fp8 (FineGrainedFP8Config, also AutoFP8's checkpoints): e4m3 weights in 128 x
// 128 blocks whose scales are stored as weight_scale_inv (a multiplier despite the name), or one
// weight_scale per tensor without weight_block_size; activations quantized at run time.
void read_fp8(const Fields& f, HfQuant& q) {
  if (auto fmt = f.text("fmt"); fmt && *fmt != "e4m3") f.fail_field("fmt", "is '" + *fmt + "'; supported: e4m3");
  if (auto act = f.text("activation_scheme"); act && *act != "dynamic")
    f.fail_field("activation_scheme", "is '" + *act + "': static activation scales (float8 activations) are not supported; "
                                      "supported: dynamic");
  if (f.has("weight_block_size")) {
    if (f.at("weight_block_size") != json({128, 128}))
      f.fail_field("weight_block_size", "is " + f.at("weight_block_size").dump() + "; supported: [128, 128]");
    q.layout = "block128";
    q.scale_suffix = "weight_scale_inv";
  } else {
    q.layout = "tensor";
    q.scale_suffix = "weight_scale";
  }
}

// quantization_config: which weights are float8 and how their scales are laid out. Every layer
// repeats one block of weights, so a projection is float8 in all layers or in none.
HfQuant read_quant(const json& j, const std::string& file, int64_t layers, bool tied) {
  HfQuant q;
  const Fields top(j, file);
  if (!top.has("quantization_config")) return q;
  const Fields f(object_at(top, "quantization_config"), file, "quantization_config.");
  const auto method = f.text("quant_method");
  if (!method) fail(file, "missing " + f.name("quant_method") + "; " + kQuantMethods);
  std::vector<IgnoreEntry> ignore;
  // Whether an unlisted LM head is float8: compressed-tensors quantizes every Linear it is not
  // told to ignore; transformers' fp8 leaves the LM head out unless modules_to_not_convert is
  // given (get_modules_to_not_convert's default), and vLLM never quantizes it.
  bool lm_head_listed = true;
  std::string lm_head_field;
  if (*method == "compressed-tensors") {
    read_compressed_tensors(f, file, q);
    ignore = read_ignore(f, "ignore", false);
    lm_head_field = f.name("ignore");
  } else if (*method == "fp8") {
    read_fp8(f, q);
    ignore = read_ignore(f, "modules_to_not_convert", true);
    lm_head_listed = f.has("modules_to_not_convert");
    lm_head_field = f.name("modules_to_not_convert");
    for (IgnoreEntry& e : read_ignore(f, "ignored_layers", true)) ignore.push_back(std::move(e));
  } else {
    f.fail_field("quant_method", "is '" + *method + "'; " + kQuantMethods);
  }
  q.enabled = true;
  q.method = *method;

  for (const Projection& p : kProjections) {
    const IgnoreEntry* first = nullptr;
    std::string first_module, kept_module;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string module = "model.layers." + std::to_string(l) + "." + p.module;
      if (const IgnoreEntry* e = ignored_by(ignore, module)) {
        if (!first) first = e, first_module = module;
      } else if (kept_module.empty()) {
        kept_module = module;
      }
    }
    if (first && !kept_module.empty())
      fail(file, first->field + " holds '" + first->text + "', which leaves " + first_module + " unquantized but not " +
                     kept_module + ": the layers share one block of weights, so each projection is float8 in every "
                     "layer or in none");
    q.*p.flag = !first;
  }
  q.lm_head = lm_head_listed && !ignored_by(ignore, "lm_head");
  if (q.lm_head && tied)
    fail(file, lm_head_field + " does not name lm_head, but tie_word_embeddings is true: the tied table is read in bf16 "
                               "by the embed op, so the LM head cannot be float8");
  return q;
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
  c.quant = read_quant(j, where, c.layers, c.tie_embeddings);
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
  const HfQuant& q = c.quant;
  if (q.enabled)
    y << "# float8 e4m3 weights (quantization_config: " << q.method << "), each with its " << q.layout << " scales.\n";
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
  // A float8 weight's declaration ends with its dtype and the key and layout of its scales, stored
  // beside it under the module's name.
  const auto fp8 = [&](bool quantized, const std::string& module) -> std::string {
    if (!quantized) return "";
    return ", dtype: f8e4m3, scale: {key: \"" + module + "." + q.scale_suffix + "\", layout: " + q.layout + "}";
  };
  if (!c.tie_embeddings) y << "  lm_head: {key: lm_head.weight, shape: [vocab, hidden]" << fp8(q.lm_head, "lm_head") << "}\n";
  y << "\nactivations:\n"
       "  logits: {shape: [vocab]}\n"
       "  next_token: {shape: [1], dtype: i32}\n\n";
  const std::string L = "model.layers.{layer}.";
  const auto projection = [&](const char* weight, const char* module, const char* shape, bool quantized) {
    y << "        " << weight << "{layer}: {key: \"" << L << module << ".weight\", shape: [" << shape << "]"
      << fp8(quantized, L + module) << "}\n";
  };
  y << "ops:\n"
       "  - {op: embed, table: embed, out: x0}\n"
       "  - repeat:\n"
       "      count: layers\n"
       "      as: layer\n"
       "      weights:\n";
  y << "        attn_norm{layer}: {key: \"" << L << "input_layernorm.weight\", shape: [hidden]}\n";
  projection("wq", "self_attn.q_proj", "heads*head_dim, hidden", q.q);
  projection("wk", "self_attn.k_proj", "kv_heads*head_dim, hidden", q.k);
  projection("wv", "self_attn.v_proj", "kv_heads*head_dim, hidden", q.v);
  if (c.qkv_bias) {
    y << "        bq{layer}: {key: \"" << L << "self_attn.q_proj.bias\", shape: [heads*head_dim]}\n";
    y << "        bk{layer}: {key: \"" << L << "self_attn.k_proj.bias\", shape: [kv_heads*head_dim]}\n";
    y << "        bv{layer}: {key: \"" << L << "self_attn.v_proj.bias\", shape: [kv_heads*head_dim]}\n";
  }
  if (c.qk_norm) {
    y << "        q_norm{layer}: {key: \"" << L << "self_attn.q_norm.weight\", shape: [head_dim]}\n";
    y << "        k_norm{layer}: {key: \"" << L << "self_attn.k_norm.weight\", shape: [head_dim]}\n";
  }
  projection("wo", "self_attn.o_proj", "hidden, heads*head_dim", q.o);
  if (c.o_bias) y << "        bo{layer}: {key: \"" << L << "self_attn.o_proj.bias\", shape: [hidden]}\n";
  y << "        mlp_norm{layer}: {key: \"" << L << "post_attention_layernorm.weight\", shape: [hidden]}\n";
  projection("wg", "mlp.gate_proj", "inter, hidden", q.gate);
  projection("wu", "mlp.up_proj", "inter, hidden", q.up);
  projection("wd", "mlp.down_proj", "hidden, inter", q.down);
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
