// The CPU emulator: executes a schedule's per-SM queues with the counter rules the GPU uses.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "device/memory.hpp"
#include "device/trace.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

struct DeadlockError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Order {
  deterministic,  // sweep the SMs round-robin, running each head instruction whose waits are met
  shuffled,       // pick a random SM whose head can run, to shake out missing edges
};

class Emulator {
 public:
  explicit Emulator(const schedule::Schedule& s) : s_(s), counters_(s.counter_count, 0) {}

  // Runs one decode step. A wait is met when counter >= target * ctx.generation; counters are
  // never reset between steps, as on the GPU. Throws DeadlockError naming every blocked SM's
  // head instruction and its unmet wait when no queue can move.
  void run_step(const schedule::StepContext& ctx, const TensorTable& mem, Order order = Order::deterministic,
                uint64_t seed = 0);
  void reset_counters() { counters_.assign(counters_.size(), 0); }

  // Tracing on a logical clock, in the GPU trace's format (device/trace.hpp): every instruction
  // takes one tick (written as 1000 ns); it starts when its SM's previous one ends and runs once
  // the last signal it waits for has landed. The times do not depend on the execution order, so
  // they show the schedule's shape: how long each SM waits with unit-cost tasks.
  void enable_trace(bool on) { tracing_ = on; }
  const std::vector<TraceEvent>& trace() const { return trace_; }  // of the last step, by instruction

 private:
  bool ready(const schedule::Instruction&, uint32_t generation, bool short_step) const;

  const schedule::Schedule& s_;
  std::vector<uint32_t> counters_;
  bool tracing_ = false;
  std::vector<TraceEvent> trace_;
};

}  // namespace mk::device
