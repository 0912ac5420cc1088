#include "schedules/cost.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mk::schedule {

double instruction_bytes(const Instruction& inst, uint32_t context) {
  double bytes = 0;
  visit_payload(inst, [&](const auto& p) { bytes = bytes_streamed(p, context); });
  return bytes;
}

StepContext cost_step(const KvSplitPolicy& policy, uint32_t context) {
  return StepContext{context ? context - 1 : 0, context, 1, 1, policy, 0, 0, kNone, nullptr, nullptr, nullptr, nullptr};
}

double instruction_us(const Instruction& inst, const CostModel& m, const StepContext& step) {
  double us = 0;
  visit_payload(inst, [&](const auto& p) { us = cost_us(p, m, step); });
  return us;
}

double predict_step_us(const Schedule& s, uint32_t context, const CostModel& m) {
  const StepContext step = cost_step(s.kv_splits, context);
  const bool short_lists = short_step(step);
  std::vector<uint32_t> head(s.sm_offsets.begin(), s.sm_offsets.end() - 1), seen(s.counter_count, 0);
  std::vector<double> sm_free(s.sm_count, 0), landed(s.counter_count, 0);
  for (size_t left = s.instructions.size(); left > 0;) {
    bool moved = false;
    for (uint32_t sm = 0; sm < s.sm_count; ++sm) {
      for (; head[sm] < s.sm_offsets[sm + 1]; ++head[sm], --left, moved = true) {
        const Instruction& inst = s.instructions[head[sm]];
        const auto waits = s.waits_of(inst, short_lists);
        if (!std::all_of(waits.begin(), waits.end(), [&](const Wait& w) { return seen[w.counter] >= w.target; })) break;
        double start = sm_free[sm];
        for (const Wait& w : waits) start = std::max(start, landed[w.counter] + m.latency_us);
        sm_free[sm] = start + instruction_us(inst, m, step);
        for (uint32_t c : s.signals_of(inst, short_lists)) {
          ++seen[c];
          landed[c] = std::max(landed[c], sm_free[sm]);
        }
      }
    }
    if (!moved) return NAN;
  }
  return s.sm_count ? *std::max_element(sm_free.begin(), sm_free.end()) : 0;
}

}  // namespace mk::schedule
