#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const EmbedPayload& p, const Schedule& s) {
  if (auto e = expect_tensor(s, p.table, "table", DType::bf16, 0, {Role::weight}); !e.empty()) return e;
  const Tensor& table = s.tensors[p.table];
  if (table.shape.size() != 2) return "table must be 2-D [vocab, hidden]";
  if (table.shape[0] != p.vocab || table.shape[1] != p.hidden) return "vocab and hidden disagree with the table";
  if (auto e = expect_tensor(s, p.out, "out", DType::f32, table.shape[1], {Role::activation, Role::io}); !e.empty()) return e;
  if (p.col_begin >= p.col_end || p.col_end > table.shape[1]) return "column range outside the table";
  return {};
}

double cost_us(const EmbedPayload&, const CostModel& m, const StepContext&) { return m.task_us; }
double bytes_streamed(const EmbedPayload& p, uint32_t) { return (p.col_end - p.col_begin) * 2.0; }  // one row's columns

}  // namespace mk::schedule
