// Speculative decoding with n-gram drafts on the emulator: the drafter on its own, then whole runs
// that must give the tokens, steps and logits (the same bits) of decoding one token a step, greedy
// and sampled, with stops and token limits inside a check step. The emulator poisons the KV-cache
// positions of rejected drafts (forget_positions), so a later step that read one would show NaN.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/speculate.hpp"
#include "schedules/ops/sample.hpp"
#include "tests/example_model.hpp"

namespace {

using mk::device::GenerateOptions;
using mk::device::GenerateResult;
using mk::device::SpeculateOptions;
using mk::device::SpeculationStats;
using V = std::vector<int32_t>;

// Drafting all that fits every step (not cost-aware: the runs below must check drafts).
SpeculateOptions options(uint32_t draft, uint32_t min_ngram = 2) {
  SpeculateOptions o;
  o.draft = draft;
  o.min_ngram = min_ngram;
  o.cost_aware = false;
  return o;
}
V draft(const V& context, uint32_t k, SpeculateOptions o = {}) { return mk::device::ngram_draft(context, o, k); }

}  // namespace

TEST_CASE("speculate: the n-gram drafter takes what followed the latest earlier occurrence of the longest tail") {
  // The 3-gram 1 2 3 occurs at 0: what followed it, up to k tokens and the context's end.
  CHECK(draft({1, 2, 3, 4, 1, 2, 3}, 4) == V{4, 1, 2, 3});
  CHECK(draft({1, 2, 3, 4, 1, 2, 3}, 2) == V{4, 1});
  // The latest occurrence wins: 5 6 follows 7 8 at 2, 9 at 6.
  CHECK(draft({0, 0, 7, 8, 5, 6, 7, 8, 9, 7, 8}, 3) == V{9, 7, 8});
  // The 3-gram 2 7 8 never occurred before; the 2-gram 7 8 did (at 0).
  CHECK(draft({7, 8, 4, 2, 7, 8}, 3) == V{4, 2, 7});
  // Where what followed reaches the end, the draft reads on into itself: repeats go on.
  CHECK(draft({3, 5, 5, 5}, 4) == V{5, 5, 5, 5});
  CHECK(draft({1, 2, 3, 1, 2}, 5) == V{3, 1, 2, 3, 1});
  // No tail of 2 or more occurred before: nothing (a 1-gram would, with min_ngram 1).
  CHECK(draft({1, 2, 3, 4, 2}, 3).empty());
  CHECK(draft({1, 2, 3, 4, 2}, 3, options(4, 1)) == V{3, 4, 2});
  CHECK(draft({1, 2, 1, 2}, 0).empty());
  CHECK(draft({1}, 4).empty());
  CHECK(draft({}, 4).empty());
}

TEST_CASE("speculate: --speculate's value") {
  CHECK(mk::device::parse_speculate("ngram").draft == SpeculateOptions{}.draft);
  CHECK(mk::device::parse_speculate("ngram:7").draft == 7);
  for (const char* bad : {"ngram:0", "ngram:65", "ngram:", "ngram:x", "ngram:-1", "ngrams", "draft", "ngram:4:2", ""})
    CHECK_THROWS_WITH(mk::device::parse_speculate(bad),
                      ("--speculate takes ngram or ngram:K (K: tokens drafted a step, 1 to 64), not '" + std::string(bad) + "'")
                          .c_str());
}

namespace {

using Model = mk::test::ExampleModel;

// A prompt that repeats itself: a random phrase three times, then its first half, so that
// drafting has something to find from the first step on; then random tokens.
V repetitive_prompt(uint32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab) - 1);
  V phrase(9), p;
  for (int32_t& t : phrase) t = d(rng);
  for (int i = 0; i < 3; ++i) p.insert(p.end(), phrase.begin(), phrase.end());
  p.insert(p.end(), phrase.begin(), phrase.begin() + 4);
  return p;
}

struct Runs {
  GenerateResult plain, speculative;
  SpeculationStats stats;
};

// The same options decoded one token a step, and speculatively, each on a fresh backend.
Runs both(const Model& m, const GenerateOptions& g, const SpeculateOptions& spec, uint32_t max_context) {
  mk::device::RuntimeOptions o;
  o.max_context = max_context;
  Runs r;
  auto plain = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
  r.plain = mk::device::generate(*plain, m.s, g, max_context);
  auto spec_backend = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
  r.speculative = mk::device::generate_speculative(*spec_backend, m.s, g, spec, max_context, &r.stats);
  return r;
}

void check_same(const GenerateResult& got, const GenerateResult& want) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.steps == want.steps);
  CHECK(got.prompt_steps == want.prompt_steps);
  CHECK(got.stopped == want.stopped);
  REQUIRE(got.logits.size() == want.logits.size());
  for (size_t i = 0; i < got.logits.size(); ++i) {
    CAPTURE(i);
    CHECK(got.logits[i] == want.logits[i]);  // the same bits: every row computes as a step of one
  }
}

}  // namespace

