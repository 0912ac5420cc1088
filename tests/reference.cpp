#include "tests/reference.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "device/bf16.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"

namespace mk::test {

ReferenceConfig reference_config(const dsl::ModelGraph& graph) {
  ReferenceConfig c;
  c.hidden = static_cast<int>(graph.number("hidden"));
  c.inter = static_cast<int>(graph.number("inter"));
  c.heads = static_cast<int>(graph.number("heads"));
  c.kv_heads = static_cast<int>(graph.number("kv_heads"));
  c.head_dim = static_cast<int>(graph.number("head_dim"));
  c.vocab = static_cast<int>(graph.number("vocab"));
  c.layers = static_cast<int>(graph.number("layers"));
  c.eps = graph.number("eps");
  c.qk_norm = graph.number("qk_norm", 0) != 0;
  c.tie_embeddings = graph.number("tie_embeddings", 0) != 0;
  c.qkv_bias = graph.number("attention_bias", 0) != 0;
  c.o_bias = graph.number("o_bias", 0) != 0;
  c.rope_theta = graph.number("rope.theta");
  c.rope_scaling = graph.text("rope.scaling", "none");
  c.rope_factor = graph.number("rope.factor", 1);
  c.rope_low_freq_factor = graph.number("rope.low_freq_factor", 1);
  c.rope_high_freq_factor = graph.number("rope.high_freq_factor", 4);
  c.rope_original_max_position = graph.number("rope.original_max_position", 8192);
  return c;
}

namespace ref {

std::vector<float> rmsnorm(std::span<const float> x, std::span<const float> weight, double eps) {
  if (x.size() != weight.size()) throw std::runtime_error("rmsnorm: weight size differs from input");
  double sum_sq = 0;
  for (float v : x) sum_sq += double(v) * double(v);
  double inv_rms = 1.0 / std::sqrt(sum_sq / double(x.size()) + eps);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = float(double(x[i]) * inv_rms * double(weight[i]));
  return out;
}

std::vector<float> matvec(std::span<const float> w, int rows, int cols, std::span<const float> x) {
  if (w.size() != size_t(rows) * size_t(cols) || x.size() != size_t(cols))
    throw std::runtime_error("matvec: sizes do not match");
  std::vector<float> out(rows);
  for (int r = 0; r < rows; r++) {
    double sum = 0;
    for (int c = 0; c < cols; c++) sum += double(w[size_t(r) * cols + c]) * double(x[c]);
    out[r] = float(sum);
  }
  return out;
}

std::vector<double> rope_inv_freq(const ReferenceConfig& cfg) {
  int half = cfg.head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; i++) inv_freq[i] = std::pow(cfg.rope_theta, -2.0 * i / cfg.head_dim);
  if (cfg.rope_scaling == "none") return inv_freq;
  if (cfg.rope_scaling != "llama3")
    throw std::runtime_error("reference: unknown rope scaling '" + cfg.rope_scaling + "'");

  // Llama-3: long wavelengths (low frequencies) are slowed down by `factor`, short ones are
  // kept, and the band between is interpolated linearly in orig/wavelen.
  double orig = cfg.rope_original_max_position;
  double low = cfg.rope_low_freq_factor, high = cfg.rope_high_freq_factor;
  double low_freq_wavelen = orig / low;
  double high_freq_wavelen = orig / high;
  for (double& f : inv_freq) {
    double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / cfg.rope_factor;
    } else if (wavelen < high_freq_wavelen) {
      // unchanged
    } else {
      double smooth = (orig / wavelen - low) / (high - low);
      f = (1 - smooth) * f / cfg.rope_factor + smooth * f;
    }
  }
  return inv_freq;
}

void apply_rope(std::span<float> head, std::span<const double> inv_freq, int position) {
  size_t half = head.size() / 2;
  if (inv_freq.size() != half) throw std::runtime_error("apply_rope: inv_freq size is not head_dim/2");
  for (size_t i = 0; i < half; i++) {
    double angle = double(position) * inv_freq[i];
    double c = std::cos(angle), s = std::sin(angle);
    double a = head[i], b = head[i + half];
    head[i] = float(a * c - b * s);
    head[i + half] = float(b * c + a * s);
  }
}

std::vector<float> attend(std::span<const float> q, std::span<const float> keys,
                          std::span<const float> values, int count) {
  size_t d = q.size();
  if (count < 1 || keys.size() < size_t(count) * d || values.size() < size_t(count) * d)
    throw std::runtime_error("attend: keys/values shorter than count * head_dim");
  double scale = 1.0 / std::sqrt(double(d));

  std::vector<double> scores(count);
  for (int p = 0; p < count; p++) {
    double dot = 0;
    for (size_t j = 0; j < d; j++) dot += double(q[j]) * double(keys[p * d + j]);
    scores[p] = dot * scale;
  }
  double max_score = scores[0];
  for (double s : scores) max_score = std::max(max_score, s);
  double total = 0;
  for (double& s : scores) {
    s = std::exp(s - max_score);
    total += s;
  }

  std::vector<float> out(d);
  for (size_t j = 0; j < d; j++) {
    double sum = 0;
    for (int p = 0; p < count; p++) sum += scores[p] * double(values[p * d + j]);
    out[j] = float(sum / total);
  }
  return out;
}

