// A standalone probe (the interpreter's block shape and ring primitives, no op or schedule): can the
// interpreter's persistent block run in clusters of SMs, and what does a hand-off between two SMs
// cost through distributed shared memory (DSMEM) against global memory, idle and while every SM
// streams from HBM as the weight ring does?
//
// The question behind it (docs/notes.md 123): a layer of Llama-3.2-1B is a chain of
// full-vector hops between SMs, each a store to L2 and another SM's poll. Work that two or more
// SMs of one cluster share (a kv head's attention spread over them, a partial sum reduced among
// them) could hand over through the cluster's shared memory instead, if a cluster launch keeps
// every SM and the stream, and if that hand-off is faster than L2's.
//
// What it prints:
//   1. For clusters of 1, 2, 4, 8 and 16 blocks of the interpreter's shape (384 threads, ~223 KiB
//      of shared memory), how many clusters fit at once (cudaOccupancyMaxActiveClusters): a
//      persistent kernel needs every block resident.
//   2. The stream alone (every block's producer warp keeping an 11-stage ring of 16 KiB bulk
//      copies in flight from its own region of a 4 GiB buffer), per cluster size: the HBM
//      bandwidth the launch reaches.
//   3. Round trips between blocks 2c and 2c + 1 (one cluster when clusters are used), warp 0 of
//      each, `payload` floats each way: through global memory (relaxed stores of values that
//      carry the round, the other side polling them, as the interpreter's tagged hand-off does)
//      and through DSMEM three ways: stores into the other block's shared memory, then a remote
//      mbarrier arrival with release at cluster scope, waited for with acquire ("release");
//      relaxed remote stores of values that carry the round, polled in the receiver's own shared
//      memory ("tagged"); `st.async` stores that complete bytes on the receiver's mbarrier
//      ("st.async"). Idle, and with every block's producer streaming meanwhile. Beside each
//      streaming row, the stream's bandwidth meanwhile: all bytes over the longest block's time,
//      which reads low where the pairs end at different times (the global rows).
//
// Build (Hopper), from the repository's root:
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o cluster bench/probes/cluster.cu
// Run: ./cluster
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/probes/check.hpp"
#include "device/cuda/block.cuh"  // kBlockThreads, kWarps: the interpreter's block
#include "device/cuda/ring.cuh"   // kStageBytes, the mbarrier and bulk-copy wrappers

namespace {

using namespace mk::device;
using mk::probes::check;

constexpr uint32_t kStages = kWarps;  // a stage per compute warp, as the interpreter's 1B and Qwen3-4B rings
constexpr uint32_t kMaxPayload = 1024;  // floats
constexpr uint32_t kSharedBytes = 223 * 1024;  // about what the interpreter asks for

enum Mode : uint32_t { kStream = 0, kGlobal = 1, kDsmem = 2, kDsmemTagged = 3, kDsmemAsync = 4 };
const char* const kModeNames[] = {"stream", "global", "DSMEM release", "DSMEM tagged", "DSMEM st.async"};

struct Params {
  const unsigned char* src;  // the streamed buffer: block b reads region b
  uint64_t region_bytes;
  uint32_t mode, load, rounds, payload, stream_tiles;  // stream_tiles: in kStream mode, tiles per block
  uint32_t* global_mail;  // per pair: two mailboxes of kMaxPayload words (rank 0's, rank 1's)
  uint64_t* round_trip_ns;  // per pair: the mean round trip (rank 0's view)
  uint64_t* streamed;       // per block: bytes its producer streamed, and the ns it took
  float* sink;
  uint32_t* failed;  // set by a wait that outlasted the deadline (the launch then ends)
  uint64_t deadline_ns;
};

// Every wait gives up after the deadline (from the block's start), so that a mistake in a mode
// shows as a failure rather than a hung launch.
__shared__ uint64_t block_start;
__device__ __forceinline__ bool late(const Params& p) {
  if (global_timer() - block_start < p.deadline_ns) return false;
  atomicExch(p.failed, 1u);
  return true;
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_blocks() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address in block `rank`'s shared memory of what is at `local` in this block's.
__device__ __forceinline__ uint32_t remote_addr(const void* local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(local)), "r"(rank));
  return r;
}
__device__ __forceinline__ void store_remote(uint32_t addr, uint32_t v) {
  asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void arrive_remote(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
// A store into another block's shared memory that completes its 4 bytes of the transaction on
// that block's mbarrier (the async proxy: no release, no fence of this SM's other traffic).
__device__ __forceinline__ void store_async(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];" ::"r"(addr), "r"(v), "r"(bar)
               : "memory");
}
__device__ __forceinline__ uint32_t load_shared_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(smem_addr(p)) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Warp 0's side of one round trip through global memory: `payload` words valued `round` into
// `to`, then `from` polled until every word is `round` (lanes own words lane, lane + 32, ...).
__device__ void global_send(uint32_t* to, uint32_t payload, uint32_t round) {
  for (uint32_t i = threadIdx.x % 32; i < payload; i += 32) store_relaxed(to + i, round);
}
__device__ void global_receive(const Params& p, const uint32_t* from, uint32_t payload, uint32_t round, float* sink) {
  uint32_t sum = 0;
  for (;;) {
    if (late(p)) break;
    uint32_t stale = 0;
    sum = 0;
    for (uint32_t i = threadIdx.x % 32; i < payload; i += 32) {
      const uint32_t v = load_relaxed(from + i);
      stale |= v != round;
      sum += v;
    }
    if (!__any_sync(0xffffffffu, stale)) break;
  }
  if (sum == 0xffffffffu) *sink = 1;  // keep the loads
}