TEST_CASE("speculate: n-gram drafts give the tokens, steps and logits of decoding one token a step") {
  uint32_t checks = 0, accepted = 0;
  for (const std::string name : {"tiny-llama", "tiny-qwen3"})
    for (const uint32_t max_tokens : {2u, 5u, 8u}) {
      CAPTURE(name);
      CAPTURE(max_tokens);
      const Model m(name, 7, max_tokens, 41 + max_tokens);
      std::mt19937 rng(max_tokens);
      for (const bool logits : {true, false})
        for (const uint32_t draft : {1u, 4u, 16u}) {
          CAPTURE(logits);
          CAPTURE(draft);
          GenerateOptions g;
          g.prompt = repetitive_prompt(m.vocab(), rng);
          g.tokens = 40;
          g.keep_logits = logits;
          const Runs r = both(m, g, options(draft), 96);
          REQUIRE(r.plain.tokens.size() == 40);
          check_same(r.speculative, r.plain);
          CHECK(r.stats.accepted <= r.stats.drafted);
          CHECK(r.stats.drafted <= r.stats.checks * std::min(draft, max_tokens - 1));
          // Every step made at least one token, and a step makes at most its accepted drafts and one.
          CHECK(r.stats.steps + r.stats.accepted == r.speculative.tokens.size() - 1);
          checks += r.stats.checks, accepted += r.stats.accepted;
        }
    }
  // The runs above did check drafts and keep them (these random models soon repeat one token).
  CHECK(checks > 20);
  CHECK(accepted > 20);
}

TEST_CASE("speculate: every number of agreeing drafts, the rest rejected and their positions poisoned") {
  for (const std::string name : {"tiny-llama", "tiny-qwen3"})
    for (const uint32_t max_tokens : {2u, 4u, 8u}) {
      CAPTURE(name);
      CAPTURE(max_tokens);
      const Model m(name, 6, max_tokens, 5 + max_tokens);
      std::mt19937 rng(max_tokens + 100);
      GenerateOptions g;
      g.prompt = repetitive_prompt(m.vocab(), rng);
      g.tokens = 50;
      g.keep_logits = true;
      mk::device::RuntimeOptions o;
      o.max_context = 96;
      auto a = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
      const GenerateResult plain = mk::device::generate(*a, m.s, g, 96);
      REQUIRE(plain.tokens.size() == 50);
      // Drafts whose first `agree` tokens are the plain run's next ones and the rest are not,
      // `agree` going 0, 1, ..., k, 0, ... from one check to the next.
      uint32_t calls = 0, expected = 0, drafted = 0;
      SpeculateOptions spec = options(7);
      spec.drafter = [&](std::span<const int32_t> context, uint32_t k) {
        const size_t at = context.size() - g.prompt.size();  // the plain run's next token
        const uint32_t agree = calls++ % (k + 1);
        V d;
        for (uint32_t j = 0; j < k; ++j) {
          const int32_t truth = plain.tokens.at(at + j);
          d.push_back(j < agree ? truth : (truth + 1 + static_cast<int32_t>(j)) % static_cast<int32_t>(m.vocab()));
        }
        expected += agree, drafted += k;
        return d;
      };
      auto b = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
      SpeculationStats st;
      check_same(mk::device::generate_speculative(*b, m.s, g, spec, 96, &st), plain);
      CHECK(st.checks == calls);
      CHECK(st.accepted == expected);
      CHECK(st.drafted == drafted);
      CHECK(st.drafted - st.accepted > 10);  // rejected drafts: positions written, then poisoned
      CHECK(st.steps + st.accepted == plain.tokens.size() - 1);
    }
}

TEST_CASE("speculate: stops and token limits inside a check step, a continuation, and sampling") {
  const Model m("tiny-llama", 5, 6, 3);
  std::mt19937 rng(9);
  GenerateOptions g;
  g.prompt = repetitive_prompt(m.vocab(), rng);
  g.tokens = 30;
  g.keep_logits = true;
  const Runs free_run = both(m, g, options(4), 64);
  REQUIRE(free_run.stats.accepted > 0);
  // Every token limit, and a stop at the n-th occurrence of a generated token, for every n: each
  // ends somewhere inside a check step or at its end.
  for (uint32_t tokens = 0; tokens <= 12; ++tokens) {
    CAPTURE(tokens);
    g.tokens = tokens;
    for (const bool cost_aware : {false, true}) {
      SpeculateOptions spec = options(4);
      spec.cost_aware = cost_aware;
      const Runs r = both(m, g, spec, 64);
      check_same(r.speculative, r.plain);
    }
  }
  g.tokens = 30;
  const int32_t stop_token = free_run.plain.tokens[7];
  for (int n = 1; n <= 3; ++n) {
    CAPTURE(n);
    int seen_plain = 0, seen_spec = 0;
    GenerateOptions stopping = g;
    stopping.stop = [&, n](int32_t t) { return t == stop_token && ++seen_plain == n; };
    mk::device::RuntimeOptions o;
    o.max_context = 64;
    auto a = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
    const GenerateResult plain = mk::device::generate(*a, m.s, stopping, 64);
    stopping.stop = [&, n](int32_t t) { return t == stop_token && ++seen_spec == n; };
    auto b = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
    const GenerateResult spec = mk::device::generate_speculative(*b, m.s, stopping, options(4), 64);
    check_same(spec, plain);
  }
  // A continuation: the cache already holds a first call's positions.
  {
    mk::device::RuntimeOptions o;
    o.max_context = 96;
    GenerateOptions first = g;
    first.tokens = 10;
    GenerateOptions second = g;
    second.start = static_cast<uint32_t>(g.prompt.size()) + 9;
    auto a = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
    const GenerateResult a1 = mk::device::generate(*a, m.s, first, 96);
    second.prompt = {a1.tokens.back(), a1.tokens[2], a1.tokens[3]};
    const GenerateResult a2 = mk::device::generate(*a, m.s, second, 96);
    auto b = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
    check_same(mk::device::generate_speculative(*b, m.s, first, options(4), 96), a1);
    check_same(mk::device::generate_speculative(*b, m.s, second, options(4), 96), a2);
  }
  // Seeded sampling: a position's draw depends on the seed and the position alone.
  Model sm("tiny-qwen3", 5, 5, 8, true);
  REQUIRE(mk::schedule::set_sampling(sm.s, {.temperature = 0.8f, .top_k = 20, .top_p = 0.95f, .seed = 12345}) == 1);
  g.prompt = repetitive_prompt(sm.vocab(), rng);
  const Runs sampled = both(sm, g, options(4), 64);
  check_same(sampled.speculative, sampled.plain);
  CHECK(sampled.stats.checks > 0);
}

