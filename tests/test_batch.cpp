// Steps of many tokens on the emulator, end to end: a prompt prefilled in chunks of T rows gives
// the logits and tokens of one position a step, and the reference's; a batch of sequences gives
// each what its own run gives (ragged prompts, different token counts, one stopping early, slots
// used again); and what cannot run is refused before anything runs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/runtime.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/reference.hpp"
#include "tests/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using mk::device::GenerateOptions;
using mk::device::GenerateResult;
using mk::device::RuntimeOptions;
using mk::device::SequenceOptions;

constexpr uint32_t kMaxTokens = 16;

// A model planned for steps of up to `max_tokens` rows, with a random checkpoint.
struct Model {
  mk::dsl::ModelGraph graph;
  mk::schedule::Schedule s;
  mk::test::TempDir dir{"mk_test_batch"};
  std::unique_ptr<mk::device::Checkpoint> ckpt;
  Model(const std::string& name, uint32_t sms, uint32_t max_tokens, uint64_t seed)
      : graph(mk::dsl::parse_file(fs::path(MK_SOURCE_DIR) / "examples" / (name + ".yaml"))) {
    mk::planner::PlanOptions o;
    o.sm_count = sms;
    o.max_tokens = max_tokens;
    s = mk::planner::plan(graph, o).schedule;
    mk::device::write_random_checkpoint(s, dir.path, seed);
    ckpt = std::make_unique<mk::device::Checkpoint>(mk::device::Checkpoint::open(dir.path));
  }
  uint32_t vocab() const { return static_cast<uint32_t>(s.tensors[s.logits_tensor].elements()); }
  std::unique_ptr<mk::device::Backend> backend(RuntimeOptions o) const { return mk::device::make_emulator_backend(s, *ckpt, o); }
};

std::vector<int32_t> random_prompt(uint32_t n, uint32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = d(rng);
  return p;
}

// The relative L2 distance of two logit vectors, in double.
double distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

// Same tokens, every position's logits within `tol` (0: the same bits).
void check_same(const GenerateResult& got, const GenerateResult& want, double tol) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.steps == want.steps);
  CHECK(got.stopped == want.stopped);
  REQUIRE(got.logits.size() == want.logits.size());
  double worst = 0;
  for (size_t i = 0; i < got.logits.size(); ++i) worst = std::max(worst, distance(got.logits[i], want.logits[i]));
  CAPTURE(worst);
  CHECK(worst <= tol);
}

GenerateResult run_one(const Model& m, RuntimeOptions o, const SequenceOptions& q, uint32_t chunk) {
  auto b = m.backend(o);
  GenerateOptions g;
  static_cast<SequenceOptions&>(g) = q;
  g.keep_logits = true;
  g.prompt_chunk = chunk;
  return mk::device::generate(*b, m.s, g, o.max_context);
}

}  // namespace

TEST_CASE("batch: a prompt prefilled T rows a step gives the bits of one position a step") {
  using Policy = mk::schedule::KvSplitPolicy;
  for (const std::string name : {"tiny-llama", "tiny-qwen3"})
    for (const uint32_t sms : {5u, 132u}) {
      const Model m(name, sms, kMaxTokens, 17 + sms);
      // The schedule's own split policy (short steps up to 4 on tiny-llama), every split at every
      // step, and splits of 3 positions with short steps up to 5.
      for (const Policy policy : {Policy{mk::schedule::kNone, mk::schedule::kNone}, Policy{0, 0}, Policy{3, 5}}) {
        CAPTURE(name);
        CAPTURE(sms);
        CAPTURE(policy.positions);
        RuntimeOptions o;
        o.max_context = 64;
        o.kv_splits = policy;
        std::mt19937 rng(sms + policy.positions);
        SequenceOptions q;
        q.prompt = random_prompt(37, m.vocab(), rng);
        q.tokens = 6;
        const GenerateResult one = run_one(m, o, q, 1);
        REQUIRE(one.tokens.size() == 6);
        for (const uint32_t T : {2u, 3u, 8u, kMaxTokens}) {
          CAPTURE(T);
          check_same(run_one(m, o, q, T), one, 0);  // each row attends as its one-token step does
        }
      }
    }
}

