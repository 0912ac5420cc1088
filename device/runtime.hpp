// Backends that run a schedule's decode steps on real weights, and the generation loop.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "common/output_file.hpp"
#include "device/emulator.hpp"
#include "device/step_run.hpp"
#include "device/trace.hpp"
#include "device/weights.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

struct RuntimeOptions {
  uint32_t max_context = 2048;                // KV-cache capacity in positions, per sequence
  uint32_t slots = 1;                         // sequences the backend holds: KV caches and token histories
  Order order = Order::deterministic;         // emulator only
  uint64_t seed = 0;                          // emulator shuffled order
  double watchdog_seconds = 1.0;              // CUDA: a wait longer than this stops the run with a report
  schedule::KvSplitPolicy kv_splits{schedule::kNone, schedule::kNone};  // StepContext::kv_splits; kNone: the schedule's
};

// A backend keeps a token history per slot on its side: a row of slot q at position p decodes
// history[q][p], and can write its greedy token to history[q][p + 1], so that decode steps
// follow each other with no round trip to the host. A slot's positions run 0, 1, 2, ... from a
// fresh backend (a sequence's rows see the cache of its own slot only).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Writes history[slot][first, first + ids.size()).
  virtual void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) = 0;
  // The slot's sampling from the next run on (StepContext::sampling): a sample op's rows of this
  // slot take these parameters where `set`, else the op's own (a fresh backend's every slot).
  // A backend without it (a test's) refuses a set one.
  virtual void set_sampling(uint32_t slot, const schedule::SlotSampling& s) {
    if (s.set) throw std::runtime_error(name() + ": no per-sequence sampling (slot " + std::to_string(slot) + ")");
  }
  // Runs the steps (check_step_run first). May return before they finish.
  virtual void run_steps(const StepRun&) = 0;
  // Waits for the runs that write history[slot][begin, end) (throws if one failed) and returns it.
  virtual std::vector<int32_t> read_history(uint32_t slot, uint32_t begin, uint32_t end) = 0;
  // Rows [row, row + rows) of the last step's logits, [rows][vocab] (waits for it).
  virtual std::vector<float> logits_rows(uint32_t row, uint32_t rows) = 0;
  // Positions [begin, end) of the slot hold nothing any step may read until a step writes them
  // again (speculative decoding's rejected drafts). The emulator poisons their KV-cache entries, so
  // that a read of one shows as NaN; the GPU leaves them, to be written over.
  virtual void forget_positions(uint32_t slot, uint32_t begin, uint32_t end) { (void)slot, (void)begin, (void)end; }
  // Whether run_steps() queues its steps and read_history() waits only for the runs that write
  // what it reads: generate() then queues the next chunk before it reads one (the GPU's).
  virtual bool queues_runs() const { return false; }
  virtual uint32_t slots() const { return 1; }

  // One sequence in slot 0: writes history[0][first, ...); runs positions [first, first + count),
  // the step at p writing its token to history[0][p + 1] when p + 1 >= fed_from; reads history[0].
  void set_tokens(uint32_t first, const std::vector<int32_t>& ids) { set_history(0, first, ids); }
  void run(uint32_t first, uint32_t count, uint32_t fed_from) { run_steps(StepRun::decode(first, count, fed_from)); }
  std::vector<int32_t> history(uint32_t begin, uint32_t end) { return read_history(0, begin, end); }
  std::vector<float> logits() { return logits_rows(0, 1); }  // the last step's first row

  // Decodes `token` at `pos` (slot 0) and returns the step's greedy token.
  int32_t step(int32_t token, uint32_t pos) {
    set_tokens(pos, {token});
    run(pos, 1, 0);
    return history(pos + 1, pos + 2)[0];
  }
  // Tracing (device/trace.hpp): when on, each step records every instruction's times, read
  // back by trace() for the last step. The GPU records globaltimer ns; the emulator a logical
  // clock (trace_is_logical()).
  // A backend without tracing refuses it.
  virtual void enable_trace(bool on) {
    if (on) throw std::runtime_error(name() + ": tracing is not supported");
  }
  virtual std::vector<TraceEvent> trace() { return {}; }
  virtual bool trace_is_logical() const { return false; }
};

// The schedule and checkpoint must outlive the backend. Weights are checked first.
std::unique_ptr<Backend> make_emulator_backend(const schedule::Schedule&, const Checkpoint&, const RuntimeOptions&);
#if MK_HAVE_CUDA
// Throws if there is no usable GPU or the schedule was planned for another SM count.
std::unique_ptr<Backend> make_cuda_backend(const schedule::Schedule&, const Checkpoint&, const RuntimeOptions&);
#endif
bool cuda_available();  // a GPU is present and this build has the CUDA interpreter

// Decode steps run per Backend::run_steps call when no step's logits are kept: the host reads
// the tokens back (and checks for a stop token) once per chunk; on the GPU a chunk is one launch,
// queued before the host reads the chunk before it.
inline constexpr uint32_t kDecodeChunk = 16;

