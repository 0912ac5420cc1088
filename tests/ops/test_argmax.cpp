// argmax: out[0] = the index of the largest in[i]: the lowest index on ties; NaN never wins;
// 0 when no value is above -inf.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "tests/step_context.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::schedule::ArgmaxPayload;
using mk::schedule::StepContext;

namespace {

// Runs argmax over `values`; checks that exactly out[0] was written and nothing else.
int32_t run_argmax(const std::vector<float>& values) {
  Memory mem;
  const uint32_t in = mem.add_f32(values);
  const ArgmaxPayload p = ArgmaxPayload::whole(in, mem.add_i32({kI32Poison}), static_cast<uint32_t>(values.size()));
  mk::device::cpu_run(p, mk::test::step_context(0, 0, 1, 1), mem.table());
  CHECK(mem.guards_intact());
  auto in_now = mem.f32(p.in);
  for (size_t i = 0; i < values.size(); ++i)
    CHECK((in_now[i] == values[i] || (std::isnan(in_now[i]) && std::isnan(values[i]))));
  return mem.i32(p.out)[0];
}

// The reference: a plain scan, skipping NaN, keeping the first of equal maxima; 0 when
// nothing is above -inf.
int32_t reference_argmax(const std::vector<float>& v) {
  int32_t best = 0;
  double best_value = -INFINITY;
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(v[i]) && double(v[i]) > best_value) {
      best = static_cast<int32_t>(i);
      best_value = v[i];
    }
  return best;
}

// Runs argmax over `values` as `tasks` tasks (ranges of whole four-logit units, as the planner
// cuts them), in the order `rng` draws, for `generation` steps counted on the same counters so
// far; the values are redrawn per step by `fill`. Checks that the token stays unwritten until
// the last task has taken its ticket, and returns it.
template <class Fill>
int32_t run_split_argmax(std::vector<float> values, uint32_t tasks, uint32_t generations, std::mt19937& rng, Fill fill) {
  Memory mem;
  ArgmaxPayload p{};
  p.in = mem.add_f32(values);
  p.out = mem.add_i32({kI32Poison});
  p.parts = mem.add_i32(std::vector<int32_t>(2 * tasks, kI32Poison));
  p.count = static_cast<uint32_t>(values.size());
  p.tasks = tasks;
  p.ticket = 1;
  std::vector<uint32_t> counters{77, 0, 99};  // the ticket between two counters it must not touch
  const uint32_t units = (p.count + 3) / 4;
  REQUIRE(tasks <= units);
  int32_t token = 0;
  for (uint32_t g = 1; g <= generations; ++g) {
    fill(mem.f32(p.in));
    mem.i32(p.out)[0] = kI32Poison;
    std::vector<uint32_t> order(tasks);
    for (uint32_t t = 0; t < tasks; ++t) order[t] = t;
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t k = 0; k < tasks; ++k) {
      CHECK(mem.i32(p.out)[0] == kI32Poison);  // no token before the last task
      p.task = order[k];
      p.begin = 4 * (p.task * units / tasks);
      p.end = std::min(p.count, 4 * ((p.task + 1) * units / tasks));
      mk::device::cpu_run(p, mk::test::step_context(0, 0, 1, g, {0, 0}, counters.data()), mem.table());
    }
    CHECK(counters == std::vector<uint32_t>{77, tasks * g, 99});
    token = mem.i32(p.out)[0];
    std::vector<float> now(mem.f32(p.in).begin(), mem.f32(p.in).end());
    CHECK(token == reference_argmax(now));
  }
  CHECK(mem.guards_intact());
  return token;
}

}  // namespace

