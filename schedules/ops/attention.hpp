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

// GQA attention over the KV cache, split along the context, for every row of the step, each row
// exactly as a one-token step at its position would do it (so that a step of T rows gives the
// bits of T one-token steps on the emulator).
// A unit is (kv head g, split s), unit = g * kv_splits + s; a task owns [unit_begin, unit_end).
// A row at position p uses the first active_kv_splits(p) splits (the others attend to nothing):
// split s of them covers attention_split(s, A, p) of the positions [0, p), and the row's last
// active split also covers p itself and appends the row's k (normed, roped) and v to the cache
// there. Positions below the start of the row's segment (format.hpp, StepSegment) come from the
// cache, written by earlier steps; positions from the start on are the segment's rows of this
// step, whose k and v the unit takes from qkv as the cache would hold them (bf16). Each active
// (unit, row): q heads g*rep .. g*rep+rep-1 of the row from qkv (optional per-head RMSNorm,
// then RoPE at p).
// out (AttentionPartials): per row [kv_heads][kv_splits][rep][head_dim + 2]: the unnormalised
// output, then the running max m and the sum l of exp(score - m) (log-sum-exp partials for
// attn_reduce). Every row of the step is written, an inactive split's as zeros: the CUDA backend
// hands the partials to attn_reduce as values that carry their step (device/cuda/handoff.cuh),
// which asks that a tensor's rows be written whole once a step. At a short step (every row at or
// before short_positions: split 0 is the only one), a task with reduce_out also writes that
// split's normalised output there (attn_reduce's output, per row [heads * head_dim]), and signals
// for the attn_reduce tasks of its kv head (the planner's short signal lists).
struct AttentionPayload {
  static constexpr const char* kColour = "#59a14f";  // green: this op in the DOT graph and the trace
  uint32_t qkv;      // activation f32 [(heads + 2*kv_heads) * head_dim]: q | k | v
  uint32_t q_norm;   // weight bf16 [head_dim] or kNone
  uint32_t k_norm;   // weight bf16 [head_dim] or kNone
  uint32_t k_cache;  // kv_cache bf16 [kv_heads][position][head_dim], 16-byte chunks permuted by position (device/ops/attention_layout.hpp)
  uint32_t v_cache;
  uint32_t out;  // activation f32 [kv_heads, kv_splits, rep, head_dim + 2] (AttentionPartials)
  uint32_t reduce_out;  // activation f32 [heads * head_dim] or kNone
  uint32_t heads, kv_heads, head_dim, kv_splits;
  uint32_t unit_begin, unit_end;
  float norm_eps;
  float scale;  // softmax scale, 1/sqrt(head_dim)
  float rope_theta;
  uint32_t rope_scaling;  // RopeScaling
  float rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;
};

// The splits a row at position `pos` uses (KvSplitPolicy): one up to short_positions (whether or
// not the step is short), else one per `positions` cached positions, at least one, up to half of
// the S splits; and all S once that count reaches one and a half times S. In between a step keeps
// half: measured on the H200 with S = 16 and splits of 64 positions (docs/notes.md 80), 8 splits
// beat 12 at 768 positions and 16 at 1024 (Qwen3-4B -58 to -74 us, Llama-3.1-8B -54 to -68,
// Llama-3.2-1B -13 to -28), tie with 16 at 1536, and lose to 16 at 2048.
MK_HD inline uint32_t active_kv_splits(const StepContext& c, uint32_t pos, uint32_t S) {
  const uint32_t P = c.kv_splits.positions;
  if (c.kv_splits.short_positions != 0 && pos <= c.kv_splits.short_positions) return 1;
  if (P == 0) return S;
  const uint32_t a = pos / P + (pos % P != 0), half = S / 2 ? S / 2 : 1;
  if (a <= half) return a < 1 ? 1 : a;
  return uint64_t{2} * a >= uint64_t{3} * S ? S : half;
}

// Where the attention writes its partials and attn_reduce reads them: per row, per kv head g,
// split s and q head r of the group, a record of head_dim + 2 values (output, max, sum).
struct AttentionPartials {
  uint32_t kv_heads, kv_splits, rep, head_dim;
  MK_HD uint32_t record() const { return head_dim + 2; }
  MK_HD uint64_t row_elements() const { return uint64_t{kv_heads} * kv_splits * rep * record(); }
  MK_HD uint64_t at(uint32_t row, uint32_t g, uint32_t s, uint32_t r) const {
    return row * row_elements() + ((uint64_t{g} * kv_splits + s) * rep + r) * record();
  }
  MK_HD uint64_t split_stride() const { return uint64_t{rep} * record(); }  // from one split's record to the next
};
MK_HD inline AttentionPartials attention_partials(const AttentionPayload& p) {
  return {p.kv_heads, p.kv_splits, p.heads / p.kv_heads, p.head_dim};
}

// Cached positions [begin, end) of split s of the A active ones (empty for s >= A).
struct AttentionSplit {
  uint32_t begin, end;
};
MK_HD inline AttentionSplit attention_split(uint32_t s, uint32_t A, uint32_t pos) {
  const uint32_t chunk = (pos + A - 1) / A;  // A * chunk < pos + A: no overflow below 2^31 positions
  const uint32_t b = (s < A ? s : A) * chunk, e = (s + 1 < A ? s + 1 : A) * chunk;
  return {b < pos ? b : pos, e < pos ? e : pos};
}

}  // namespace mk::schedule
