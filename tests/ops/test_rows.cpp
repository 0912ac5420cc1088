// Every op over the rows of a step (format.hpp, StepSegment): each row as a one-token step
// computes it, rows past the step's untouched; the attention's segments against a reference in
// double that attends each row to its own sequence's positions up to its own.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

#include "device/bf16.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"
#include "tests/step_context.hpp"

using namespace mk::test::op;
using mk::schedule::kNone;
using mk::schedule::StepSegment;

namespace {

// A step of `segments` (slot, start, rows; row_begin and fed_from filled) over histories of
// `slots` slots of max_context + 1 positions, each row's token drawn from [0, vocab).
struct RowStep {
  std::vector<StepSegment> segments;
  std::vector<int32_t> history;
  uint32_t max_context, rows = 0;
  RowStep(std::vector<StepSegment> segs, uint32_t slots, uint32_t context, uint32_t vocab, std::mt19937& rng)
      : segments(std::move(segs)), history(size_t{slots} * (context + 1), -1), max_context(context) {
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
    for (StepSegment& g : segments) {
      g.row_begin = rows;
      rows += g.rows;
      for (uint32_t q = g.start; q < g.start + g.rows; ++q) history[size_t{g.slot} * (context + 1) + q] = tok(rng);
    }
  }
  mk::schedule::StepContext ctx(mk::schedule::KvSplitPolicy policy = {0, 0}, uint32_t* counters = nullptr,
                                uint32_t generation = 1) {
    return mk::test::step_context(segments, history, max_context, generation, policy, counters);
  }
  int32_t token(const StepSegment& g, uint32_t q) const { return history[size_t{g.slot} * (max_context + 1) + q]; }
};

}  // namespace

TEST_CASE("rows: matvec computes each row as a one-row step does, bit for bit, and nothing past the step's rows") {
  std::mt19937 rng(101);
  const uint32_t cols = 48, rows = 24, T = 5;
  for (const bool silu : {false, true}) {
    CAPTURE(silu);
    Memory mem;
    mk::schedule::MatvecPayload p{};
    std::vector<float> in = randn(size_t{cols} * T, rng), res = randn(size_t{rows} * T, rng);
    p.in = mem.add_f32(in);
    p.cols = cols;
    p.eps = 1e-5f;
    p.norm = mem.add_bf16(to_bf16(randn(cols, rng, 1, 0.2)));
    p.act = static_cast<uint16_t>(silu ? mk::schedule::MatvecAct::silu_mul : mk::schedule::MatvecAct::none);
    p.weight_count = 2;
    p.weight[0] = mem.add_bf16(to_bf16(randn(size_t{silu ? rows : 16} * cols, rng, 0, 0.2)));
    p.weight[1] = mem.add_bf16(to_bf16(randn(size_t{silu ? rows : 8} * cols, rng, 0, 0.2)));
    p.weight_row_end[0] = silu ? rows : 16;
    p.weight_row_end[1] = rows;
    p.residual = silu ? kNone : mem.add_f32(res);
    p.out = mem.add_f32_poisoned(size_t{rows} * T);
    p.row_begin = 3;
    p.row_end = 21;
    RowStep step({{0, 7, 3, 0, 0}, {1, 2, 1, 0, 0}}, 2, 16, 100, rng);  // 4 of the T rows
    mk::device::cpu_run(p, step.ctx(), mem.table());
    const std::vector<float> out(mem.f32(p.out).begin(), mem.f32(p.out).end());
    for (uint32_t t = 0; t < T; ++t) {
      CAPTURE(t);
      // The same payload on a memory of row t alone.
      Memory one;
      mk::schedule::MatvecPayload q = p;
      q.in = one.add_f32({in.begin() + t * cols, in.begin() + (t + 1) * cols});
      q.norm = one.add_bf16(std::vector<uint16_t>(mem.bf16(p.norm).begin(), mem.bf16(p.norm).end()));
      q.weight[0] = one.add_bf16(std::vector<uint16_t>(mem.bf16(p.weight[0]).begin(), mem.bf16(p.weight[0]).end()));
      q.weight[1] = one.add_bf16(std::vector<uint16_t>(mem.bf16(p.weight[1]).begin(), mem.bf16(p.weight[1]).end()));
      q.residual = silu ? kNone : one.add_f32({res.begin() + t * rows, res.begin() + (t + 1) * rows});
      q.out = one.add_f32_poisoned(rows);
      mk::device::cpu_run(q, mk::test::step_context(0, 1, 4, 1), one.table());
      for (uint32_t r = 0; r < rows; ++r) {
        const float got = out[size_t{t} * rows + r], want = one.f32(q.out)[r];
        if (t >= step.rows) CHECK(std::isnan(got));  // past the step's rows: untouched
        else CHECK(std::memcmp(&got, &want, 4) == 0);
      }
    }
    CHECK(mem.guards_intact());
  }
}