float silu(float z) { return float(double(z) / (1.0 + std::exp(-double(z)))); }

}  // namespace ref

namespace {

// A float8 weight dequantized as published checkpoints define it: each e4m3 value times its
// scale, the tensor "<key>_scale" (or "<key>_scale_inv", the name of the block-scaled format: a
// multiplier all the same) of one value, one a row, or one a 128 x 128 block, told by its size.
std::vector<float> dequantize(const device::Checkpoint& ckpt, const std::string& key, std::vector<float> w) {
  const device::CheckpointTensor* t = ckpt.find(key);
  const std::string scale_key = ckpt.find(key + "_scale") ? key + "_scale" : key + "_scale_inv";
  const std::vector<float> scale = ckpt.to_float(scale_key);
  if (t->shape.size() != 2) throw std::runtime_error("reference: float8 " + key + " is not 2-D");
  const size_t rows = t->shape[0], cols = t->shape[1], blocks_across = (cols + 127) / 128;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = scale.size() == 1 ? 0 : scale.size() == rows ? r : r / 128 * blocks_across + c / 128;
      if (i >= scale.size()) throw std::runtime_error("reference: " + scale_key + " has too few scales");
      w[r * cols + c] = float(double(w[r * cols + c]) * scale[i]);
    }
  return w;
}

// Loads one weight (float8 dequantized) and checks it has the element count the config implies.
std::vector<float> load(const device::Checkpoint& ckpt, const std::string& key, size_t expected) {
  std::vector<float> w = ckpt.to_float(key);
  if (const device::CheckpointTensor* t = ckpt.find(key); t && t->stored_dtype == "F8_E4M3") w = dequantize(ckpt, key, std::move(w));
  if (w.size() != expected)
    throw std::runtime_error("reference: " + key + " has " + std::to_string(w.size()) +
                             " elements, expected " + std::to_string(expected));
  return w;
}

}  // namespace

ReferenceModel::ReferenceModel(const device::Checkpoint& ckpt, const ReferenceConfig& cfg, int max_context)
    : cfg_(cfg), max_context_(max_context) {
  if (cfg.heads <= 0 || cfg.kv_heads <= 0 || cfg.heads % cfg.kv_heads != 0)
    throw std::runtime_error("reference: heads must be a positive multiple of kv_heads");
  if (cfg.head_dim <= 0 || cfg.head_dim % 2 != 0)
    throw std::runtime_error("reference: head_dim must be even");
  if (max_context < 1) throw std::runtime_error("reference: max_context must be at least 1");

  size_t hidden = cfg.hidden, inter = cfg.inter, vocab = cfg.vocab, head_dim = cfg.head_dim;
  size_t q_rows = size_t(cfg.heads) * head_dim, kv_rows = size_t(cfg.kv_heads) * head_dim;

  inv_freq_ = ref::rope_inv_freq(cfg);
  embed_ = load(ckpt, "model.embed_tokens.weight", vocab * hidden);
  final_norm_ = load(ckpt, "model.norm.weight", hidden);
  if (!cfg.tie_embeddings) lm_head_ = load(ckpt, "lm_head.weight", vocab * hidden);

  for (int i = 0; i < cfg.layers; i++) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = load(ckpt, p + "input_layernorm.weight", hidden);
    l.wq = load(ckpt, p + "self_attn.q_proj.weight", q_rows * hidden);
    l.wk = load(ckpt, p + "self_attn.k_proj.weight", kv_rows * hidden);
    l.wv = load(ckpt, p + "self_attn.v_proj.weight", kv_rows * hidden);
    l.wo = load(ckpt, p + "self_attn.o_proj.weight", hidden * q_rows);
    if (cfg.qkv_bias) {
      l.bq = load(ckpt, p + "self_attn.q_proj.bias", q_rows);
      l.bk = load(ckpt, p + "self_attn.k_proj.bias", kv_rows);
      l.bv = load(ckpt, p + "self_attn.v_proj.bias", kv_rows);
    }
    if (cfg.o_bias) l.bo = load(ckpt, p + "self_attn.o_proj.bias", hidden);
    if (cfg.qk_norm) {
      l.q_norm = load(ckpt, p + "self_attn.q_norm.weight", head_dim);
      l.k_norm = load(ckpt, p + "self_attn.k_norm.weight", head_dim);
    }
    l.mlp_norm = load(ckpt, p + "post_attention_layernorm.weight", hidden);
    l.wg = load(ckpt, p + "mlp.gate_proj.weight", inter * hidden);
    l.wu = load(ckpt, p + "mlp.up_proj.weight", inter * hidden);
    l.wd = load(ckpt, p + "mlp.down_proj.weight", hidden * inter);
    l.k_cache.assign(kv_rows * size_t(max_context), 0.0f);
    l.v_cache.assign(kv_rows * size_t(max_context), 0.0f);
    layers_.push_back(std::move(l));
  }
}

