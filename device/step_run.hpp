// A run of steps of the same rows, the unit a backend runs at once (one launch on the GPU), and
// its checks. Header-only: the CUDA executor (device/cuda) and the runtime share it.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace mk::device {

// Steps run together (one launch on the GPU): `steps` steps of the same segments, each
// segment's start advancing by `advance` positions from one step to the next (1: decoding, each
// step fed the token the one before wrote; a chunk's rows: a prompt's chunks one after another).
// Segments are in row order (row_begin: the rows before them), one per slot at most.
struct StepRun {
  std::vector<schedule::StepSegment> segments;  // as at the first step
  uint32_t steps = 1;
  uint32_t advance = 1;
  // Every row's logits (kept by the caller); else only those of the rows that feed their
  // sequence's next token (StepContext::fed_logits).
  bool all_logits = false;
  uint32_t rows() const {  // of each step
    uint32_t n = 0;
    for (const schedule::StepSegment& g : segments) n += g.rows;
    return n;
  }

  // One sequence (slot 0): positions [first, first + count), one a step, as decoding runs them.
  static StepRun decode(uint32_t first, uint32_t count, uint32_t fed_from) {
    return StepRun{{schedule::StepSegment{0, first, 1, 0, fed_from}}, count, 1, true};
  }
};
// Refuses (std::invalid_argument, one line) a run this schedule and backend cannot take: no
// segment, an empty one, rows above the schedule's max_tokens, a slot outside [0, slots) or twice,
// row_begin not the rows before, a position past max_context at the run's last step.
inline void check_step_run(const schedule::Schedule& s, const StepRun& run, uint32_t slots, uint32_t max_context) {
  if (run.segments.empty()) throw std::invalid_argument("a step needs at least one sequence");
  std::vector<bool> used(slots, false);
  uint64_t rows = 0;
  for (const schedule::StepSegment& g : run.segments) {
    if (g.rows == 0) throw std::invalid_argument("a step holds an empty run of positions");
    if (g.slot >= slots)
      throw std::invalid_argument("sequence slot " + std::to_string(g.slot) + " is outside the backend's " +
                                  std::to_string(slots) + (slots == 1 ? " slot" : " slots"));
    if (used[g.slot]) throw std::invalid_argument("slot " + std::to_string(g.slot) + " appears twice in one step");
    used[g.slot] = true;
    if (g.row_begin != rows) throw std::invalid_argument("a step's runs of positions must follow each other (row_begin)");
    rows += g.rows;
    const uint64_t last = g.start + uint64_t{run.steps ? run.steps - 1 : 0} * run.advance + g.rows - 1;
    if (last >= max_context)
      throw std::invalid_argument("position " + std::to_string(last) + " is beyond the KV cache (" + std::to_string(max_context) + ")");
  }
  if (rows > s.max_tokens)
    throw std::invalid_argument("a step of " + std::to_string(rows) + " tokens is more than the schedule's max_tokens (" +
                                std::to_string(s.max_tokens) + "); plan with mkplan --max-tokens " + std::to_string(rows));
}

}  // namespace mk::device
