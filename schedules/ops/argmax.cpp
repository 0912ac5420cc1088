#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const ArgmaxPayload& p, const Schedule& s) {
  if (p.count == 0) return "count is 0";
  if (auto e = expect_tensor(s, p.in, "in", DType::f32, p.count, {Role::activation, Role::io}); !e.empty()) return e;
  if (auto e = expect_tensor(s, p.out, "out", DType::i32, 1, {Role::io}); !e.empty()) return e;
  return {};
}

// One SM reads all of its input from L2.
double cost_us(const ArgmaxPayload& p, const CostModel& m, uint32_t) { return m.task_us + p.count * 4.0 / m.input_bytes_per_us; }
double bytes_streamed(const ArgmaxPayload&, uint32_t) { return 0; }

}  // namespace mk::schedule
