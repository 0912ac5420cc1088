// Per-instruction timing of one decode step, and what we make of it: a Chrome / Perfetto trace
// (chrome://tracing, ui.perfetto.dev), an SVG Gantt chart with one lane per SM, and a per-op
// summary of where the time went. The CUDA backend records globaltimer nanoseconds; the
// emulator records a logical clock (device/emulator.hpp) in the same format.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace mk::device {

inline constexpr uint32_t kTraceSlots = 5;  // globaltimer values recorded per instruction

struct TraceEvent {
  uint64_t start, ready, end;  // ns: reached the head of its queue, waits met, signalled
  uint64_t mark[2];            // phases inside the op body (0: not recorded); matvec: input ready, weights done
};

// The event of one instruction's record (kTraceSlots values) as the kernel leaves it. In a
// launch of several steps every step writes the record again, but a body that marked a phase
// at an earlier step and none at the last would leave that step's marks, from before the
// record's start: they are dropped. (None does today: the only body that marks conditionally,
// the attention's, marks for its active splits, which only grow with the position.)
TraceEvent trace_event(const uint64_t* record);

struct TraceOptions {
  std::string title;     // the picture's first line (e.g. the schedule and the backend)
  bool logical = false;  // the emulator's clock: 1000 "ns" per tick, shown as ticks rather than us
  uint32_t context = 0;  // the traced step's position: with a real clock, the summary gives each op's bytes and rate
};

// `events` is indexed like schedule.instructions. The file writers go through io::OutputFile;
// the string forms are for callers that opened their output early.
std::string chrome_trace(const schedule::Schedule&, const std::vector<TraceEvent>&, const TraceOptions& = {});
std::string trace_svg(const schedule::Schedule&, const std::vector<TraceEvent>&, const TraceOptions& = {});
void write_chrome_trace(const schedule::Schedule&, const std::vector<TraceEvent>&, const std::string& path,
                        const TraceOptions& = {});
void write_trace_svg(const schedule::Schedule&, const std::vector<TraceEvent>&, const std::string& path,
                     const TraceOptions& = {});
// A table: per opcode, instructions, mean wait and run time, and the step's span; per op of the
// layer block the same, and (given the context, on a real clock) the bytes each instruction
// streams and the rate it ran at against one SM's share of the bandwidth.
std::string trace_summary(const schedule::Schedule&, const std::vector<TraceEvent>&, const TraceOptions& = {});

}  // namespace mk::device
