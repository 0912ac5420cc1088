// The hand-off of an activation between SMs without a counter: values that carry their step.
//
// An f32 activation whose every reader and writer can take it so (each op's gpu_activations
// says which of its tensors) is "tagged": the lowest mantissa bit of each value is the parity of
// the step that wrote it (step_bit), a relative change of at most 2^-23 (an infinity written at a
// step whose bit is 1 becomes a NaN). A matvec's input always is (the executor refuses a
// schedule where it cannot be). The writer stores each value with one
// relaxed 32-bit store, no release; the reader polls the values themselves until every one has
// its step's bit. One bit is enough: every tagged tensor is written once per step, and no step
// starts on an SM before every SM has finished the one before, so a value is its step's or the
// previous step's. The executor drops the counters that only tagged tensors were signalled on
// (their waits and signals), so that a matvec neither waits for a counter and then loads its
// input (two round trips to L2) nor releases a counter after its stores (a release waits for
// the SM's copies in flight). The layout is f32's own: a 64-bit word per value (the value and
// the whole generation) doubled the bytes of every input and cost more than the hand-off saved
// (docs/notes.md 103). A matvec checks its input with a few logic operations per batch of loads
// (stale_bits) and decides for the whole block at the barrier it needs anyway (block_any)
// whether to load it again: a check by value with branches cost each batch ~0.35 us, a branch
// per thread after its batches ~0.1 us per task (docs/notes.md 104-105).
//
// A poll that outlasts the watchdog records code 3 (the executor, interpreter.cu, reports it) and fails: every compute
// thread then sees `handoff.failed` after the op's next block barrier, and the SM leaves.
#pragma once
#include <cstdint>

#include "device/cuda/block.cuh"
#include "device/cuda/queues.hpp"

namespace mk::device {

// The launch's watchdog record: the first wait that timed out (filled by the SM whose wait did).
struct ErrorRecord {
  uint32_t code;  // 0: none, 1: a counter's wait timed out, 2: the wait for the previous step, 3: a tagged value's
  // Code 1: the SM, its instruction's slot in its queue, the task, the counter, the value seen
  // and the target. Code 2: the SM, the position of the step it was to start (in `instruction`),
  // counter ~0u (the steps_done count), the value seen and the target. Code 3: as code 1 with the
  // tensor in `counter` and the step bits seen and wanted.
  uint32_t sm, instruction, task, counter, value, target, pad;
};

// The bit a value written at the step of this generation carries. Generations start at 1 after
// every counter reset, which poisons tagged tensors with all-ones bytes (bit 1): stale then.
__host__ __device__ constexpr uint32_t step_bit(uint32_t generation) { return ~generation & 1u; }

// (How an op's CUDA body takes each of its activations, its gpu_activations: Tagging, queues.hpp.)

struct Handoff {
  uint32_t fields;        // the instruction's tagged activations: bit k for its op's k-th (tagged_field)
  uint32_t bit;           // this step's step_bit
  uint32_t failed;        // a tagged poll timed out or saw the launch abort
  uint32_t slot;          // the instruction running, for a report
  ErrorRecord* error;
  uint64_t timeout_ns;
};

namespace detail {
static __shared__ Handoff handoff;  // set by the interpreter's loop
}  // namespace detail

// Whether the k-th activation its op's gpu_activations lists is tagged for this instruction. The
// executor puts the bits in its copy of the instruction (Instruction::reserved) and the
// interpreter's loop here: a shared-memory read, where a table in global memory cost a round
// trip to L2 in every task's epilogue (docs/notes.md 103).
__device__ __forceinline__ bool tagged_field(uint32_t k) { return (detail::handoff.fields >> k) & 1u; }

__device__ __forceinline__ float4 load_tagged4(const float* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float load_tagged(const float* p) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ void store_tagged(float* p, float value, uint32_t bit) {
  const uint32_t u = (__float_as_uint(value) & ~1u) | bit;
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(u));
}

// One value of an activation the executor may or may not tag (the op's tagged_field): tagged
// with `bit`, or a plain store.
__device__ __forceinline__ void store_activation(float* p, float value, bool tagged, uint32_t bit) {
  if (tagged) store_tagged(p, value, bit);
  else *p = value;
}

// A tagged value with its step bit cleared: what was stored, to 2^-23 relative, and exactly where
// that matters: a zero is zero again, and an infinity (a NaN once tagged with bit 1) infinite.
__device__ __forceinline__ float untagged(float v) { return __uint_as_float(__float_as_uint(v) & ~1u); }

__device__ __forceinline__ bool fresh(float v) { return (__float_as_uint(v) & 1u) == detail::handoff.bit; }
// Bit 0 set where any of the four values does not carry `bit` (this step's): no branch.
__device__ __forceinline__ uint32_t stale_bits(float4 v, uint32_t bit) {
  return ((__float_as_uint(v.x) ^ bit) | (__float_as_uint(v.y) ^ bit) | (__float_as_uint(v.z) ^ bit) |
          (__float_as_uint(v.w) ^ bit)) & 1u;
}

// Whether a poll that found stale values should go on: on every 64th round it reads the abort
// flag and the clock (since `start`, taken at its first stale round); past the watchdog it
// records code 3 for `tensor`, with `seen_bit` (a stale value's) as the bit seen. False also
// marks the block's hand-off failed.
__device__ __forceinline__ bool keep_polling(uint32_t round, uint64_t& start, uint32_t tensor, uint32_t seen_bit) {
  Handoff& h = detail::handoff;
  if (round == 0) start = global_timer();
  if (round % 64 != 63) {
    __nanosleep(32);
    return true;
  }
  bool go = *static_cast<volatile uint32_t*>(&h.error->code) == 0;
  if (go && global_timer() - start > h.timeout_ns) {
    if (atomicCAS(&h.error->code, 0u, 3u) == 0) {
      *h.error = ErrorRecord{3, blockIdx.x, h.slot, 0, tensor, seen_bit, h.bit, 0};
      __threadfence();
    }
    go = false;
  }
  if (!go) h.failed = 1;
  return go;
}

// n values from src into dst, by one warp, polled until every one is this step's. If the launch
// aborts it stops early, with handoff.failed set (every lane of the warp sees it).
__device__ __forceinline__ void warp_load_tagged(float* dst, const float* src, uint32_t n, uint32_t tensor) {
  const uint32_t lane = threadIdx.x % 32, bit = detail::handoff.bit;
  uint64_t start = 0;
  for (uint32_t round = 0;; ++round) {
    uint32_t stale = 0;
    for (uint32_t i = lane; i < n; i += 32) {
      const float v = load_tagged(src + i);
      dst[i] = v;
      stale |= (__float_as_uint(v) ^ bit) & 1u;
    }
    if (!__any_sync(0xffffffffu, stale)) return;
    if (stale) keep_polling(round, start, tensor, bit ^ 1u);
    __syncwarp();
    if (detail::handoff.failed) return;
  }
}

// One tagged value, polled until it is this step's; NaN if the launch aborts.
__device__ inline float poll_tagged(const float* p, uint32_t tensor) {
  float v = load_tagged(p);
  uint64_t start = 0;
  for (uint32_t round = 0; !fresh(v); ++round) {
    if (!keep_polling(round, start, tensor, __float_as_uint(v) & 1u)) return __int_as_float(0x7fc00000);
    v = load_tagged(p);
  }
  return v;
}

}  // namespace mk::device
