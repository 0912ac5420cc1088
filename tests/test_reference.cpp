// The reference forward pass is the oracle for the emulator, so its pieces are checked here
// against facts computed by hand, not against any other implementation.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/bf16.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "tests/reference.hpp"

using mk::test::ReferenceConfig;
namespace ref = mk::test::ref;

namespace {

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return std::sqrt(s);
}

// A folder holding one safetensors file of random bf16 weights for `c`, under the Hugging Face
// keys; removed when the object goes away.
struct RandomCheckpoint {
  std::filesystem::path dir;

  RandomCheckpoint(const ReferenceConfig& c, const std::string& name, uint64_t seed) {
    dir = std::filesystem::temp_directory_path() / ("mk_test_reference_" + name + "_" + std::to_string(seed));
    std::filesystem::create_directories(dir);
    std::mt19937_64 rng(seed);
    std::vector<mk::device::NewTensor> tensors;
    // Norm weights near 1, everything else roughly unit-scaled per row so values stay tame.
    auto add = [&](const std::string& key, std::vector<uint64_t> shape, double mean, double stddev) {
      std::normal_distribution<double> dist(mean, stddev);
      size_t n = 1;
      for (uint64_t s : shape) n *= s;
      mk::device::NewTensor t{key, shape, {}};
      for (size_t i = 0; i < n; i++) t.bf16.push_back(mk::device::f32_to_bf16(float(dist(rng))));
      tensors.push_back(std::move(t));
    };
    uint64_t hidden = c.hidden, inter = c.inter, q_rows = uint64_t(c.heads) * c.head_dim,
             kv_rows = uint64_t(c.kv_heads) * c.head_dim;
    add("model.embed_tokens.weight", {uint64_t(c.vocab), hidden}, 0, 1);
    add("model.norm.weight", {hidden}, 1, 0.1);
    if (!c.tie_embeddings)
      add("lm_head.weight", {uint64_t(c.vocab), hidden}, 0, 1 / std::sqrt(double(hidden)));
    for (int i = 0; i < c.layers; i++) {
      std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", {hidden}, 1, 0.1);
      add(p + "self_attn.q_proj.weight", {q_rows, hidden}, 0, 1 / std::sqrt(double(hidden)));
      add(p + "self_attn.k_proj.weight", {kv_rows, hidden}, 0, 1 / std::sqrt(double(hidden)));
      add(p + "self_attn.v_proj.weight", {kv_rows, hidden}, 0, 1 / std::sqrt(double(hidden)));
      add(p + "self_attn.o_proj.weight", {hidden, q_rows}, 0, 1 / std::sqrt(double(q_rows)));
      if (c.qk_norm) {
        add(p + "self_attn.q_norm.weight", {uint64_t(c.head_dim)}, 1, 0.1);
        add(p + "self_attn.k_norm.weight", {uint64_t(c.head_dim)}, 1, 0.1);
      }
      add(p + "post_attention_layernorm.weight", {hidden}, 1, 0.1);
      add(p + "mlp.gate_proj.weight", {inter, hidden}, 0, 1 / std::sqrt(double(hidden)));
      add(p + "mlp.up_proj.weight", {inter, hidden}, 0, 1 / std::sqrt(double(hidden)));
      add(p + "mlp.down_proj.weight", {hidden, inter}, 0, 1 / std::sqrt(double(inter)));
    }
    mk::device::write_safetensors(dir / "model.safetensors", tensors);
  }
  ~RandomCheckpoint() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

ReferenceConfig small_config() {
  ReferenceConfig c;
  c.hidden = 16;
  c.inter = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.vocab = 24;
  c.layers = 1;
  c.eps = 1e-5;
  c.rope_theta = 500000;
  c.rope_scaling = "llama3";
  c.rope_factor = 32;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_position = 8192;
  return c;
}

}  // namespace

TEST_CASE("reference rmsnorm of known vectors") {
  // mean(x^2) = 4, so x / 2, then times the weight.
  std::vector<float> x = {2, -2, 2, -2}, w = {1, 2, 3, 4};
  std::vector<float> y = ref::rmsnorm(x, w, 0.0);
  CHECK(y == std::vector<float>{1, -2, 3, -4});

  // mean(x^2) = (9 + 16) / 2 = 12.5.
  std::vector<float> x2 = {3, 4}, ones = {1, 1};
  std::vector<float> y2 = ref::rmsnorm(x2, ones, 0.0);
  CHECK(y2[0] == doctest::Approx(3 / std::sqrt(12.5)).epsilon(1e-7));
  CHECK(y2[1] == doctest::Approx(4 / std::sqrt(12.5)).epsilon(1e-7));

  // eps sits inside the square root: mean(x^2) = 0.5, eps = 0.5 -> divide by 1.
  std::vector<float> x3 = {1, 0};
  std::vector<float> y3 = ref::rmsnorm(x3, ones, 0.5);
  CHECK(y3[0] == doctest::Approx(1.0));
  CHECK(y3[1] == 0.0f);
}

