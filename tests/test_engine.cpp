// Continuous batching (device/engine.hpp) on the emulator: requests that come and go while others
// run give each the tokens of its own run; cancellation, stop requests, a full queue, shutdown
// and refused requests.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/engine.hpp"
#include "device/runtime.hpp"
#include "tests/example_model.hpp"

namespace {

namespace fs = std::filesystem;
using mk::device::Engine;
using mk::device::EngineRequest;
using mk::device::EngineResult;
using mk::device::EndReason;

// The example on 5 SMs.
struct Model : mk::test::ExampleModel {
  Model(const std::string& name, uint32_t max_tokens, uint64_t seed, bool sample = false)
      : ExampleModel(name, 5, max_tokens, seed, sample) {}
};

// What one sequence gives alone (a backend of its own, one position a step), sampling (where
// given) with the parameters in the schedule's sample op, as mkrun --temperature sets them.
std::vector<int32_t> alone(const Model& m, const std::vector<int32_t>& prompt, uint32_t tokens, uint32_t max_context,
                           const std::optional<mk::schedule::SamplingParams>& sampling = std::nullopt) {
  mk::schedule::Schedule s = m.s;
  if (sampling) REQUIRE(mk::schedule::set_sampling(s, *sampling) == 1);
  mk::device::RuntimeOptions o;
  o.max_context = max_context;
  auto b = mk::device::make_emulator_backend(s, *m.ckpt, o);
  mk::device::GenerateOptions g;
  g.prompt = prompt;
  g.tokens = tokens;
  g.prompt_chunk = 1;
  return mk::device::generate(*b, s, g, max_context).tokens;
}

// A request's outcome, filled on the engine's thread.
struct Outcome {
  std::mutex mu;
  std::vector<int32_t> tokens;
  bool ended = false;
  EngineResult result;
};

EngineRequest request(std::vector<int32_t> prompt, uint32_t max_tokens, std::shared_ptr<Outcome> out) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.on_token = [out](int32_t t) {
    std::lock_guard<std::mutex> lock(out->mu);
    out->tokens.push_back(t);
    return true;
  };
  r.on_end = [out](const EngineResult& e) {
    std::lock_guard<std::mutex> lock(out->mu);
    REQUIRE(!out->ended);  // once
    out->ended = true;
    out->result = e;
  };
  return r;
}

bool wait_for(const std::function<bool()>& done, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done())
    if (std::chrono::steady_clock::now() > end) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

// A backend that passes everything to another and notes how the engine filled its launches.
struct Recording : mk::device::Backend {
  std::unique_ptr<mk::device::Backend> inner;
  size_t most_segments = 0;
  uint32_t mixed_steps = 0;  // a prompt chunk of several rows beside a decoding row
  explicit Recording(std::unique_ptr<mk::device::Backend> b) : inner(std::move(b)) {}
  std::string name() const override { return inner->name(); }
  uint32_t slots() const override { return inner->slots(); }
  void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) override { inner->set_history(slot, first, ids); }
  void set_sampling(uint32_t slot, const mk::schedule::SlotSampling& s) override { inner->set_sampling(slot, s); }
  void run_steps(const mk::device::StepRun& run) override {
    most_segments = std::max(most_segments, run.segments.size());
    bool chunk = false, single = false;
    for (const auto& g : run.segments) (g.rows > 1 ? chunk : single) = true;
    mixed_steps += chunk && single;
    inner->run_steps(run);
  }
  std::vector<int32_t> read_history(uint32_t slot, uint32_t begin, uint32_t end) override {
    return inner->read_history(slot, begin, end);
  }
  std::vector<float> logits_rows(uint32_t row, uint32_t rows) override { return inner->logits_rows(row, rows); }
};

bool all_ended(const std::vector<std::shared_ptr<Outcome>>& out) {
  for (const auto& o : out) {
    std::lock_guard<std::mutex> lock(o->mu);
    if (!o->ended) return false;
  }
  return true;
}

