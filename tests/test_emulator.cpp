// The CPU emulator end to end: planned tiny models on random checkpoints against the independent
// reference forward pass (teacher forcing), shuffled orders, deadlock reports, counter
// generations across steps, checkpoint mismatches, generate() and write_npy().
#include <doctest/doctest.h>

#include "tests/step_context.hpp"
#include "tests/temp_dir.hpp"
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/bf16.hpp"
#include "device/emulator.hpp"
#include "device/runtime.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/schedule.hpp"
#include "tests/float8_model.hpp"
#include "tests/reference.hpp"

namespace {

namespace fs = std::filesystem;
using mk::device::Checkpoint;
using mk::device::DeadlockError;
using mk::device::Emulator;
using mk::device::Order;
using mk::device::RuntimeOptions;
using mk::planner::Policy;
using mk::schedule::Schedule;

struct TempDir : mk::test::TempDir {
  TempDir() : mk::test::TempDir("mk_test_emulator") {}
};

mk::dsl::ModelGraph load_model(const std::string& name) {
  return mk::dsl::parse_file(fs::path(MK_SOURCE_DIR) / "examples" / (name + ".yaml"));
}

Schedule plan_schedule(const mk::dsl::ModelGraph& model, uint32_t sms, Policy policy) {
  mk::planner::PlanOptions o;
  o.sm_count = sms;
  o.policy = policy;
  return mk::planner::plan(model, o).schedule;
}

// A planned model with a random checkpoint on disk, opened.
struct Fixture {
  mk::dsl::ModelGraph model;
  Schedule schedule;
  TempDir dir;
  Checkpoint ckpt;

  Fixture(const std::string& name, uint32_t sms, Policy policy, uint64_t seed) : Fixture(load_model(name), sms, policy, seed) {}
  Fixture(mk::dsl::ModelGraph m, uint32_t sms, Policy policy, uint64_t seed)
      : model(std::move(m)), schedule(plan_schedule(model, sms, policy)), ckpt(open(schedule, dir.path, seed)) {}

  static Checkpoint open(const Schedule& s, const fs::path& dir, uint64_t seed) {
    mk::device::write_random_checkpoint(s, dir, seed);
    return Checkpoint::open(dir);
  }
  uint32_t vocab() const { return static_cast<uint32_t>(schedule.tensors[schedule.logits_tensor].elements()); }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= m)) m = d;  // NaN propagates
  }
  return m;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// Lowest index of the largest value.
int32_t argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

// The gap between the largest and second largest value, for failure messages about ties.
double top2_gap(const std::vector<float>& v) {
  const int32_t b = argmax(v);
  double second = -INFINITY;
  for (size_t i = 0; i < v.size(); ++i)
    if (static_cast<int32_t>(i) != b) second = std::max(second, double(v[i]));
  return double(v[b]) - second;
}

std::vector<int32_t> random_prompt(uint32_t n, uint32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = d(rng);
  return p;
}

// The token fed at each step of a generate() run: the prompt, then the greedy tokens.
std::vector<int32_t> fed_tokens(const std::vector<int32_t>& prompt, const mk::device::GenerateResult& r) {
  std::vector<int32_t> fed = prompt;
  for (uint32_t pos = static_cast<uint32_t>(prompt.size()); pos < r.steps; ++pos) fed.push_back(r.tokens[pos - prompt.size()]);
  return fed;
}

mk::device::GenerateResult run_generate(const Fixture& f, const RuntimeOptions& opt, const std::vector<int32_t>& prompt,
                                        uint32_t tokens) {
  auto backend = mk::device::make_emulator_backend(f.schedule, f.ckpt, opt);
  mk::device::GenerateOptions g;
  g.prompt = prompt;
  g.tokens = tokens;
  g.keep_logits = true;
  return mk::device::generate(*backend, f.schedule, g, opt.max_context);
}

