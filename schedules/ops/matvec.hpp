#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

enum class MatvecAct : uint16_t { none = 0, silu_mul = 1 };

// The element type of a matvec's weights, and for float8 how the scales cover each of them (every
// weight of the op alike): weight[i]'s scales are tensor weight[i] + 1 (format.hpp, DType::f8e4m3).
enum class WeightFormat : uint16_t { bf16 = 0, f8_tensor = 1, f8_row = 2, f8_block128 = 3 };
inline constexpr uint32_t kScaleBlock = 128;  // f8_block128: rows and columns a scale covers

// y = W · (norm ? rmsnorm(in) * norm : in), fp32 accumulation, for output rows [row_begin,
// row_end), for every row (token) of the step: in, out and residual hold one vector a row. act none: W is the row-wise concatenation of weight[0..weight_count) and
// out[r] = y[r] (+ residual[r]). act silu_mul: weight[0] is gate, weight[1] is up and
// out[r] = silu(gate_r · x) * (up_r · x). bias[i] (act none only): bf16 [rows_i] added to the
// rows of weight[i] before the residual, or kNone.
struct MatvecPayload {
  static constexpr const char* kColour = "#4e79a7";  // blue: this op in the DOT graph and the trace
  uint32_t in;        // activation f32 [cols]
  uint32_t norm;      // weight bf16 [cols] or kNone
  uint32_t out;       // activation f32 [rows]
  uint32_t residual;  // activation f32 [rows] or kNone
  float eps;
  uint16_t act;            // MatvecAct
  uint16_t weight_format;  // WeightFormat (0, bf16, in files before version 7)
  uint32_t cols;
  uint32_t weight_count;
  uint32_t weight[3];          // weights [rows_i, cols], bf16 or f8e4m3 (weight_format)
  uint32_t weight_row_end[3];  // cumulative row ends of the concatenation
  uint32_t row_begin, row_end;
  uint32_t bias[3] = {kNone, kNone, kNone};  // weights bf16 [rows_i] or kNone, parallel to weight[]
};

MK_HD inline bool matvec_fp8(const MatvecPayload& p) { return p.weight_format != static_cast<uint16_t>(WeightFormat::bf16); }

// Where the scale of weight i's row `row` (of the weight) and column `col` is in its scale tensor.
MK_HD inline uint32_t matvec_scale_index(const MatvecPayload& p, uint32_t row, uint32_t col) {
  switch (static_cast<WeightFormat>(p.weight_format)) {
    case WeightFormat::f8_row: return row;
    case WeightFormat::f8_block128: return row / kScaleBlock * ((p.cols + kScaleBlock - 1) / kScaleBlock) + col / kScaleBlock;
    default: return 0;
  }
}

// Which of the concatenated weights holds output row `row` (act none; silu_mul: gate and up both
// hold every row, and `up` picks), and the row in it.
struct MatvecWeightRow {
  uint32_t weight, row;  // index into weight[] (and bias[]), row of that weight
};
MK_HD inline MatvecWeightRow matvec_weight_row(const MatvecPayload& p, uint32_t row, bool up = false) {
  if (p.act == static_cast<uint32_t>(MatvecAct::silu_mul)) return {up ? 1u : 0u, row};
  uint32_t i = 0, first = 0;
  while (i + 1 < p.weight_count && row >= p.weight_row_end[i]) first = p.weight_row_end[i++];
  return {i, row - first};
}

// Elements of one row of out (and residual): every weight's rows, or gate's for silu_mul.
MK_HD inline uint32_t matvec_out_width(const MatvecPayload& p) {
  return p.weight_count ? p.weight_row_end[p.weight_count - 1] : 0;
}

}  // namespace mk::schedule
