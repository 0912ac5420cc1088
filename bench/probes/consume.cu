// A standalone probe of the matvec's consumer: how long one warp holds a 16 KiB ring tile
// (detail::consume_tile, the interpreter's own code) when the tile has already landed, for the
// tile shapes of the benchmark's models, with 1, 4 or all compute warps busy at once, each on a
// tile of its own ("own") or all on slices of one ("shared", as a task's last tiles are taken).
//
// The stream probe (feeder.cu) prices a tile's hold time: 1.5 -> 0.7 us took its synthetic 1B
// step from 911 to 852 us. This measures what the real consumer holds.
//
// Build (Hopper), from the repository's root: nvcc -O3 -std=c++20 -arch=sm_90a -I. -o consume bench/probes/consume.cu
// Run: ./consume (prints ns per tile per warp; for "shared", per tile)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#include "device/ops/matvec.cuh"

namespace {

using namespace mk::device;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

constexpr uint32_t kMaxCols = 9728;  // the widest input here (Qwen3-4B down)

// Variants of the consumer's inner loop, to price against it: U chunks a lane per iteration.
template <uint32_t NR, uint32_t U>
__device__ __forceinline__ void dot_rows_u(const uint4* row, uint32_t n8, const float4* xlo, const float4* xhi, uint32_t first,
                                           float (&a)[4]) {
#pragma unroll U
  for (uint32_t c = first; c < n8; c += 32) {
    uint4 w[NR];
#pragma unroll
    for (uint32_t r = 0; r < NR; ++r) w[r] = row[r * n8 + c];
    const float4 xa = xlo[c], xb = xhi[c];
#pragma unroll
    for (uint32_t r = 0; r < NR; ++r) a[r] += dot8(w[r], xa, xb);
  }
}
template <uint32_t U>
__device__ __forceinline__ void consume_tile_u(const WeightTile& t, const uint16_t* w, const float4* xlo, const float4* xhi,
                                               float* acc) {
  const uint32_t lane = threadIdx.x % 32, n8 = t.cols / 8, c0 = t.col0 / 8;
  const uint4* tile = reinterpret_cast<const uint4*>(w);
  for (uint32_t r0 = 0; r0 < t.rows; r0 += 4) {
    const uint32_t nr = min(4u, t.rows - r0);
    const uint4* row = tile + r0 * n8;
    float a[4] = {0, 0, 0, 0};
    switch (nr) {
      case 4: dot_rows_u<4, U>(row, n8, xlo + c0, xhi + c0, lane, a); break;
      case 3: dot_rows_u<3, U>(row, n8, xlo + c0, xhi + c0, lane, a); break;
      case 2: dot_rows_u<2, U>(row, n8, xlo + c0, xhi + c0, lane, a); break;
      default: dot_rows_u<1, U>(row, n8, xlo + c0, xhi + c0, lane, a); break;
    }
    const float s = detail::warp_sum4(a[0], a[1], a[2], a[3]);
    if (lane % 8 == 0 && lane / 8 < nr) atomicAdd(acc + t.acc_row + r0 + lane / 8, s);
  }
}
enum Kind : uint32_t { kOwn, kShared, kUnroll1, kUnroll4, kUnroll8, kKinds };
const char* const kKindNames[] = {"own", "shared", "own-u1", "own-u4", "own-u8"};

// Every block: the tiles in shared memory (kWarps stages of random bf16), x in its two planes;
// warps < active each consume their stage's tile `reps` times; thread 0 of each warp records
// its cycles.
__global__ void __launch_bounds__(kBlockThreads, 1)
    probe(uint32_t kind, uint32_t cols, uint32_t tile_cols, uint32_t rows, uint32_t active, uint32_t reps, uint64_t* cycles,
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
  if (kind == kShared)  // every active warp a slice of stage 0's tile
    for (uint32_t r = 0; r < reps; ++r) detail::consume_tile(t, w - warp * kStageBytes / 2, xlo, xhi, warp, active, acc);
  else if (kind == kUnroll1)
    for (uint32_t r = 0; r < reps; ++r) consume_tile_u<1>(t, w, xlo, xhi, acc);
  else if (kind == kUnroll4)
    for (uint32_t r = 0; r < reps; ++r) consume_tile_u<4>(t, w, xlo, xhi, acc);
  else if (kind == kUnroll8)
    for (uint32_t r = 0; r < reps; ++r) consume_tile_u<8>(t, w, xlo, xhi, acc);
  else
    for (uint32_t r = 0; r < reps; ++r) detail::consume_tile(t, w, xlo, xhi, 0, 1, acc);
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
  std::printf("%-44s %-7s %7s %12s %14s\n", "shape", "kind", "warps", "ns / tile", "GB/s per SM");
  for (const Shape& s : shapes) for (uint32_t kind = 0; kind < kKinds; ++kind) {
    for (uint32_t active : {1u, 4u, kWarps}) {
      probe<<<sms, kBlockThreads, shared>>>(kind, s.cols, s.tile_cols, s.rows, active, reps, cycles, sink);
      check(cudaGetLastError(), "launch");
      check(cudaDeviceSynchronize(), "run");
      std::vector<uint64_t> host(sms * kWarps), v;
      check(cudaMemcpy(host.data(), cycles, host.size() * 8, cudaMemcpyDeviceToHost), "copy");
      for (int b = 0; b < sms; ++b)
        for (uint32_t w = 0; w < active; ++w) v.push_back(host[b * kWarps + w]);
      std::sort(v.begin(), v.end());
      const double ns = v[v.size() / 2] / (clock_khz / 1e6) / reps;
      const double bytes = double(s.tile_cols) * 2 * s.rows;
      // A shared tile is one tile for all the active warps.
      std::printf("%-44s %-7s %7u %12.1f %14.1f\n", s.what, kKindNames[kind], active, ns,
                  (kind == kShared ? 1 : active) * bytes / ns);
    }
  }
  return 0;
}
