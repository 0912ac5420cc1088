#include <cmath>

#include "device/bf16.hpp"
#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_run(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const uint16_t* table = mem.at<const uint16_t>(p.table);
  for (uint32_t r = 0; r < ctx.rows; ++r) {
    const schedule::StepSegment& g = schedule::row_segment(ctx, r);
    const uint32_t token = static_cast<uint32_t>(*schedule::history_at(ctx, g.slot, schedule::row_position(ctx, g, r)));
    float* out = mem.at<float>(p.out) + uint64_t{r} * p.hidden;
    for (uint32_t c = p.col_begin; c < p.col_end; ++c)
      out[c] = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : NAN;
  }
}

}  // namespace mk::device
