// One check per op payload (defined in schedules/ops/<op>.cpp): returns "" when the payload
// is consistent with the tensor table, else what is wrong. Regions must lie inside tensors
// so that a bad file can never make the device read or write out of bounds.
#pragma once
#include <string>

#include "schedules/ops.hpp"
#include "schedules/schedule.hpp"

namespace mk::schedule {

#define MK_OP(name, code, payload) std::string check_payload(const payload&, const Schedule&);
#include "schedules/op_table.def"
#undef MK_OP

// A task of an op whose tasks combine by ticket (format.hpp, last_ticket): the op's ticket
// counter (kNone: the task takes none), its task count, this task's index and its workspace.
// validate() checks the uses of each ticket together: one op's tasks, each index once, all of
// them, and no wait or signal list naming the counter. An op that takes tickets overloads
// ticket_use in its schedules/ops/<op>.cpp.
struct TicketUse {
  uint32_t counter = kNone, tasks = 0, task = 0, workspace = kNone;
};
template <class P>
TicketUse ticket_use(const P&) {
  return {};
}
TicketUse ticket_use(const ArgmaxPayload&);

// Helpers shared by the per-op checks: "" when tensor `id` exists with the given role(s),
// dtype and element count (0: any), else a message naming `field`.
std::string expect_tensor(const Schedule&, uint32_t id, const char* field, DType dtype, uint64_t elements,
                          std::initializer_list<Role> roles);
std::string expect_optional_tensor(const Schedule&, uint32_t id, const char* field, DType dtype, uint64_t elements,
                                   std::initializer_list<Role> roles);

}  // namespace mk::schedule
