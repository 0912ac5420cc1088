#include "schedules/cost.hpp"
#include "schedules/ops/attention.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const AttnReducePayload& p, const Schedule& s) {
  if (p.kv_heads == 0 || p.kv_splits == 0 || p.rep == 0 || p.head_dim == 0) return "zero dimension";
  if (p.head_dim > kMaxScheduleHeadDim || p.kv_splits > 64) return "head_dim above 256 or more than 64 splits";
  const uint64_t heads = uint64_t{p.kv_heads} * p.rep;
  if (auto e = expect_tensor(s, p.in, "in", DType::f32, AttentionPartials{p.kv_heads, p.kv_splits, p.rep, p.head_dim}.row_elements(), {Role::activation, Role::io});
      !e.empty())
    return e;
  if (auto e = expect_tensor(s, p.out, "out", DType::f32, heads * p.head_dim, {Role::activation, Role::io}); !e.empty()) return e;
  if (p.head_begin >= p.head_end || p.head_end > heads) return "head range outside the op";
  if (p.bypassed > 1) return "bypassed must be 0 or 1";
  if (p.bypassed && p.head_begin / p.rep != (p.head_end - 1) / p.rep) return "a bypassed task's heads must lie in one kv head";
  return {};
}

// The partials of its heads from L2: one round trip, every load issued at once. At a short step
// a bypassed task returns at once and signals nothing (0.33 us in the traces of bca72d8).
double cost_us(const AttnReducePayload& p, const CostModel& m, const StepContext& step) {
  constexpr double kBypassedUs = 0.33;
  return p.bypassed && short_step(step) ? kBypassedUs : m.task_us;
}
double bytes_streamed(const AttnReducePayload&, uint32_t) { return 0; }

}  // namespace mk::schedule
