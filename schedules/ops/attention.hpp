#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

// Limits of the CUDA implementation (registers per lane): device/cuda refuses a schedule past
// them (check_cuda_limits); the format, the planner and the emulator take any q heads per kv
// head and a head_dim up to kMaxScheduleHeadDim.
inline constexpr uint32_t kMaxHeadDim = 128;
inline constexpr uint32_t kMaxGroup = 8;  // q heads per kv head
inline constexpr uint32_t kMaxScheduleHeadDim = 256;

enum class RopeScaling : uint32_t { none = 0, llama3 = 1 };

// GQA decode attention over the KV cache for one token, split along the context.
// A unit is (kv head g, split s), unit = g * kv_splits + s; a task owns [unit_begin, unit_end).
// Each unit: q heads g*rep .. g*rep+rep-1 from qkv (optional per-head RMSNorm, then RoPE),
// positions of its split of [0, pos) read from the cache; the last split also handles the
// current position, whose k (normed, roped) and v it appends to the cache.
// out layout [kv_heads][kv_splits][rep][head_dim + 2]: the unnormalised output, then the
// running max m and the sum l of exp(score - m) (log-sum-exp partials for attn_reduce).
struct AttentionPayload {
  static constexpr const char* kColour = "#59a14f";  // green: this op in the DOT graph and the trace
  uint32_t qkv;      // activation f32 [(heads + 2*kv_heads) * head_dim]: q | k | v
  uint32_t q_norm;   // weight bf16 [head_dim] or kNone
  uint32_t k_norm;   // weight bf16 [head_dim] or kNone
  uint32_t k_cache;  // kv_cache bf16 [kv_heads][position][head_dim], 16-byte chunks permuted by position (device/ops/attention_layout.hpp)
  uint32_t v_cache;
  uint32_t out;  // activation f32 [kv_heads, kv_splits, rep, head_dim + 2]
  uint32_t heads, kv_heads, head_dim, kv_splits;
  uint32_t unit_begin, unit_end;
  float norm_eps;
  float scale;  // softmax scale, 1/sqrt(head_dim)
  float rope_theta;
  uint32_t rope_scaling;  // RopeScaling
  float rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;
};

}  // namespace mk::schedule
