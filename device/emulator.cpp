#include "device/emulator.hpp"

#include <algorithm>
#include <random>
#include <span>
#include <sstream>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

bool Emulator::ready(const schedule::Instruction& inst, uint32_t generation, bool short_step) const {
  for (const schedule::Wait& w : s_.waits_of(inst, short_step))
    if (counters_[w.counter] < uint64_t{w.target} * generation) return false;
  return true;
}

void Emulator::run_step(const schedule::StepContext& step, const TensorTable& mem, Order order, uint64_t seed) {
  schedule::StepContext ctx = step;
  ctx.counters = counters_.data();  // for the ops that combine their tasks by ticket
  const uint32_t sms = s_.sm_count;
  std::vector<uint32_t> head(sms);
  for (uint32_t sm = 0; sm < sms; ++sm) head[sm] = s_.sm_offsets[sm];
  const bool short_lists = schedule::short_step(ctx);  // the step's wait and signal lists, chosen once
  auto runnable = [&](uint32_t sm) {
    return head[sm] < s_.sm_offsets[sm + 1] && ready(s_.instructions[head[sm]], ctx.generation, short_lists);
  };
  // The logical clock: when each SM is free, when each counter got its last signal.
  std::vector<uint64_t> sm_free(tracing_ ? sms : 0, 0), signalled(tracing_ ? s_.counter_count : 0, 0);
  if (tracing_) trace_.assign(s_.instructions.size(), TraceEvent{});
  auto run = [&](uint32_t sm) {
    const uint32_t i = head[sm]++;
    const schedule::Instruction& inst = s_.instructions[i];
    cpu_execute(inst, ctx, mem);
    const std::span<const uint32_t> signals = s_.signals_of(inst, short_lists);
    for (uint32_t c : signals) ++counters_[c];
    if (!tracing_) return;
    constexpr uint64_t kTick = 1000;
    TraceEvent& e = trace_[i];
    e.start = e.ready = sm_free[sm];
    for (const schedule::Wait& w : s_.waits_of(inst, short_lists)) e.ready = std::max(e.ready, signalled[w.counter]);
    e.end = e.ready + kTick;
    for (uint32_t c : signals) signalled[c] = std::max(signalled[c], e.end);
    sm_free[sm] = e.end;
  };
  std::mt19937_64 rng(seed);
  size_t left = s_.instructions.size();
  std::vector<uint32_t> candidates;
  while (left > 0) {
    bool moved = false;
    if (order == Order::deterministic) {
      for (uint32_t sm = 0; sm < sms; ++sm)
        if (runnable(sm)) {
          run(sm);
          --left;
          moved = true;
        }
    } else {
      candidates.clear();
      for (uint32_t sm = 0; sm < sms; ++sm)
        if (runnable(sm)) candidates.push_back(sm);
      if (!candidates.empty()) {
        run(candidates[rng() % candidates.size()]);
        --left;
        moved = true;
      }
    }
    if (moved) continue;
    std::ostringstream o;
    o << "deadlock in step at position " << ctx.pos << ": no SM can move; " << left << " instructions left";
    for (uint32_t sm = 0; sm < sms; ++sm) {
      if (head[sm] == s_.sm_offsets[sm + 1]) continue;
      const schedule::Instruction& inst = s_.instructions[head[sm]];
      o << "\n  SM " << sm << " instruction " << head[sm] - s_.sm_offsets[sm] << " (task " << inst.task << ", op '"
        << s_.ops[inst.op].name << "')";
      for (const schedule::Wait& w : s_.waits_of(inst, short_lists))
        if (counters_[w.counter] < uint64_t{w.target} * ctx.generation)
          o << " waits for counter " << w.counter << " = " << uint64_t{w.target} * ctx.generation << ", it is "
            << counters_[w.counter];
    }
    throw DeadlockError(o.str());
  }
}

}  // namespace mk::device
