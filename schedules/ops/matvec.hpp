#pragma once
#include "schedules/format.hpp"

namespace mk::schedule {

enum class MatvecAct : uint32_t { none = 0, silu_mul = 1 };

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
  uint32_t act;  // MatvecAct
  uint32_t cols;
  uint32_t weight_count;
  uint32_t weight[3];          // weights bf16 [rows_i, cols]
  uint32_t weight_row_end[3];  // cumulative row ends of the concatenation
  uint32_t row_begin, row_end;
  uint32_t bias[3] = {kNone, kNone, kNone};  // weights bf16 [rows_i] or kNone, parallel to weight[]
};

// Elements of one row of out (and residual): every weight's rows, or gate's for silu_mul.
MK_HD inline uint32_t matvec_out_width(const MatvecPayload& p) {
  return p.weight_count ? p.weight_row_end[p.weight_count - 1] : 0;
}

}  // namespace mk::schedule
