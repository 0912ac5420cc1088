#pragma once
#include "schedules/format.hpp"
#include "schedules/ops/attention.hpp"  // active_kv_splits

namespace mk::schedule {

// Combines the split-KV partials of attention into out[head * head_dim + d] for q heads
// [head_begin, head_end), weighting each active split (active_kv_splits) by exp(m_s - max m)
// and dividing by the sum. A bypassed task does nothing at a short step: the attention task of
// its kv head's split 0 writes its output and signals for it (schedules/ops/attention.hpp).
struct AttnReducePayload {
  static constexpr const char* kColour = "#b07aa1";  // purple: this op in the DOT graph and the trace
  uint32_t in;   // activation f32 [kv_heads, kv_splits, rep, head_dim + 2]
  uint32_t out;  // activation f32 [kv_heads * rep * head_dim]
  uint32_t kv_heads, kv_splits, rep, head_dim;
  uint32_t head_begin, head_end;
  uint32_t bypassed;  // 1: skipped at short steps (its heads lie in one kv head)
};

}  // namespace mk::schedule