TEST_CASE("rows: embed gathers each row's token from its own slot's history at its own position") {
  std::mt19937 rng(7);
  const uint32_t vocab = 50, hidden = 12, T = 6;
  Memory mem;
  mk::schedule::EmbedPayload p{};
  const std::vector<uint16_t> table = to_bf16(randn(size_t{vocab} * hidden, rng));
  p.table = mem.add_bf16(table);
  p.out = mem.add_f32_poisoned(size_t{hidden} * T);
  p.vocab = vocab;
  p.hidden = hidden;
  p.col_begin = 2;
  p.col_end = 9;
  RowStep step({{2, 5, 2, 0, 0}, {0, 0, 1, 0, 0}, {1, 9, 2, 0, 0}}, 3, 12, vocab, rng);
  mk::device::cpu_run(p, step.ctx(), mem.table());
  auto out = mem.f32(p.out);
  for (const StepSegment& g : step.segments)
    for (uint32_t t = g.row_begin; t < g.row_begin + g.rows; ++t) {
      const size_t token = static_cast<size_t>(step.token(g, g.start + (t - g.row_begin)));
      for (uint32_t c = 0; c < hidden; ++c) {
        const float got = out[size_t{t} * hidden + c];
        if (c < p.col_begin || c >= p.col_end) CHECK(std::isnan(got));
        else CHECK(got == mk::device::bf16_to_f32(table[token * hidden + c]));
      }
    }
  for (size_t i = size_t{step.rows} * hidden; i < out.size(); ++i) CHECK(std::isnan(out[i]));
  CHECK(mem.guards_intact());
}

TEST_CASE("rows: argmax in several tasks picks each row's best, writing it to its sequence's next position when fed") {
  std::mt19937 rng(3);
  const uint32_t count = 90, tasks = 4, T = 7;
  Memory mem;
  std::vector<float> logits = randn(size_t{count} * T, rng);
  logits[2 * count + 17] = 40;  // row 2's best
  const uint32_t in = mem.add_f32(logits), out = mem.add_i32(std::vector<int32_t>(T, kI32Poison)),
                 parts = mem.add_i32(std::vector<int32_t>(size_t{2} * tasks * T, kI32Poison));
  // Slot 1: a prompt chunk of 3 rows (positions 4-6) whose last row is the prompt's last; slot 0:
  // one decoding row; slot 2: a chunk of 2 not yet at its prompt's end.
  RowStep step({{1, 4, 3, 0, 7}, {0, 9, 1, 0, 10}, {2, 0, 2, 0, 5}}, 3, 12, count, rng);
  const std::vector<int32_t> before = step.history;
  std::vector<uint32_t> counters(1, 0);
  for (uint32_t k = 0; k < tasks; ++k) {
    mk::schedule::ArgmaxPayload p{in, out, count, k * count / tasks, (k + 1) * count / tasks, parts, 0, tasks, k};
    mk::device::cpu_run(p, step.ctx({0, 0}, counters.data()), mem.table());
  }
  auto tokens = mem.i32(out);
  for (uint32_t t = 0; t < step.rows; ++t) {
    const float* row = logits.data() + size_t{t} * count;
    CHECK(tokens[t] == std::max_element(row, row + count) - row);
  }
  CHECK(tokens[2] == 17);
  for (uint32_t t = step.rows; t < T; ++t) CHECK(tokens[t] == kI32Poison);
  // Written: slot 1 position 7 (row 2's), slot 0 position 10 (row 3's); nothing else.
  std::vector<int32_t> want = before;
  want[1 * 13 + 7] = tokens[2];
  want[0 * 13 + 10] = tokens[3];
  CHECK(step.history == want);
}

TEST_CASE("rows: sample draws each row by its own position, greedy where the temperature is 0") {
  std::mt19937 rng(11);
  const uint32_t count = 64, T = 4;
  Memory mem;
  const std::vector<float> logits = randn(size_t{count} * T, rng);
  mk::schedule::SamplePayload p{mem.add_f32(logits), mem.add_i32(std::vector<int32_t>(T, kI32Poison)), count, 0.8f, 0, 1, 5, 0};
  RowStep step({{0, 3, 2, 0, 0}, {1, 3, 1, 0, 0}}, 2, 8, count, rng);
  mk::device::cpu_run(p, step.ctx(), mem.table());
  // Rows 1 and 2 are at positions 4 and 3; row 0 at 3 too: each draw as one-token steps make it.
  for (uint32_t t = 0; t < step.rows; ++t) {
    const uint32_t pos = t == 1 ? 4 : 3;
    Memory one;
    mk::schedule::SamplePayload q = p;
    q.in = one.add_f32({logits.begin() + t * count, logits.begin() + (t + 1) * count});
    q.out = one.add_i32({kI32Poison});
    mk::device::cpu_run(q, mk::test::step_context(pos, 0, 8, 1), one.table());
    CHECK(mem.i32(p.out)[t] == one.i32(q.out)[0]);
  }
  CHECK(mem.i32(p.out)[3] == kI32Poison);
}

