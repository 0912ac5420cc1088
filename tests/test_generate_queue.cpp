// generate() on a backend that queues its runs, as the GPU's does: the next chunk is queued
// before a chunk's tokens are read, the tokens and steps are those of a backend that runs each
// chunk at once, a stop token still ends generation (the chunk queued after it discarded), and
// non-finite logits are still refused, early when the weights make them.
#include <doctest/doctest.h>

#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <string>

#include "device/runtime.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/temp_dir.hpp"

namespace {

// The emulator behind a queue: run_steps() only records the steps; read_history() runs the queued
// ones that write what it reads (a step at q writes q + 1), logits_rows() all of them. It logs
// what generate() asks for, in order (slot 0 only). Logits of a step at `nan_from` or later get a
// NaN.
class QueuedEmulator : public mk::device::Backend {
 public:
  QueuedEmulator(std::unique_ptr<mk::device::Backend> inner, uint32_t nan_from)
      : inner_(std::move(inner)), nan_from_(nan_from) {}
  std::string name() const override { return "queued emulator"; }
  bool queues_runs() const override { return true; }
  void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) override {
    inner_->set_history(slot, first, ids);
  }
  void set_sampling(uint32_t slot, const mk::schedule::SlotSampling& s) override {
    execute(queue_.size());  // the runs queued before it sample as they were set to
    inner_->set_sampling(slot, s);
  }
  void run_steps(const mk::device::StepRun& run) override {
    queue_.push_back(run);
    log.push_back("run " + std::to_string(run.segments[0].start));
  }
  std::vector<int32_t> read_history(uint32_t slot, uint32_t begin, uint32_t end) override {
    size_t last = queue_.size();
    for (size_t j = 0; j < queue_.size(); ++j)
      if (queue_[j].segments[0].start + 1 < end) last = j;
    if (last < queue_.size()) execute(last + 1);
    log.push_back("read " + std::to_string(begin - 1));
    return inner_->read_history(slot, begin, end);
  }
  std::vector<float> logits_rows(uint32_t row, uint32_t rows) override {
    execute(queue_.size());
    std::vector<float> l = inner_->logits_rows(row, rows);
    if (last_step_ >= nan_from_) l[5] = std::numeric_limits<float>::quiet_NaN();
    return l;
  }
  std::vector<std::string> log;

 private:
  void execute(size_t runs) {
    for (size_t j = 0; j < runs; ++j) {
      const mk::device::StepRun r = queue_.front();
      queue_.pop_front();
      inner_->run_steps(r);
      last_step_ = r.segments[0].start + (r.steps - 1) * r.advance + r.segments[0].rows - 1;
    }
  }
  std::unique_ptr<mk::device::Backend> inner_;
  std::deque<mk::device::StepRun> queue_;
  uint32_t nan_from_, last_step_ = 0;
};

struct Fixture {
  mk::schedule::Schedule s;
  mk::test::TempDir dir{"mk_generate_queue"};
  std::unique_ptr<mk::device::Checkpoint> ckpt;
  mk::device::RuntimeOptions ro;
  Fixture() {
    const mk::dsl::ModelGraph model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/tiny-llama.yaml");
    mk::planner::PlanOptions po;
    po.sm_count = 3;
    s = mk::planner::plan(model, po).schedule;
    mk::device::write_random_checkpoint(s, dir.path, 91);
    ckpt = std::make_unique<mk::device::Checkpoint>(mk::device::Checkpoint::open(dir.path));
    ro.max_context = 64;
  }
  std::unique_ptr<mk::device::Backend> emulator() const { return mk::device::make_emulator_backend(s, *ckpt, ro); }
};

}  // namespace

TEST_CASE("generate on a queuing backend: the next chunk queued before a chunk is read, the same tokens") {
  const Fixture f;
  mk::device::GenerateOptions go;
  go.prompt = {4, 9, 2};
  go.tokens = 40;  // 42 positions: the prompt's 3 (one a step here), then chunks of 16, 16 and 7
  auto plain = f.emulator();
  const mk::device::GenerateResult want = mk::device::generate(*plain, f.s, go, f.ro.max_context);
  QueuedEmulator queued(f.emulator(), ~0u);
  const mk::device::GenerateResult got = mk::device::generate(queued, f.s, go, f.ro.max_context);
  CHECK(got.tokens == want.tokens);
  CHECK(got.steps == want.steps);
  CHECK(got.steps == 42);
  // The prompt is run (and its logits checked) and the first token read before a decode chunk is
  // queued; from then on each chunk's successor is queued before the chunk is read.
  const std::vector<std::string> expected = {"run 0", "read 2", "run 3", "run 19", "read 3", "run 35", "read 19", "read 35"};
  CHECK(queued.log == expected);
}

TEST_CASE("generate on a queuing backend: a stop token ends generation, the chunk queued after it discarded") {
  const Fixture f;
  mk::device::GenerateOptions go;
  go.prompt = {4, 9, 2};
  go.tokens = 40;
  int seen = 0;
  go.stop = [&](int32_t) { return ++seen == 20; };  // the 20th generated token, in the chunk from position 19
  auto plain = f.emulator();
  const mk::device::GenerateResult want = mk::device::generate(*plain, f.s, go, f.ro.max_context);
  seen = 0;
  QueuedEmulator queued(f.emulator(), ~0u);
  const mk::device::GenerateResult got = mk::device::generate(queued, f.s, go, f.ro.max_context);
  CHECK(want.stopped);
  CHECK(got.stopped);
  CHECK(got.tokens == want.tokens);
  CHECK(got.tokens.size() == 20);
  CHECK(got.steps == want.steps);
  const std::vector<std::string> expected = {"run 0", "read 2", "run 3", "run 19", "read 3", "run 35", "read 19"};
  CHECK(queued.log == expected);  // the chunk from 35 ran, and was not read
}