TEST_CASE("reference matvec and silu") {
  std::vector<float> w = {1, 2, 3,   // row 0
                          -1, 0, 4};  // row 1
  std::vector<float> x = {1, 1, 2};
  CHECK(ref::matvec(w, 2, 3, x) == std::vector<float>{9, 7});

  CHECK(ref::silu(0) == 0.0f);
  CHECK(ref::silu(2) == doctest::Approx(2 / (1 + std::exp(-2.0))));
  CHECK(ref::silu(-30) == doctest::Approx(0).epsilon(1e-9));
}

TEST_CASE("reference rope inv_freq without scaling") {
  ReferenceConfig c;
  c.head_dim = 4;
  c.rope_theta = 10000;
  std::vector<double> f = ref::rope_inv_freq(c);
  REQUIRE(f.size() == 2);
  CHECK(f[0] == 1.0);
  CHECK(f[1] == doctest::Approx(0.01));  // 10000^(-2/4)
}

TEST_CASE("reference rope inv_freq with llama3 scaling") {
  // The tiny-llama settings: wavelengths above 8192 are slowed by 32, below 2048 kept.
  ReferenceConfig c;
  c.head_dim = 32;
  c.rope_theta = 500000;
  c.rope_scaling = "llama3";
  c.rope_factor = 32;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_position = 8192;
  std::vector<double> f = ref::rope_inv_freq(c);
  REQUIRE(f.size() == 16);

  auto base = [](int i) { return std::pow(500000.0, -2.0 * i / 32); };
  auto wavelen = [&](int i) { return 2 * std::numbers::pi / base(i); };

  // i = 7: wavelen ~ 1956 < 2048, a high frequency: unchanged.
  REQUIRE(wavelen(7) < 2048);
  CHECK(f[7] == doctest::Approx(base(7)).epsilon(1e-12));
  CHECK(f[0] == 1.0);

  // i = 9: wavelen ~ 10090 > 8192, a low frequency: divided by the factor.
  REQUIRE(wavelen(9) > 8192);
  CHECK(f[9] == doctest::Approx(base(9) / 32).epsilon(1e-12));
  CHECK(f[15] == doctest::Approx(base(15) / 32).epsilon(1e-12));

  // i = 8: wavelen ~ 4438, in the band: smooth = (8192/wavelen - 1) / (4 - 1) ~ 0.282.
  REQUIRE(wavelen(8) > 2048);
  REQUIRE(wavelen(8) < 8192);
  double smooth = (8192 / wavelen(8) - 1) / 3;
  CHECK(smooth == doctest::Approx(0.282).epsilon(0.01));
  double expected = (1 - smooth) * base(8) / 32 + smooth * base(8);
  CHECK(f[8] == doctest::Approx(expected).epsilon(1e-12));
  // Strictly between the two pure branches.
  CHECK(f[8] < base(8));
  CHECK(f[8] > base(8) / 32);
}

TEST_CASE("reference rope rotation") {
  ReferenceConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000;
  std::vector<double> f = ref::rope_inv_freq(c);
  std::vector<float> head = {0.5f, -1.25f, 2, 3, -0.75f, 1, 0.125f, -2};

  // Position 0: cos = 1, sin = 0, so exactly the identity.
  std::vector<float> same = head;
  ref::apply_rope(same, f, 0);
  CHECK(same == head);

  // Any position is a rotation of each (i, i + d/2) pair: the norm is kept.
  for (int pos : {1, 7, 1000, 131071}) {
    std::vector<float> r = head;
    ref::apply_rope(r, f, pos);
    CHECK(r != head);
    CHECK(norm2(r) == doctest::Approx(norm2(head)).epsilon(1e-6));
  }

  // The rotate_half sign convention on one pair, rotated by a quarter turn:
  // (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin) = (-x1, x0).
  std::vector<double> quarter = {std::numbers::pi / 2};
  std::vector<float> pair = {1, 0};
  ref::apply_rope(pair, quarter, 1);
  CHECK(pair[0] == doctest::Approx(0).epsilon(1e-7));
  CHECK(pair[1] == doctest::Approx(1));
  pair = {0, 1};
  ref::apply_rope(pair, quarter, 1);
  CHECK(pair[0] == doctest::Approx(-1));
  CHECK(pair[1] == doctest::Approx(0).epsilon(1e-7));
}