// Teacher forcing: the reference decodes exactly the tokens the emulator was fed; every step's
// logits agree within `tol`, and every greedy token is the reference's argmax.
void compare_with_reference(const Fixture& f, const std::vector<int32_t>& prompt, const mk::device::GenerateResult& r,
                            double tol) {
  const std::vector<int32_t> fed = fed_tokens(prompt, r);
  REQUIRE(r.logits.size() == r.steps);
  mk::test::ReferenceModel ref(f.ckpt, mk::test::reference_config(f.model), static_cast<int>(r.steps));
  for (uint32_t pos = 0; pos < r.steps; ++pos) {
    CAPTURE(pos);
    const std::vector<float> want = ref.step(fed[pos]);
    const std::vector<float>& got = r.logits[pos];
    REQUIRE(got.size() == want.size());
    CHECK(all_finite(got));
    const double err = mk::test::rel_error(got, want);
    CAPTURE(err);
    CHECK(err < tol);
    if (pos + 1 >= prompt.size()) {
      const int32_t token = r.tokens[pos + 1 - prompt.size()];
      const double gap = top2_gap(want);
      CAPTURE(gap);
      CHECK(token == argmax(want));
      CHECK(token == argmax(got));  // the device's argmax agrees with its own logits
    }
  }
}

// Host buffers for driving an Emulator directly: weights from a checkpoint, activations and io
// poisoned with NaN, kv caches sized for `max_context` positions (also poisoned).
struct Buffers {
  std::vector<std::vector<uint8_t>> owned;
  std::vector<void*> base;

  Buffers(const Schedule& s, const Checkpoint& ckpt, uint32_t max_context) {
    owned.resize(s.tensors.size());
    base.resize(s.tensors.size(), nullptr);
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const mk::schedule::Tensor& t = s.tensors[i];
      if (t.role == mk::schedule::Role::weight) {
        const mk::device::CheckpointTensor* w = ckpt.find(t.key);
        REQUIRE(w != nullptr);
        base[i] = const_cast<uint8_t*>(w->bytes.data());
        continue;
      }
      const uint64_t n = t.elements() * (t.role == mk::schedule::Role::kv_cache ? max_context : 1);
      owned[i].assign(n * mk::schedule::dtype_bytes(t.dtype), 0xff);
      base[i] = owned[i].data();
    }
  }
  mk::device::TensorTable table() const { return {base.data(), static_cast<uint32_t>(base.size())}; }
  std::vector<float> floats(uint32_t id) const {
    std::vector<float> v(owned[id].size() / sizeof(float));
    std::memcpy(v.data(), owned[id].data(), owned[id].size());
    return v;
  }
  int32_t token(const Schedule& s) const {
    int32_t t;
    std::memcpy(&t, owned[s.token_tensor].data(), sizeof t);
    return t;
  }
};

// Runs one step of `s` (fresh buffers, position 0) and returns the DeadlockError's message, or
// "" if the step completed.
std::string deadlock_message(const Schedule& s, const Checkpoint& ckpt) {
  Buffers mem(s, ckpt, 8);
  Emulator emu(s);
  try {
    emu.run_step(mk::test::step_context(0, 5, 8, 1), mem.table());
  } catch (const DeadlockError& e) {
    return e.what();
  }
  return "";
}

// Gives instruction `i` a private copy of its waits (so edits touch no other instruction).
void own_waits(Schedule& s, uint32_t i) {
  mk::schedule::Instruction& inst = s.instructions[i];
  const uint32_t begin = static_cast<uint32_t>(s.waits.size());
  for (uint32_t w = 0; w < inst.wait_count; ++w) s.waits.push_back(s.waits[inst.wait_begin + w]);
  inst.wait_begin = begin;
}

void add_wait(Schedule& s, uint32_t i, mk::schedule::Wait w) {
  own_waits(s, i);
  s.waits.push_back(w);
  ++s.instructions[i].wait_count;
}

