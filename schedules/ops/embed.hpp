#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

// out[c] = table[token][c] for c in [col_begin, col_end); a token outside the vocabulary
// yields NaN rather than an out-of-bounds read.
struct EmbedPayload {
  static constexpr const char* kColour = "#f28e2b";  // orange: this op in the DOT graph and the trace
  uint32_t table;  // weight bf16 [vocab, hidden]
  uint32_t out;    // activation f32 [hidden]
  uint32_t vocab, hidden;  // the table's shape
  uint32_t col_begin, col_end;
};

}  // namespace mk::schedule
