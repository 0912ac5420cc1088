// What the CUDA attention kernel (device/ops/attention.cuh) was built for: at most
// schedule::kMaxGroup q heads per kv head and head_dim a multiple of 16 up to
// schedule::kMaxHeadDim (the tensor cores take q as 2 x kMaxGroup rows and 16 dimensions per
// step; the output is held in registers sized by the head). A schedule past them plans and runs
// on the emulator; the CUDA executor refuses it with this message (std::runtime_error) before
// allocating anything. Header-only, so that the CPU tests check the message without CUDA.
#pragma once
#include <stdexcept>
#include <string>

#include "schedules/ops.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

// Rows a step may have on the CUDA interpreter (a schedule's max_tokens), and the sequences one
// launch may hold (its segments, passed with the launch).
inline constexpr uint32_t kMaxCudaRows = 128;
inline constexpr uint32_t kMaxLaunchSegments = 64;

inline void check_cuda_limits(const schedule::Schedule& s) {
  if (s.max_tokens > kMaxCudaRows)
    throw std::runtime_error("the CUDA interpreter runs at most " + std::to_string(kMaxCudaRows) +
                             " tokens a step; this schedule was planned for " + std::to_string(s.max_tokens) +
                             " (plan with mkplan --max-tokens " + std::to_string(kMaxCudaRows) +
                             " or less, or run it with --backend emulator)");
  for (const schedule::Instruction& inst : s.instructions) {
    if (inst.opcode != static_cast<uint16_t>(schedule::Opcode::attention)) continue;
    const auto& a = schedule::payload_as<schedule::AttentionPayload>(inst);
    const uint32_t group = a.heads / a.kv_heads;
    if (group > schedule::kMaxGroup || a.head_dim > schedule::kMaxHeadDim || a.head_dim % 16 != 0)
      throw std::runtime_error("the CUDA interpreter's attention takes at most " + std::to_string(schedule::kMaxGroup) +
                               " q heads per kv head and a head_dim that is a multiple of 16, at most " +
                               std::to_string(schedule::kMaxHeadDim) + "; this schedule has " + std::to_string(a.heads) +
                               " heads over " + std::to_string(a.kv_heads) + " kv heads (" + std::to_string(group) +
                               " per kv head), head_dim " + std::to_string(a.head_dim) + " (run it with --backend emulator)");
  }
}

}  // namespace mk::device
