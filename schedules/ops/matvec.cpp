#include <cmath>

#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const MatvecPayload& p, const Schedule& s) {
  const std::initializer_list<Role> act = {Role::activation, Role::io};
  if (auto e = expect_tensor(s, p.in, "in", DType::f32, p.cols, act); !e.empty()) return e;
  if (auto e = expect_optional_tensor(s, p.norm, "norm", DType::bf16, p.cols, {Role::weight}); !e.empty()) return e;
  if (p.cols == 0 || p.cols % 8) return "cols must be a positive multiple of 8 (the device reads 8 bf16 at a time)";
  if (p.weight_count < 1 || p.weight_count > 3) return "weight_count must be 1 to 3";
  if (p.act > static_cast<uint32_t>(MatvecAct::silu_mul)) return "unknown activation";
  if (p.weight_format > static_cast<uint32_t>(WeightFormat::f8_block128)) return "unknown weight format";
  const bool fp8 = matvec_fp8(p);
  if (fp8 && p.cols % 16) return "cols must be a multiple of 16 for float8 weights (16-byte copies)";
  const bool silu = p.act == static_cast<uint32_t>(MatvecAct::silu_mul);
  if (silu && p.weight_count != 2) return "silu_mul needs exactly two weights (gate, up)";
  uint64_t rows = 0;  // 64-bit: a sum of u32 row counts
  for (uint32_t i = 0; i < p.weight_count; ++i) {
    if (auto e = expect_tensor(s, p.weight[i], "weight", fp8 ? DType::f8e4m3 : DType::bf16, 0, {Role::weight}); !e.empty()) return e;
    const Tensor& w = s.tensors[p.weight[i]];
    if (w.shape.size() != 2 || w.shape[1] != p.cols) return "weight " + w.name + " is not [rows, cols]";
    if (fp8) {  // validate() checked that its scales follow it; here that they are of this layout
      const uint32_t layout_elements = p.weight_format == static_cast<uint32_t>(WeightFormat::f8_row) ? w.shape[0]
                                       : p.weight_format == static_cast<uint32_t>(WeightFormat::f8_tensor)
                                           ? 1
                                           : matvec_scale_index(p, w.shape[0] - 1, p.cols - 1) + 1;
      const Tensor& sc = s.tensors[p.weight[i] + 1];
      if (sc.elements() != layout_elements || (p.weight_format == static_cast<uint32_t>(WeightFormat::f8_block128)) != (sc.shape.size() == 2))
        return "the scales of weight " + w.name + " (" + sc.name + ") are not of the payload's weight format";
    }
    rows = silu ? w.shape[0] : rows + w.shape[0];
    if (p.weight_row_end[i] != rows) return "weight_row_end inconsistent with the weight shapes";
    if (silu && i == 1 && w.shape != s.tensors[p.weight[0]].shape) return "gate and up shapes differ";
    if (p.bias[i] != kNone && silu) return "a bias is only applied without an activation";
    if (auto e = expect_optional_tensor(s, p.bias[i], "bias", DType::bf16, w.shape[0], {Role::weight}); !e.empty()) return e;
  }
  for (uint32_t i = p.weight_count; i < 3; ++i)
    if (p.bias[i] != kNone) return "a bias without its weight";
  if (silu) rows = s.tensors[p.weight[0]].shape[0];
  if (auto e = expect_tensor(s, p.out, "out", DType::f32, rows, act); !e.empty()) return e;
  if (auto e = expect_optional_tensor(s, p.residual, "residual", DType::f32, rows, act); !e.empty()) return e;
  if (p.row_begin >= p.row_end || p.row_end > rows) return "row range outside the output";
  if (!(p.eps > 0.0f) || !std::isfinite(p.eps)) return "eps must be positive and finite";
  return {};
}

// Its rows of every weight (gate and up for silu_mul), at their element size (the scales are
// at most a 32nd of float8 weights' bytes, a row's or a block's: not counted).
double bytes_streamed(const MatvecPayload& p, uint32_t) {
  const bool silu = p.act == static_cast<uint32_t>(MatvecAct::silu_mul);
  return double(p.row_end - p.row_begin) * p.cols * (matvec_fp8(p) ? 1 : 2) * (silu ? 2 : 1);
}

// Its input vector from L2, then its weights at one SM's share of the stream.
double cost_us(const MatvecPayload& p, const CostModel& m, const StepContext& step) {
  return m.task_us + p.cols * 4.0 / m.input_bytes_per_us + bytes_streamed(p, step.pos + 1) / m.stream_bytes_per_us;
}

}  // namespace mk::schedule
