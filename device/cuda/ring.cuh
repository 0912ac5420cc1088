// The weight ring: `count` shared-memory stages of kStageBytes, each with a "full" mbarrier
// (the bulk copy landed) and an "empty" one (its consumers are done: kWarps arrivals per tile,
// however an op divides its tiles among the warps). Weights never depend on activations, so the
// producer warp streams the tiles of the SM's upcoming instructions while the compute warps
// still wait for their counters. Tile k of the launch uses stage k % count.
#pragma once
#include <cstdint>

#include "device/cuda/block.cuh"
#include "device/memory.hpp"
#include "schedules/format.hpp"

namespace mk::device {

inline constexpr uint32_t kStageBytes = 16384;
inline constexpr uint32_t kMaxStages = 16;

// A contiguous piece of one weight: `rows` rows of `cols` elements starting at column `col0`
// (whole rows, or one piece of a long row), accumulated into acc[acc_row ...].
struct WeightTile {
  const uint16_t* src;
  uint32_t bytes;
  uint32_t acc_row;
  uint32_t rows, col0, cols;
  const uint16_t* src2 = nullptr;  // optional: as many bytes more, to offset2 in the stage (v beside k)
  uint32_t offset2 = 0;
  uint32_t pieces = 1;  // copies of `bytes`, the k-th from src + k * stride elements to offset k * bytes
  uint32_t stride = 0;
  __device__ uint32_t total_bytes() const { return pieces * bytes + (src2 ? bytes : 0); }
};

struct WeightRing {
  unsigned char* stages;
  uint32_t count;
  uint64_t* full;
  uint64_t* empty;
  uint32_t next_tile;  // the launch's tile counter, advanced alike by every compute thread
  // While set, the producer issues no bulk copy (tiles already landed keep the compute warps
  // busy). Thread 0 of an op sets it (pause) once the op has consumed its tiles, and the
  // interpreter clears it after the signal, whose release waits for this SM's copies in flight;
  // a matvec also pauses while it loads its input, which would otherwise queue behind them
  // (Qwen3-4B's gate/up input 3.0 -> 2.0 us; docs/notes.md entries 9 and 42), and resumes after
  // the block_sync that ends the load.
  // The compute threads write it with shared-memory atomics (pause and resume by thread 0, the
  // clear after the signal by thread 32; the block's barriers order those); the producer warp
  // reads it with a volatile load, outside every barrier. It is a hint: a stale read lets one
  // copy out or holds one back a moment. Plain writes against that read were a race to
  // compute-sanitizer's racecheck (77 hazards at 452fa23); atomic writes are not. An atomic read
  // as well costs the stream: the producer spinning on it slowed the compute warps' own shared
  // atomics (Llama-3.2-1B +25 us, docs/notes.md entry 65).
  uint32_t* quiet;

  // A stage's kWarps arrivals per tile, shared out among the `share` warps that consume it:
  // what warp h of them arrives with (the attention's).
  __device__ static uint32_t releases(uint32_t share, uint32_t h) { return kWarps / share + (h < kWarps % share); }
  // The empty barrier counts lanes (ring_release): kEmptyArrivals per tile.
  static constexpr uint32_t kEmptyArrivals = kWarps * 32;

  __device__ void pause() const {
    if (threadIdx.x == 0) atomicExch(quiet, 1u);
  }
  __device__ void resume(uint32_t thread = 0) const {
    if (threadIdx.x == thread) atomicExch(quiet, 0u);
  }
  __device__ bool paused() const { return *static_cast<volatile uint32_t*>(quiet) != 0; }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// `count` arrivals at once (a warp that stands for several consumers).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// A consuming warp's release of a stage: every lane arrives itself, after its own reads, with the
// warp's share of the tile's arrivals. A warp barrier and one lane's arrival order the other
// lanes' reads before the producer's next copy only through the barrier's cumulativity, which
// compute-sanitizer's racecheck does not follow (docs/notes.md 81).
__device__ __forceinline__ void ring_release(const WeightRing& ring, uint32_t stage, uint32_t releases) {
  mbar_arrive(ring.empty + stage, releases);
}

__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// kCluster: acquire at cluster scope, for a barrier that another block of the cluster arrives on
// with release (bench/probes/cluster.cu; the interpreter's barriers are its own block's).
#define MK_MBAR_TRY_WAIT(sem)                                                                               \
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity" sem ".shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}" \
               : "=r"(done)                                                                                  \
               : "r"(smem_addr(bar)), "r"(parity)                                                            \
               : "memory")
template <bool kCluster = false>
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  if constexpr (kCluster) MK_MBAR_TRY_WAIT(".acquire.cluster");
  else MK_MBAR_TRY_WAIT("");
  return done != 0;
}
#undef MK_MBAR_TRY_WAIT

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Records in an instruction's trace record (when tracing: not null) the time its op body
// reaches phase k (0 or 1) of its own; by thread 0.
__device__ __forceinline__ void trace_mark(uint64_t* trace, uint32_t k) {
  if (trace && threadIdx.x == 0) trace[3 + k] = global_timer();
}

