// matvec: y = W · (norm ? rmsnorm(in) * norm : in) for rows [row_begin, row_end), W the
// row-wise concatenation of up to 3 bf16 (or float8 e4m3 with scales) weights, optional residual
// add, or silu(gate·x) * (up·x).
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "tests/step_context.hpp"
#include "device/fp8.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::schedule::kNone;
using mk::schedule::MatvecAct;
using mk::schedule::MatvecPayload;
using mk::schedule::StepContext;
using mk::schedule::WeightFormat;

namespace {

struct MatvecSetup {
  uint32_t cols = 64;
  std::vector<uint32_t> weight_rows = {40};  // rows of each weight
  bool norm = false;
  bool residual = false;
  bool silu = false;
  uint32_t row_begin = 0, row_end = 0;  // row_end 0: all rows
  float eps = 1e-5f;
  WeightFormat format = WeightFormat::bf16;
};

// A float8 weight of `rows` x `cols` drawn like a bf16 one, with scales of the format's layout
// (each the largest magnitude it covers over 448, times a random factor in [1, 2): values span
// e4m3's range, the largest well inside it), quantized to the nearest e4m3.
struct Float8Weight {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  std::vector<double> dequantized;  // float(q) * scale, the reference's weight
};
Float8Weight draw_float8(uint32_t rows, uint32_t cols, WeightFormat f, std::mt19937& rng) {
  MatvecPayload p{};
  p.cols = cols;
  p.weight_format = static_cast<uint16_t>(f);
  const std::vector<float> v = randn(size_t{rows} * cols, rng, 0, 1 / std::sqrt(cols));
  const uint32_t n = mk::schedule::matvec_scale_index(p, rows - 1, cols - 1) + 1;
  Float8Weight w;
  std::vector<float> amax(n, 0.0f);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < cols; ++c) {
      float& m = amax[mk::schedule::matvec_scale_index(p, r, c)];
      m = std::max(m, std::fabs(v[size_t{r} * cols + c]));
    }
  std::uniform_real_distribution<float> factor(1.0f, 2.0f);
  for (float m : amax) w.scale.push_back(m / 448.0f * factor(rng));
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < cols; ++c) {
      const float s = w.scale[mk::schedule::matvec_scale_index(p, r, c)];
      w.q.push_back(mk::device::f32_to_f8e4m3(v[size_t{r} * cols + c] / s));
      w.dequantized.push_back(double(mk::device::f8e4m3_to_f32(w.q.back())) * s);
    }
  return w;
}

struct MatvecCase {
  Memory mem;
  MatvecPayload p{};
  uint32_t rows = 0;  // output rows
  std::vector<float> in, norm_w, res;
  std::vector<std::vector<double>> weights;  // bf16 values, or float8 ones dequantized, [rows_i, cols]

  MatvecCase(const MatvecSetup& s, std::mt19937& rng) {
    in = randn(s.cols, rng);
    p.in = mem.add_f32(in);
    p.cols = s.cols;
    p.eps = s.eps;
    p.act = static_cast<uint16_t>(s.silu ? MatvecAct::silu_mul : MatvecAct::none);
    p.norm = kNone;
    if (s.norm) {
      const std::vector<uint16_t> w = to_bf16(randn(s.cols, rng, 1.0, 0.2));
      norm_w = from_bf16(w);
      p.norm = mem.add_bf16(w);
    }
    p.weight_count = static_cast<uint32_t>(s.weight_rows.size());
    p.weight_format = static_cast<uint16_t>(s.format);
    for (size_t i = 0; i < s.weight_rows.size(); ++i) {
      if (s.format == WeightFormat::bf16) {
        const std::vector<uint16_t> w = to_bf16(randn(size_t{s.weight_rows[i]} * s.cols, rng, 0, 1 / std::sqrt(s.cols)));
        const std::vector<float> f = from_bf16(w);
        weights.emplace_back(f.begin(), f.end());
        p.weight[i] = mem.add_bf16(w);
      } else {  // the weight, then its scales (the tensor after it)
        Float8Weight w = draw_float8(s.weight_rows[i], s.cols, s.format, rng);
        weights.push_back(std::move(w.dequantized));
        p.weight[i] = mem.add_u8(w.q);
        CHECK(mem.add_f32(w.scale) == p.weight[i] + 1);
      }
      rows = s.silu ? s.weight_rows[i] : rows + s.weight_rows[i];
      p.weight_row_end[i] = rows;
    }
    p.out = mem.add_f32_poisoned(rows);
    p.residual = kNone;
    if (s.residual) {
      res = randn(rows, rng);
      p.residual = mem.add_f32(res);
    }
    p.row_begin = s.row_begin;
    p.row_end = s.row_end ? s.row_end : rows;
  }