void add_signal(Schedule& s, uint32_t i, uint32_t counter) {
  mk::schedule::Instruction& inst = s.instructions[i];
  const uint32_t begin = static_cast<uint32_t>(s.signals.size());
  for (uint32_t k = 0; k < inst.signal_count; ++k) s.signals.push_back(s.signals[inst.signal_begin + k]);
  s.signals.push_back(counter);
  inst.signal_begin = begin;
  ++inst.signal_count;
}

const char* policy_label(Policy p) { return p == Policy::round_robin ? "round-robin" : "critical-path"; }

}  // namespace

TEST_CASE("emulator: matches the reference forward pass (teacher forcing, greedy tokens)") {
  uint64_t seed = 0xe1100;
  for (const char* name : {"tiny-llama", "tiny-qwen3"})
    for (uint32_t sms : {1u, 5u, 132u})
      for (Policy policy : {Policy::round_robin, Policy::critical_path}) {
        ++seed;  // a fresh checkpoint and prompt per configuration
        CAPTURE(name);
        CAPTURE(sms);
        CAPTURE(policy_label(policy));
        CAPTURE(seed);
        Fixture f(name, sms, policy, seed);
        REQUIRE(f.schedule.sm_count == sms);
        std::mt19937 rng(static_cast<uint32_t>(seed));
        const std::vector<int32_t> prompt = random_prompt(4, f.vocab(), rng);
        RuntimeOptions opt;
        opt.max_context = 32;
        const mk::device::GenerateResult r = run_generate(f, opt, prompt, 16);
        CHECK(r.steps == 4 + 15);
        REQUIRE(r.tokens.size() == 16);
        compare_with_reference(f, prompt, r, 1e-4);
      }
}

TEST_CASE("emulator: float8 projections of each scale layout match the reference dequantizing the checkpoint") {
  uint64_t seed = 0xf8000;
  for (const char* name : {"tiny-llama", "tiny-qwen3"})
    for (const char* layout : {"tensor", "row", "block128"}) {
      ++seed;
      CAPTURE(name);
      CAPTURE(layout);
      const std::string file = (fs::path(MK_SOURCE_DIR) / "examples" / (std::string(name) + ".yaml")).string();
      Fixture f(mk::dsl::parse_string(mk::test::yaml_with_float8(file, layout), name), 5, Policy::critical_path, seed);
      // The checkpoint holds float8 projections with scales of the layout, and bf16 elsewhere.
      const mk::device::CheckpointTensor* wq = f.ckpt.find("model.layers.1.self_attn.q_proj.weight");
      REQUIRE(wq);
      CHECK(wq->stored_dtype == "F8_E4M3");
      CHECK(f.ckpt.find("model.layers.1.self_attn.q_proj.weight_scale")->shape.size() == (std::string(layout) == "block128" ? 2 : 1));
      CHECK(f.ckpt.find("model.layers.1.input_layernorm.weight")->stored_dtype == "BF16");
      std::mt19937 rng(static_cast<uint32_t>(seed));
      const std::vector<int32_t> prompt = random_prompt(4, f.vocab(), rng);
      RuntimeOptions opt;
      opt.max_context = 32;
      const mk::device::GenerateResult r = run_generate(f, opt, prompt, 12);
      REQUIRE(r.tokens.size() == 12);
      compare_with_reference(f, prompt, r, 1e-4);
    }
}

