// The cost model's step prediction (schedules/cost.hpp): exact on hand-built queues, and sane on
// real plans (finite, at least each SM's own work, growing with the context).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/cost.hpp"
#include "schedules/ops/matvec.hpp"

using namespace mk::schedule;

namespace {

Instruction embed_instruction() {
  Instruction inst{};
  inst.opcode = static_cast<uint16_t>(Opcode::embed);
  return inst;
}

}  // namespace

TEST_CASE("cost model: a wait across SMs adds the latency; an SM runs its queue in order") {
  CostModel m;
  m.task_us = 3;
  m.latency_us = 5;
  // SM 0: A, C, D; SM 1: B, which waits for A. A signals counter 0.
  Schedule s;
  s.sm_count = 2;
  s.counter_count = 1;
  Instruction a = embed_instruction(), b = embed_instruction(), c = embed_instruction(), d = embed_instruction();
  a.signal_begin = 0, a.signal_count = 1;
  b.wait_begin = 0, b.wait_count = 1;
  s.instructions = {a, c, d, b};
  s.sm_offsets = {0, 3, 4};
  s.signals = {0};
  s.waits = {Wait{0, 1}};
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
  p.act = static_cast<uint32_t>(MatvecAct::none);
  const double plain = cost_us(p, m, 512);
  CHECK(plain == doctest::Approx(m.task_us + 2048 * 4.0 / m.input_bytes_per_us + 16 * 2048 * 2.0 / m.stream_bytes_per_us));
  p.act = static_cast<uint32_t>(MatvecAct::silu_mul);  // gate and up: twice the weights
  CHECK(cost_us(p, m, 512) - plain == doctest::Approx(16 * 2048 * 2.0 / m.stream_bytes_per_us));
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
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) work += instruction_us(s.instructions[i], m, 512);
    busiest = std::max(busiest, work);
  }
  const double at32 = predict_step_us(s, 32), at512 = predict_step_us(s, 512), at8k = predict_step_us(s, 8192);
  CHECK(std::isfinite(at512));
  CHECK(at512 >= busiest);
  CHECK(at32 < at512);
  CHECK(at512 < at8k);
}