  // The expected output over all rows, in double.
  std::vector<double> reference() const {
    std::vector<double> x(in.begin(), in.end());
    if (!norm_w.empty()) {
      double ss = 0;
      for (double v : x) ss += v * v;
      const double inv = 1 / std::sqrt(ss / x.size() + double(p.eps));
      for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * inv * norm_w[i];
    }
    auto dot = [&](const std::vector<double>& w, uint32_t row) {
      double acc = 0;
      for (uint32_t i = 0; i < p.cols; ++i) acc += w[size_t{row} * p.cols + i] * x[i];
      return acc;
    };
    std::vector<double> y;
    if (p.act == static_cast<uint32_t>(MatvecAct::silu_mul)) {
      for (uint32_t r = 0; r < rows; ++r) {
        const double g = dot(weights[0], r), u = dot(weights[1], r);
        y.push_back(g / (1 + std::exp(-g)) * u);
      }
    } else {
      for (const std::vector<double>& w : weights)
        for (uint32_t r = 0; r < w.size() / p.cols; ++r) y.push_back(dot(w, r));
    }
    for (size_t r = 0; r < res.size(); ++r) y[r] += res[r];
    return y;
  }

  void run() { mk::device::cpu_run(p, mk::test::step_context(2, 7, 16, 1), mem.table()); }

  // Runs and checks: rows [row_begin, row_end) written and close to the reference, no other
  // element written, inputs untouched.
  void run_and_check() {
    const std::vector<float> in_before = in;
    run();
    auto out = mem.f32(p.out);
    const WriteCheck w = check_writes(out, p.row_begin, p.row_end);
    CHECK(w.unwritten_inside == 0);
    CHECK(w.written_outside == 0);
    const std::vector<double> ref = reference();
    const double err = rel_error(out, ref, p.row_begin, p.row_end);
    CAPTURE(err);
    CHECK(err < 1e-5);
    auto in_now = mem.f32(p.in);
    CHECK(std::equal(in_now.begin(), in_now.end(), in_before.begin()));
    CHECK(mem.guards_intact());
  }
};

}  // namespace

TEST_CASE("op matvec: plain") {
  std::mt19937 rng(2201);
  MatvecSetup s;
  s.cols = 96;
  s.weight_rows = {40};
  MatvecCase c(s, rng);
  c.run_and_check();
}

TEST_CASE("op matvec: with rmsnorm prologue") {
  std::mt19937 rng(2202);
  MatvecSetup s;
  s.cols = 80;
  s.weight_rows = {36};
  s.norm = true;
  MatvecCase c(s, rng);
  c.run_and_check();
  // A large input: the norm must use the mean square of the whole vector.
  for (float& x : c.mem.f32(c.p.in)) x *= 50;
  for (float& x : c.in) x *= 50;
  for (float& x : c.mem.f32(c.p.out)) x = kNaN;
  c.run_and_check();
}

TEST_CASE("op matvec: with residual") {
  std::mt19937 rng(2203);
  MatvecSetup s;
  s.cols = 64;
  s.weight_rows = {48};
  s.residual = true;
  MatvecCase c(s, rng);
  c.run_and_check();
}

TEST_CASE("op matvec: norm and residual together on a row sub-range") {
  std::mt19937 rng(2204);
  MatvecSetup s;
  s.cols = 72;
  s.weight_rows = {50};
  s.norm = true;
  s.residual = true;
  s.row_begin = 9;
  s.row_end = 33;
  MatvecCase c(s, rng);
  c.run_and_check();
}

TEST_CASE("op matvec: three concatenated weights") {
  std::mt19937 rng(2205);
  MatvecSetup s;
  s.cols = 64;
  s.weight_rows = {24, 8, 16};  // q | k | v; boundaries at rows 24 and 32
  s.norm = true;
  SUBCASE("all rows") {
    MatvecCase c(s, rng);
    c.run_and_check();
  }
  SUBCASE("a range across the first boundary") {
    s.row_begin = 20;
    s.row_end = 28;
    MatvecCase c(s, rng);
    c.run_and_check();
  }
  SUBCASE("a range across both boundaries") {
    s.row_begin = 23;
    s.row_end = 33;
    MatvecCase c(s, rng);
    c.run_and_check();
  }
  SUBCASE("a range starting exactly at a boundary, ending at the last row") {
    s.row_begin = 32;
    s.row_end = 48;
    MatvecCase c(s, rng);
    c.run_and_check();
  }
  SUBCASE("one row of the middle weight") {
    s.row_begin = 31;
    s.row_end = 32;
    MatvecCase c(s, rng);
    c.run_and_check();
  }
}

