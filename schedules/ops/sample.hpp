#pragma once
#include <cmath>
#include <cstring>

#include "schedules/format.hpp"

namespace mk::schedule {

// out[0] = a token drawn from softmax(in / temperature), restricted to the top_k largest logits
// and then to the top_p most probable mass (the order Hugging Face applies them). The draw is
// the Gumbel-max trick: argmax over the kept tokens of in[i] / temperature + G(seed, pos, i),
// with G a Gumbel variate from a counter-based hash, so it needs no sum and no sort, and the
// same seed gives the same tokens on the emulator and the GPU.
//   temperature <= 0 (or top_k == 1): greedy, exactly argmax's rule (lowest index on ties,
//     NaN never wins, 0 when nothing is above -inf).
//   top_k: 0 = off; else keep in[i] >= the k-th largest value (ties at the boundary kept).
//   top_p: >= 1 = off; else keep the smallest set of most probable tokens whose probability
//     (after top-k) sums to at least top_p: every token with probability >= t, t the largest
//     threshold for which that holds (ties at the boundary kept).
// The planner writes greedy parameters; mkrun sets temperature, top_k, top_p and seed in the
// loaded schedule (set_sampling) before the backend starts.
struct SamplePayload {
  static constexpr const char* kColour = "#ff9da7";  // pink: this op in the DOT graph and the trace
  uint32_t in;   // f32 [count]
  uint32_t out;  // i32 [1]
  uint32_t count;
  float temperature;
  uint32_t top_k;
  float top_p;
  uint32_t seed_lo, seed_hi;
};

struct Schedule;
struct SamplingParams {
  float temperature = 0;
  uint32_t top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
};
// The payload with these parameters.
MK_HD inline SamplePayload with_sampling(SamplePayload p, const SlotSampling& s) {
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.seed_lo = s.seed_lo;
  p.seed_hi = s.seed_hi;
  return p;
}
// A sequence's own parameters (StepContext::sampling of the row's slot, where set), else the op's.
MK_HD inline SamplePayload slot_sampling(const SamplePayload& p, const StepContext& ctx, const StepSegment& g) {
  return ctx.sampling && ctx.sampling[g.slot].set ? with_sampling(p, ctx.sampling[g.slot]) : p;
}
// The parameters as a slot's (checked as set_sampling checks them: std::invalid_argument).
SlotSampling slot_sampling_of(const SamplingParams&);
// Sets the parameters of every sample op of a loaded schedule; returns how many there were.
// Throws std::invalid_argument for values out of range.
uint32_t set_sampling(Schedule&, const SamplingParams&);

namespace sample_detail {

// A float's bits as an unsigned key with the same order (NaN above +inf, not used).
MK_HD inline uint32_t order_key(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

MK_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform in (0, 1) for (seed, pos, i): 24 bits, centred in their interval, exact in float.
MK_HD inline float uniform(uint64_t seed, uint32_t pos, uint32_t i) {
  const uint64_t h = splitmix64(splitmix64(seed ^ (uint64_t{pos} << 32)) ^ i);
  return (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

}  // namespace sample_detail

}  // namespace mk::schedule