// What an op body gets besides its payload: scratch shared memory and the weight ring. At a step
// of one row the scratch is what the ring leaves (each op's gpu_shared_bytes, the largest); at a
// step of several rows the producer streams nothing and the scratch is all of shared memory.
struct BlockContext {
  unsigned char* scratch;
  WeightRing& ring;
  uint64_t* trace;  // this instruction's trace record, or nullptr
  uint32_t scratch_bytes = 0;

  __device__ void mark(uint32_t k) const { trace_mark(trace, k); }
};

// Which kinds of weights an instance of the kernel executes: bf16 only, or float8 too (kF8).
// Float8 bodies in the kernel's call graph made every op body spill (matvec.cuh), so a schedule
// without float8 weights runs an instance without them. An op whose body depends on it takes it
// as a last argument of gpu_run and gpu_rows (kernel.cuh, execute); the others never see it.
template <bool kF8>
struct WeightKinds {};

// An L2 policy for data read once per step (weights, the KV cache): evicted first, so that the
// stream does not push out of L2 what is read again soon (activations, counters, the queues,
// norm weights). Llama-3.2-1B 987 -> 954 us, Qwen3-4B at 8K 3305 -> 3220 (docs/notes.md 52).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Global -> shared through the bulk-copy engine, completing on `bar`, with an L2 policy.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// An op that streams weights through the ring defines gpu_tiles(payload, ctx, mem): an object with
// count() and at(j) -> WeightTile, its tiles in the order it consumes them, built once per
// instruction. Ops that stream none get this one.
struct NoTiles {
  __device__ uint32_t count() const { return 0; }
  __device__ WeightTile at(uint32_t) const { return WeightTile{}; }
};
// Tiles that read what an earlier step wrote (the KV cache) rather than weights say so with a
// member `static constexpr bool kReadsEarlierSteps = true`: in a launch of several steps the
// producer holds them until every SM has finished the previous step.
template <class Tiles>
__device__ constexpr bool reads_earlier_steps(const Tiles&) {
  if constexpr (requires { Tiles::kReadsEarlierSteps; }) return Tiles::kReadsEarlierSteps;
  else return false;
}
template <class Payload>
__device__ NoTiles gpu_tiles(const Payload&, const schedule::StepContext&, const TensorTable&) {
  return {};
}

// The producer walks an instruction's tiles in order: f(tile) for each, until f returns false
// (then walk_tiles does too). Its work per tile lies on the stream's path (docs/notes.md
// 113-114: a division per tile cost 7-10 ns of the step a tile), so tiles that can step from
// one to the next more cheaply than at(j) finds tile j (no division, no search) define
// `walk(f)` with the same contract; the others are walked by index. The matvec does (the 8B
// -16 us a step); the attention does not: its walk made the producer faster and the step slower
// (Qwen3-4B +21 us at 8K, +35 at 32K: the set-up's loads behind more copies in flight; docs/notes.md 115).
template <class Tiles, class F>
__device__ __forceinline__ bool walk_tiles(const Tiles& tiles, F&& f) {
  if constexpr (requires { tiles.walk(f); }) {
    return tiles.walk(f);
  } else {
    const uint32_t n = tiles.count();
    for (uint32_t j = 0; j < n; ++j)
      if (!f(tiles.at(j))) return false;
    return true;
  }
}

// Weights an op body reads itself rather than through the ring (norm weights, biases) do not
// depend on the step either: while warp 0 waits for the instruction's counters, the other
// compute warps ask L2 for them (gpu_prefetch(payload, pos, mem, thread, threads) with `threads`
// threads taking part), so that the body's loads after the wait find them there instead of
// going to memory. The same hook may prepare what the body needs from the payload and the
// step's position alone into shared memory of the op's own (the matvec's tile geometry, the
// attention's RoPE cos/sin and its norm weights in f32); the block barrier that ends the wait
// orders it before the body. Ops that need none of this get this one.
template <class Payload>
__device__ void gpu_prefetch(const Payload&, uint32_t, const TensorTable&, uint32_t, uint32_t) {}

// `bytes` from p into L2, one 128-byte line per thread in turn; kept there ahead of the stream.
__device__ __forceinline__ void prefetch_lines(const void* p, uint64_t bytes, uint32_t thread, uint32_t threads) {
  for (uint64_t off = uint64_t{thread} * 128; off < bytes; off += uint64_t{threads} * 128)
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(static_cast<const char*>(p) + off));
}

// Host: what an op works out once per instruction for its device copy, into the payload's
// bytes past its struct (the matvec's tile geometry). Ops that need nothing get this one.
template <class Payload>
inline void gpu_prepare(const Payload&, unsigned char*) {}

// Every op declares its scratch shared memory at a step of one row: gpu_shared_bytes(payload)
// (none of its own: no default, so that an op without one does not compile). At a step of several
// rows the scratch is all of shared memory (BlockContext).

}  // namespace mk::device
