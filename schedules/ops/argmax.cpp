#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const ArgmaxPayload& p, const Schedule& s) {
  if (p.count == 0) return "count is 0";
  if (auto e = expect_tensor(s, p.in, "in", DType::f32, p.count, {Role::activation, Role::io}); !e.empty()) return e;
  if (auto e = expect_tensor(s, p.out, "out", DType::i32, 1, {Role::io}); !e.empty()) return e;
  if (p.begin >= p.end || p.end > p.count) return "range [begin, end) is empty or past count";
  if (p.tasks == 0 || p.task >= p.tasks) return "task is not below tasks";
  if (p.tasks == 1) {
    if (p.parts != kNone || p.ticket != kNone) return "one task has no parts and no ticket";
    return {};
  }
  if (auto e = expect_tensor(s, p.parts, "parts", DType::i32, uint64_t{2} * p.tasks, {Role::activation}); !e.empty()) return e;
  if (p.ticket >= s.counter_count) return "ticket names a counter past counter_count";
  return {};  // the op's tasks together: validate(), through ticket_use
}

TicketUse ticket_use(const ArgmaxPayload& p) { return p.tasks > 1 ? TicketUse{p.ticket, p.tasks, p.task, p.parts} : TicketUse{}; }

// One SM reads its range from L2, 16-byte loads with eight in flight per thread: 0.5 MB of
// logits in 11 us, 0.6 MB in 13 us (H200 traces of 2026-11-30). With several tasks, the ticket
// and (the last task) the parts are two more round trips.
double cost_us(const ArgmaxPayload& p, const CostModel& m, const StepContext&) {
  constexpr double kLogitsBytesPerUs = 58e3;
  return m.task_us + (p.end - p.begin) * 4.0 / kLogitsBytesPerUs + (p.tasks > 1 ? 2 * m.latency_us : 0.0);
}
double bytes_streamed(const ArgmaxPayload&, uint32_t) { return 0; }

}  // namespace mk::schedule
