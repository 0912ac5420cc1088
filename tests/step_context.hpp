// A StepContext decoding one token, for tests that call op bodies or the emulator directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "schedules/format.hpp"

namespace mk::test {

// The token lives in a per-thread history (slot 0, max_context + 1 positions, the token at
// `pos`): use the context before making the next one. `counters`: the executing side's, for ops
// that combine their tasks by ticket (argmax split in several).
inline schedule::StepContext step_context(uint32_t pos, int32_t token, uint32_t max_context, uint32_t generation,
                                         schedule::KvSplitPolicy kv_splits = {0, 0}, uint32_t* counters = nullptr) {
  thread_local std::vector<int32_t> history;
  thread_local schedule::StepSegment segment;
  history.assign(size_t{max_context > pos ? max_context : pos + 1} + 1, -1);
  history.at(pos) = token;
  segment = {0, pos, 1, 0, pos + 1};  // the step's token goes to history[pos + 1]
  return {pos, max_context, generation, 1, kv_splits, 1, 0, schedule::kNone, &segment, history.data(), counters, nullptr};
}

// A step of several rows: `segments` as given (row_begin, and the context's rows, from their
// order), tokens read from and written to `history` ([slots][max_context + 1]).
inline schedule::StepContext step_context(std::vector<schedule::StepSegment>& segments, std::vector<int32_t>& history,
                                         uint32_t max_context, uint32_t generation, schedule::KvSplitPolicy kv_splits = {0, 0},
                                         uint32_t* counters = nullptr) {
  uint32_t rows = 0, longest = 0;
  for (schedule::StepSegment& g : segments) {
    g.row_begin = rows;
    rows += g.rows;
    longest = g.start + g.rows - 1 > longest ? g.start + g.rows - 1 : longest;
  }
  return {longest, max_context, generation, rows, kv_splits, static_cast<uint32_t>(segments.size()), 0, schedule::kNone, segments.data(),
          history.data(), counters, nullptr};
}

}  // namespace mk::test