TEST_CASE("engine: requests joining and leaving a running batch each get their own run's tokens") {
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    CAPTURE(name);
    const Model m(name, 6, 31);
    const uint32_t max_context = 96;
    Recording b(m.backend(4, max_context));  // 4 slots for 9 requests: some wait for a slot
    Engine engine(b, m.s, max_context, 16);
    CHECK(engine.slots() == 4);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.vocab()) - 1);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<uint32_t> lengths = {1, 7, 13, 3, 20, 2, 9, 6, 15}, tokens = {5, 12, 3, 20, 8, 1, 17, 9, 4};
    for (const uint32_t n : lengths) {
      prompts.emplace_back(n);
      for (int32_t& t : prompts.back()) t = id(rng);
    }
    std::vector<std::shared_ptr<Outcome>> out;
    for (size_t i = 0; i < prompts.size(); ++i) out.push_back(std::make_shared<Outcome>());
    // Five at first (one waits for a slot); requests 5-8 from this thread while the engine runs,
    // each once request i - 4 has two tokens, so that they join a batch mid-run.
    for (size_t i = 0; i < 5; ++i) engine.submit(request(prompts[i], tokens[i], out[i]));
    size_t submitted = 5;
    std::thread runner([&] { engine.run(); });
    for (size_t i = 5; i < prompts.size(); ++i) {
      REQUIRE(wait_for([&] {
        std::lock_guard<std::mutex> lock(out[i - 4]->mu);
        return out[i - 4]->tokens.size() >= 2 || out[i - 4]->ended;
      }));
      engine.submit(request(prompts[i], tokens[i], out[i]));
      ++submitted;
    }
    REQUIRE(wait_for([&] { return all_ended(out); }));
    engine.shutdown();
    runner.join();
    CHECK(submitted == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(out[i]->result.reason == EndReason::length);
      CHECK(out[i]->result.tokens == tokens[i]);
      CHECK(out[i]->result.prompt_tokens == lengths[i]);
      CHECK(out[i]->tokens == alone(m, prompts[i], tokens[i], max_context));
    }
    const Engine::Stats st = engine.stats();
    CHECK(st.served == prompts.size());
    // They ran together: launches of four sequences, and prompt chunks beside decoding rows.
    CHECK(b.most_segments == 4);
    CHECK(b.mixed_steps > 0);
    CHECK(st.running == 0);
    CHECK(st.waiting == 0);
  }
}

TEST_CASE("engine: each request samples with its own parameters, as its own run with them would") {
  const Model m("tiny-llama", 4, 41, true);
  const uint32_t max_context = 64;
  auto b = m.backend(4, max_context);
  Engine engine(*b, m.s, max_context, 8);
  std::mt19937 rng(12);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.vocab()) - 1);
  // (The random checkpoint's logits are far apart: temperatures of tens to sample at all.)
  const std::vector<std::optional<mk::schedule::SamplingParams>> params = {
      mk::schedule::SamplingParams{40.0f, 0, 1.0f, 5}, std::nullopt /* the op's: greedy */,
      mk::schedule::SamplingParams{40.0f, 20, 0.9f, 5}, mk::schedule::SamplingParams{40.0f, 0, 1.0f, 6},
      mk::schedule::SamplingParams{0.0f, 0, 1.0f, 0} /* greedy, asked */};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> out;
  for (size_t i = 0; i < params.size(); ++i) {
    prompts.emplace_back(3 + i);
    for (int32_t& t : prompts.back()) t = id(rng);
    out.push_back(std::make_shared<Outcome>());
    EngineRequest r = request(prompts[i], 24, out[i]);
    r.sampling = params[i];
    engine.submit(std::move(r));
  }
  std::thread runner([&] { engine.run(); });
  REQUIRE(wait_for([&] { return all_ended(out); }));
  engine.shutdown();
  runner.join();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(out[i]->tokens == alone(m, prompts[i], 24, max_context, params[i]));
  }
  for (const size_t i : {0, 2, 3}) CHECK(out[i]->tokens != alone(m, prompts[i], 24, max_context));  // they did sample
  CHECK(alone(m, prompts[0], 24, max_context, params[0]) != alone(m, prompts[0], 24, max_context, params[3]));  // by seed
  CHECK(out[1]->tokens == alone(m, prompts[1], 24, max_context));
  auto bad = std::make_shared<Outcome>();
  EngineRequest r = request(prompts[0], 4, bad);
  r.sampling = mk::schedule::SamplingParams{-1.0f, 0, 1.0f, 0};
  CHECK_THROWS_AS(engine.submit(std::move(r)), std::invalid_argument);
}