TEST_CASE("emulator: every number of active KV splits matches the reference (short steps, some splits, all)") {
  // tiny-qwen3 has 4 splits per kv head; (positions per split, short positions): the schedule's
  // (2, 3) runs short steps (attn_reduce's work done by the attention) to position 3, then 2
  // splits, and 4 from position 11 (active_kv_splits: half the splits until a step has one and
  // a half times as many); (1, 0) walks 1, 2 and 4 splits with attn_reduce; (32, 0) one split
  // with attn_reduce; (0, 0) every split at every step; (1000, 1000) every step short.
  using mk::schedule::KvSplitPolicy;
  uint64_t seed = 0x5417;
  for (const KvSplitPolicy P : {KvSplitPolicy{mk::schedule::kNone, mk::schedule::kNone}, KvSplitPolicy{1, 0},
                                KvSplitPolicy{32, 0}, KvSplitPolicy{0, 0}, KvSplitPolicy{1000, 1000}})
    for (Policy policy : {Policy::round_robin, Policy::critical_path}) {
      ++seed;
      CAPTURE(P.positions);
      CAPTURE(P.short_positions);
      CAPTURE(policy_label(policy));
      Fixture f("tiny-qwen3", 5, policy, seed);
      REQUIRE(f.schedule.kv_splits.positions == 2);
      REQUIRE(f.schedule.kv_splits.short_positions == 3);
      std::mt19937 rng(static_cast<uint32_t>(seed));
      const std::vector<int32_t> prompt = random_prompt(6, f.vocab(), rng);
      RuntimeOptions opt;
      opt.max_context = 32;
      opt.kv_splits = P;
      opt.order = mk::device::Order::shuffled;
      opt.seed = seed;
      const mk::device::GenerateResult r = run_generate(f, opt, prompt, 14);
      CHECK(r.steps == 6 + 13);
      compare_with_reference(f, prompt, r, 1e-4);
    }
}