TEST_CASE("speculate: what cannot run is refused before anything runs") {
  const Model one("tiny-llama", 3, 1, 2);
  mk::device::RuntimeOptions o;
  o.max_context = 32;
  auto b = mk::device::make_emulator_backend(one.s, *one.ckpt, o);
  GenerateOptions g;
  g.prompt = {1, 2, 3};
  g.tokens = 8;
  CHECK_THROWS_WITH(mk::device::generate_speculative(*b, one.s, g, options(3), 32),
                    "speculative decoding checks its drafts in steps of several tokens, but this schedule runs one token a "
                    "step; plan it with mkplan --max-tokens 4");
  const Model m("tiny-llama", 3, 4, 2);
  auto c = mk::device::make_emulator_backend(m.s, *m.ckpt, o);
  g.tokens = 31;
  CHECK_THROWS_WITH(mk::device::generate_speculative(*c, m.s, g, {}, 32),
                    "33 positions do not fit a context of 32 positions; raise --max-context");
  CHECK(c->read_history(0, 0, 4) == V(4, -1));  // nothing ran
}

TEST_CASE("speculate: the cost-aware policy drafts where checking pays, and is not slower where it does not") {
  // Steps of a GPU's shape (a one-row step 1, a check step of r rows 2.5 + 0.15 r), drafts kept
  // each with chance p once those before were: tokens a unit of time against plain decoding's 1.
  auto simulate = [](double p, uint32_t K, uint64_t seed) {
    mk::device::DraftPolicy policy(K, true);
    std::mt19937_64 rng(seed);
    std::bernoulli_distribution keep(p);
    double time = 0;
    uint32_t tokens = 0, checks = 0;
    while (tokens < 4000) {
      const uint32_t k = policy.draft_size(K);
      uint32_t kept = 0;
      while (kept < k && keep(rng)) ++kept;
      const double t = k ? 2.5 + 0.15 * (k + 1) : 1.0;
      policy.observe(k + 1, t, k, kept);
      time += t, tokens += kept + 1, checks += k ? 1 : 0;
    }
    return std::pair{tokens / time, checks};
  };
  for (const double p : {0.0, 0.2, 0.5}) {
    CAPTURE(p);
    const auto [rate, checks] = simulate(p, 8, 1);
    CHECK(rate > 0.98);  // within 2 % of plain decoding's 1 token a unit
    CHECK(checks < 60);   // it stopped drafting but for probes, ever rarer
  }
  for (const double p : {0.9, 1.0}) {
    CAPTURE(p);
    const auto [rate, checks] = simulate(p, 8, 2);
    CHECK(rate > (p == 1.0 ? 2.2 : 1.5));  // 9 tokens for 3.85 units with every draft kept
    CHECK(checks > 300);
  }
  // Text that becomes easy to guess halfway: the probes find it.
  mk::device::DraftPolicy policy(8, true);
  for (int i = 0; i < 200; ++i) policy.observe(policy.draft_size(8) + 1, 1.0, 0, 0);  // plain steps only
  uint32_t drafted = 0;
  for (int i = 0; i < 400; ++i) {
    const uint32_t k = policy.draft_size(8);
    policy.observe(k + 1, k ? 2.5 + 0.15 * (k + 1) : 1.0, k, k);
    drafted += k;
  }
  CHECK(drafted > 1000);
  // Not cost-aware: all that fits, every step; and never more than the schedule allows.
  mk::device::DraftPolicy fixed(4, false);
  for (int i = 0; i < 10; ++i) {
    CHECK(fixed.draft_size(3) == 3);
    CHECK(fixed.draft_size(9) == 4);
    fixed.observe(5, 100.0, 4, 0);
  }
}