TEST_CASE("batch: a chunked prompt agrees with the independent reference, teacher-forced") {
  for (const std::string name : {"tiny-llama", "tiny-qwen3"}) {
    CAPTURE(name);
    const Model m(name, 7, kMaxTokens, 5);
    RuntimeOptions o;
    o.max_context = 64;
    std::mt19937 rng(3);
    SequenceOptions q;
    q.prompt = random_prompt(40, m.vocab(), rng);
    q.tokens = 5;
    const GenerateResult r = run_one(m, o, q, kMaxTokens);
    std::vector<int32_t> fed = q.prompt;
    fed.insert(fed.end(), r.tokens.begin(), r.tokens.end() - 1);
    REQUIRE(r.logits.size() == fed.size());
    mk::test::ReferenceModel ref(*m.ckpt, mk::test::reference_config(m.graph), static_cast<int>(fed.size()));
    // Within what the two sides' rounding allows: the reference keeps double sums, the device
    // float ones, and a k or v value the two put either side of a bf16 rounding point differs by
    // 2^-8 in the cache, which later positions read (the emulator's own one-token steps land
    // 1e-4 to 3e-4 from it on this checkpoint; a wrong mask or position is off by 1e-1 and more).
    for (size_t pos = 0; pos < fed.size(); ++pos) {
      CAPTURE(pos);
      const std::vector<float> want = ref.step(fed[pos]);
      CHECK(mk::test::rel_error(r.logits[pos], want) < 1e-3);
    }
  }
}

namespace {

// B sequences with ragged prompts and token counts; sequence 1 stops at its third token.
std::vector<SequenceOptions> ragged(uint32_t B, uint32_t vocab, std::mt19937& rng) {
  std::vector<SequenceOptions> seqs(B);
  for (uint32_t i = 0; i < B; ++i) {
    seqs[i].prompt = random_prompt(1 + (i * 7 + 3) % 23, vocab, rng);
    seqs[i].tokens = 1 + (i * 5) % 9;
  }
  if (B > 1) {
    seqs[1].tokens = 12;
    seqs[1].stop = [n = 0](int32_t) mutable { return ++n == 3; };
  }
  return seqs;
}

// Each sequence of a batch against its own run on a backend of one slot.
void check_batch(const Model& m, const std::vector<SequenceOptions>& seqs, const std::vector<GenerateResult>& got,
                 RuntimeOptions o, bool logits) {
  REQUIRE(got.size() == seqs.size());
  o.slots = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    CAPTURE(i);
    SequenceOptions q = seqs[i];
    if (i == 1) q.stop = [n = 0](int32_t) mutable { return ++n == 3; };  // a fresh count
    GenerateResult want = run_one(m, o, q, 1);
    if (!logits) want.logits.clear();
    check_same(got[i], want, 0);
  }
}

}  // namespace

TEST_CASE("batch: B sequences at once give each what its own run gives") {
  const Model m("tiny-llama", 6, kMaxTokens, 23);
  for (const uint32_t B : {1u, 2u, 3u, 8u, kMaxTokens})
    for (const bool logits : {true, false}) {
      CAPTURE(B);
      CAPTURE(logits);
      std::mt19937 rng(B);
      const std::vector<SequenceOptions> seqs = ragged(B, m.vocab(), rng);
      RuntimeOptions o;
      o.max_context = 48;
      o.slots = B;
      auto b = m.backend(o);
      const std::vector<GenerateResult> got = mk::device::generate_batch(*b, m.s, seqs, {logits, 0}, o.max_context);
      if (B > 1) {
        CHECK(got[1].stopped);
        CHECK(got[1].tokens.size() == 3);
      }
      check_batch(m, seqs, got, o, logits);
    }
}

