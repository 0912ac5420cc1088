// A standalone probe (the interpreter's ring and block primitives, no op or schedule): can a few SMs that only ask L2 for the weights ahead of
// the others keep HBM streaming while the computing SMs pause their rings around each task's
// input and signal and wait for each other between ops?
//
// It imitates the interpreter's stream on a synthetic model: every computing SM runs the same
// ops in order; each op waits for every SM to have signalled the op before (one counter), loads
// an input vector from L2 with the ring paused, consumes its tiles of 16 KiB from an 11-stage
// bulk-copy ring (a warp per stage, each tile held for a set time, as the matvec's dot products
// hold it), and signals with the ring paused (a release add). With `feeders` > 0, that many more
// blocks walk the same tiles in order, tile row by tile row (tile j of every computing SM), and
// send `cp.async.bulk.prefetch.L2` for each, at most `lead` rows past the slowest ring's issue.
// The weights are the same bytes in every configuration: fewer computing SMs take more tiles.
//
// Build (Hopper), from the repository's root: nvcc -O3 -std=c++20 -arch=sm_90a -I. -o feeder bench/probes/feeder.cu
// Run: ./feeder [model [tile_ns [plain|handoff]]] (model 1b: a Llama-3.2-1B-like layer list at a short step; 8b:
// Llama-3.1-8B-like; 1b-fused: the 1B with the attention done by every o-proj task, a barrier fewer a layer;
// 1b-no-attention: the 1B without its attention). `plain` runs the interpreter's way only, no feeders; a number
// after it sets the attention's time in ns (default 5000). `handoff` compares the interpreter's hand-off between ops
// (a release add on a counter that the next op polls, then its input loaded) with tagged data (`tagged_input`).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/probes/check.hpp"
#include "device/cuda/block.cuh"  // kWarps, kThreads, kBlockThreads, block_sync: the interpreter's block
#include "device/cuda/ring.cuh"   // kStageBytes, the mbarrier and bulk-copy wrappers

