#include "device/emulator.hpp"

#include <random>
#include <sstream>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

bool Emulator::ready(const schedule::Instruction& inst, uint32_t generation) const {
  for (const schedule::Wait& w : s_.waits_of(inst))
    if (counters_[w.counter] < uint64_t{w.target} * generation) return false;
  return true;
}

void Emulator::execute(const schedule::Instruction& inst, const schedule::StepContext& ctx, const TensorTable& mem) {
  cpu_execute(inst, ctx, mem);
  for (uint32_t c : s_.signals_of(inst)) ++counters_[c];
}

void Emulator::run_step(const schedule::StepContext& ctx, const TensorTable& mem, Order order, uint64_t seed) {
  const uint32_t sms = s_.sm_count;
  std::vector<uint32_t> head(sms);
  for (uint32_t sm = 0; sm < sms; ++sm) head[sm] = s_.sm_offsets[sm];
  auto runnable = [&](uint32_t sm) {
    return head[sm] < s_.sm_offsets[sm + 1] && ready(s_.instructions[head[sm]], ctx.generation);
  };
  std::mt19937_64 rng(seed);
  size_t left = s_.instructions.size();
  std::vector<uint32_t> candidates;
  while (left > 0) {
    bool moved = false;
    if (order == Order::deterministic) {
      for (uint32_t sm = 0; sm < sms; ++sm)
        if (runnable(sm)) {
          execute(s_.instructions[head[sm]++], ctx, mem);
          --left;
          moved = true;
        }
    } else {
      candidates.clear();
      for (uint32_t sm = 0; sm < sms; ++sm)
        if (runnable(sm)) candidates.push_back(sm);
      if (!candidates.empty()) {
        const uint32_t sm = candidates[rng() % candidates.size()];
        execute(s_.instructions[head[sm]++], ctx, mem);
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
      for (const schedule::Wait& w : s_.waits_of(inst))
        if (counters_[w.counter] < uint64_t{w.target} * ctx.generation)
          o << " waits for counter " << w.counter << " = " << uint64_t{w.target} * ctx.generation << ", it is "
            << counters_[w.counter];
    }
    throw DeadlockError(o.str());
  }
}

}  // namespace mk::device