TEST_CASE("batch: slots used again by new sequences give what fresh ones give") {
  const Model m("tiny-qwen3", 4, 8, 31);
  RuntimeOptions o;
  o.max_context = 48;
  o.slots = 5;
  auto b = m.backend(o);
  std::mt19937 rng(77);
  const std::vector<SequenceOptions> first = ragged(5, m.vocab(), rng);
  (void)mk::device::generate_batch(*b, m.s, first, {false, 0}, o.max_context);
  // Shorter prompts in slots whose caches hold longer ones, and fewer of them.
  std::vector<SequenceOptions> second = ragged(3, m.vocab(), rng);
  second[0].prompt.resize(2);
  const std::vector<GenerateResult> got = mk::device::generate_batch(*b, m.s, second, {true, 3}, o.max_context);
  check_batch(m, second, got, o, true);
}

TEST_CASE("batch: what cannot run is refused before anything runs, with one clear message") {
  const Model m("tiny-llama", 3, 4, 9);
  RuntimeOptions o;
  o.max_context = 32;
  o.slots = 6;
  auto b = m.backend(o);
  std::mt19937 rng(1);
  std::vector<SequenceOptions> five = ragged(5, m.vocab(), rng);
  CHECK_THROWS_WITH(mk::device::generate_batch(*b, m.s, five, {}, o.max_context),
                    "5 sequences decode together in steps of 5 tokens, more than the schedule's max_tokens (4); plan with "
                    "mkplan --max-tokens 5");
  std::vector<SequenceOptions> three = ragged(3, m.vocab(), rng);
  three[2].prompt.clear();
  CHECK_THROWS_WITH(mk::device::generate_batch(*b, m.s, three, {}, o.max_context),
                    "sequence 3: the prompt needs at least one token");
  three[2].prompt = {1, 2, 3};
  three[2].tokens = 40;
  CHECK_THROWS_WITH(mk::device::generate_batch(*b, m.s, three, {}, o.max_context),
                    "sequence 3: 42 positions do not fit a context of 32 positions; raise --max-context");
  three[2].tokens = 2;
  three[0].prompt[0] = 512;
  CHECK_THROWS_WITH(mk::device::generate_batch(*b, m.s, three, {}, o.max_context),
                    "sequence 1: prompt token 512 is outside the vocabulary [0, 512)");
  // Nothing above ran: every slot's history is as fresh.
  for (uint32_t slot = 0; slot < 6; ++slot) CHECK(b->read_history(slot, 0, 33) == std::vector<int32_t>(33, -1));
  o.slots = 2;
  auto two = m.backend(o);
  three[0].prompt[0] = 5;
  CHECK_THROWS_WITH(mk::device::generate_batch(*two, m.s, three, {}, o.max_context),
                    "3 sequences need as many KV-cache slots; the backend holds 2");

  // Runs the backend refuses (check_step_run).
  using mk::schedule::StepSegment;
  CHECK_THROWS_WITH(b->run_steps({{StepSegment{0, 0, 5, 0, 0}}, 1, 1, true}),
                    "a step of 5 tokens is more than the schedule's max_tokens (4); plan with mkplan --max-tokens 5");
  CHECK_THROWS_WITH(b->run_steps({{StepSegment{1, 0, 1, 0, 0}, StepSegment{1, 4, 1, 1, 0}}, 1, 1, true}),
                    "slot 1 appears twice in one step");
  CHECK_THROWS_WITH(b->run_steps({{StepSegment{6, 0, 1, 0, 0}}, 1, 1, true}), "sequence slot 6 is outside the backend's 6 slots");
  CHECK_THROWS_WITH(b->run_steps({{StepSegment{0, 30, 2, 0, 0}}, 2, 1, true}), "position 32 is beyond the KV cache (32)");
  CHECK_THROWS_WITH(b->run_steps({{StepSegment{0, 0, 0, 0, 0}}, 1, 1, true}), "a step holds an empty run of positions");
  CHECK_THROWS_WITH(b->run_steps({{}, 1, 1, true}), "a step needs at least one sequence");

  // KV caches for every slot that do not fit in memory: the bytes they need.
  o.slots = 4000;
  o.max_context = 1u << 24;
  CHECK_THROWS_WITH(m.backend(o), doctest::Contains("4000 sequences of 16777216 positions needs"));
}
