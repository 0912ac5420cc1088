#include <cmath>
#include <cstring>
#include <stdexcept>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

namespace {
using schedule::argmax_better;

void write_token(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem, uint32_t row,
                 uint32_t best) {
  const int32_t token = best == 0xffffffffu ? 0 : static_cast<int32_t>(best);
  mem.at<int32_t>(p.out)[row] = token;
  if (int32_t* next = schedule::next_token_of(ctx, schedule::row_segment(ctx, row), row)) *next = token;
}
}  // namespace

// Per row: each task's best of its range; split in several tasks, each writes its bests (one
// record a row) and the last task to take its ticket (one ticket a step) combines every row's.
void cpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  int32_t* parts = p.tasks == 1 ? nullptr : mem.at<int32_t>(p.parts);
  for (uint32_t t = 0; t < ctx.rows; ++t) {
    if (!schedule::row_needed(ctx, p.in, t)) continue;  // a token nobody reads, of logits not made
    const float* in = mem.at<const float>(p.in) + uint64_t{t} * p.count;
    uint32_t best = 0xffffffffu;  // none yet: all NaN or -inf gives 0
    float best_value = -INFINITY;
    for (uint32_t i = p.begin; i < p.end; ++i)
      if (argmax_better(in[i], i, best_value, best)) best_value = in[i], best = i;
    if (p.tasks == 1) {
      write_token(p, ctx, mem, t, best);
      continue;
    }
    int32_t* part = parts + (uint64_t{t} * p.tasks + p.task) * 2;
    std::memcpy(part, &best_value, 4);
    part[1] = static_cast<int32_t>(best);
  }
  if (p.tasks == 1) return;
  if (!ctx.counters) throw std::logic_error("an argmax split in tasks needs the executing side's counters (StepContext::counters)");
  if (!schedule::last_ticket(ctx.counters[p.ticket]++, p.tasks, ctx.generation)) return;
  for (uint32_t t = 0; t < ctx.rows; ++t) {
    if (!schedule::row_needed(ctx, p.in, t)) continue;
    uint32_t best = 0xffffffffu;
    float best_value = -INFINITY;
    for (uint32_t k = 0; k < p.tasks; ++k) {
      const int32_t* part = parts + (uint64_t{t} * p.tasks + k) * 2;
      float v;
      std::memcpy(&v, part, 4);
      const uint32_t i = static_cast<uint32_t>(part[1]);
      if (argmax_better(v, i, best_value, best)) best_value = v, best = i;
    }
    write_token(p, ctx, mem, t, best);
  }
}

}  // namespace mk::device
