#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

// Combines the split-KV partials of attention into out[head * head_dim + d] for q heads
// [head_begin, head_end), weighting each split by exp(m_s - max m) and dividing by the sum.
struct AttnReducePayload {
  static constexpr const char* kColour = "#b07aa1";  // purple: this op in the DOT graph and the trace
  uint32_t in;   // activation f32 [kv_heads, kv_splits, rep, head_dim + 2]
  uint32_t out;  // activation f32 [kv_heads * rep * head_dim]
  uint32_t kv_heads, kv_splits, rep, head_dim;
  uint32_t head_begin, head_end;
};

}  // namespace mk::schedule