TEST_CASE("reference attention for one head") {
  std::vector<float> q = {0.3f, -1.5f, 2.0f, 0.25f};

  SUBCASE("one position returns v exactly") {
    std::vector<float> k = {4, -3, 0.5f, 1}, v = {1.5f, -2.25f, 3.0f, 1e-3f};
    CHECK(ref::attend(q, k, v, 1) == v);
  }
  SUBCASE("two equal keys average v") {
    std::vector<float> k = {1, 2, 3, 4, 1, 2, 3, 4};
    std::vector<float> v = {1, 2, 3, 4, 3, -2, 5, 0};
    std::vector<float> out = ref::attend(q, k, v, 2);
    CHECK(out == std::vector<float>{2, 0, 4, 2});
  }
  SUBCASE("scale is 1/sqrt(head_dim) and softmax is exact") {
    // Scores 0 and 2 ln 3 / sqrt(4) = ln 3: weights 1/4 and 3/4.
    std::vector<float> q1 = {1, 0, 0, 0};
    float l = float(2 * std::log(3.0));
    std::vector<float> k = {0, 0, 0, 0, l, 0, 0, 0};
    std::vector<float> v = {4, 0, 8, 0, 0, 4, 0, 8};
    std::vector<float> out = ref::attend(q1, k, v, 2);
    CHECK(out[0] == doctest::Approx(1));
    CHECK(out[1] == doctest::Approx(3));
    CHECK(out[2] == doctest::Approx(2));
    CHECK(out[3] == doctest::Approx(6));
  }
  SUBCASE("large scores do not overflow") {
    std::vector<float> q1 = {1000, 0, 0, 0};
    std::vector<float> k = {1000, 0, 0, 0, -1000, 0, 0, 0};
    std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(ref::attend(q1, k, v, 2) == std::vector<float>{1, 2, 3, 4});
  }
}

TEST_CASE("reference config from the tiny-llama example") {
  auto file = std::filesystem::path(MK_SOURCE_DIR) / "examples/tiny-llama.yaml";
  mk::dsl::ModelGraph g = mk::dsl::parse_file(file);
  ReferenceConfig c = mk::test::reference_config(g);
  CHECK(c.hidden == 256);
  CHECK(c.inter == 512);
  CHECK(c.heads == 8);
  CHECK(c.kv_heads == 2);
  CHECK(c.head_dim == 32);
  CHECK(c.vocab == 512);
  CHECK(c.layers == 3);
  CHECK(c.eps == doctest::Approx(1e-5));
  CHECK_FALSE(c.qk_norm);
  CHECK(c.tie_embeddings);
  CHECK(c.rope_theta == 500000);
  CHECK(c.rope_scaling == "llama3");
  CHECK(c.rope_factor == 32);
  CHECK(c.rope_low_freq_factor == 1);
  CHECK(c.rope_high_freq_factor == 4);
  CHECK(c.rope_original_max_position == 8192);
}

TEST_CASE("reference model decodes a random one-layer model") {
  ReferenceConfig c = small_config();
  SUBCASE("llama, tied embeddings") { c.tie_embeddings = true; }
  SUBCASE("qwen3, qk norm and an lm_head") {
    c.qk_norm = true;
    c.rope_scaling = "none";
    c.rope_theta = 1000000;
  }
  RandomCheckpoint files(c, c.qk_norm ? "qwen3" : "llama", 7);
  mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(files.dir);

  mk::test::ReferenceModel model(ckpt, c, 4);
  CHECK(model.position() == 0);
  std::vector<float> first = model.step(3);
  CHECK(model.position() == 1);
  std::vector<float> second = model.step(5);
  CHECK(model.position() == 2);

  REQUIRE(first.size() == size_t(c.vocab));
  REQUIRE(second.size() == size_t(c.vocab));
  for (int i = 0; i < c.vocab; i++) {
    CHECK(std::isfinite(first[i]));
    CHECK(std::isfinite(second[i]));
  }
  CHECK(first != second);

  // Token 5 at position 0 of a fresh model: it must differ from token 5 decoded after token 3,
  // since there it also attends to the cached token 3.
  mk::test::ReferenceModel fresh(ckpt, c, 4);
  std::vector<float> alone = fresh.step(5);
  CHECK(alone != second);

  // The same token twice: every cached v is the same vector, so attention returns it whatever
  // the scores are, and the logits repeat (up to rounding in the weighted sum).
  mk::test::ReferenceModel repeat(ckpt, c, 4);
  std::vector<float> once = repeat.step(5);
  CHECK(once == alone);  // nothing leaks between instances
  std::vector<float> twice = repeat.step(5);
  for (int i = 0; i < c.vocab; i++) CHECK(twice[i] == doctest::Approx(once[i]).epsilon(1e-5));

  model.step(7);
  model.step(0);
  CHECK_THROWS_AS(model.step(1), std::runtime_error);  // the context of 4 is full
  CHECK_THROWS_AS(fresh.step(c.vocab), std::runtime_error);
}

TEST_CASE("reference model rejects weights that do not fit the config") {
  ReferenceConfig c = small_config();
  c.tie_embeddings = true;
  RandomCheckpoint files(c, "mismatch", 11);
  mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(files.dir);

  ReferenceConfig wider = c;
  wider.inter = 64;
  CHECK_THROWS_AS(mk::test::ReferenceModel(ckpt, wider, 4), std::runtime_error);
  ReferenceConfig untied = c;
  untied.tie_embeddings = false;  // lm_head.weight is absent
  CHECK_THROWS(mk::test::ReferenceModel(ckpt, untied, 4));
}