namespace {

using namespace mk::device;
constexpr uint32_t kStage = kStageBytes, kStages = kWarps, kBlock = kBlockThreads;  // a ring stage per compute warp
constexpr uint32_t kMaxOps = 1024;

using mk::probes::check;

struct Op {
  uint32_t tiles;         // per computing SM
  uint32_t input_floats;  // the input vector each SM loads after the wait
  uint32_t busy_ns;       // work without tiles (the attention at a short step), on busy_sms SMs
  uint32_t busy_sms;
};

struct Params {
  const unsigned char* weights;
  const Op* ops;
  const unsigned long long* op_base;  // byte offset of op k's tiles: SM s's tile j at + (s * tiles + j) * kStage
  uint32_t nops, consumers, feeders, lead, pauses, tile_ns, total_tiles, line_prefetch;
  uint32_t tagged;      // hand-off by tagged data instead of counters (see `tagged_input`)
  uint32_t backoff_ns;  // the tagged poll's sleep between rounds (0: none)
  uint32_t salt;        // this launch's tags: salt + op (the vectors are not cleared between launches)
  unsigned long long wrap;  // tiles read at their offset modulo this (0: none): a weight set that stays in L2
  uint32_t* counters;  // per op: SMs that signalled it
  uint32_t* issued;    // per computing SM: tiles its ring has issued (relaxed, every 4 tiles)
  float* act;          // per op an input vector (act_stride floats)
  uint32_t act_stride;
  float* sink;
};

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t load_relaxed64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The hand-off without counters (`tagged`): every element of an op's input is a 64-bit word
// {float, tag}, stored by the SM that computed it with one relaxed 64-bit store (single-copy
// atomic) and no release; the consumer polls the words themselves until every tag is this
// launch's for the op. No fence waits for the SM's copies in flight, and the wait and the input
// load are one round trip. Each thread loads its words 8 at a time, then re-polls the stale ones
// together.
__device__ float tagged_input(const uint64_t* in, uint32_t n, uint32_t want, uint32_t backoff_ns) {
  float acc = 0;
  for (uint32_t base = threadIdx.x; base < n; base += 8 * kThreads) {
    uint64_t v[8];
#pragma unroll
    for (uint32_t j = 0; j < 8; ++j) {
      const uint32_t i = base + j * kThreads;
      v[j] = i < n ? load_relaxed64(in + i) : uint64_t{want} << 32;
    }
    for (;;) {  // every stale word polled again at once: one round trip a round, not one a word
      bool stale = false;
#pragma unroll
      for (uint32_t j = 0; j < 8; ++j) stale |= static_cast<uint32_t>(v[j] >> 32) != want;
      if (!stale) break;
      if (backoff_ns) __nanosleep(backoff_ns);
#pragma unroll
      for (uint32_t j = 0; j < 8; ++j)
        if (static_cast<uint32_t>(v[j] >> 32) != want) v[j] = load_relaxed64(in + base + j * kThreads);
    }
#pragma unroll
    for (uint32_t j = 0; j < 8; ++j) acc += __uint_as_float(static_cast<uint32_t>(v[j]));
  }
  return acc;
}

__global__ void __launch_bounds__(kBlock, 1) probe(const Params p) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ uint32_t quiet;
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (blockIdx.x >= p.consumers) {  // a feeder: computing SMs f + lane * feeders, by warp 0
    if (warp != 0) return;
    const uint32_t f = blockIdx.x - p.consumers, s = f + lane * p.feeders;
    uint32_t row = 0, k = 0, j = 0;  // the next row: op k's tile j
    while (k < p.nops && p.ops[k].tiles == 0) ++k;
    auto next = [&] {
      ++row;
      if (++j == p.ops[k].tiles) {
        j = 0;
        do ++k; while (k < p.nops && p.ops[k].tiles == 0);
      }
    };
    while (row < p.total_tiles) {
      // One poll, then every row up to `lead` past the slowest ring: polling per row left the
      // feeder a round trip per row, slower than the rings it should be ahead of.
      const uint32_t issued = s < p.consumers ? load_relaxed(p.issued + s) : ~0u;
      const uint32_t slowest = __reduce_min_sync(0xffffffffu, issued);
      while (row < slowest && row < p.total_tiles) next();
      if (row >= p.total_tiles) break;
      if (row >= slowest + p.lead) {
        __nanosleep(64);
        continue;
      }
      while (row < slowest + p.lead && row < p.total_tiles) {
        if (issued <= row) {  // this ring has not asked for it yet
          const unsigned char* tile = p.weights + p.op_base[k] + (uint64_t{s} * p.ops[k].tiles + j) * kStage;
          if (p.line_prefetch)
            for (uint32_t off = 0; off < kStage; off += 128) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(tile + off));
          else
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(tile), "r"(kStage) : "memory");
        }
        next();
      }
    }
    return;
  }

  const uint32_t sm = blockIdx.x;
  if (tid == 0) {
    for (uint32_t s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 32);  // the lanes of the one warp that consumes the stage
    }
    mbar_fence_init();
    quiet = 0;
  }
  __syncthreads();

  if (warp == kWarps) {  // the producer
    if (lane != 0) return;
    const uint64_t policy = evict_first_policy();
    uint32_t stage = 0, parity = 1, n = 0;
    bool first = true;
    for (uint32_t k = 0; k < p.nops; ++k) {
      for (uint32_t j = 0; j < p.ops[k].tiles; ++j) {
        while (*static_cast<volatile uint32_t*>(&quiet)) {
        }
        if (!first)
          while (!mbar_try_wait(empty + stage, parity)) {
          }
        const uint64_t at = p.op_base[k] + (uint64_t{sm} * p.ops[k].tiles + j) * kStage;
        mbar_expect_bytes(full + stage, kStage);
        bulk_copy(ring + stage * kStage, p.weights + (p.wrap ? at % p.wrap : at), kStage, full + stage, policy);
        if (++stage == kStages) stage = 0, parity ^= 1, first = false;
        if (++n % 4 == 0) asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p.issued + sm), "r"(n) : "memory");
      }
    }
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p.issued + sm), "r"(~0u >> 1) : "memory");
    return;
  }

  float acc = 0;
  uint32_t t = 0;  // this SM's tiles so far
  uint64_t* act64 = reinterpret_cast<uint64_t*>(p.act);  // the tagged hand-off's words
  for (uint32_t k = 0; k < p.nops; ++k) {
    const Op op = p.ops[k];
    if (p.tagged) {
      if (p.pauses && tid == 0) atomicExch(&quiet, 1u);
      if (k > 0) acc += tagged_input(act64 + uint64_t{k} * p.act_stride, op.input_floats, p.salt + k, p.backoff_ns);
      block_sync();
      if (p.pauses && tid == 0) atomicExch(&quiet, 0u);
    } else {
      if (k > 0) {
        if (tid == 0)
          while (load_relaxed(p.counters + k - 1) < p.consumers) __nanosleep(32);
        block_sync();
      }
      if (p.pauses && tid == 0) atomicExch(&quiet, 1u);
      const float* in = p.act + uint64_t{k} * p.act_stride;
      for (uint32_t i = tid; i < op.input_floats; i += kThreads) acc += __ldcg(in + i);
      block_sync();
      if (p.pauses && tid == 0) atomicExch(&quiet, 0u);
    }
    if (sm < op.busy_sms) {
      const uint64_t until = now() + op.busy_ns;
      while (now() < until) {
      }
    }
    for (uint32_t j = 0; j < op.tiles; ++j) {
      const uint32_t g = t + j, stage = g % kStages;
      if (stage != warp) continue;
      const uint32_t parity = (g / kStages) & 1;
      while (!mbar_try_wait(full + stage, parity)) {
      }
      const uint4* tile = reinterpret_cast<const uint4*>(ring + stage * kStage);
      uint32_t x = 0;
#pragma unroll 8
      for (uint32_t i = lane; i < kStage / 16; i += 32) x ^= tile[i].x ^ tile[i].w;
      acc += static_cast<float>(x & 1);
      const uint64_t until = now() + p.tile_ns;
      while (now() < until) {
      }
      mbar_arrive(empty + stage);
    }
    t += op.tiles;
    block_sync();
    if (p.tagged) {  // this SM's share of the next op's input: a contiguous slice
      const uint32_t n = k + 1 < p.nops ? p.ops[k + 1].input_floats : 0;
      const uint64_t word = uint64_t{p.salt + k + 1} << 32 | __float_as_uint(acc);
      for (uint32_t i = sm * n / p.consumers + tid; i < (sm + 1) * n / p.consumers; i += kThreads)
        asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(act64 + uint64_t{k + 1} * p.act_stride + i), "l"(word) : "memory");
      continue;
    }
    if (p.pauses && tid == 0) atomicExch(&quiet, 1u);
    if (k + 1 < p.nops && tid < 16) p.act[uint64_t{k + 1} * p.act_stride + sm * 16 + tid] = acc;
    block_sync();
    if (tid == 32) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.counters + k) : "memory");
      atomicExch(&quiet, 0u);
    }
  }
  if (acc == 12345.0f) p.sink[sm] = acc;
}

