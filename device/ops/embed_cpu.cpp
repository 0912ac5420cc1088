#include <cmath>

#include "device/bf16.hpp"
#include "device/ops/cpu_ops.hpp"

namespace mk::device {

void cpu_run(const schedule::EmbedPayload& p, const schedule::StepContext& ctx, const TensorTable& mem) {
  const uint16_t* table = mem.at<const uint16_t>(p.table);
  float* out = mem.at<float>(p.out);
  const uint32_t token = static_cast<uint32_t>(ctx.tokens[0]);
  for (uint32_t c = p.col_begin; c < p.col_end; ++c)
    out[c] = token < p.vocab ? bf16_to_f32(table[uint64_t{token} * p.hidden + c]) : NAN;
}

}  // namespace mk::device
