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

// Helpers shared by the per-op checks: "" when tensor `id` exists with the given role(s),
// dtype and element count (0: any), else a message naming `field`.
std::string expect_tensor(const Schedule&, uint32_t id, const char* field, DType dtype, uint64_t elements,
                          std::initializer_list<Role> roles);
std::string expect_optional_tensor(const Schedule&, uint32_t id, const char* field, DType dtype, uint64_t elements,
                                   std::initializer_list<Role> roles);

}  // namespace mk::schedule