TEST_CASE("op argmax: split in tasks that combine by ticket, in any order, over several steps") {
  std::mt19937 rng(5505);
  for (size_t n : {7, 333, 1000, 151936}) {
    for (uint32_t tasks : {2u, 3u, 5u, 32u}) {
      if (tasks > (n + 3) / 4) continue;
      CAPTURE(n);
      CAPTURE(tasks);
      run_split_argmax(std::vector<float>(n), tasks, 3, rng, [&](std::span<float> v) {
        const std::vector<float> r = randn(v.size(), rng);
        std::copy(r.begin(), r.end(), v.begin());
      });
    }
  }
  // Ties across tasks: the lowest index wins, whichever task finishes last; NaN and -inf never.
  for (uint32_t rep = 0; rep < 8; ++rep) {
    CAPTURE(rep);
    const int32_t token = run_split_argmax(std::vector<float>(1000), 5, 2, rng, [&](std::span<float> v) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) - 10;
      v[612] = v[999] = v[401] = 3;  // tasks 3, 4 and 2 hold the maximum
      v[400] = v[0] = kNaN;
      v[1] = INFINITY * -1;
    });
    CHECK(token == 401);
  }
  // Nothing above -inf anywhere: 0, as with one task.
  CHECK(run_split_argmax(std::vector<float>(64), 4, 2, rng, [](std::span<float> v) {
          for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 ? -INFINITY : kNaN;
        }) == 0);
}

TEST_CASE("op argmax: random vectors") {
  std::mt19937 rng(5501);
  for (size_t n : {1, 2, 7, 512, 1000, 151936}) {
    CAPTURE(n);
    for (int rep = 0; rep < 3; ++rep) {
      const std::vector<float> v = randn(n, rng, rep == 2 ? -100.0 : 0.0, 1 + rep);  // rep 2: all negative
      CHECK(run_argmax(v) == reference_argmax(v));
    }
  }
}

TEST_CASE("op argmax: the maximum at either end") {
  std::mt19937 rng(5502);
  std::vector<float> v = randn(300, rng);
  v[0] = 50;
  CHECK(run_argmax(v) == 0);
  v[0] = 0.5f;
  v[299] = 50;
  CHECK(run_argmax(v) == 299);
}

TEST_CASE("op argmax: ties go to the lowest index") {
  std::mt19937 rng(5503);
  std::vector<float> v = randn(800, rng);
  v[613] = 9;
  v[77] = 9;
  v[402] = 9;
  CHECK(run_argmax(v) == 77);
  v[0] = 9;
  CHECK(run_argmax(v) == 0);
  // Every element equal.
  CHECK(run_argmax(std::vector<float>(64, -2.5f)) == 0);
  // +0 and -0 compare equal: a tie.
  std::vector<float> z = randn(10, rng, -5, 0.1);
  z[3] = -0.0f;
  z[6] = 0.0f;
  CHECK(run_argmax(z) == 3);
}

TEST_CASE("op argmax: NaN does not win") {
  std::mt19937 rng(5504);
  std::vector<float> v = randn(500, rng);
  const int32_t expected = reference_argmax(v);
  SUBCASE("NaN in the middle") {
    v[123] = kNaN;
    v[expected == 124 ? 125 : 124] = kNaN;
    CHECK(run_argmax(v) == reference_argmax(v));
  }
  SUBCASE("NaN first") {
    v[0] = kNaN;
    CHECK(run_argmax(v) == reference_argmax(v));
    v[1] = kNaN;
    v[2] = kNaN;
    CHECK(run_argmax(v) == reference_argmax(v));
  }
  SUBCASE("NaN last") {
    v[499] = kNaN;
    CHECK(run_argmax(v) == reference_argmax(v));
  }
  SUBCASE("NaN right after the maximum, and a tie after it") {
    std::vector<float> w = randn(40, rng);
    w[10] = 20;
    w[11] = kNaN;
    w[30] = 20;
    CHECK(run_argmax(w) == 10);
  }
  SUBCASE("NaN before the maximum") {
    std::vector<float> w{kNaN, 1, 3, kNaN, 3, -1};
    CHECK(run_argmax(w) == 2);
  }
  SUBCASE("infinities") {
    std::vector<float> w{-INFINITY, kNaN, -INFINITY, 2, INFINITY, kNaN, INFINITY};
    CHECK(run_argmax(w) == 4);
  }
}

TEST_CASE("op argmax: nothing above -inf gives 0") {
  CHECK(run_argmax({-INFINITY, -INFINITY, -INFINITY}) == 0);
  CHECK(run_argmax({kNaN, kNaN, kNaN, kNaN}) == 0);
  CHECK(run_argmax({kNaN, -INFINITY, kNaN, -INFINITY}) == 0);
  CHECK(run_argmax({-INFINITY, kNaN, -1e30f}) == 2);  // a finite value wins over -inf
}
