// Explicit limits on every size, count and nesting depth that comes from outside: the model
// YAML, a schedule file, a checkpoint, the command line. Each is checked where the value is
// read, so that arithmetic downstream (64-bit) cannot overflow, memory stays bounded and no
// recursive reader can exhaust the stack. Changing one is a format decision: the planner, the
// schedule reader and the runtime all use these.
#pragma once
#include <cstdint>

namespace mk::limits {

// A tensor: each dimension is stored as u32 in the schedule format; the element count of one
// tensor (for a kv cache: of one position) is bounded well below 2^64 / max_context.
inline constexpr uint64_t kMaxDimension = 0xffffffffu;
inline constexpr uint64_t kMaxElements = uint64_t{1} << 40;

// A model: the repeat count (layers; op records store the layer as int16), and the ops and
// tensors after the repeat block is expanded.
inline constexpr int64_t kMaxRepeat = 4096;
inline constexpr uint64_t kMaxOps = 1u << 18;
inline constexpr uint64_t kMaxTensors = 1u << 18;
inline constexpr uint64_t kMaxConfigEntries = 1u << 16;  // nested maps walked, aliases expanded

// A plan: tasks in all, counters in all (the planner and the verifier keep a bitset per counter,
// so memory grows with the square of this), units of work of one op (payloads store u32), SMs.
inline constexpr uint64_t kMaxTasks = 1u << 20;
inline constexpr uint64_t kMaxCounters = 1u << 15;
inline constexpr uint64_t kMaxUnits = 0xffffffffu;
inline constexpr uint32_t kMaxSms = 4096;

// Nesting depth of every recursive reader: YAML maps and lists, expressions, JSON.
inline constexpr int kMaxNesting = 64;

// Input files read whole into memory: a model YAML, a JSON index, a safetensors header; a
// schedule file (instructions and tasks are bounded above, waits and signals by 2^28 each).
inline constexpr uint64_t kMaxTextBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxScheduleBytes = uint64_t{4} << 30;

// Tokens (rows) a step may run: a schedule's max_tokens, and the sequences one backend holds
// (KV-cache slots).
inline constexpr uint32_t kMaxStepTokens = 4096;
inline constexpr uint32_t kMaxSlots = 4096;

// The KV-cache capacity in positions (the step context stores u32 and ops compute pos + 1).
inline constexpr uint64_t kMaxContext = uint64_t{1} << 30;

}  // namespace mk::limits