TEST_CASE("op matvec: tasks over row ranges compose to the whole output") {
  std::mt19937 rng(2206);
  MatvecSetup s;
  s.cols = 48;
  s.weight_rows = {20, 10, 10};
  s.residual = true;
  MatvecCase c(s, rng);
  for (auto [b, e] : {std::pair{0u, 13u}, {13u, 26u}, {26u, 40u}}) {
    c.p.row_begin = b;
    c.p.row_end = e;
    c.run();
  }
  auto out = c.mem.f32(c.p.out);
  CHECK(check_writes(out, 0, 40).unwritten_inside == 0);
  const std::vector<double> ref = c.reference();
  CHECK(rel_error(out, ref) < 1e-5);
}

TEST_CASE("op matvec: silu_mul") {
  std::mt19937 rng(2207);
  MatvecSetup s;
  s.cols = 64;
  s.weight_rows = {56, 56};  // gate, up
  s.silu = true;
  s.norm = true;
  SUBCASE("all rows") {
    MatvecCase c(s, rng);
    CHECK(c.rows == 56);
    c.run_and_check();
  }
  SUBCASE("a row sub-range") {
    s.row_begin = 17;
    s.row_end = 45;
    MatvecCase c(s, rng);
    c.run_and_check();
  }
}

TEST_CASE("op matvec: only the row sub-range is written") {
  std::mt19937 rng(2208);
  MatvecSetup s;
  s.cols = 40;
  s.weight_rows = {30};
  s.row_begin = 7;
  s.row_end = 19;
  MatvecCase c(s, rng);
  c.run_and_check();
  SUBCASE("an empty range writes nothing") {
    for (float& x : c.mem.f32(c.p.out)) x = kNaN;
    c.p.row_begin = c.p.row_end = 12;
    c.run();
    CHECK(check_writes(c.mem.f32(c.p.out), 0, 0).written_outside == 0);
  }
}

TEST_CASE("op matvec: float8 weights of each scale layout against dequantize-then-matvec") {
  std::mt19937 rng(2209);
  for (const WeightFormat f : {WeightFormat::f8_tensor, WeightFormat::f8_row, WeightFormat::f8_block128}) {
    CAPTURE(static_cast<int>(f));
    MatvecSetup s;
    s.format = f;
    SUBCASE("rows and columns past a 128 block, norm and residual") {
      s.cols = 272;  // two whole blocks and part of a third
      s.weight_rows = {200};
      s.norm = s.residual = true;
      MatvecCase c(s, rng);
      c.run_and_check();
    }
    SUBCASE("three concatenated weights, a range across both boundaries") {
      s.cols = 144;
      s.weight_rows = {136, 8, 16};
      s.row_begin = 120;
      s.row_end = 150;
      MatvecCase c(s, rng);
      c.run_and_check();
    }
    SUBCASE("silu_mul over a row sub-range") {
      s.cols = 160;
      s.weight_rows = {150, 150};
      s.silu = s.norm = true;
      s.row_begin = 100;
      s.row_end = 140;
      MatvecCase c(s, rng);
      c.run_and_check();
    }
  }
}

TEST_CASE("op matvec: a float8 weight's scales are its own: changing one changes exactly the outputs it covers") {
  std::mt19937 rng(2210);
  MatvecSetup s;
  s.format = WeightFormat::f8_block128;
  s.cols = 256;
  s.weight_rows = {192};
  MatvecCase c(s, rng);
  c.run_and_check();
  const std::vector<float> before(c.mem.f32(c.p.out).begin(), c.mem.f32(c.p.out).end());
  c.mem.f32(c.p.weight[0] + 1)[3] *= 2;  // block (row block 1, column block 1): rows 128-191
  for (uint32_t r = 128; r < 192; ++r)
    for (uint32_t k = 0; k < s.cols; ++k) c.weights[0][size_t{r} * s.cols + k] *= k >= 128 ? 2 : 1;
  for (float& x : c.mem.f32(c.p.out)) x = kNaN;
  c.run_and_check();
  const auto after = c.mem.f32(c.p.out);
  for (uint32_t r = 0; r < 192; ++r) {
    CAPTURE(r);
    CHECK((after[r] == before[r]) == (r < 128));
  }
}
