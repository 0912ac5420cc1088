// Per-instruction timing of one decode step on the GPU, and what we make of it: a Chrome /
// Perfetto trace (chrome://tracing, ui.perfetto.dev), an SVG Gantt chart with one lane per SM,
// and a per-op summary of where the time went.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace mk::device {

inline constexpr uint32_t kTraceSlots = 5;  // globaltimer values recorded per instruction

struct TraceEvent {
  uint64_t start, ready, end;  // globaltimer ns: reached the head of its queue, waits met, signalled
  uint64_t mark[2];            // phases inside the op body (0: not recorded); matvec: input ready, weights done
};

// `events` is indexed like schedule.instructions.
void write_chrome_trace(const schedule::Schedule&, const std::vector<TraceEvent>&, const std::string& path);
void write_trace_svg(const schedule::Schedule&, const std::vector<TraceEvent>&, const std::string& path);
// A table: per opcode, instructions, mean wait and run time, and the step's span.
std::string trace_summary(const schedule::Schedule&, const std::vector<TraceEvent>&);

}  // namespace mk::device