__global__ void __launch_bounds__(kBlockThreads, 1) probe_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stages = smem;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* mail_bar = full + kStages;  // arrivals of the other block's 32 lanes, a phase a round
  volatile uint32_t* done = reinterpret_cast<volatile uint32_t*>(mail_bar + 1);
  uint32_t* mailbox = const_cast<uint32_t*>(done) + 32;  // kMaxPayload words written by the other block
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool clustered = cluster_blocks() > 1;
  if (threadIdx.x == 0) {
    block_start = global_timer();
    for (uint32_t s = 0; s < kStages; ++s) mbar_init(full + s, 1);
    mbar_init(mail_bar, p.mode == kDsmemAsync ? 1 : 32);
    if (p.mode == kDsmemAsync) mbar_expect_bytes(mail_bar, p.payload * 4);  // armed for the first round
    *done = 0;
    mbar_fence_init();
  }
  __syncthreads();
  if (clustered) cluster_sync_all();  // the other block's barrier initialised before any remote arrival

  if (warp == kWarps && lane == 0 && (p.mode == kStream || p.load)) {  // the producer: every stage's copy in flight
    const uint64_t policy = evict_first_policy();
    const unsigned char* src = p.src + uint64_t{blockIdx.x} * p.region_bytes;
    const uint64_t region_tiles = p.region_bytes / kStageBytes;
    uint64_t issued = 0;
    const uint64_t t0 = global_timer();
    for (;;) {
      const uint32_t s = issued % kStages;
      if (issued >= kStages)  // the copy before in this stage (number issued - kStages) has landed
        while (!mbar_try_wait(full + s, ((issued / kStages) - 1) & 1))
          if (late(p)) break;
      if (p.mode == kStream ? issued >= p.stream_tiles : *done != 0) break;
      mbar_expect_bytes(full + s, kStageBytes);
      bulk_copy(stages + s * kStageBytes, src + (issued % region_tiles) * kStageBytes, kStageBytes, full + s, policy);
      ++issued;
    }
    for (uint64_t j = issued - (issued < kStages - 1 ? issued : kStages - 1); j < issued; ++j)  // the rest in flight
      while (!mbar_try_wait(full + j % kStages, (j / kStages) & 1))
        if (late(p)) break;
    p.streamed[2 * blockIdx.x] = issued * kStageBytes;
    p.streamed[2 * blockIdx.x + 1] = global_timer() - t0;
  } else if (warp == 0 && p.mode != kStream) {  // blocks 2c and 2c + 1: the round trips
    const uint32_t pair = blockIdx.x / 2, rank = blockIdx.x % 2;
    if (clustered && cluster_rank() != rank) __trap();  // pairs are clusters' ranks 0 and 1
    uint32_t* gm = p.global_mail + uint64_t{pair} * 2 * kMaxPayload;
    const uint32_t warmup = 50;
    uint64_t t0 = 0;
    const uint32_t peer_mailbox = p.mode >= kDsmem ? remote_addr(mailbox, rank ^ 1) : 0;
    const uint32_t peer_bar = p.mode >= kDsmem ? remote_addr(mail_bar, rank ^ 1) : 0;
    for (uint32_t k = 1; k <= p.rounds + warmup; ++k) {
      if (k == warmup + 1) t0 = global_timer();
      for (uint32_t turn = 0; turn < 2; ++turn) {
        const bool send = (turn == 0) == (rank == 0);
        if (p.mode == kGlobal) {
          if (send) global_send(gm + (rank ^ 1) * kMaxPayload, p.payload, k);
          else global_receive(p, gm + rank * kMaxPayload, p.payload, k, p.sink);
        } else if (send) {
          if (p.mode == kDsmem) {
            for (uint32_t i = lane; i < p.payload; i += 32) store_remote(peer_mailbox + 4 * i, k);
            arrive_remote(peer_bar);  // each lane's release orders its own stores before its arrival
          } else if (p.mode == kDsmemTagged) {  // values that carry the round, no release
            for (uint32_t i = lane; i < p.payload; i += 32) store_remote(peer_mailbox + 4 * i, k);
          } else {
            for (uint32_t i = lane; i < p.payload; i += 32) store_async(peer_mailbox + 4 * i, k, peer_bar);
          }
        } else {
          uint32_t sum = 0;
          if (p.mode == kDsmemTagged) {
            for (;;) {
              if (late(p)) break;
              uint32_t stale = 0;
              sum = 0;
              for (uint32_t i = lane; i < p.payload; i += 32) {
                const uint32_t v = load_shared_relaxed(mailbox + i);
                stale |= v != k;
                sum += v;
              }
              if (!__any_sync(0xffffffffu, stale)) break;
            }
          } else {
            while (!mbar_try_wait<true>(mail_bar, (k - 1) & 1))
              if (late(p)) break;
            for (uint32_t i = lane; i < p.payload; i += 32) sum += mailbox[i];
            __syncwarp();
            if (p.mode == kDsmemAsync && lane == 0) mbar_expect_bytes(mail_bar, p.payload * 4);  // the next round's
          }
          if (sum == 0xffffffffu) *p.sink = 2;  // keep the loads
        }
      }
    }
    if (rank == 0 && lane == 0) p.round_trip_ns[pair] = (global_timer() - t0) / p.rounds;
    __syncwarp();
    if (lane == 0) *done = 1;
  }
  // No block leaves while the other block of its cluster may still write its shared memory.
  __syncthreads();
  if (clustered) cluster_sync_all();
}

