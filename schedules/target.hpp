// The GPU the planner's defaults and the cost model are written for, in one place: the H200's
// SM count, and its streaming bandwidth as measured on the test machine (a bulk-copy stream of
// weights, docs/notes.md). A schedule for another GPU is planned with mkplan --sms.
#pragma once
#include <cstdint>

namespace mk::schedule {

inline constexpr uint32_t kDefaultSmCount = 132;
inline constexpr double kStreamBytesPerUs = 4.58e6;  // 4.58 TB/s

}  // namespace mk::schedule
