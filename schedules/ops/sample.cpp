#include <cmath>
#include <stdexcept>
#include <string>

#include "schedules/cost.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {

std::string check_payload(const SamplePayload& p, const Schedule& s) {
  if (p.count == 0) return "count is 0";
  if (!std::isfinite(p.temperature) || p.temperature < 0) return "temperature must be finite and >= 0";
  if (!(p.top_p > 0) || !std::isfinite(p.top_p)) return "top_p must be finite and > 0";
  if (p.top_k > p.count) return "top_k is larger than the vocabulary";
  if (auto e = expect_tensor(s, p.in, "in", DType::f32, p.count, {Role::activation, Role::io}); !e.empty()) return e;
  if (auto e = expect_tensor(s, p.out, "out", DType::i32, 1, {Role::io}); !e.empty()) return e;
  return {};
}

namespace {
void check_sampling(const SamplingParams& sp) {
  if (!std::isfinite(sp.temperature) || sp.temperature < 0)
    throw std::invalid_argument("--temperature must be a number >= 0");
  if (!std::isfinite(sp.top_p) || !(sp.top_p > 0) || sp.top_p > 1) throw std::invalid_argument("--top-p must be in (0, 1]");
}
}  // namespace

// (A top_k at or above the vocabulary keeps every token, as 0 does.)
SlotSampling slot_sampling_of(const SamplingParams& sp) {
  check_sampling(sp);
  return {sp.temperature, sp.top_k, sp.top_p, static_cast<uint32_t>(sp.seed), static_cast<uint32_t>(sp.seed >> 32), 1};
}

uint32_t set_sampling(Schedule& s, const SamplingParams& sp) {
  const SlotSampling params = slot_sampling_of(sp);
  uint32_t n = 0;
  for (Instruction& inst : s.instructions) {
    if (inst.opcode != static_cast<uint16_t>(Opcode::sample)) continue;
    SamplePayload p;
    memcpy(&p, inst.payload, sizeof p);
    if (sp.top_k > p.count)
      throw std::invalid_argument("--top-k " + std::to_string(sp.top_k) + " is larger than the vocabulary (" +
                                  std::to_string(p.count) + ")");
    p = with_sampling(p, params);
    memcpy(inst.payload, &p, sizeof p);
    ++n;
  }
  return n;
}

// One SM reads its input from L2 twice (the maximum, then the draw).
double cost_us(const SamplePayload& p, const CostModel& m, const StepContext&) { return m.task_us + p.count * 8.0 / m.input_bytes_per_us; }
double bytes_streamed(const SamplePayload&, uint32_t) { return 0; }

}  // namespace mk::schedule