namespace {

// The attention over segments in double, from the Hugging Face semantics: row t of segment g at
// position q attends to its slot's positions 0..q: the cache below g.start as it was, and the
// segment's own rows' k (normed, roped) and v, rounded to bf16 as the cache stores them.
struct SegmentAttention {
  uint32_t kv_heads = 2, rep = 3, hd = 16, splits = 4, slots = 3, max_context = 24, T = 8;
  bool qk_norm = true;
  Memory mem;
  mk::schedule::AttentionPayload p{};
  mk::schedule::AttnReducePayload rp{};
  std::vector<float> qkv, qn, kn;
  std::vector<uint16_t> k0, v0;  // the caches before the step

  explicit SegmentAttention(std::mt19937& rng) {
    const uint32_t heads = kv_heads * rep, width = (heads + 2 * kv_heads) * hd;
    qkv = randn(size_t{width} * T, rng);
    p.qkv = mem.add_f32(qkv);
    qn = from_bf16(to_bf16(randn(hd, rng, 1, 0.3)));
    kn = from_bf16(to_bf16(randn(hd, rng, 1, 0.3)));
    p.q_norm = qk_norm ? mem.add_bf16(to_bf16(qn)) : kNone;
    p.k_norm = qk_norm ? mem.add_bf16(to_bf16(kn)) : kNone;
    k0 = to_bf16(randn(size_t{slots} * kv_heads * max_context * hd, rng));
    v0 = to_bf16(randn(size_t{slots} * kv_heads * max_context * hd, rng));
    p.k_cache = mem.add_bf16(k0);
    p.v_cache = mem.add_bf16(v0);
    p.out = mem.add_f32_poisoned(size_t{kv_heads} * splits * rep * (hd + 2) * T);
    p.reduce_out = mem.add_f32_poisoned(size_t{heads} * hd * T);
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = hd;
    p.kv_splits = splits;
    p.unit_begin = 0;
    p.unit_end = kv_heads * splits;
    p.norm_eps = 1e-6f;
    p.scale = float(1 / std::sqrt(double(hd)));
    p.rope_theta = 10000;
    p.rope_scaling = static_cast<uint32_t>(mk::schedule::RopeScaling::none);
    rp = {p.out, mem.add_f32_poisoned(size_t{heads} * hd * T), kv_heads, splits, rep, hd, 0, heads, 0};
  }

