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
#include "device/trace.hpp"
#include "device/weights.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

struct RuntimeOptions {
  uint32_t max_context = 2048;                // KV-cache capacity in positions
  Order order = Order::deterministic;         // emulator only
  uint64_t seed = 0;                          // emulator shuffled order
  double watchdog_seconds = 1.0;              // CUDA: a wait longer than this stops the run with a report
  schedule::KvSplitPolicy kv_splits{schedule::kNone, schedule::kNone};  // StepContext::kv_splits; kNone: the schedule's
};

// A backend keeps a token history on its side: the step at position p decodes history[p], and
// can write its greedy token to history[p + 1], so that decode steps follow each other with no
// round trip to the host. Positions run 0, 1, 2, ... from a fresh backend.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Writes history[first, first + ids.size()).
  virtual void set_tokens(uint32_t first, const std::vector<int32_t>& ids) = 0;
  // Runs the steps at positions [first, first + count); step p writes its greedy token to
  // history[p + 1] when p + 1 >= fed_from. May return before they finish.
  virtual void run(uint32_t first, uint32_t count, uint32_t fed_from) = 0;
  // Waits for the runs that write history[begin, end) (throws if one failed) and returns it.
  virtual std::vector<int32_t> history(uint32_t begin, uint32_t end) = 0;
  virtual std::vector<float> logits() = 0;  // of the last step run (waits for it)
  // Whether run() queues its steps and history() waits only for the runs that write what it
  // reads: generate() then queues the next chunk before it reads one (the GPU's).
  virtual bool queues_runs() const { return false; }

  // Decodes `token` at `pos` and returns the step's greedy token.
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

// Decode steps run per Backend::run call when no step's logits are kept: the host reads the
// tokens back (and checks for a stop token) once per chunk; on the GPU a chunk is one launch,
// queued before the host reads the chunk before it.
inline constexpr uint32_t kDecodeChunk = 16;

struct GenerateOptions {
  std::vector<int32_t> prompt;  // at least one token
  // Positions the backend's KV cache already holds from earlier calls on it (a conversation's
  // turns): the prompt is decoded from this position on. 0 for a fresh backend. The token at the
  // position before (what the last call generated but did not decode) is not in the cache: a
  // continuation's prompt starts with whatever should stand there.
  uint32_t start = 0;
  uint32_t tokens = 16;         // greedy tokens to produce
  bool keep_logits = false;     // every step's logits, prompt steps included
  // Called after each step: (steps done, steps in all, token produced by that step).
  std::function<void(uint32_t, uint32_t, int32_t)> on_step;
  // Called with each generated token (after on_step); true ends generation after that token
  // (end-of-sequence ids). The token is kept in GenerateResult::tokens.
  std::function<bool(int32_t)> stop;
};

struct GenerateResult {
  std::vector<int32_t> tokens;            // the greedy continuation
  std::vector<std::vector<float>> logits; // per step, when kept
  uint32_t steps = 0;          // steps run (fewer than planned when `stop` ended generation)
  bool stopped = false;        // `stop` ended generation
  double seconds = 0;         // wall time of all steps
  double decode_seconds = 0;  // of the steps after the prompt (the greedy continuation)
  uint32_t prompt_steps = 0;  // the steps before it: the prompt's tokens but its last

  uint32_t decode_steps() const { return steps - prompt_steps; }
  double prompt_seconds() const { return seconds - decode_seconds; }
  // Tokens a second over those steps; 0 where they took no time (a prompt of one token).
  double prompt_tokens_per_s() const { return prompt_steps && prompt_seconds() > 0 ? prompt_steps / prompt_seconds() : 0.0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_steps() / decode_seconds : 0.0; }
};

// Prefill as decode steps over the prompt, then greedy decoding. Checks the prompt ids against
// the vocabulary and the step count (from opt.start) against the context before the first step.
// Steps, on_step's counts and the logits are this call's, counted from its first step.
GenerateResult generate(Backend&, const schedule::Schedule&, const GenerateOptions&, uint32_t max_context);

// Bytes of activations and KV caches (not weights) a backend holds for a context of
// `max_context` positions; UINT64_MAX when that overflows.
uint64_t state_bytes(const schedule::Schedule&, uint64_t max_context);
uint64_t physical_memory_bytes();
std::string show_bytes(uint64_t bytes);  // "N bytes (X.Y GiB)"
// Refuses a context outside 1..limits::kMaxContext or one whose state_bytes exceed `available`
// bytes of `memory` ("host memory", "GPU memory"), saying how much it needs. A backend calls
// it before allocating.
void check_context_memory(const schedule::Schedule&, uint64_t max_context, uint64_t available, const std::string& memory);
// The check generate() makes after every step: throws naming the step (0-based `step` of
// `steps`, at position first_position + step) when a logit is NaN or Inf. One pass over the
// vocabulary on the host.
void check_finite_logits(std::span<const float> logits, uint32_t step, uint32_t steps, uint32_t first_position = 0);

// Writes a float32 .npy array [rows, cols] (rows of equal length), through io::OutputFile; the
// second form writes into one opened earlier (mkrun opens it before the run) and commits it.
void write_npy(const std::string& path, const std::vector<std::vector<float>>& rows);
void write_npy(io::OutputFile&, const std::vector<std::vector<float>>& rows);

}  // namespace mk::device