TEST_CASE("engine: a stop token, a stop asked by on_token, cancellation, a full queue, shutdown") {
  const Model m("tiny-llama", 4, 77);
  const uint32_t max_context = 64;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.vocab()) - 1);
  std::vector<int32_t> prompt(5);
  for (int32_t& t : prompt) t = id(rng);
  const std::vector<int32_t> want = alone(m, prompt, 30, max_context);

  SUBCASE("a stop token ends the sequence there, counted but not passed on") {
    auto b = m.backend(2, max_context);
    Engine engine(*b, m.s, max_context, 4);
    auto out = std::make_shared<Outcome>();
    EngineRequest r = request(prompt, 30, out);
    const int32_t stop = want[6];
    r.is_stop = [stop](int32_t t) { return t == stop; };
    engine.submit(std::move(r));
    std::thread runner([&] { engine.run(); });
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(out->mu); return out->ended; }));
    engine.shutdown();
    runner.join();
    size_t at = 0;
    while (want[at] != stop) ++at;
    CHECK(out->result.reason == EndReason::stop);
    CHECK(out->tokens == std::vector<int32_t>(want.begin(), want.begin() + at));
    CHECK(out->result.tokens == at + 1);
  }
  SUBCASE("on_token returning false stops; cancel() ends a running and a queued request; the slot is used again") {
    auto b = m.backend(1, max_context);  // one slot: the second request waits
    Engine engine(*b, m.s, max_context, 4);
    auto stopped = std::make_shared<Outcome>(), cancelled = std::make_shared<Outcome>(),
         queued = std::make_shared<Outcome>(), after = std::make_shared<Outcome>();
    EngineRequest r = request(prompt, 30, stopped);
    r.on_token = [stopped](int32_t t) {
      std::lock_guard<std::mutex> lock(stopped->mu);
      stopped->tokens.push_back(t);
      return stopped->tokens.size() < 4;
    };
    engine.submit(std::move(r));
    std::thread runner([&] { engine.run(); });
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(stopped->mu); return stopped->ended; }));
    CHECK(stopped->result.reason == EndReason::stop);
    CHECK(stopped->tokens == std::vector<int32_t>(want.begin(), want.begin() + 4));

    const uint64_t a = engine.submit(request(prompt, 60, cancelled));  // runs (one slot)
    const uint64_t q = engine.submit(request(prompt, 5, queued));      // waits
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(cancelled->mu); return cancelled->tokens.size() >= 2; }));
    engine.cancel(q);
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(queued->mu); return queued->ended; }));
    CHECK(queued->result.reason == EndReason::cancelled);
    CHECK(queued->tokens.empty());
    engine.cancel(a);
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(cancelled->mu); return cancelled->ended; }));
    CHECK(cancelled->result.reason == EndReason::cancelled);
    CHECK(cancelled->tokens.size() < 60);
    engine.submit(request(prompt, 10, after));  // the slot again, from position 0
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(after->mu); return after->ended; }));
    CHECK(after->tokens == std::vector<int32_t>(want.begin(), want.begin() + 10));
    engine.cancel(a);  // ended already: nothing
    engine.shutdown();
    runner.join();
    CHECK(engine.stats().served == 4);
  }
  SUBCASE("a full queue refuses, naming its length; shutdown ends what waits and what runs") {
    auto b = m.backend(1, max_context);
    Engine engine(*b, m.s, max_context, 2);
    std::vector<std::shared_ptr<Outcome>> out;
    for (int i = 0; i < 2; ++i) {
      out.push_back(std::make_shared<Outcome>());
      engine.submit(request(prompt, 50, out.back()));
    }
    auto refused = std::make_shared<Outcome>();
    try {
      engine.submit(request(prompt, 5, refused));
      FAIL("a third request went into a queue of 2");
    } catch (const mk::device::EngineBusy& e) {
      CHECK(std::string(e.what()).find("2 requests are already waiting") != std::string::npos);
    }
    std::thread runner([&] { engine.run(); });
    REQUIRE(wait_for([&] { std::lock_guard<std::mutex> l(out[0]->mu); return out[0]->tokens.size() >= 1; }));
    engine.shutdown();
    runner.join();
    for (auto& o : out) {
      CHECK(o->ended);
      CHECK(o->result.reason == EndReason::cancelled);
    }
    CHECK(!refused->ended);
    CHECK_THROWS_AS(engine.submit(request(prompt, 5, refused)), std::runtime_error);
  }
  SUBCASE("requests that cannot run are refused before they queue") {
    auto b = m.backend(1, max_context);
    Engine engine(*b, m.s, max_context, 2);
    auto o = std::make_shared<Outcome>();
    CHECK_THROWS_WITH_AS(engine.submit(request({}, 5, o)), doctest::Contains("at least one token"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(engine.submit(request({static_cast<int32_t>(m.vocab())}, 5, o)), doctest::Contains("outside the vocabulary"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(engine.submit(request({-1}, 5, o)), doctest::Contains("outside the vocabulary"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(engine.submit(request(prompt, 0, o)), doctest::Contains("at least 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(engine.submit(request(prompt, 61, o)), doctest::Contains("do not fit the context of 64"),
                         std::invalid_argument);
    CHECK_NOTHROW(engine.submit(request(prompt, 60, o)));  // 5 + 60 - 1 = 64 positions
    CHECK(engine.stats().waiting == 1);
  }
}

}  // namespace