TEST_CASE("emulator: shuffled orders give the deterministic run's logits") {
  Fixture f("tiny-llama", 7, Policy::round_robin, 0x5eed7);
  std::mt19937 rng(0x5eed7);
  const std::vector<int32_t> prompt = random_prompt(4, f.vocab(), rng);
  RuntimeOptions opt;
  opt.max_context = 24;
  const mk::device::GenerateResult base = run_generate(f, opt, prompt, 16);
  compare_with_reference(f, prompt, base, 1e-4);
  opt.order = Order::shuffled;
  for (uint64_t k = 1; k <= 24; ++k) {
    CAPTURE(k);
    opt.seed = k;
    const mk::device::GenerateResult r = run_generate(f, opt, prompt, 16);
    CHECK(r.tokens == base.tokens);
    REQUIRE(r.logits.size() == base.logits.size());
    double worst = 0;
    for (size_t step = 0; step < r.logits.size(); ++step) {
      CHECK(all_finite(r.logits[step]));
      worst = std::max(worst, mk::test::rel_error(r.logits[step], base.logits[step]));
    }
    CAPTURE(worst);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("emulator: the shuffled order exposes a missing edge") {
  // Drop every wait of the first layer's first qkv task: it may now read the embedding before it
  // is written. Some shuffled order must show it (NaN from the poison, or a stale vector).
  Fixture f("tiny-llama", 7, Policy::round_robin, 0x3155);
  std::mt19937 rng(0x3155);
  const std::vector<int32_t> prompt = random_prompt(4, f.vocab(), rng);
  RuntimeOptions opt;
  opt.max_context = 12;
  const mk::device::GenerateResult good = run_generate(f, opt, prompt, 4);

  Schedule broken = f.schedule;
  mk::schedule::Instruction* victim = nullptr;  // the lowest task: layer 0's first qkv task
  for (mk::schedule::Instruction& inst : broken.instructions)
    if (broken.ops[inst.op].opcode == mk::schedule::Opcode::matvec && broken.ops[inst.op].layer == 0 &&
        inst.wait_count > 0 && (!victim || inst.task < victim->task))
      victim = &inst;
  const bool dropped = victim != nullptr;
  if (victim) victim->wait_count = victim->short_wait_count = 0;  // at every step
  REQUIRE(dropped);
  opt.order = Order::shuffled;
  bool exposed = false;
  for (uint64_t k = 1; k <= 20 && !exposed; ++k) {
    opt.seed = k;
    auto backend = mk::device::make_emulator_backend(broken, f.ckpt, opt);
    mk::device::GenerateOptions g;
    g.prompt = prompt;
    g.tokens = 4;
    g.keep_logits = true;
    const mk::device::GenerateResult r = mk::device::generate(*backend, broken, g, opt.max_context);
    for (size_t step = 0; step < r.logits.size(); ++step)
      if (!(max_abs_diff(r.logits[step], good.logits[step]) == 0)) exposed = true;
  }
  CHECK(exposed);
}

TEST_CASE("emulator: an unreachable wait target is reported as a deadlock naming SM, instruction, counter") {
  Fixture f("tiny-llama", 2, Policy::round_robin, 0xdead1);
  Schedule s = f.schedule;
  // The first instruction with a wait on SM 1, at some depth in its queue.
  uint32_t victim = mk::schedule::kNone;
  for (uint32_t i = s.sm_offsets[1] + 3; i < s.sm_offsets[2]; ++i)
    if (s.instructions[i].wait_count > 0) {
      victim = i;
      break;
    }
  REQUIRE(victim != mk::schedule::kNone);
  own_waits(s, victim);
  mk::schedule::Wait& w = s.waits[s.instructions[victim].wait_begin];
  const uint32_t counter = w.counter, target = w.target;
  w.target = target + 1;  // edited directly, past the verifier

  const std::string message = deadlock_message(s, f.ckpt);
  CAPTURE(message);
  REQUIRE(!message.empty());
  // The blocked SM's head is the edited instruction; its producers have all signalled.
  const std::string slot = std::to_string(victim - s.sm_offsets[1]);
  CHECK(message.find("SM 1 instruction " + slot + " ") != std::string::npos);
  std::ostringstream want;
  want << "counter " << counter << " = " << target + 1 << ", it is " << target;
  CHECK(message.find(want.str()) != std::string::npos);
}

TEST_CASE("emulator: two SMs waiting on each other are reported as a deadlock") {
  Fixture f("tiny-llama", 2, Policy::round_robin, 0xdead2);
  Schedule s = f.schedule;
  REQUIRE(s.sm_offsets[1] - s.sm_offsets[0] >= 2);
  REQUIRE(s.sm_offsets[2] - s.sm_offsets[1] >= 2);
  const uint32_t a = s.counter_count, b = s.counter_count + 1;  // two new counters
  s.counter_count += 2;
  const uint32_t head0 = s.sm_offsets[0], head1 = s.sm_offsets[1];
  add_signal(s, head1 + 1, a);   // only SM 1's second instruction signals a
  add_signal(s, head0 + 1, b);   // only SM 0's second instruction signals b
  add_wait(s, head0, {a, 1});    // SM 0's head waits for SM 1's second instruction
  add_wait(s, head1, {b, 1});    // and SM 1's head for SM 0's second

  const std::string message = deadlock_message(s, f.ckpt);
  CAPTURE(message);
  REQUIRE(!message.empty());
  CHECK(message.find("SM 0 instruction 0") != std::string::npos);
  CHECK(message.find("SM 1 instruction 0") != std::string::npos);
  CHECK(message.find("counter " + std::to_string(a) + " = 1, it is 0") != std::string::npos);
  CHECK(message.find("counter " + std::to_string(b) + " = 1, it is 0") != std::string::npos);

  SUBCASE("shuffled order reports it too") {
    Buffers mem(s, f.ckpt, 8);
    Emulator shuffled(s);
    CHECK_THROWS_AS(shuffled.run_step(mk::test::step_context(0, 5, 8, 1), mem.table(), Order::shuffled, 99), DeadlockError);
  }
}

TEST_CASE("emulator: counters carry over steps through generations") {
  Fixture f("tiny-qwen3", 5, Policy::critical_path, 0x6e6);
  const Schedule& s = f.schedule;
  const uint32_t max_context = 8;
  Buffers mem(s, f.ckpt, max_context);
  Emulator emu(s);
  mk::test::ReferenceModel ref(f.ckpt, mk::test::reference_config(f.model), max_context);
  std::mt19937 rng(0x6e6);
  const std::vector<int32_t> tokens = random_prompt(3, f.vocab(), rng);
  for (uint32_t pos = 0; pos < 3; ++pos) {
    CAPTURE(pos);
    emu.run_step(mk::test::step_context(pos, static_cast<uint32_t>(tokens[pos]), max_context, pos + 1), mem.table());
    const std::vector<float> want = ref.step(tokens[pos]);
    const std::vector<float> got = mem.floats(s.logits_tensor);
    CHECK(all_finite(got));
    CHECK(mk::test::rel_error(got, want) < 1e-4);
    CHECK(mem.token(s) == argmax(want));
  }
  // Counters now stand at 3 x target: generation 5 cannot be reached in one step.
  const int32_t next = random_prompt(1, f.vocab(), rng)[0];
  CHECK_THROWS_AS(emu.run_step(mk::test::step_context(3, static_cast<uint32_t>(next), max_context, 5), mem.table()), DeadlockError);
  // After a reset, generation 1 runs again and position 3 still matches.
  emu.reset_counters();
  emu.run_step(mk::test::step_context(3, static_cast<uint32_t>(next), max_context, 1), mem.table());
  const std::vector<float> want = ref.step(next);
  CHECK(mk::test::rel_error(mem.floats(s.logits_tensor), want) < 1e-4);
  CHECK(mem.token(s) == argmax(want));
}

TEST_CASE("emulator: a checkpoint missing a key is refused before any step") {
  Fixture f("tiny-llama", 5, Policy::round_robin, 0xc4e);
  const std::string dropped = "model.layers.1.mlp.up_proj.weight";
  REQUIRE(f.ckpt.find(dropped) != nullptr);
  std::vector<mk::device::NewTensor> kept;
  for (const auto& [key, t] : f.ckpt.tensors()) {
    if (key == dropped) continue;
    mk::device::NewTensor n{key, t.shape, std::vector<uint16_t>(t.bytes.size() / 2)};
    std::memcpy(n.bf16.data(), t.bytes.data(), t.bytes.size());
    kept.push_back(std::move(n));
  }
  TempDir dir;
  mk::device::write_safetensors(dir.path / "model.safetensors", kept);
  const Checkpoint partial = Checkpoint::open(dir.path);
  std::string message;
  try {
    (void)mk::device::make_emulator_backend(f.schedule, partial, RuntimeOptions{});
  } catch (const mk::device::WeightError& e) {
    message = e.what();
  }
  CAPTURE(message);
  REQUIRE(!message.empty());
  CHECK(message.find(dropped) != std::string::npos);

  SUBCASE("a key of the wrong shape too") {
    std::vector<mk::device::NewTensor> reshaped = kept;
    for (mk::device::NewTensor& t : reshaped)
      if (t.key == "model.layers.0.self_attn.k_proj.weight") t.shape = {t.shape[1], t.shape[0]};
    TempDir dir2;
    mk::device::write_safetensors(dir2.path / "model.safetensors", reshaped);
    const Checkpoint bad = Checkpoint::open(dir2.path);
    CHECK_THROWS_AS((void)mk::device::make_emulator_backend(f.schedule, bad, RuntimeOptions{}), mk::device::WeightError);
  }
}

namespace {

// A backend that records what generate() asks of it: each step's (token, pos), its greedy
// token a function of both, fed to the next step past the prompt as a real backend does.
struct RecordingBackend : mk::device::Backend {
  uint32_t vocab;
  std::vector<std::pair<uint32_t, uint32_t>> calls;  // (token, pos)
  std::vector<int32_t> tokens = std::vector<int32_t>(128, -1);
  explicit RecordingBackend(uint32_t v) : vocab(v) {}
  std::string name() const override { return "recording"; }
  void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) override {
    REQUIRE(slot == 0);
    std::copy(ids.begin(), ids.end(), tokens.begin() + first);
  }
  void run_steps(const mk::device::StepRun& run) override {
    REQUIRE(run.segments.size() == 1);
    const mk::schedule::StepSegment& g = run.segments[0];
    for (uint32_t k = 0; k < run.steps; ++k)
      for (uint32_t pos = g.start + k * run.advance; pos < g.start + k * run.advance + g.rows; ++pos) {
        const uint32_t token = static_cast<uint32_t>(tokens.at(pos));
        calls.push_back({token, pos});
        if (pos + 1 >= g.fed_from) tokens.at(pos + 1) = static_cast<int32_t>((token * 31 + pos * 7 + 3) % vocab);
      }
  }
  std::vector<int32_t> read_history(uint32_t, uint32_t begin, uint32_t end) override {
    return {tokens.begin() + begin, tokens.begin() + end};
  }
  std::vector<float> logits_rows(uint32_t, uint32_t rows) override {
    return std::vector<float>(size_t{vocab} * rows, float(calls.size()));
  }
};

}  // namespace

TEST_CASE("emulator: generate feeds the prompt, then its own greedy tokens, at positions 0, 1, 2, ...") {
  const Schedule s = plan_schedule(load_model("tiny-llama"), 3, Policy::round_robin);
  const uint32_t vocab = static_cast<uint32_t>(s.tensors[s.logits_tensor].elements());
  RecordingBackend b(vocab);
  mk::device::GenerateOptions g;
  g.prompt = {5, 400, 17};
  g.tokens = 6;
  g.keep_logits = true;
  const mk::device::GenerateResult r = mk::device::generate(b, s, g, 64);
  CHECK(r.steps == 3 + 5);
  REQUIRE(b.calls.size() == 8);
  REQUIRE(r.tokens.size() == 6);
  CHECK(r.logits.size() == 8);
  for (uint32_t pos = 0; pos < 8; ++pos) {
    CAPTURE(pos);
    CHECK(b.calls[pos].second == pos);
    const uint32_t expected_token = pos < 3 ? uint32_t(g.prompt[pos]) : uint32_t(r.tokens[pos - 3]);
    CHECK(b.calls[pos].first == expected_token);
    if (pos >= 2) CHECK(r.tokens[pos - 2] == int32_t((b.calls[pos].first * 31 + pos * 7 + 3) % vocab));
  }
}

TEST_CASE("emulator: generate refuses a bad prompt or too many steps before the first step") {
  const Schedule s = plan_schedule(load_model("tiny-llama"), 3, Policy::round_robin);
  const uint32_t vocab = static_cast<uint32_t>(s.tensors[s.logits_tensor].elements());
  RecordingBackend b(vocab);
  mk::device::GenerateOptions g;
  g.tokens = 4;
  for (std::vector<int32_t> prompt : {std::vector<int32_t>{1, int32_t(vocab)}, {int32_t(vocab) + 1000},
                                      {3, -1, 4}, {}}) {
    CAPTURE(prompt.size());
    g.prompt = prompt;
    CHECK_THROWS_AS(mk::device::generate(b, s, g, 64), std::invalid_argument);
    CHECK(b.calls.empty());
  }
  // 4 prompt steps + 15 more: 19 steps.
  g.prompt = {1, 2, 3, 4};
  g.tokens = 16;
  CHECK_THROWS_AS(mk::device::generate(b, s, g, 18), std::invalid_argument);
  CHECK(b.calls.empty());
  const mk::device::GenerateResult r = mk::device::generate(b, s, g, 19);  // exactly fits
  CHECK(r.steps == 19);
  CHECK(b.calls.size() == 19);

  SUBCASE("a token count whose step count overflows 32 bits is refused too") {
    b.calls.clear();
    g.tokens = 0xffffffffu;  // 4 + 0xfffffffe steps: wraps to 2 in uint32 arithmetic
    CHECK_THROWS_AS(mk::device::generate(b, s, g, 64), std::invalid_argument);
    CHECK(b.calls.empty());
  }
}

TEST_CASE("emulator: generate with no greedy tokens runs the prompt only") {
  const Schedule s = plan_schedule(load_model("tiny-llama"), 3, Policy::round_robin);
  RecordingBackend b(static_cast<uint32_t>(s.tensors[s.logits_tensor].elements()));
  mk::device::GenerateOptions g;
  g.prompt = {9, 8, 7};
  g.tokens = 0;
  const mk::device::GenerateResult r = mk::device::generate(b, s, g, 3);
  CHECK(r.steps == 3);
  CHECK(b.calls.size() == 3);
  CHECK(r.tokens.empty());
}

TEST_CASE("emulator: a step past the KV-cache capacity is refused, not written out of bounds") {
  // Run in a child process: without a check, the step writes k and v past the end of the cache
  // buffers, which must not corrupt this process.
  Fixture f("tiny-llama", 4, Policy::round_robin, 0xcab);
  RuntimeOptions opt;
  opt.max_context = 4;
  auto backend = mk::device::make_emulator_backend(f.schedule, f.ckpt, opt);
  for (uint32_t pos = 0; pos < 4; ++pos) backend->step(pos + 1, pos);  // fills the cache
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A crash here is a result, not a failure of the test runner: drop doctest's handlers.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
    int code = 1;  // stepped without complaint
    try {
      backend->step(5, 4);
    } catch (const std::exception&) {
      code = 0;
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const std::string outcome = WIFSIGNALED(status) ? "the step crashed with signal " + std::to_string(WTERMSIG(status))
                              : WEXITSTATUS(status) == 1 ? "the step ran without complaint"
                                                         : "the step threw";
  CAPTURE(outcome);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("emulator: write_npy writes a float32 .npy file") {
  TempDir dir;
  std::mt19937 rng(0x9e7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> rows(3, std::vector<float>(5));
  for (auto& row : rows)
    for (float& x : row) x = nd(rng);
  const fs::path file = dir.path / "logits.npy";
  mk::device::write_npy(file.string(), rows);

  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(bytes.size() >= 10);
  CHECK(std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0);
  CHECK(bytes[6] == 1);  // format version 1.0
  CHECK(bytes[7] == 0);
  const size_t header_len = bytes[8] | (size_t{bytes[9]} << 8);
  const size_t data_begin = 10 + header_len;
  CHECK(data_begin % 64 == 0);  // the header is padded so that the data is aligned
  REQUIRE(bytes.size() == data_begin + 15 * sizeof(float));
  const std::string header(bytes.begin() + 10, bytes.begin() + static_cast<std::ptrdiff_t>(data_begin));
  CAPTURE(header);
  CHECK(header.find("'descr': '<f4'") != std::string::npos);
  CHECK(header.find("'fortran_order': False") != std::string::npos);
  CHECK(header.find("'shape': (3, 5)") != std::string::npos);
  CHECK(header.back() == '\n');
  for (size_t i = 0; i < 15; ++i) {
    float x;
    std::memcpy(&x, bytes.data() + data_begin + i * sizeof(float), sizeof x);
    CHECK(x == rows[i / 5][i % 5]);  // row-major, little-endian on this host
  }

  SUBCASE("rows of different lengths are refused") {
    rows[1].pop_back();
    CHECK_THROWS_AS(mk::device::write_npy((dir.path / "bad.npy").string(), rows), std::runtime_error);
  }
}

TEST_CASE("emulator: time per token, tiny-llama at 132 SMs") {
  Fixture f("tiny-llama", 132, Policy::round_robin, 0x71e);
  std::mt19937 rng(0x71e);
  const std::vector<int32_t> prompt = random_prompt(4, f.vocab(), rng);
  RuntimeOptions opt;
  opt.max_context = 64;
  auto backend = mk::device::make_emulator_backend(f.schedule, f.ckpt, opt);
  mk::device::GenerateOptions g;
  g.prompt = prompt;
  g.tokens = 32;
  const mk::device::GenerateResult r = mk::device::generate(*backend, f.schedule, g, opt.max_context);
  REQUIRE(r.steps == 4 + 31);
  CHECK(r.seconds > 0);
  const double us = r.seconds / r.steps * 1e6;
  MESSAGE("emulator, tiny-llama, 132 SMs: " << us << " us/token over " << r.steps << " steps, "
                                            << f.schedule.instructions.size() << " instructions/step");
}
