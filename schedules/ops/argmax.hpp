#pragma once
#include <cmath>

#include "schedules/format.hpp"

namespace mk::schedule {

// out[0] = the index of the largest in[i]: the lowest index on ties; NaN never wins; 0 when
// no value is above -inf. A task takes in[begin, end); with several tasks, each writes its best
// (value bits, index) to parts[2 task], and the last to take its ticket (last_ticket) picks the
// best of all the parts, by the same rule, and writes out.
struct ArgmaxPayload {
  static constexpr const char* kColour = "#e15759";  // red: this op in the DOT graph and the trace
  uint32_t in;  // f32 [count]
  uint32_t out; // i32 [1]
  uint32_t count;
  uint32_t begin, end;  // this task's range of in
  uint32_t parts;       // i32 [2 tasks], or kNone with one task
  uint32_t ticket;      // the op's ticket counter, or kNone with one task
  uint32_t tasks, task; // the op's tasks, and this one's index among them

  // All of in[0, count) in one task: no parts, no ticket.
  MK_HD static ArgmaxPayload whole(uint32_t in, uint32_t out, uint32_t count) {
    return {in, out, count, 0, count, kNone, kNone, 1, 0};
  }
};

// The order both bodies pick by, (value, index): larger value first, then lower index; NaN and
// -inf never win (nothing above -inf gives token 0).
MK_HD inline bool argmax_better(float v, uint32_t i, float best, uint32_t best_index) {
  return v > best || (v == best && v > -INFINITY && i < best_index);
}

}  // namespace mk::schedule
