// Continuous batching: requests join the backend's steps as they come and leave at their end,
// each in a KV-cache slot of its own. One thread runs the engine (run()); any thread submits and
// cancels. What a server puts behind its HTTP handlers; mkrun's generate_batch runs a fixed set
// of sequences instead.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/runtime.hpp"
#include "schedules/ops/sample.hpp"

namespace mk::device {

enum class EndReason {
  stop,       // a stop token (counted in `tokens`), or on_token asked to stop (a stop string)
  length,     // max_tokens generated
  cancelled,  // cancel(), or the engine shut down
  error,      // the backend failed (its message in EngineResult::error)
};
const char* end_reason_name(EndReason);

struct EngineResult {
  EndReason reason = EndReason::length;
  uint32_t prompt_tokens = 0;
  uint32_t tokens = 0;               // generated, a stop token included
  double queue_seconds = 0;          // submitted to admitted into a slot
  double first_token_seconds = 0;    // submitted to the first generated token (0 if none)
  double seconds = 0;                // submitted to the end
  std::string error;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // at least one token, ids inside the vocabulary
  uint32_t max_tokens = 16;     // at least 1; prompt + max_tokens - 1 positions must fit the context
  // Its own sampling, for a schedule with a sample op (none: the op's parameters; an argmax
  // schedule decodes greedily whatever this says).
  std::optional<schedule::SamplingParams> sampling;
  std::function<bool(int32_t)> is_stop;  // end-of-sequence tokens (the token ends it; not passed to on_token)
  // Each generated token but a stop token, in order, on the engine's thread; false ends the
  // sequence there (reason stop).
  std::function<bool(int32_t)> on_token;
  std::function<void(const EngineResult&)> on_end;  // once, last, on the engine's thread
};

// submit() while `queue_limit` requests already wait for a slot.
struct EngineBusy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  // Slots: the backend's, at most the schedule's max_tokens (each running sequence decodes a row
  // a step). The backend and schedule must outlive the engine.
  Engine(Backend&, const schedule::Schedule&, uint32_t max_context, uint32_t queue_limit);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request (std::invalid_argument, one line) and queues it; returns its id. Throws
  // EngineBusy when the queue is full, std::runtime_error after shutdown().
  uint64_t submit(EngineRequest);
  // Ends the request at its next launch boundary (reason cancelled); nothing if it has ended.
  void cancel(uint64_t id);
  // Admits queued requests into free slots and runs launches until shutdown(); then ends what is
  // queued or running (reason cancelled) and returns. On one thread.
  void run();
  void shutdown();

  struct Stats {
    uint32_t slots = 0, running = 0, waiting = 0;
    uint64_t served = 0;  // ended, any reason
  };
  Stats stats() const;
  uint32_t slots() const { return slots_; }
  uint32_t max_context() const { return max_context_; }

 private:
  struct Sequence;
  void admit(std::unique_lock<std::mutex>&);
  bool launch();  // one run of steps over the running sequences; false if there were none
  void finish(Sequence&, EndReason, const std::string& error = {});

  Backend& backend_;
  const schedule::Schedule& s_;
  const uint32_t max_context_, queue_limit_, slots_;
  const uint64_t vocab_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> served_{0};
  std::deque<std::unique_ptr<Sequence>> waiting_;          // under mu_
  std::vector<uint64_t> cancels_;                          // under mu_: ids to end at the next boundary
  std::vector<std::unique_ptr<Sequence>> running_;         // the engine thread's (its count under mu_)
  uint32_t running_count_ = 0;                             // under mu_
  std::vector<bool> slot_used_;                            // the engine thread's
};

}  // namespace mk::device