TEST_CASE("generate on a queuing backend: non-finite logits are refused, from the weights before a second chunk") {
  const Fixture f;
  mk::device::GenerateOptions go;
  go.prompt = {4, 9, 2};
  go.tokens = 40;
  QueuedEmulator from_start(f.emulator(), 0);
  CHECK_THROWS_WITH(mk::device::generate(from_start, f.s, go, f.ro.max_context), doctest::Contains("non-finite logit"));
  CHECK(from_start.log == std::vector<std::string>{"run 0"});
  // A NaN that appears later (a step's own, which the KV cache passes on) is found at the end.
  QueuedEmulator later(f.emulator(), 30);
  CHECK_THROWS_WITH(mk::device::generate(later, f.s, go, f.ro.max_context), doctest::Contains("position 41"));
}

// A conversation's later turn (GenerateOptions::start): decoded on the same backend after the
// positions the turns before it left in the KV cache, it gives what one call over the whole
// token sequence gives. The token the turn before generated last was never decoded, so the
// later turn's prompt stands at that position.
namespace {

// The whole sequence a fresh backend decodes for turn 2: turn 1's prompt, the tokens it decoded
// (all it generated but the last), turn 2's prompt.
std::vector<int32_t> conversation(const std::vector<int32_t>& first, const mk::device::GenerateResult& r1,
                                  const std::vector<int32_t>& second) {
  std::vector<int32_t> all = first;
  all.insert(all.end(), r1.tokens.begin(), r1.tokens.end() - 1);
  all.insert(all.end(), second.begin(), second.end());
  return all;
}

// Turn 1 of a conversation: the prompt {4, 9, 2}, at most `tokens` generated, ended at the
// `stop_at`-th (the callback counts the tokens it is offered).
mk::device::GenerateResult first_turn(mk::device::Backend& b, const Fixture& f, mk::device::GenerateOptions& turn1,
                                      uint32_t tokens, int stop_at) {
  turn1.prompt = {4, 9, 2};
  turn1.tokens = tokens;
  turn1.stop = [seen = 0, stop_at](int32_t) mutable { return ++seen == stop_at; };
  return mk::device::generate(b, f.s, turn1, f.ro.max_context);
}

}  // namespace

TEST_CASE("generate: a later turn from GenerateOptions::start decodes as one call over the whole sequence") {
  const Fixture f;
  mk::device::GenerateOptions turn1;
  auto backend = f.emulator();
  const mk::device::GenerateResult r1 = first_turn(*backend, f, turn1, 12, 5);
  REQUIRE(r1.stopped);
  REQUIRE(r1.steps == 3 + 4);

  mk::device::GenerateOptions turn2;
  turn2.prompt = {r1.tokens.back(), 7, 8, 1};
  turn2.start = r1.steps;
  turn2.tokens = 20;
  turn2.keep_logits = true;
  std::vector<uint32_t> counts;
  turn2.on_step = [&](uint32_t done, uint32_t all, int32_t) { counts.push_back(all - done); };
  const mk::device::GenerateResult r2 = mk::device::generate(*backend, f.s, turn2, f.ro.max_context);
  CHECK(r2.steps == 4 + 19);
  CHECK(counts.front() == 19);  // on_step counts this call's positions: the prompt's 4 at once, of 23
  CHECK(r2.logits.size() == 23);

  mk::device::GenerateOptions whole;
  whole.prompt = conversation(turn1.prompt, r1, turn2.prompt);
  whole.tokens = 20;
  whole.keep_logits = true;
  auto fresh = f.emulator();
  const mk::device::GenerateResult want = mk::device::generate(*fresh, f.s, whole, f.ro.max_context);
  CHECK(r2.tokens == want.tokens);
  REQUIRE(want.logits.size() == r1.steps + r2.logits.size());
  for (size_t i = 0; i < r2.logits.size(); ++i) CHECK(r2.logits[i] == want.logits[r1.steps + i]);  // bit for bit

  // The context bounds the whole conversation, not the turn.
  turn2.start = f.ro.max_context - 10;
  CHECK_THROWS_WITH(mk::device::generate(*backend, f.s, turn2, f.ro.max_context),
                    "23 positions after 54 positions do not fit a context of 64 positions; raise --max-context");
}

TEST_CASE("generate on a queuing backend: a later turn overwrites what the steps queued past a stop left") {
  const Fixture f;
  mk::device::GenerateOptions turn1;
  QueuedEmulator queued(f.emulator(), ~0u);
  const mk::device::GenerateResult r1 = first_turn(queued, f, turn1, 40, 20);
  REQUIRE(r1.steps == 22);
  REQUIRE(queued.log.back() == "read 19");  // the chunk from 35 ran: positions 22 to 41 hold its k and v

  mk::device::GenerateOptions turn2;
  turn2.prompt = {3, 3, 5};
  turn2.start = r1.steps;
  turn2.tokens = 30;
  const mk::device::GenerateResult r2 = mk::device::generate(queued, f.s, turn2, f.ro.max_context);
  CHECK(queued.log[7] == "run 22");  // turn 2's prompt from where turn 1's tokens ended

  mk::device::GenerateOptions whole;
  whole.prompt = conversation(turn1.prompt, r1, turn2.prompt);
  whole.tokens = 30;
  auto fresh = f.emulator();
  const mk::device::GenerateResult want = mk::device::generate(*fresh, f.s, whole, f.ro.max_context);
  CHECK(r2.tokens == want.tokens);
  CHECK(r2.tokens.size() == 30);
}