  size_t cache_at(uint32_t slot, uint32_t g, uint32_t q, uint32_t i) const {
    return (size_t{slot} * kv_heads + g) * max_context * hd + mk::device::kv_index(q, i, hd);
  }
  std::vector<double> head(uint32_t t, uint32_t index, const std::vector<float>* norm, uint32_t pos) const {
    const uint32_t width = (kv_heads * rep + 2 * kv_heads) * hd;
    std::vector<double> v(qkv.begin() + size_t{t} * width + size_t{index} * hd, qkv.begin() + size_t{t} * width + size_t{index + 1} * hd);
    if (norm) {
      double ss = 0;
      for (double x : v) ss += x * x;
      const double inv = 1 / std::sqrt(ss / hd + 1e-6);
      for (uint32_t i = 0; i < hd; ++i) v[i] = v[i] * inv * (*norm)[i];
    }
    if (pos != kNone)
      for (uint32_t i = 0; i < hd / 2; ++i) {
        const double f = 1.0 / std::pow(10000.0, 2.0 * i / hd), a = v[i], b = v[i + hd / 2], angle = pos * f;
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    return v;
  }

  // Runs every unit and every attn_reduce head, then checks each row's output, the caches, and
  // that nothing past the step's rows was written.
  void run_and_check(RowStep& step, mk::schedule::KvSplitPolicy policy) {
    const auto ctx = step.ctx(policy);
    mk::device::cpu_run(p, ctx, mem.table());
    mk::device::cpu_run(rp, ctx, mem.table());
    const bool is_short = mk::schedule::short_step(ctx);
    const uint32_t heads = kv_heads * rep;
    auto kc = mem.bf16(p.k_cache), vc = mem.bf16(p.v_cache);
    // The caches: each segment's rows appended at their positions in their slot, nothing else.
    std::vector<uint16_t> k_want = k0, v_want = v0;
    for (const StepSegment& g : step.segments)
      for (uint32_t t = g.row_begin; t < g.row_begin + g.rows; ++t)
        for (uint32_t kh = 0; kh < kv_heads; ++kh) {
          const uint32_t pos = g.start + (t - g.row_begin);
          const std::vector<double> k = head(t, heads + kh, qk_norm ? &kn : nullptr, pos), v = head(t, heads + kv_heads + kh, nullptr, kNone);
          for (uint32_t i = 0; i < hd; ++i) {
            k_want[cache_at(g.slot, kh, pos, i)] = mk::device::f32_to_bf16(float(k[i]));
            v_want[cache_at(g.slot, kh, pos, i)] = mk::device::f32_to_bf16(float(v[i]));
          }
        }
    size_t k_diff = 0, v_diff = 0;
    for (size_t i = 0; i < k_want.size(); ++i) {
      // One rounding of the f32 rope against the double one may differ in the last bf16 bit.
      k_diff += std::abs(int(kc[i]) - int(k_want[i])) > 1;
      v_diff += vc[i] != v_want[i];
    }
    CHECK(k_diff == 0);
    CHECK(v_diff == 0);
    for (const StepSegment& g : step.segments)
      for (uint32_t t = g.row_begin; t < g.row_begin + g.rows; ++t) {
        const uint32_t pos = g.start + (t - g.row_begin);
        for (uint32_t h = 0; h < heads; ++h) {
          CAPTURE(t);
          CAPTURE(h);
          const uint32_t kh = h / rep;
          const std::vector<double> q = head(t, h, qk_norm ? &qn : nullptr, pos);
          std::vector<double> scores, out(hd, 0);
          double m = -INFINITY;
          for (uint32_t at = 0; at <= pos; ++at) {
            double sc = 0;
            for (uint32_t i = 0; i < hd; ++i) sc += q[i] * mk::device::bf16_to_f32(kc[cache_at(g.slot, kh, at, i)]);
            scores.push_back(sc / std::sqrt(double(hd)));
            m = std::max(m, scores.back());
          }
          double l = 0;
          for (uint32_t at = 0; at <= pos; ++at) {
            const double w = std::exp(scores[at] - m);
            l += w;
            for (uint32_t i = 0; i < hd; ++i) out[i] += w * mk::device::bf16_to_f32(vc[cache_at(g.slot, kh, at, i)]);
          }
          for (double& x : out) x /= l;
          const std::span<const float> got = mem.f32(rp.out).subspan(size_t{t} * heads * hd + size_t{h} * hd, hd);
          CHECK(rel_error(got, out) < 1e-5);
          if (is_short) CHECK(rel_error(mem.f32(p.reduce_out).subspan(size_t{t} * heads * hd + size_t{h} * hd, hd), out) < 1e-5);
        }
      }
    for (size_t i = size_t{step.rows} * heads * hd; i < size_t{T} * heads * hd; ++i) CHECK(std::isnan(mem.f32(rp.out)[i]));
    const size_t part_row = size_t{kv_heads} * splits * rep * (hd + 2);
    for (size_t i = 0; i < part_row * T; ++i) {
      if (i < part_row * step.rows) CHECK(!std::isnan(mem.f32(p.out)[i]));  // every record of every row, inactive ones zero
      else CHECK(std::isnan(mem.f32(p.out)[i]));
    }
    CHECK(mem.guards_intact());
  }
};

}  // namespace

TEST_CASE("rows: attention over segments (a prompt chunk, decoding rows, a chunk from 0) matches the reference") {
  using Policy = mk::schedule::KvSplitPolicy;
  for (const Policy policy : {Policy{0, 0}, Policy{3, 0}, Policy{5, 0}, Policy{4, 12}}) {
    CAPTURE(policy.positions);
    CAPTURE(policy.short_positions);
    std::mt19937 rng(29);
    SegmentAttention a(rng);
    // Slot 2: a chunk of 4 rows at 9-12 after 9 cached; slot 0: one decoding row at 16; slot 1:
    // a chunk of 3 from position 0 (nothing cached).
    RowStep step({{2, 9, 4, 0, 0}, {0, 16, 1, 0, 0}, {1, 0, 3, 0, 0}}, 3, a.max_context, 10, rng);
    a.run_and_check(step, policy);
  }
  SUBCASE("a short step: every segment within short_positions") {
    std::mt19937 rng(31);
    SegmentAttention a(rng);
    RowStep step({{1, 2, 5, 0, 0}, {0, 6, 1, 0, 0}}, 3, a.max_context, 10, rng);
    a.run_and_check(step, {4, 8});
  }
}
