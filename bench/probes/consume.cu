// A standalone probe of the matvec's consumer: how long one warp holds a 16 KiB ring tile
// (detail::consume_tile, the interpreter's own code) when the tile has already landed, for the
// tile shapes of the benchmark's models, with 1, 4 or all compute warps busy at once, each on a
// tile of its own. (Earlier versions also timed all the warps on slices of one tile, variants of
// the inner loop and a tensor-core consumer: docs/notes.md 91-92; its log: git show da5833b^:bench/probe-consume-2026-12-02.log.)
//
// The stream probe (feeder.cu) prices a tile's hold time: 1.5 -> 0.7 us took its synthetic 1B
// step from 911 to 852 us. This measures what the real consumer holds.
//
// Build (Hopper), from the repository's root: nvcc -O3 -std=c++20 -arch=sm_90a -I. -o consume bench/probes/consume.cu
// Run: ./consume (prints ns per tile per warp)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/probes/check.hpp"
#include "device/ops/matvec.cuh"

namespace {

using namespace mk::device;

using mk::probes::check;

constexpr uint32_t kMaxCols = 9728;  // the widest input here (Qwen3-4B down)

// Every block: the tiles in shared memory (kWarps stages of random bf16), x in its two planes;
// warps < active each consume their stage's tile `reps` times; thread 0 of each warp records
// its cycles.
__global__ void __launch_bounds__(kBlockThreads, 1)
    probe(uint32_t cols, uint32_t tile_cols, uint32_t rows, uint32_t active, uint32_t reps, uint64_t* cycles,
          float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stages = smem;
  float4* xlo = reinterpret_cast<float4*>(smem + kWarps * kStageBytes);
  float4* xhi = xlo + cols / 8;
  float* acc = reinterpret_cast<float*>(xhi + cols / 8);
  const uint32_t tid = threadIdx.x, warp = tid / 32;
  for (uint32_t i = tid; i < kWarps * kStageBytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(stages)[i] = (i * 2654435761u) & 0x3fff3fffu;  // small finite bf16 pairs
  for (uint32_t i = tid; i < cols / 8; i += blockDim.x) xlo[i] = xhi[i] = make_float4(0.5f, -0.25f, 0.125f, 1.0f);
  for (uint32_t i = tid; i < 64; i += blockDim.x) acc[i] = 0;
  __syncthreads();
  if (warp >= active) return;
  const WeightTile t{nullptr, tile_cols * 2, 0, rows, 0, tile_cols, nullptr, 0, rows, cols};
  const uint16_t* w = reinterpret_cast<const uint16_t*>(stages + warp * kStageBytes);
  __syncwarp();
  const uint64_t start = clock64();
  for (uint32_t r = 0; r < reps; ++r) detail::consume_tile(t, w, xlo, xhi, acc);
  __syncwarp();
  const uint64_t end = clock64();
  if (tid % 32 == 0) cycles[blockIdx.x * kWarps + warp] = end - start;
  if (acc[0] == 12345.0f) sink[0] = acc[1];
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "attribute");
  const uint32_t shared = kWarps * kStageBytes + kMaxCols * 4 + 64 * 4;
  check(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, shared), "shared");
  uint64_t* cycles = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&cycles, sms * kWarps * 8), "malloc");
  check(cudaMalloc(&sink, 4), "malloc");
  struct Shape {
    const char* what;
    uint32_t cols, tile_cols, rows;
  };
  // A tile is whole rows where two fit a stage, else four rows of a column block (matvec_tiles).
  const Shape shapes[] = {{"1B qkv/o/gate-up (2048 cols)", 2048, 2048, 4},
                          {"1B down (8192 cols, blocks of 2048)", 8192, 2048, 4},
                          {"Qwen3-4B (2560 cols)", 2560, 2560, 3},
                          {"8B (4096 cols)", 4096, 4096, 2},
                          {"Qwen3-4B down (9728 cols, blocks of 1952)", 9728, 1952, 4}};
  const uint32_t reps = 200;
  std::printf("SM clock %.0f MHz; ns per 16 KiB tile per warp (median over %d SMs x warps), and the SM's consumption\n",
              clock_khz / 1e3, sms);
  std::printf("%-44s %7s %12s %14s\n", "shape", "warps", "ns / tile", "GB/s per SM");
  for (const Shape& s : shapes) {
    for (uint32_t active : {1u, 4u, kWarps}) {
      probe<<<sms, kBlockThreads, shared>>>(s.cols, s.tile_cols, s.rows, active, reps, cycles, sink);
      check(cudaGetLastError(), "launch");
      check(cudaDeviceSynchronize(), "run");
      std::vector<uint64_t> host(sms * kWarps), v;
      check(cudaMemcpy(host.data(), cycles, host.size() * 8, cudaMemcpyDeviceToHost), "copy");
      for (int b = 0; b < sms; ++b)
        for (uint32_t w = 0; w < active; ++w) v.push_back(host[b * kWarps + w]);
      std::sort(v.begin(), v.end());
      const double ns = v[v.size() / 2] / (clock_khz / 1e6) / reps;
      const double bytes = double(s.tile_cols) * 2 * s.rows;
      std::printf("%-44s %7u %12.1f %14.1f\n", s.what, active, ns, active * bytes / ns);
    }
  }
  return 0;
}
