// attn_reduce: combines split-KV partials (acc, m, l) into softmax attention outputs:
// out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s, with M the largest m_s.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tests/step_context.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::schedule::AttnReducePayload;
using mk::schedule::StepContext;

namespace {

struct ReduceCase {
  Memory mem;
  AttnReducePayload p{};
  std::vector<float> in;
  uint32_t heads = 0;

  // Random partials; `empty` lists (head, split) pairs holding an empty split (m = -inf, l = 0,
  // acc arbitrary finite values that must carry no weight); m is drawn around `m_center`.
  ReduceCase(uint32_t kv_heads, uint32_t splits, uint32_t rep, uint32_t hd, std::mt19937& rng,
             const std::set<std::pair<uint32_t, uint32_t>>& empty = {}, double m_center = 0, double m_spread = 3) {
    heads = kv_heads * rep;
    in.assign(size_t{kv_heads} * splits * rep * (hd + 2), kNaN);
    std::normal_distribution<double> nd(0, 1);
    std::uniform_real_distribution<double> ud(-m_spread, m_spread), ul(1, 20);
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t s = 0; s < splits; ++s) {
        float* o = in.data() + index(h, s, splits, rep, hd);
        for (uint32_t i = 0; i < hd; ++i) o[i] = float(nd(rng) * 3);
        if (empty.count({h, s})) {
          o[hd] = -INFINITY;
          o[hd + 1] = 0;
        } else {
          o[hd] = float(m_center + ud(rng));
          o[hd + 1] = float(ul(rng));  // >= 1: the maximum itself contributes exp(0)
        }
      }
    p.in = mem.add_f32(in);
    p.out = mem.add_f32_poisoned(size_t{heads} * hd);
    p.kv_heads = kv_heads;
    p.kv_splits = splits;
    p.rep = rep;
    p.head_dim = hd;
    p.head_begin = 0;
    p.head_end = heads;
  }

  static size_t index(uint32_t h, uint32_t s, uint32_t splits, uint32_t rep, uint32_t hd) {
    const uint32_t g = h / rep, r = h % rep;
    return ((size_t{g} * splits + s) * rep + r) * (hd + 2);
  }

  std::vector<double> reference() const {
    const uint32_t hd = p.head_dim, S = p.kv_splits;
    std::vector<double> out(size_t{heads} * hd);
    for (uint32_t h = 0; h < heads; ++h) {
      double mx = -INFINITY;
      for (uint32_t s = 0; s < S; ++s) mx = std::max(mx, double(in[index(h, s, S, p.rep, hd) + hd]));
      double l = 0;
      std::vector<double> acc(hd, 0.0);
      for (uint32_t s = 0; s < S; ++s) {
        const float* o = in.data() + index(h, s, S, p.rep, hd);
        const double w = std::exp(double(o[hd]) - mx);  // 0 for an empty split
        if (w == 0) continue;
        l += w * o[hd + 1];
        for (uint32_t i = 0; i < hd; ++i) acc[i] += w * o[i];
      }
      for (uint32_t i = 0; i < hd; ++i) out[size_t{h} * hd + i] = acc[i] / l;
    }
    return out;
  }

  void run() { mk::device::cpu_run(p, mk::test::step_context(4, 1, 16, 1), mem.table()); }

  void run_and_check() {
    run();
    auto out = mem.f32(p.out);
    const size_t b = size_t{p.head_begin} * p.head_dim, e = size_t{p.head_end} * p.head_dim;
    const WriteCheck w = check_writes(out, b, e);
    CHECK(w.unwritten_inside == 0);
    CHECK(w.written_outside == 0);
    const std::vector<double> ref = reference();
    const double err = rel_error(out, ref, b, e);
    CAPTURE(err);
    CHECK(err < 1e-5);
    CHECK(mem.guards_intact());
    auto in_now = mem.f32(p.in);
    CHECK(std::equal(in_now.begin(), in_now.end(), in.begin(),
                     [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
  }
};

}  // namespace

TEST_CASE("op attn_reduce: random partials") {
  std::mt19937 rng(4401);
  ReduceCase c(2, 3, 4, 16, rng);
  c.run_and_check();
}

TEST_CASE("op attn_reduce: one split is the plain normalisation") {
  std::mt19937 rng(4402);
  ReduceCase c(3, 1, 2, 32, rng);
  c.run_and_check();
  auto out = c.mem.f32(c.p.out);
  for (uint32_t h = 0; h < c.heads; ++h)
    for (uint32_t i = 0; i < 32; ++i) {
      const float* o = c.in.data() + ReduceCase::index(h, 0, 1, 2, 32);
      CHECK(out[h * 32 + i] == doctest::Approx(o[i] / o[33]).epsilon(1e-6));
    }
}

TEST_CASE("op attn_reduce: an empty split (l = 0, m = -inf) carries no weight") {
  std::mt19937 rng(4403);
  SUBCASE("the first split empty for some heads") {
    ReduceCase c(2, 3, 4, 16, rng, {{0, 0}, {3, 0}, {5, 1}, {7, 0}, {7, 1}});
    c.run_and_check();
  }
  SUBCASE("only the last split holds anything (pos 0 with several splits)") {
    std::set<std::pair<uint32_t, uint32_t>> empty;
    for (uint32_t h = 0; h < 8; ++h)
      for (uint32_t s = 0; s < 3; ++s) empty.insert({h, s});
    ReduceCase c(2, 4, 4, 16, rng, empty);
    c.run_and_check();
  }
}

TEST_CASE("op attn_reduce: large maxima do not overflow") {
  std::mt19937 rng(4404);
  // exp(m) alone overflows float beyond 88.7; the reduction must subtract the maximum.
  ReduceCase c(2, 4, 2, 16, rng, {{1, 2}}, 300, 20);
  c.run_and_check();
  ReduceCase d(2, 4, 2, 16, rng, {}, -300, 20);
  d.run_and_check();
}

TEST_CASE("op attn_reduce: only the head sub-range is written") {
  std::mt19937 rng(4405);
  ReduceCase c(2, 3, 4, 16, rng, {{2, 1}});
  for (auto [b, e] : {std::pair{1u, 6u}, {0u, 1u}, {7u, 8u}}) {
    CAPTURE(b);
    for (float& x : c.mem.f32(c.p.out)) x = kNaN;
    c.p.head_begin = b;
    c.p.head_end = e;
    c.run_and_check();
  }
}