std::vector<float> ReferenceModel::step(int token) {
  if (token < 0 || token >= cfg_.vocab) throw std::runtime_error("reference: token out of range");
  if (position_ >= max_context_) throw std::runtime_error("reference: context is full");
  const int pos = position_;
  const int hidden = cfg_.hidden, head_dim = cfg_.head_dim;
  const int q_rows = cfg_.heads * head_dim, kv_rows = cfg_.kv_heads * head_dim;
  const int group = cfg_.heads / cfg_.kv_heads;  // q heads sharing one kv head

  std::vector<float> x(embed_.begin() + size_t(token) * hidden, embed_.begin() + size_t(token + 1) * hidden);

  for (Layer& l : layers_) {
    // Attention block.
    std::vector<float> a = ref::rmsnorm(x, l.attn_norm, cfg_.eps);
    std::vector<float> q = ref::matvec(l.wq, q_rows, hidden, a);
    std::vector<float> k = ref::matvec(l.wk, kv_rows, hidden, a);
    std::vector<float> v = ref::matvec(l.wv, kv_rows, hidden, a);
    // nn.Linear with bias: y = W x + b, before anything else touches the projection.
    auto add = [](std::vector<float>& y, const std::vector<float>& b) {
      for (size_t j = 0; j < b.size(); j++) y[j] = float(double(y[j]) + double(b[j]));
    };
    add(q, l.bq);
    add(k, l.bk);
    add(v, l.bv);

    for (int h = 0; h < cfg_.heads; h++) {
      std::span<float> qh(q.data() + size_t(h) * head_dim, head_dim);
      if (cfg_.qk_norm) {
        std::vector<float> n = ref::rmsnorm(qh, l.q_norm, cfg_.eps);
        std::copy(n.begin(), n.end(), qh.begin());
      }
      ref::apply_rope(qh, inv_freq_, pos);
    }
    for (int h = 0; h < cfg_.kv_heads; h++) {
      std::span<float> kh(k.data() + size_t(h) * head_dim, head_dim);
      if (cfg_.qk_norm) {
        std::vector<float> n = ref::rmsnorm(kh, l.k_norm, cfg_.eps);
        std::copy(n.begin(), n.end(), kh.begin());
      }
      ref::apply_rope(kh, inv_freq_, pos);
      // Store as the device does: bf16. The current position is read back from the cache too.
      size_t slot = (size_t(h) * max_context_ + pos) * head_dim;
      for (int j = 0; j < head_dim; j++) {
        l.k_cache[slot + j] = device::round_bf16(kh[j]);
        l.v_cache[slot + j] = device::round_bf16(v[size_t(h) * head_dim + j]);
      }
    }

    std::vector<float> attn(q_rows);
    for (int h = 0; h < cfg_.heads; h++) {
      int kvh = h / group;
      size_t base = size_t(kvh) * max_context_ * head_dim;
      size_t len = size_t(pos + 1) * head_dim;
      std::vector<float> out = ref::attend(std::span<const float>(q.data() + size_t(h) * head_dim, head_dim),
                                           std::span<const float>(l.k_cache.data() + base, len),
                                           std::span<const float>(l.v_cache.data() + base, len), pos + 1);
      std::copy(out.begin(), out.end(), attn.begin() + size_t(h) * head_dim);
    }
    std::vector<float> o = ref::matvec(l.wo, hidden, q_rows, attn);
    add(o, l.bo);
    for (int j = 0; j < hidden; j++) x[j] += o[j];

    // MLP block.
    std::vector<float> b = ref::rmsnorm(x, l.mlp_norm, cfg_.eps);
    std::vector<float> gate = ref::matvec(l.wg, cfg_.inter, hidden, b);
    std::vector<float> up = ref::matvec(l.wu, cfg_.inter, hidden, b);
    std::vector<float> act(cfg_.inter);
    for (int j = 0; j < cfg_.inter; j++) act[j] = float(double(ref::silu(gate[j])) * double(up[j]));
    std::vector<float> down = ref::matvec(l.wd, hidden, cfg_.inter, act);
    for (int j = 0; j < hidden; j++) x[j] += down[j];
  }

  std::vector<float> final_x = ref::rmsnorm(x, final_norm_, cfg_.eps);
  const std::vector<float>& head = cfg_.tie_embeddings ? embed_ : lm_head_;
  position_++;
  return ref::matvec(head, cfg_.vocab, hidden, final_x);
}

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    diff += d * d;
    norm += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(diff / norm);
}

}  // namespace mk::test