struct Layer {
  uint32_t kb, input_floats, busy_ns, busy_sms;  // kb: per SM at 132 SMs
};

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "1b";
  // Per-SM bytes of each op at 132 SMs, from the real plans (docs/notes.md, the traces).
  std::vector<Layer> layer, head;
  uint32_t layers = 16;
  if (model == "8b") {
    layer = {{381, 4096, 0, 0}, {0, 6144, 6000, 32}, {254, 4096, 0, 0}, {1780, 4096, 0, 0}, {886, 14336, 0, 0}};
    head = {{7960, 4096, 0, 0}};
    layers = 32;
  } else if (model == "1b-fused") {  // the attention done by every o-proj task (per kv group), one barrier fewer a layer
    layer = {{96, 2048, 0, 0}, {64, 3072, 5000, 132}, {508, 2048, 0, 0}, {254, 8192, 0, 0}};
    head = {{3980, 2048, 0, 0}};
  } else if (model == "1b-no-attention") {
    layer = {{96, 2048, 0, 0}, {64, 2048, 0, 0}, {508, 2048, 0, 0}, {254, 8192, 0, 0}};
    head = {{3980, 2048, 0, 0}};
  } else {
    layer = {{96, 2048, 0, 0}, {0, 3072, 5000, 8}, {64, 2048, 0, 0}, {508, 2048, 0, 0}, {254, 8192, 0, 0}};
    head = {{3980, 2048, 0, 0}};
  }
  if (argc > 4 && std::string(argv[3]) == "plain")  // the attention's time (ns) in place of 5000
    for (Layer& L : layer)
      if (L.busy_ns) L.busy_ns = std::atoi(argv[4]);
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attr");
  std::vector<Layer> all;
  for (uint32_t l = 0; l < layers; ++l) all.insert(all.end(), layer.begin(), layer.end());
  all.insert(all.end(), head.begin(), head.end());
  uint64_t bytes132 = 0;
  for (const Layer& L : all) bytes132 += uint64_t{L.kb} * 1024 * 132;
  const uint64_t alloc = bytes132 + (uint64_t{512} << 20);
  unsigned char* w = nullptr;
  check(cudaMalloc(&w, alloc), "weights");
  check(cudaMemset(w, 0x3c, alloc), "fill");
  uint32_t *counters, *issued;
  float *act, *sink;
  const uint32_t stride = 16384;
  check(cudaMalloc(&counters, kMaxOps * 4), "counters");
  check(cudaMalloc(&issued, 256 * 4), "issued");
  check(cudaMalloc(&act, uint64_t{kMaxOps} * stride * 8), "act");  // 8 bytes an element: the tagged words
  check(cudaMemset(act, 0, uint64_t{kMaxOps} * stride * 8), "act");
  uint32_t launches = 0;  // the tagged hand-off's salt
  check(cudaMalloc(&sink, 256 * 4), "sink");
  Op* dops;
  unsigned long long* dbase;
  check(cudaMalloc(&dops, kMaxOps * sizeof(Op)), "ops");
  check(cudaMalloc(&dbase, kMaxOps * 8), "base");
  const uint32_t shared = kStages * kStage;
  check(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, shared), "smem");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::printf("model %s: %u ops, %.3f GB of weights, %d SMs\n", model.c_str(), (unsigned)all.size(), bytes132 / 1e9, sms);
  std::printf("%-8s %-8s %-6s %-7s %-8s %10s %10s\n", "feeders", "pauses", "lead", "tile_ns", "busy", "us (med)", "TB/s");

  auto run = [&](uint32_t feeders, uint32_t pauses, uint32_t lead, uint32_t tile_ns, bool busy, unsigned long long wrap = 0,
                 uint32_t lines = 0, bool tagged = false, uint32_t backoff_ns = 0) {
    const uint32_t consumers = static_cast<uint32_t>(sms) - feeders;
    std::vector<Op> ops;
    std::vector<unsigned long long> base;
    unsigned long long off = 0;
    uint32_t total = 0;
    for (const Layer& L : all) {
      const uint32_t tiles = static_cast<uint32_t>((uint64_t{L.kb} * 1024 * 132 / consumers + kStage / 2) / kStage);
      ops.push_back(Op{tiles, L.input_floats, busy ? L.busy_ns : 0, L.busy_sms});
      base.push_back(off);
      off += uint64_t{tiles} * consumers * kStage;
      total += tiles;
    }
    if (off > alloc) {
      std::fprintf(stderr, "layout past the allocation\n");
      std::exit(1);
    }
    check(cudaMemcpy(dops, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice), "ops");
    check(cudaMemcpy(dbase, base.data(), base.size() * 8, cudaMemcpyHostToDevice), "base");
    Params p{w, dops, dbase, static_cast<uint32_t>(ops.size()), consumers, feeders, lead, pauses, tile_ns, total, lines,
             tagged, backoff_ns, 0, wrap, counters, issued, act, stride, sink};
    std::vector<float> ms;
    for (int r = 0; r < 12; ++r) {
      p.salt = ++launches * kMaxOps;
      check(cudaMemset(counters, 0, kMaxOps * 4), "reset");
      check(cudaMemset(issued, 0, 256 * 4), "reset");
      check(cudaEventRecord(a), "record");
      probe<<<sms, kBlock, shared>>>(p);
      check(cudaGetLastError(), "launch");
      check(cudaEventRecord(b), "record");
      check(cudaEventSynchronize(b), "run");
      float t = 0;
      check(cudaEventElapsedTime(&t, a, b), "elapsed");
      if (r >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    std::printf("%-8u %-8u %-6u %-7u %-8s %10.1f %10.3f%s\n", feeders, pauses, lead, tile_ns, busy ? "yes" : "no", us,
                off / us / 1e6, wrap ? "  (weights wrapped into L2)" : lines ? "  (line prefetches)" : tagged ? "  (tagged hand-off)" : "");
    if (tagged) std::printf("  back-off %u ns\n", backoff_ns);
    std::fflush(stdout);
  };
  const uint32_t tile_ns = argc > 2 ? std::atoi(argv[2]) : 1500;
  if (argc == 4 && std::string(argv[3]) == "handoff") {  // counters against tagged data, no feeders
    for (int again = 0; again < 2; ++again) {
      run(0, 1, 0, tile_ns, true);
      for (uint32_t backoff : {0u, 64u}) {
        run(0, 0, 0, tile_ns, true, 0, 0, true, backoff);
        run(0, 1, 0, tile_ns, true, 0, 0, true, backoff);
      }
    }
    run(0, 1, 0, tile_ns, false);  // without the attention's busy SMs
    run(0, 0, 0, tile_ns, false, 0, 0, true, 256);
    return 0;
  }
  if ((argc == 4 || argc == 5) && std::string(argv[3]) == "plain") {  // the interpreter's way only, no feeders
    run(0, 1, 0, tile_ns, true);
    return 0;
  }
  if (argc > 5) {  // one configuration: model tile_ns feeders lead lines (for a profiler)
    run(std::atoi(argv[3]), 1, std::atoi(argv[4]), tile_ns, true, 0, std::atoi(argv[5]));
    return 0;
  }
  run(0, 1, 0, tile_ns, true);  // as the interpreter: pauses, the attention's busy SMs
  for (uint32_t f : {4u, 8u})
    for (uint32_t lead : {0u, 4u, 16u}) {
      run(f, 1, lead, tile_ns, true);
      if (lead) run(f, 1, lead, tile_ns, true, 0, 1);
    }
  run(0, 0, 0, 300, false);
  run(8, 0, 8, 300, false);
  run(8, 0, 8, 300, false, 0, 1);
  return 0;
}
