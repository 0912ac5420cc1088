#include <cmath>
#include <cstring>
#include <stdexcept>

#include "device/ops/cpu_ops.hpp"

namespace mk::device {

namespace {
using schedule::argmax_better;

void write_token(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem, uint32_t best) {
  const int32_t token = best == 0xffffffffu ? 0 : static_cast<int32_t>(best);
  *mem.at<int32_t>(p.out) = token;
  if (ctx.next_tokens) ctx.next_tokens[0] = token;
}
}  // namespace

void cpu_run(const schedule::ArgmaxPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const float* in = mem.at<const float>(p.in);
  uint32_t best = 0xffffffffu;  // none yet: all NaN or -inf gives 0
  float best_value = -INFINITY;
  for (uint32_t i = p.begin; i < p.end; ++i)
    if (argmax_better(in[i], i, best_value, best)) best_value = in[i], best = i;
  if (p.tasks == 1) return write_token(p, ctx, mem, best);
  if (!ctx.counters) throw std::logic_error("an argmax split in tasks needs the executing side's counters (StepContext::counters)");
  int32_t* parts = mem.at<int32_t>(p.parts);
  std::memcpy(parts + 2 * p.task, &best_value, 4);
  parts[2 * p.task + 1] = static_cast<int32_t>(best);
  if (!schedule::last_ticket(ctx.counters[p.ticket]++, p.tasks, ctx.generation)) return;
  for (uint32_t t = 0; t < p.tasks; ++t) {
    float v;
    std::memcpy(&v, parts + 2 * t, 4);
    const uint32_t i = static_cast<uint32_t>(parts[2 * t + 1]);
    if (argmax_better(v, i, best_value, best)) best_value = v, best = i;
  }
  write_token(p, ctx, mem, best);
}

}  // namespace mk::device