// One sequence to generate for.
struct SequenceOptions {
  std::vector<int32_t> prompt;  // at least one token
  // Positions its slot's KV cache already holds from earlier calls (a conversation's turns): the
  // prompt is decoded from this position on. 0 for a fresh slot. The token at the position before
  // (what the last call generated but did not decode) is not in the cache: a continuation's prompt
  // starts with whatever should stand there.
  uint32_t start = 0;
  uint32_t tokens = 16;  // tokens to produce, at most
  // Called as positions are done: (positions done, positions in all, the token the last of them
  // produced). The prompt's positions are reported a chunk at a time, with token -1 before the
  // prompt's last one; then each generated token once.
  std::function<void(uint32_t, uint32_t, int32_t)> on_step;
  // Called with each generated token (after on_step); true ends generation after that token
  // (end-of-sequence ids). The token is kept in GenerateResult::tokens.
  std::function<bool(int32_t)> stop;
};

struct GenerateOptions : SequenceOptions {
  bool keep_logits = false;  // every position's logits, prompt positions included
  // Prompt rows a step, at most (0: the schedule's max_tokens): a prompt is prefilled in chunks.
  uint32_t prompt_chunk = 0;
};

struct GenerateResult {
  std::vector<int32_t> tokens;            // the continuation
  std::vector<std::vector<float>> logits; // per position, when kept
  uint32_t steps = 0;          // positions run: the prompt's, then one per generated token but the last
  bool stopped = false;        // `stop` ended generation
  double seconds = 0;          // wall time of all of it
  double decode_seconds = 0;   // of the positions after the prompt (from the first generated token on)
  uint32_t prompt_steps = 0;   // the prompt's positions: the first generated token comes with the last

  uint32_t decode_steps() const { return steps - prompt_steps; }
  double prompt_seconds() const { return seconds - decode_seconds; }  // to the first generated token
  // Tokens a second over those positions; 0 where they took no time.
  double prompt_tokens_per_s() const { return prompt_steps && prompt_seconds() > 0 ? prompt_steps / prompt_seconds() : 0.0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_steps() / decode_seconds : 0.0; }
};

// Refuses (std::invalid_argument, one line; "sequence N: " first where count > 1) a sequence
// generate() cannot run: no prompt, an id outside the vocabulary, more positions than max_context.
void check_sequence(const SequenceOptions&, size_t index, size_t count, uint64_t vocab, uint32_t max_context);

// Prefills the prompt in chunks of up to max_tokens rows a step, then decodes. Checks the prompt
// ids against the vocabulary and the positions (from opt.start) against the context before the
// first step. Positions, on_step's counts and the logits are this call's, from opt.start.
GenerateResult generate(Backend&, const schedule::Schedule&, const GenerateOptions&, uint32_t max_context);

// Several sequences at once, sequence i in slot i (at most the backend's slots and the
// schedule's max_tokens): their prompts packed into steps of up to max_tokens rows (a prompt may
// span steps, a step hold several prompts' chunks), then every sequence decoding one token a step
// until it stops or has its tokens; a sequence that ends leaves the steps after it. Every check
// is made before the first step. Results in the sequences' order.
struct BatchOptions {
  bool keep_logits = false;
  uint32_t prompt_chunk = 0;  // as GenerateOptions'
};
std::vector<GenerateResult> generate_batch(Backend&, const schedule::Schedule&, const std::vector<SequenceOptions>&,
                                           const BatchOptions&, uint32_t max_context);

// Bytes of activations and KV caches (not weights) a backend holds for `slots` sequences of
// `max_context` positions each; UINT64_MAX when that overflows.
uint64_t state_bytes(const schedule::Schedule&, uint64_t max_context, uint64_t slots = 1);
uint64_t physical_memory_bytes();
std::string show_bytes(uint64_t bytes);  // "N bytes (X.Y GiB)"
// Refuses a context outside 1..limits::kMaxContext, slots outside 1..limits::kMaxSlots, or state
// whose state_bytes exceed `available` bytes of `memory` ("host memory", "GPU memory"), saying how
// much it needs. A backend calls it before allocating.
void check_context_memory(const schedule::Schedule&, uint64_t max_context, uint64_t available, const std::string& memory,
                          uint64_t slots = 1);
// The check generate() makes after every step: throws naming the step (0-based `step` of
// `steps`, at position first_position + step) when a logit is NaN or Inf. One pass over the
// vocabulary on the host.
void check_finite_logits(std::span<const float> logits, uint32_t step, uint32_t steps, uint32_t first_position = 0);

// Writes a float32 .npy array [rows, cols] (rows of equal length), through io::OutputFile; the
// second form writes into one opened earlier (mkrun opens it before the run) and commits it.
void write_npy(const std::string& path, const std::vector<std::vector<float>>& rows);
void write_npy(io::OutputFile&, const std::vector<std::vector<float>>& rows);

}  // namespace mk::device
