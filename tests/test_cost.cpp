// The cost model's step prediction (schedules/cost.hpp): exact on hand-built queues, and sane on
// real plans (finite, at least each SM's own work, growing with the context).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/cost.hpp"
#include "schedules/ops/attention.hpp"
#include "schedules/ops/attn_reduce.hpp"
#include "schedules/ops/matvec.hpp"

using namespace mk::schedule;

namespace {

Instruction embed_instruction() {
  Instruction inst{};
  inst.opcode = static_cast<uint16_t>(Opcode::embed);
  return inst;
}

// SM 0: A, C, D; SM 1: B, which waits for A. A signals counter 0. `set` adjusts A and B first.
template <class F>
Schedule two_sms(F set) {
  Schedule s;
  s.sm_count = 2;
  s.counter_count = 1;
  Instruction a = embed_instruction(), b = embed_instruction(), c = embed_instruction(), d = embed_instruction();
  a.signal_begin = 0, a.signal_count = 1;
  b.wait_begin = 0, b.wait_count = 1;
  set(a, b);
  s.instructions = {a, c, d, b};
  s.sm_offsets = {0, 3, 4};
  s.signals = {0};
  s.waits = {Wait{0, 1}};
  return s;
}

}  // namespace

TEST_CASE("cost model: a wait across SMs adds the latency; an SM runs its queue in order") {
  CostModel m;
  m.task_us = 3;
  m.latency_us = 5;
  Schedule s = two_sms([](Instruction&, Instruction&) {});
  CHECK(predict_step_us(s, 1, m) == doctest::Approx(3 + 5 + 3));  // B: A's end + latency + its own
  m.latency_us = 0.5;
  CHECK(predict_step_us(s, 1, m) == doctest::Approx(9));  // SM 0's queue (A, C, D) now ends last

  SUBCASE("a wait that no signal can meet gives NaN") {
    s.waits = {Wait{0, 2}};
    CHECK(std::isnan(predict_step_us(s, 1, m)));
  }
}

TEST_CASE("cost model: a matvec costs its input read and its weights at one SM's share of the stream") {
  CostModel m;
  MatvecPayload p{};
  p.cols = 2048;
  p.row_begin = 100, p.row_end = 116;
  p.act = static_cast<uint16_t>(MatvecAct::none);
  const StepContext step = cost_step(KvSplitPolicy{0, 0}, 512);
  const double plain = cost_us(p, m, step);
  CHECK(plain == doctest::Approx(m.task_us + 2048 * 4.0 / m.input_bytes_per_us + 16 * 2048 * 2.0 / m.stream_bytes_per_us));
  p.act = static_cast<uint16_t>(MatvecAct::silu_mul);  // gate and up: twice the weights
  CHECK(cost_us(p, m, step) - plain == doctest::Approx(16 * 2048 * 2.0 / m.stream_bytes_per_us));
}

TEST_CASE("cost model: a real plan's prediction is finite, covers every SM's own work and grows with the context") {
  const mk::dsl::ModelGraph model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/llama-3.2-1b.yaml");
  mk::planner::PlanOptions o;
  o.sm_count = 132;
  const mk::planner::Plan p = mk::planner::plan(model, o);
  const Schedule& s = p.schedule;
  const CostModel m;
  double busiest = 0;
  for (uint32_t sm = 0; sm < s.sm_count; ++sm) {
    double work = 0;
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) work += instruction_us(s.instructions[i], m, cost_step(s.kv_splits, 512));
    busiest = std::max(busiest, work);
  }
  const double at32 = predict_step_us(s, 32), at512 = predict_step_us(s, 512), at8k = predict_step_us(s, 8192);
  CHECK(std::isfinite(at512));
  CHECK(at512 >= busiest);
  CHECK(at32 < at512);
  CHECK(at512 < at8k);
}

TEST_CASE("cost model: at a short step an instruction waits for its short waits only") {
  CostModel m;
  m.task_us = 3;
  m.latency_us = 5;
  // B waits for A at regular steps and for nothing at short ones.
  Schedule s = two_sms([](Instruction& a, Instruction& b) {
    a.short_signal_begin = 0, a.short_signal_count = 1;
    b.short_wait_count = 0;
  });
  s.kv_splits = {0, 8};  // steps at positions up to 8 are short
  s.task_count = 4;
  CHECK(predict_step_us(s, 20, m) == doctest::Approx(3 + 5 + 3));  // position 19: B after A's signal
  CHECK(predict_step_us(s, 5, m) == doctest::Approx(9));           // position 4: B at once; SM 0's queue ends last
}

TEST_CASE("cost model: only the step's active splits attend; at a short step split 0 has every position") {
  CostModel m;
  AttentionPayload p{};
  p.heads = 32, p.kv_heads = 8, p.head_dim = 64, p.kv_splits = 16;
  const KvSplitPolicy policy{32, 128};  // splits of 32 positions, short steps up to 128
  auto unit_cost = [&](uint32_t split, uint32_t context) {
    p.unit_begin = 3 * p.kv_splits + split, p.unit_end = p.unit_begin + 1;  // kv head 3
    return cost_us(p, m, cost_step(policy, context));
  };
  // Position 99 is a short step: split 0 attends to all 99 cached positions, split 1 to none.
  CHECK(unit_cost(1, 100) == doctest::Approx(m.task_us));
  const double all99 = unit_cost(0, 100);
  CHECK(all99 > m.task_us);
  // Position 239: 8 splits of 30 positions; split 0 has 30, split 7 has 29, split 8 none.
  const double s0 = unit_cost(0, 240), s7 = unit_cost(7, 240);
  CHECK(s0 < all99);
  CHECK(s7 < s0);
  CHECK(unit_cost(8, 240) == doctest::Approx(m.task_us));
  // Each position costs the same: split 7 has one fewer than split 0, the short step 69 more.
  CHECK(all99 - s0 == doctest::Approx(69 * (s0 - s7)));
}

TEST_CASE("cost model: a bypassed attn_reduce costs next to nothing at a short step only") {
  CostModel m;
  AttnReducePayload p{};
  p.bypassed = 1;
  const KvSplitPolicy policy{32, 128};
  const double short_cost = cost_us(p, m, cost_step(policy, 64)), regular = cost_us(p, m, cost_step(policy, 512));
  CHECK(regular == doctest::Approx(m.task_us));
  CHECK(short_cost < 0.5 * m.task_us);
  p.bypassed = 0;
  CHECK(cost_us(p, m, cost_step(policy, 64)) == doctest::Approx(m.task_us));
}

TEST_CASE("cost model: a real plan's short steps, with their short signal lists, predict less than regular ones") {
  const mk::dsl::ModelGraph model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/llama-3.2-1b.yaml");
  mk::planner::PlanOptions o;
  o.sm_count = 132;
  Schedule s = mk::planner::plan(model, o).schedule;
  REQUIRE(s.kv_splits.short_positions >= 32);
  const double with_short = predict_step_us(s, 32);
  s.kv_splits.short_positions = 0;  // the same queues, every step regular
  const double without = predict_step_us(s, 32);
  CHECK(std::isfinite(with_short));
  // Each of the 16 layers loses attn_reduce's task (all but its 0.33 us) and, with the short
  // signal lists, its hop (a latency): more than the task alone would give.
  const CostModel m;
  MESSAGE("Llama-3.2-1B at 32 positions: " << with_short << " us with short steps, " << without << " without");
  CHECK(without - with_short > 16 * (m.task_us - 0.33 + 0.25 * m.latency_us));
}
