// sample: a token from softmax(in / temperature) restricted by top-k and top-p, drawn by
// Gumbel-max with a counter-based uniform of (seed, pos, i). Temperature 0 is argmax.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "tests/step_context.hpp"
#include "device/ops/cpu_ops.hpp"
#include "schedules/schedule.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::schedule::ArgmaxPayload;
using mk::schedule::SamplePayload;
using mk::schedule::StepContext;

namespace {

struct Params {
  float temperature = 0;
  uint32_t top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
};

int32_t run_sample(const std::vector<float>& values, const Params& q, uint32_t pos = 0) {
  Memory mem;
  SamplePayload p{};
  p.in = mem.add_f32(values);
  p.out = mem.add_i32({kI32Poison});
  p.count = static_cast<uint32_t>(values.size());
  p.temperature = q.temperature;
  p.top_k = q.top_k;
  p.top_p = q.top_p;
  p.seed_lo = static_cast<uint32_t>(q.seed);
  p.seed_hi = static_cast<uint32_t>(q.seed >> 32);
  mk::device::cpu_run(p, mk::test::step_context(pos, 0, 1, 1), mem.table());
  CHECK(mem.guards_intact());
  return mem.i32(p.out)[0];
}

int32_t run_argmax(const std::vector<float>& values) {
  Memory mem;
  const uint32_t in = mem.add_f32(values);
  const ArgmaxPayload p = ArgmaxPayload::whole(in, mem.add_i32({kI32Poison}), static_cast<uint32_t>(values.size()));
  mk::device::cpu_run(p, mk::test::step_context(0, 0, 1, 1), mem.table());
  return mem.i32(p.out)[0];
}

std::vector<double> softmax(const std::vector<float>& l, double t) {
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) p[i] = std::exp((l[i] - m) / t);
  const double z = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= z;
  return p;
}

// Draws n tokens at positions 0..n-1 and returns the counts per token.
std::vector<int> draw(const std::vector<float>& l, const Params& q, int n) {
  std::vector<int> counts(l.size(), 0);
  for (int k = 0; k < n; ++k) {
    const int32_t t = run_sample(l, q, static_cast<uint32_t>(k));
    REQUIRE((t >= 0 && t < static_cast<int32_t>(l.size())));
    ++counts[t];
  }
  return counts;
}

// Pearson's chi-square of the counts against probabilities p over the tokens with p > 0; the
// tokens with p == 0 must never be drawn.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n, int& dof) {
  double chi = 0;
  dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      CHECK_MESSAGE(counts[i] == 0, "token " << i << " is excluded but was drawn " << counts[i] << " times");
      continue;
    }
    const double e = p[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++dof;
  }
  return chi;
}

// Upper 0.1 % points of the chi-square distribution.
double critical(int dof) {
  static const double c[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};
  REQUIRE((dof >= 1 && dof <= 10));
  return c[dof];
}

const std::vector<float> kLogits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f, 0.2f, -2.0f};

}  // namespace

TEST_CASE("op sample: temperature 0 (and top-k 1) is argmax, NaN and infinities included") {
  std::mt19937 rng(6601);
  for (size_t n : {1, 2, 7, 512, 1000, 151936}) {
    CAPTURE(n);
    std::vector<float> v = randn(n, rng);
    CHECK(run_sample(v, {}) == run_argmax(v));
    CHECK(run_sample(v, {.temperature = 0.7f, .top_k = 1, .seed = 3}) == run_argmax(v));
    if (n > 3) v[1] = kNaN, v[2] = INFINITY;
    CHECK(run_sample(v, {}) == run_argmax(v));
    CHECK(run_sample(v, {.temperature = 1.0f}) == run_argmax(v));  // +inf: greedy
  }
  CHECK(run_sample({-INFINITY, kNaN, -INFINITY}, {.temperature = 1.0f}) == 0);
}

