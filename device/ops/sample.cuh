// sample: the CUDA body of schedules/ops/sample.hpp, one block. The same rules as
// device/ops/sample_cpu.cpp: greedy falls back to argmax's body; top-k and top-p thresholds by
// bisection over order keys (32 block-wide counts / double sums); the draw by Gumbel-max with
// the counter-based uniform of (seed, pos, i). Emulator and GPU draw the same token unless two
// perturbed logits (or a top-p mass and its bound) agree to within float rounding of exp/log.
#pragma once
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
#include "device/cuda/ring.cuh"
#include "device/memory.hpp"
#include "device/ops/argmax.cuh"
#include "schedules/ops/sample.hpp"

namespace mk::device {

namespace detail {

// The Gumbel pick's order: larger score first, then lower index, -inf included (scores that all
// overflow to -inf still go to the lowest kept index, as sample_cpu.cpp picks), unlike the
// argmax's rule, under which -inf never wins.
__device__ __forceinline__ bool gumbel_better(float v, uint32_t i, float best, uint32_t best_index) {
  return v > best || (v == best && i < best_index);
}

// Block-wide reductions over the compute threads; every thread gets the result.
// `scratch` holds kWarps doubles (88 bytes, inside the default op scratch).
__device__ inline double sample_sum(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  block_sync();  // scratch may still be read from a previous call
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  block_sync();
  double total = 0;
  for (uint32_t w = 0; w < kWarps; ++w) total += scratch[w];
  return total;
}

__device__ inline float sample_max(float v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));  // fmaxf drops NaN
  float* s = reinterpret_cast<float*>(scratch);
  block_sync();
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  block_sync();
  float m = -INFINITY;
  for (uint32_t w = 0; w < kWarps; ++w) m = fmaxf(m, s[w]);
  return m;
}

}  // namespace detail

// Shared memory: kWarps doubles for the block-wide sums (block_argmax's values and indices fit there).
inline uint32_t gpu_shared_bytes(const schedule::SamplePayload&) { return kWarps * 8; }

// The activations its body reads and writes, each as f(tensor, writes, Tagging): whether the
// CUDA body takes it tagged (handoff.cuh); the k-th call is its tagged_field(k).
template <class F>
void gpu_activations(const schedule::SamplePayload& p, F&& f) {
  f(p.in, false, Tagging::never);
  f(p.out, true, Tagging::never);
}

namespace detail {
// One row: its logits `in`, its position `pos` (the draw's); thread 0 writes its token as row r's.
template <bool kOne>
__device__ __forceinline__ void sample_row(const schedule::SamplePayload& op, const schedule::StepContext& ctx, const TensorTable& mem,
                                  unsigned char* scratch_bytes, uint32_t r) {
  namespace sd = schedule::sample_detail;
  const schedule::StepSegment& seg = kOne ? ctx.segments[0] : schedule::row_segment(ctx, r);
  const schedule::SamplePayload p = schedule::slot_sampling(op, ctx, seg);  // its sequence's parameters, or the op's
  const float* in = mem.at<const float>(p.in) + uint64_t{r} * p.count;
  const uint32_t pos = schedule::row_position(ctx, seg, r);
  const schedule::ArgmaxPayload a = schedule::ArgmaxPayload::whole(p.in, p.out, p.count);
  double* scratch = reinterpret_cast<double*>(scratch_bytes);
  float m = -INFINITY;
  if (p.temperature > 0 && p.top_k != 1) {
    for (uint32_t i = threadIdx.x; i < p.count; i += kThreads) m = fmaxf(m, load_activation(in + i));
    m = sample_max(m, scratch);
  }
  if (!(p.temperature > 0) || p.top_k == 1 || m == -INFINITY || m == INFINITY) {
    block_sync();  // sample_max's readers of the scratch are done before argmax writes it
    float best;
    uint32_t index;
    argmax_range(in, 0, p.count, best, index, scratch_bytes);
    if (threadIdx.x == 0) write_token<kOne>(a, ctx, mem, r, index);
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  uint32_t key_min = sd::order_key(-INFINITY) + 1;
  if (p.top_k > 1 && p.top_k < p.count) {
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      double n = 0;  // counts are exact in double
      for (uint32_t i = threadIdx.x; i < p.count; i += kThreads) {
        const float v = load_activation(in + i);
        n += (!isnan(v) && sd::order_key(v) >= cand) ? 1.0 : 0.0;
      }
      if (sample_sum(n, scratch) >= p.top_k) t = cand;
    }
    if (t > key_min) key_min = t;
  }
  if (p.top_p < 1) {
    double z = 0;
    for (uint32_t i = threadIdx.x; i < p.count; i += kThreads) {
      const float v = load_activation(in + i);
      if (!isnan(v) && sd::order_key(v) >= key_min) z += static_cast<double>(expf((v - m) * inv_t));
    }
    const double need = static_cast<double>(p.top_p) * sample_sum(z, scratch);
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      double s = 0;
      for (uint32_t i = threadIdx.x; i < p.count; i += kThreads) {
        const float v = load_activation(in + i);
        if (!isnan(v) && sd::order_key(v) >= key_min && sd::order_key(v) >= cand)
          s += static_cast<double>(expf((v - m) * inv_t));
      }
      if (sample_sum(s, scratch) >= need) t = cand;
    }
    if (t > key_min) key_min = t;
  }
  // Gumbel-max over the kept tokens; ties to the lower index.
  const uint64_t seed = (uint64_t{p.seed_hi} << 32) | p.seed_lo;
  float best = -INFINITY;
  uint32_t index = 0xffffffffu;
  for (uint32_t i = threadIdx.x; i < p.count; i += kThreads) {
    const float v = load_activation(in + i);
    if (isnan(v) || sd::order_key(v) < key_min) continue;
    const float g = -logf(-logf(sd::uniform(seed, pos, i)));
    const float x = v * inv_t + g;
    if (index == 0xffffffffu || gumbel_better(x, i, best, index)) best = x, index = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const uint32_t oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (oi != 0xffffffffu && (index == 0xffffffffu || gumbel_better(ov, oi, best, index))) best = ov, index = oi;
  }
  float* values = reinterpret_cast<float*>(scratch);
  uint32_t* indices = reinterpret_cast<uint32_t*>(values + kWarps);
  block_sync();
  if (threadIdx.x % 32 == 0) values[threadIdx.x / 32] = best, indices[threadIdx.x / 32] = index;
  block_sync();
  if (threadIdx.x == 0) {
    for (uint32_t w = 1; w < kWarps; ++w)
      if (indices[w] != 0xffffffffu && (index == 0xffffffffu || gumbel_better(values[w], indices[w], best, index)))
        best = values[w], index = indices[w];
    write_token<kOne>(a, ctx, mem, r, index);
  }
}
}  // namespace detail

__device__ inline void gpu_run(const schedule::SamplePayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                               BlockContext& bc) {
  detail::sample_row<true>(p, ctx, mem, bc.scratch, 0);
}
// Each row on its own (the same block, one after another), its draw keyed by its position.
__device__ inline void gpu_rows(const schedule::SamplePayload& p, const schedule::StepContext& ctx, const TensorTable& mem,
                                BlockContext& bc) {
  for (uint32_t r = 0; r < ctx.rows; ++r) {
    if (!schedule::row_needed(ctx, p.in, r)) continue;  // a token nobody reads, of logits not made
    detail::sample_row<false>(p, ctx, mem, bc.scratch, r);
    block_sync();  // the scratch's readers done before the next row writes it
  }
}

}  // namespace mk::device
