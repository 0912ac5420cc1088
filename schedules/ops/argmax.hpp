#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

// out[0] = the index of the largest in[i]: the lowest index on ties; NaN never wins; 0 when
// no value is above -inf.
struct ArgmaxPayload {
  static constexpr const char* kColour = "#e15759";  // red: this op in the DOT graph and the trace
  uint32_t in;  // f32 [count]
  uint32_t out; // i32 [1]
  uint32_t count;
};

}  // namespace mk::schedule