struct Launch {
  uint32_t cluster, blocks;
};

float run(const Launch& l, Params p) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(l.blocks);
  config.blockDim = dim3(kBlockThreads);
  config.dynamicSmemBytes = kSharedBytes;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = l.cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = l.cluster > 1 ? 1 : 0;
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  check(cudaEventRecord(a), "record");
  check(cudaLaunchKernelEx(&config, probe_kernel, p), "launch");
  check(cudaEventRecord(b), "record");
  check(cudaEventSynchronize(b), "synchronize");
  check(cudaGetLastError(), "kernel");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // what was measured comes out even if a later launch fails
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  check(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes), "smem");
  check(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "non-portable");
  std::printf("SMs: %d; block: %u threads, %u KiB of dynamic shared memory\n", sms, kBlockThreads, kSharedBytes / 1024);

  // 1. How many clusters of each size fit at once.
  std::vector<Launch> launches;
  for (uint32_t c : {1u, 2u, 4u, 8u, 16u}) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(sms / c * c);
    config.blockDim = dim3(kBlockThreads);
    config.dynamicSmemBytes = kSharedBytes;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = c;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, probe_kernel, &config);
    if (e != cudaSuccess) {
      std::printf("clusters of %2u: %s\n", c, cudaGetErrorString(e));
      cudaGetLastError();
      continue;
    }
    std::printf("clusters of %2u: %d fit at once = %d blocks resident (of %d SMs)\n", c, clusters, clusters * c, sms);
    if (clusters > 0) launches.push_back({c, std::min<uint32_t>(clusters * c, sms / c * c)});
  }

  const uint64_t buffer_bytes = 4ull << 30;
  unsigned char* src = nullptr;
  check(cudaMalloc(&src, buffer_bytes), "malloc src");
  check(cudaMemset(src, 1, buffer_bytes), "memset src");
  uint32_t* mail = nullptr;
  uint64_t *rt = nullptr, *streamed = nullptr;
  float* sink = nullptr;
  uint32_t* failed = nullptr;
  check(cudaMalloc(&failed, 4), "malloc failed");
  check(cudaMemset(failed, 0, 4), "memset failed");
  check(cudaMalloc(&mail, uint64_t(sms) * kMaxPayload * 4 * 2), "malloc mail");
  check(cudaMalloc(&rt, sms * 8), "malloc rt");
  check(cudaMalloc(&streamed, sms * 16), "malloc streamed");
  check(cudaMalloc(&sink, 4), "malloc sink");

  Params base{};
  base.src = src;
  base.global_mail = mail;
  base.round_trip_ns = rt;
  base.streamed = streamed;
  base.sink = sink;
  base.failed = failed;
  base.deadline_ns = 2000000000ull;  // 2 s: every launch here takes milliseconds

  // 2. The stream alone, per cluster size.
  std::printf("\nthe stream alone (each block 3000 tiles of 16 KiB from its own region, 11 in flight):\n");
  for (const Launch& l : launches) {
    Params p = base;
    p.mode = kStream;
    p.stream_tiles = 3000;
    p.region_bytes = buffer_bytes / l.blocks / kStageBytes * kStageBytes;
    run(l, p);  // warm
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) ms.push_back(run(l, p));
    std::sort(ms.begin(), ms.end());
    const double bytes = double(l.blocks) * p.stream_tiles * kStageBytes;
    std::printf("  clusters of %2u, %3u blocks: %.3f ms median of 5, %.2f TB/s\n", l.cluster, l.blocks, ms[2],
                bytes / (ms[2] * 1e-3) / 1e12);
  }

  // 3. Round trips between blocks 2c and 2c + 1.
  std::printf("\nround trips between blocks 2c and 2c + 1 (warp 0 each; mean of 2000 per pair; min / median / max over pairs, ns):\n");
  for (const Launch& l : launches) {
    if (l.cluster > 2) continue;  // pairs: clusters of 1 (no cluster) and 2
    for (uint32_t mode : {uint32_t{kGlobal}, uint32_t{kDsmem}, uint32_t{kDsmemTagged}, uint32_t{kDsmemAsync}}) {
      if (mode != kGlobal && l.cluster < 2) continue;
      for (uint32_t payload : {1u, 256u, 1024u}) {
        for (uint32_t load : {0u, 1u}) {
          Params p = base;
          p.mode = mode;
          p.load = load;
          p.rounds = 2000;
          p.payload = payload;
          p.region_bytes = buffer_bytes / l.blocks / kStageBytes * kStageBytes;
          check(cudaMemset(mail, 0, uint64_t(sms) * kMaxPayload * 4 * 2), "memset mail");
          check(cudaMemset(streamed, 0, sms * 16), "memset streamed");
          run(l, p);
          const uint32_t pairs = l.blocks / 2;
          std::vector<uint64_t> h(pairs), st(2 * l.blocks);
          check(cudaMemcpy(h.data(), rt, pairs * 8, cudaMemcpyDeviceToHost), "copy rt");
          check(cudaMemcpy(st.data(), streamed, 2 * l.blocks * 8, cudaMemcpyDeviceToHost), "copy streamed");
          std::sort(h.begin(), h.end());
          double bytes = 0, ns = 0;
          for (uint32_t b = 0; b < l.blocks; ++b) bytes += st[2 * b], ns = std::max(ns, double(st[2 * b + 1]));
          std::printf("  %-14s clusters of %u, %4u floats, %s: %5llu / %5llu / %5llu", kModeNames[mode],
                      l.cluster, payload, load ? "streaming" : "idle     ", (unsigned long long)h.front(),
                      (unsigned long long)h[pairs / 2], (unsigned long long)h.back());
          if (load) std::printf("   (the stream meanwhile: %.2f TB/s)", bytes / ns / 1e3);
          uint32_t f = 0;
          check(cudaMemcpy(&f, failed, 4, cudaMemcpyDeviceToHost), "copy failed");
          if (f) std::printf("   FAILED: a wait outlasted the deadline");
          check(cudaMemset(failed, 0, 4), "memset failed");
          std::printf("\n");
        }
      }
    }
  }
  check(cudaFree(src), "free");
  return 0;
}
