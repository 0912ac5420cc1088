// A naive, sequential reference forward pass (batch-1 decode) for Llama, Mistral, Qwen2 and
// Qwen3 dense models (any GQA ratio, optional linear biases), written from the Hugging Face semantics and nothing else: the tests' oracle for the
// emulator and the GPU. It deliberately shares no code with device/ops or planner/, so that a
// mistake there cannot hide by being repeated here.
//
// Numerics: float32 storage, double accumulation in dot products and sums. K and V are rounded
// to bfloat16 before they enter the cache, because that is what the device stores.
#pragma once
#include <span>
#include <string>
#include <vector>

namespace mk::device {
class Checkpoint;
}
namespace mk::dsl {
struct ModelGraph;
}

namespace mk::test {

struct ReferenceConfig {
  int hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, layers = 0;
  double eps = 1e-5;
  bool qk_norm = false;         // Qwen3: per-head RMSNorm of q and k before RoPE
  bool tie_embeddings = false;  // lm_head is the embedding table
  bool qkv_bias = false;        // Qwen2 (attention_bias): q, k and v projections add a bias
  bool o_bias = false;          // the o projection adds one too
  double rope_theta = 10000;
  std::string rope_scaling = "none";  // "none" or "llama3"
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  double rope_original_max_position = 8192;
};

// Reads the model's `config:` keys (see examples/tiny-llama.yaml).
ReferenceConfig reference_config(const dsl::ModelGraph&);

// The pieces of the forward pass, exposed so the tests can check them against hand-computed
// facts.
namespace ref {

// x / sqrt(mean(x^2) + eps) * weight; x and weight have the same length.
std::vector<float> rmsnorm(std::span<const float> x, std::span<const float> weight, double eps);

// w is row-major [rows, cols]; returns w·x [rows].
std::vector<float> matvec(std::span<const float> w, int rows, int cols, std::span<const float> x);

// The RoPE inverse frequencies [head_dim/2], with Llama-3 scaling when the config asks for it.
std::vector<double> rope_inv_freq(const ReferenceConfig&);

// Rotates one head (head_dim values) in place at `position`, HF rotate_half convention:
// element i pairs with element i + head_dim/2.
void apply_rope(std::span<float> head, std::span<const double> inv_freq, int position);

// One query head attending over `count` positions; keys and values are [count, head_dim]
// row-major. Scale 1/sqrt(head_dim), softmax with the maximum subtracted. Returns [head_dim].
std::vector<float> attend(std::span<const float> q, std::span<const float> keys,
                          std::span<const float> values, int count);

float silu(float z);

}  // namespace ref

class ReferenceModel {
 public:
  // Loads every weight (Hugging Face keys) to float once; throws std::runtime_error when a
  // weight has the wrong number of elements. `max_context` bounds the number of steps.
  ReferenceModel(const device::Checkpoint&, const ReferenceConfig&, int max_context);

  // Decodes `token` at the next position (0, 1, 2, ...) and returns the logits [vocab].
  std::vector<float> step(int token);
  int position() const { return position_; }

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, q_norm, k_norm;
    std::vector<float> bq, bk, bv, bo;  // empty without biases
    std::vector<float> mlp_norm, wg, wu, wd;
    // Caches, bf16-rounded, laid out [kv_heads][max_context][head_dim] so that one kv head's
    // keys over all positions are contiguous for ref::attend.
    std::vector<float> k_cache, v_cache;
  };

  ReferenceConfig cfg_;
  int max_context_ = 0;
  int position_ = 0;
  std::vector<double> inv_freq_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
};

// The relative L2 error of logits against the reference's: |got - ref| / |ref| in double;
// infinity when the lengths differ.
double rel_error(const std::vector<float>& got, const std::vector<float>& ref);

}  // namespace mk::test
