// The persistent CUDA interpreter: one block per SM walks that SM's instruction queue.
// Host-side interface (no CUDA headers), used by the CUDA backend and the GPU tests.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/step_run.hpp"
#include "device/trace.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a failed launch reports: the first wait that timed out.
// A tagged input's wait (device/cuda/handoff.cuh) names its tensor, counter kNone, and the
// step bits seen and wanted as value and target; a counter's wait has tensor kNone.
struct WatchdogReport {
  uint32_t sm = 0, instruction = 0, task = 0, counter = 0, value = 0, target = 0;
  uint32_t tensor = schedule::kNone;
};

struct WatchdogError : CudaError {
  WatchdogReport report;
  WatchdogError(const std::string& what, const WatchdogReport& r) : CudaError(what), report(r) {}
};

struct ExecutorOptions {
  uint32_t max_context = 2048;  // positions per sequence
  uint32_t slots = 1;           // sequences: KV caches and token histories
  double watchdog_seconds = 1.0;  // a wait longer than this aborts the launch with a report
  bool exact_sm_count = true;     // refuse a schedule planned for another SM count
  uint32_t ring_stages = 0;       // weight ring stages; 0: as many as shared memory holds (mkbench --stages)
  schedule::KvSplitPolicy kv_splits{schedule::kNone, schedule::kNone};  // StepContext::kv_splits; kNone: the schedule's
  // f32 activations that every op touching them can take so carry their step's parity in their
  // lowest bit (device/cuda/handoff.cuh), and the counters only they were signalled on are
  // dropped: the readers poll the values instead. false: the same values, every counter as the
  // schedule lists it (mkbench --handoff counters).
  bool tagged_handoff = true;
};

// Device memory for one schedule: instruction arrays, counters, and a buffer per tensor
// (activations of max_tokens rows and kv caches of every slot, poisoned with NaN). Weights are
// uploaded by the caller.
class CudaExecutor {
 public:
  CudaExecutor(const schedule::Schedule&, const ExecutorOptions&);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  void upload(uint32_t tensor, const void* data, size_t bytes);
  void download(uint32_t tensor, void* data, size_t bytes, size_t offset = 0) const;
  size_t tensor_bytes(uint32_t tensor) const;
  bool tagged(uint32_t tensor) const;  // its values carry their step's bit (device/cuda/handoff.cuh)
  // The counter waits the GPU runs for an instruction at a full or short step: the schedule's,
  // less those of the tagged hand-offs.
  uint32_t device_waits(uint32_t instruction, bool short_step) const;
  // Its signals at such a step: the schedule's, less those of the tagged hand-offs.
  uint32_t device_signals(uint32_t instruction, bool short_step) const;
  // Of those, the ones whose counter no wait list of that step's kind names: relaxed adds, no release.
  uint32_t relaxed_signals(uint32_t instruction, bool short_step) const;

  // The token histories on the device ([slots][max_context + 1]): a row of slot q at position p
  // decodes history[q][p].
  void set_tokens(uint32_t slot, uint32_t first, const int32_t* ids, uint32_t n);
  // A slot's sampling parameters for the launches after this (StepContext::sampling).
  void set_sampling(uint32_t slot, const schedule::SlotSampling&);
  // history[slot][begin, end): waits for the launches that write it (and checks them, as finish()
  // does), not for those queued after them.
  std::vector<int32_t> tokens(uint32_t slot, uint32_t begin, uint32_t end);
  // Launches the run's steps (check_step_run) as one kernel, without waiting: a row at q of slot
  // s writes its greedy token to history[s][q + 1], the next step's input, when q + 1 >= its
  // segment's fed_from. Between steps the SMs wait for each other (the next step's first weights
  // stream meanwhile) instead of for a new launch. With tracing on, one launch per step.
  // finish() waits and checks. A step of several rows streams no weights ahead: its op bodies
  // load what they read into all of shared memory.
  void launch(const StepRun&);
  // One sequence (slot 0): the steps at positions [first, first + count), one row each.
  void launch(uint32_t first, uint32_t count, uint32_t fed_from);
  // The launches whose event launch(), tokens() or finish() has not yet taken back (ended or not).
  size_t launches_pending() const;
  // Throws WatchdogError (after which the executor has reset its counters and stays usable) or
  // CudaError.
  void finish();
  // Decodes `token` at `pos` and waits for it.
  void step(int32_t token, uint32_t pos);
  // One step timed with device events (milliseconds of GPU time, launch to completion); like
  // timed_steps, it writes its token to history[pos + 1].
  float timed_step(int32_t token, uint32_t pos);
  // `count` steps from `pos` in one launch, each fed the previous one's token; milliseconds in all.
  float timed_steps(int32_t token, uint32_t pos, uint32_t count);
  // The run as one launch (launch()), timed with device events: milliseconds in all.
  float timed_run(const StepRun&);
  // Fills a tensor with deterministic pseudo-random values (bf16, f8e4m3 or f32, std about
  // `scale`), for benchmarks that need no checkpoint.
  void fill_random(uint32_t tensor, uint32_t seed, float scale);
  // Every weight so: norms (1-D) about 0.1, matrices of std 1/sqrt(cols); float8 ones of std 64
  // (over e4m3's range), their scales about 1 / (64 sqrt(cols)). Seeds from `seed`.
  void fill_random_weights(uint32_t seed);

  // Tracing: when on, every launch records each instruction's times (device/trace.hpp).
  void enable_trace(bool on);
  std::vector<TraceEvent> read_trace() const;  // of the last step (a traced launch runs one), by instruction index

  uint32_t shared_bytes() const;
  uint32_t ring_stages() const;  // the weight ring's depth (ExecutorOptions::ring_stages caps it)
  uint64_t launches() const;     // kernel launches so far (each runs up to a launch's worth of steps)

 private:
  struct State;
  std::unique_ptr<State> st_;
};

int cuda_device_sm_count();  // 0 when there is no usable GPU
uint64_t cuda_free_memory();  // free device memory in bytes; 0 when it cannot be read

}  // namespace mk::device
