// A standalone probe of the attention's tensor-core step: how long one warp takes for one block
// of 16 cached positions (detail::WarpAttention::add, the interpreter's own code) on a tile
// already in shared memory, at head_dim 64 and 128, with 1, 4 or all compute warps busy at once,
// each on blocks of its own tile; the first call of a launch (cold instruction caches) apart
// from the calls after it. Both steps: the one of the head size ("own", what the benchmark's
// models take) and the general one ("general", what other head sizes take).
//
// The interpreter's trace put a short step's tile phase at 1.6 us for one block a warp
// (Llama-3.2-1B at 32 positions) and a second block on the same warp at +0.83 us (docs/notes.md 96):
// far over the block's arithmetic. This says how much of it the step itself takes.
//
// Build (Hopper), from the repository's root: nvcc -O3 -std=c++20 -arch=sm_90a -I. -o attend bench/probes/attend.cu
// Run: ./attend (prints ns per block per warp)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/probes/check.hpp"
#include "device/ops/attention.cuh"

namespace {

using namespace mk::device;

using mk::probes::check;

// Every block: kWarps stages of random bf16 k (first half) and v (second half), q for the
// tensor cores; warps < active each run `reps` blocks of 16 positions over their own stage's
// tile; thread 0 of each warp records the first block's cycles and the rest's.
__global__ void __launch_bounds__(kBlockThreads, 1)
    probe(uint32_t hd, uint32_t active, uint32_t reps, bool general, uint64_t* cycles, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stages = smem;
  uint16_t* qa = reinterpret_cast<uint16_t*>(smem + kWarps * kStageBytes);
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (uint32_t i = tid; i < kWarps * kStageBytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(stages)[i] = (i * 2654435761u) & 0x3eff3effu;  // small finite bf16 pairs
  for (uint32_t i = tid; i < detail::kQRows * detail::q_stride(hd); i += blockDim.x) qa[i] = (i * 40503u) & 0x3eff;
  __syncthreads();
  if (warp >= active) return;
  const uint32_t per = attention_tile_positions(hd), blocks = per / 16;
  const uint32_t k = smem_addr(stages + warp * kStageBytes), v = k + kStageBytes / 2;
  detail::WarpAttention wa;
  wa.reset();
  __syncwarp();
  const uint64_t t0 = clock64();
  auto step = [&](uint32_t k, uint32_t v, uint32_t pos0) {
    if (general) wa.add_hd<0>(smem_addr(qa), k, v, pos0, 16, hd);
    else wa.add(smem_addr(qa), k, v, pos0, 16, hd);
  };
  step(k, v, 0);
  __syncwarp();
  const uint64_t t1 = clock64();
  for (uint32_t r = 1; r < reps; ++r) {
    const uint32_t b = r % blocks;
    step(k + b * 16 * hd * 2, v + b * 16 * hd * 2, b * 16);
  }
  __syncwarp();
  const uint64_t t2 = clock64();
  if (lane == 0) cycles[(blockIdx.x * kWarps + warp) * 2] = t1 - t0, cycles[(blockIdx.x * kWarps + warp) * 2 + 1] = t2 - t1;
  float s = wa.m + wa.l;
  for (uint32_t t = 0; t < detail::WarpAttention::NT; ++t) s += wa.acc[t][0];
  if (s == 12345.0f) sink[0] = s;
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "attribute");
  const uint32_t shared = kWarps * kStageBytes + detail::kQRows * detail::q_stride(128) * 2;
  check(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, shared), "shared");
  uint64_t* cycles = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&cycles, sms * kWarps * 16), "malloc");
  check(cudaMalloc(&sink, 4), "malloc");
  const uint32_t reps = 201;
  std::printf("SM clock %.0f MHz; ns per block of 16 positions per warp (median over %d SMs x warps)\n", clock_khz / 1e3, sms);
  std::printf("%-9s %-8s %7s %14s %14s\n", "head_dim", "step", "warps", "first block", "next blocks");
  for (uint32_t hd : {64u, 128u})
  for (bool general : {false, true}) {
    for (uint32_t active : {1u, 4u, kWarps}) {
      probe<<<sms, kBlockThreads, shared>>>(hd, active, reps, general, cycles, sink);
      check(cudaGetLastError(), "launch");
      check(cudaDeviceSynchronize(), "run");
      std::vector<uint64_t> host(sms * kWarps * 2), first, next;
      check(cudaMemcpy(host.data(), cycles, host.size() * 8, cudaMemcpyDeviceToHost), "copy");
      for (int b = 0; b < sms; ++b)
        for (uint32_t w = 0; w < active; ++w) first.push_back(host[(b * kWarps + w) * 2]), next.push_back(host[(b * kWarps + w) * 2 + 1]);
      std::sort(first.begin(), first.end());
      std::sort(next.begin(), next.end());
      const double ghz = clock_khz / 1e6;
      std::printf("%-9u %-8s %7u %14.1f %14.1f\n", hd, general ? "general" : "own", active, first[first.size() / 2] / ghz, next[next.size() / 2] / ghz / (reps - 1));
    }
  }
  return 0;
}
