#include <cmath>

#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const AttentionPayload& p, const Schedule& s) {
  if (p.heads == 0 || p.kv_heads == 0 || p.head_dim == 0 || p.kv_splits == 0) return "zero dimension";
  if (p.heads % p.kv_heads) return "heads must be a multiple of kv_heads";
  if (p.head_dim % 8 || p.head_dim > kMaxScheduleHeadDim) return "head_dim must be a multiple of 8, at most 256";
  if (p.kv_splits > 64) return "at most 64 kv splits";
  const uint64_t hd = p.head_dim;
  if (auto e = expect_tensor(s, p.qkv, "qkv", DType::f32, (p.heads + 2ull * p.kv_heads) * hd, {Role::activation, Role::io});
      !e.empty())
    return e;
  if (auto e = expect_optional_tensor(s, p.q_norm, "q_norm", DType::bf16, hd, {Role::weight}); !e.empty()) return e;
  if (auto e = expect_optional_tensor(s, p.k_norm, "k_norm", DType::bf16, hd, {Role::weight}); !e.empty()) return e;
  if (auto e = expect_tensor(s, p.k_cache, "k_cache", DType::bf16, p.kv_heads * hd, {Role::kv_cache}); !e.empty())
    return e;
  if (auto e = expect_tensor(s, p.v_cache, "v_cache", DType::bf16, p.kv_heads * hd, {Role::kv_cache}); !e.empty())
    return e;
  if (p.k_cache == p.v_cache) return "k_cache and v_cache must differ";
  if (auto e = expect_tensor(s, p.out, "out", DType::f32, attention_partials(p).row_elements(), {Role::activation, Role::io});
      !e.empty())
    return e;
  if (auto e = expect_optional_tensor(s, p.reduce_out, "reduce_out", DType::f32, uint64_t{p.heads} * hd, {Role::activation, Role::io});
      !e.empty())
    return e;
  if (p.unit_begin >= p.unit_end || p.unit_end > uint64_t{p.kv_heads} * p.kv_splits) return "unit range outside the op";
  if (p.rope_scaling > static_cast<uint32_t>(RopeScaling::llama3)) return "unknown rope scaling";
  auto positive = [](float v) { return v > 0.0f && std::isfinite(v); };
  if (!positive(p.rope_theta) || !positive(p.scale) || !positive(p.norm_eps)) return "theta, scale and eps must be positive and finite";
  if (p.rope_scaling == static_cast<uint32_t>(RopeScaling::llama3) &&
      (!positive(p.rope_factor) || !positive(p.rope_original_max_position) || !positive(p.rope_low_freq_factor) ||
       !positive(p.rope_high_freq_factor) || !(p.rope_low_freq_factor < p.rope_high_freq_factor)))
    return "llama3 rope scaling needs positive, finite factors with low_freq_factor < high_freq_factor";
  return {};
}

// Each unit: its q, k and v loaded, normed and roped, the warps' states merged at the end, and
// between them its share of the cache, which streams through the ring (ahead of the waits).
// Fitted to the traces of 2026-11-30 (commit 756481f, each stage's tiles taken by its own warps):
// 6.1 us per unit at 513 positions (head_dim 64, 8 KB), 14.9 us at 8193 and 36.8 us at 32769
// (head_dim 128, 0.26 and 1.05 MB): the cache streams at one SM's share, the set-up and merge
// around it cost ~4 us.
// Only the step's active splits do any of it (active_kv_splits: one at a short step).
double cost_us(const AttentionPayload& p, const CostModel& m, const StepContext& step) {
  constexpr double kUnitUs = 3.9;
  if (p.kv_splits == 0) return m.task_us;  // refused by check_payload; no division by it here
  const uint32_t A = active_kv_splits(step, step.pos, p.kv_splits);
  double us = m.task_us;
  for (uint32_t u = p.unit_begin; u < p.unit_end; ++u) {
    if (u % p.kv_splits >= A) continue;
    const AttentionSplit sp = attention_split(u % p.kv_splits, A, step.pos);
    us += kUnitUs + double(sp.end - sp.begin) * p.head_dim * 4 / m.stream_bytes_per_us;
  }
  return us;
}

// Each unit's cached positions, k and v in bf16 (as if every split were active: the same bytes
// in all, spread over fewer tasks at contexts below kv_splits * KvSplitPolicy::positions; the
// traces' rates and the planner's bytes per SM use this, cost_us the step's active splits).
double bytes_streamed(const AttentionPayload& p, uint32_t context) {
  return double(p.unit_end - p.unit_begin) * std::ceil(double(context) / p.kv_splits) * p.head_dim * 4;
}

}  // namespace mk::schedule