TEST_CASE("op sample: the draws follow softmax(logits / temperature) (chi-square, fixed seed)") {
  const int n = 40000;
  for (float t : {0.5f, 1.0f, 2.5f}) {
    CAPTURE(t);
    int dof = 0;
    const double chi = chi_square(draw(kLogits, {.temperature = t, .seed = 11}, n), softmax(kLogits, t), n, dof);
    MESSAGE("temperature " << t << ": chi-square " << chi << " on 7 degrees of freedom (0.1 % point " << critical(7) << ")");
    CHECK(dof == 7);
    CHECK(chi < critical(dof));
  }
}

TEST_CASE("op sample: top-k keeps exactly the k largest") {
  const int n = 20000;
  for (uint32_t k : {2u, 3u, 5u, 7u}) {
    CAPTURE(k);
    std::vector<uint32_t> order(kLogits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [](uint32_t a, uint32_t b) { return kLogits[a] > kLogits[b]; });
    std::vector<float> kept(kLogits.size(), -INFINITY);
    for (uint32_t i = 0; i < k; ++i) kept[order[i]] = kLogits[order[i]];
    std::vector<double> p = softmax(kept, 1.2);
    int dof = 0;
    const double chi = chi_square(draw(kLogits, {.temperature = 1.2f, .top_k = k, .seed = 5}, n), p, n, dof);
    CHECK(dof == static_cast<int>(k) - 1);
    CHECK(chi < critical(dof));
  }
  // Ties at the k-th value are all kept.
  const std::vector<float> tied = {3, 1, 2, 2, 0};
  const std::vector<int> c = draw(tied, {.temperature = 1.0f, .top_k = 2, .seed = 9}, 3000);
  CHECK(c[0] > 0);
  CHECK(c[2] > 0);
  CHECK(c[3] > 0);
  CHECK(c[1] == 0);
  CHECK(c[4] == 0);
}

TEST_CASE("op sample: top-p keeps the smallest most probable set with mass >= p") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logits).
  const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  const int n = 20000;
  struct Case {
    float top_p;
    std::vector<int> kept;
  };
  for (const Case& c : {Case{0.45f, {1}}, Case{0.55f, {1, 3}}, Case{0.79f, {1, 3}}, Case{0.81f, {1, 3, 0}},
                        Case{0.94f, {1, 3, 0}}, Case{0.96f, {1, 3, 0, 2}}, Case{1.0f, {1, 3, 0, 2}}}) {
    CAPTURE(c.top_p);
    std::vector<float> masked(l.size(), -INFINITY);
    for (int i : c.kept) masked[i] = l[i];
    int dof = 0;
    const std::vector<int> counts = draw(l, {.temperature = 1.0f, .top_p = c.top_p, .seed = 21}, n);
    const double chi = chi_square(counts, softmax(masked, 1.0), n, dof);
    CHECK(dof == static_cast<int>(c.kept.size()) - 1);
    if (dof > 0) CHECK(chi < critical(dof));
  }
  // top-k first, then top-p over what is left (renormalised): top-2 leaves 0.5/0.8 and 0.3/0.8;
  // top-p 0.6 then keeps only the first.
  const std::vector<int> c = draw(l, {.temperature = 1.0f, .top_k = 2, .top_p = 0.6f, .seed = 4}, 2000);
  CHECK(c[1] == 2000);
}

TEST_CASE("op sample: the same seed and position give the same token; others differ") {
  std::mt19937 rng(6605);
  const std::vector<float> v = randn(1000, rng, 0, 0.5);
  std::vector<int32_t> a, b, c;
  for (uint32_t pos = 0; pos < 64; ++pos) {
    a.push_back(run_sample(v, {.temperature = 1.0f, .seed = 42}, pos));
    b.push_back(run_sample(v, {.temperature = 1.0f, .seed = 42}, pos));
    c.push_back(run_sample(v, {.temperature = 1.0f, .seed = 43}, pos));
  }
  CHECK(a == b);
  CHECK(a != c);
  CHECK(std::set<int32_t>(a.begin(), a.end()).size() > 30);  // not stuck on one token
}

TEST_CASE("op sample: set_sampling sets every sample op and checks the values") {
  mk::schedule::Schedule s;
  mk::schedule::Instruction inst{};
  inst.opcode = static_cast<uint16_t>(mk::schedule::Opcode::sample);
  SamplePayload p{};
  p.count = 100;
  memcpy(inst.payload, &p, sizeof p);
  s.instructions = {inst, inst};
  CHECK(mk::schedule::set_sampling(s, {.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = (7ull << 32) | 5}) == 2);
  memcpy(&p, s.instructions[1].payload, sizeof p);
  CHECK(p.temperature == 0.7f);
  CHECK(p.top_k == 40);
  CHECK(p.top_p == 0.9f);
  CHECK(p.seed_lo == 5);
  CHECK(p.seed_hi == 7);
  CHECK_THROWS_WITH(mk::schedule::set_sampling(s, {.temperature = -1}), doctest::Contains("--temperature"));
  CHECK_THROWS_WITH(mk::schedule::set_sampling(s, {.top_p = 0}), doctest::Contains("--top-p"));
  CHECK_THROWS_WITH(mk::schedule::set_sampling(s, {.top_k = 101}), doctest::Contains("larger than the vocabulary"));
}

TEST_CASE("op sample: each sequence's own parameters (StepContext::sampling) where set, the op's elsewhere") {
  std::mt19937 rng(8821);
  const uint32_t vocab = 500, slots = 3;
  // Three one-row sequences in one step: slot 0 unset (the op's greedy parameters), slot 1 and
  // slot 2 sampling with their own temperature, top-k, top-p and seed.
  std::vector<float> rows;
  std::vector<std::vector<float>> each;
  for (uint32_t t = 0; t < slots; ++t) {
    each.push_back(randn(vocab, rng, 0, 1));
    rows.insert(rows.end(), each.back().begin(), each.back().end());
  }
  const std::vector<Params> own = {{}, {.temperature = 0.8f, .top_k = 50, .top_p = 0.95f, .seed = 77},
                                   {.temperature = 1.3f, .top_k = 0, .top_p = 1, .seed = (3ull << 32) | 9}};
  for (uint32_t pos = 20; pos < 60; ++pos) {
    Memory mem;
    SamplePayload p{};
    p.in = mem.add_f32(rows);
    p.out = mem.add_i32(std::vector<int32_t>(slots, kI32Poison));
    p.count = vocab;  // the op's own parameters: greedy
    std::vector<mk::schedule::StepSegment> segments;
    for (uint32_t t = 0; t < slots; ++t) segments.push_back({t, pos + t, 1, 0, 0});
    std::vector<int32_t> history(size_t{slots} * 101, 0);
    StepContext ctx = mk::test::step_context(segments, history, 100, 1);
    std::vector<mk::schedule::SlotSampling> sampling = {
        mk::schedule::SlotSampling{}, mk::schedule::slot_sampling_of({own[1].temperature, own[1].top_k, own[1].top_p, own[1].seed}),
        mk::schedule::slot_sampling_of({own[2].temperature, own[2].top_k, own[2].top_p, own[2].seed})};
    ctx.sampling = sampling.data();
    mk::device::cpu_run(p, ctx, mem.table());
    CHECK(mem.guards_intact());
    for (uint32_t t = 0; t < slots; ++t) {
      CAPTURE(pos);
      CAPTURE(t);
      CHECK(mem.i32(p.out)[t] == run_sample(each[t], own[t], pos + t));  // as a step of its own with those parameters
    }
    CHECK(mem.i32(p.out)[0] == run_argmax(each[0]));
  }
  CHECK_THROWS_WITH_AS(mk::schedule::slot_sampling_of({.temperature = -0.5f}), doctest::Contains("--temperature"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(mk::schedule::slot_sampling_of({.top_p = 1.5f}), doctest::Contains("--top-p"), std::invalid_argument);
}
