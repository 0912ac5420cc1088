// The persistent interpreter kernel: one block per SM walks that SM's instruction queue, step
// after step of a launch (KernelParams), waiting for and signalling the counters in global
// memory, a producer warp streaming each instruction's weight tiles into the ring ahead of the
// compute warps (at one row a step). Each op's body is its own device/ops/<op>.cuh; the kernel
// reaches them through the op table (schedules/ops.hpp: visit_payload). Included by
// interpreter.cu alone, which launches it (the executor); the queues it walks are the host's
// rewrite of the schedule (queues.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/fp8.hpp"
#include "device/cuda/handoff.cuh"
#include "device/cuda/queues.hpp"
#include "device/cuda/ring.cuh"
#include "device/cuda_limits.hpp"
#include "device/memory.hpp"
#include "device/ops/argmax.cuh"
#include "device/ops/attention.cuh"
#include "device/ops/attn_reduce.cuh"
#include "device/ops/embed.cuh"
#include "device/ops/matvec.cuh"
#include "device/ops/sample.cuh"
#include "schedules/limits.hpp"
#include "schedules/ops.hpp"

namespace mk::device {
namespace {  // one translation unit: interpreter.cu

struct KernelParams {
  // The SMs' queues. A short step (schedules/format.hpp) takes each instruction's short wait
  // and signal lists: the kernel's loop chooses, from a flag, never an op body.
  const schedule::Instruction* instructions;
  const uint32_t* sm_offsets;
  const schedule::Wait* waits;
  const uint32_t* signals;
  uint32_t* counters;
  // Every SM adds one here after each step's last signal: the step with generation g + 1 starts
  // on an SM once it reaches sm_count * g (a launch's first step finds it there already).
  uint32_t* steps_done;
  TensorTable tensors;
  schedule::StepContext ctx;  // of the launch's first step (its segments: `segments`, below)
  uint32_t steps;             // steps in this launch
  uint32_t advance;           // every segment's start moves this many positions from one step to the next
  int32_t* history;           // the token histories [slots][max_context + 1] (format.hpp, StepContext)
  uint32_t shared_bytes;      // dynamic shared memory: the ring and the scratch (all scratch at a step of several rows)
  schedule::StepSegment segments[kMaxLaunchSegments];  // at the first step; ctx.segments points here
  ErrorRecord* error;
  uint64_t timeout_ns;
  uint32_t ring_stages;
  uint64_t* trace;  // optional: per instruction kTraceSlots globaltimer values of the launch's last step (device/trace.hpp)
};

// Step s of the launch: its positions (the launch's segments shifted), its counters' generation.
// The segments stay in the launch's parameters (a grid constant: no copy, read through the
// constant cache by every SM and by the producer running a step ahead).
__device__ __forceinline__ schedule::StepContext step_context(const KernelParams& p, uint32_t s) {
  schedule::StepContext c = p.ctx;
  c.shift = s * p.advance;
  c.pos += c.shift;
  c.generation += s;
  c.segments = p.segments;
  c.history = p.history;
  return c;
}

// Counters are polled with relaxed loads, not acquire ones. An acquire also empties the SM's L1
// (the compiler follows it with CCTL.IVALL), and with it the tensor table, the instruction queue
// and the kernel's spilled registers, each then a round trip to L2 after every wait (docs/
// notes.md entry 47). What an acquire would order is an op's reads of other SMs' outputs, and
// none of those goes through L1: activations are read with ld.global.cg (load_activation,
// __ldcg) and the KV cache by bulk copies, both from L2, where the writer's release put the data
// before its counter moved; and they are issued only after the poll returned (by warp 0; the
// block barrier after the wait orders the other warps). So this relies on L2 being the GPU's
// point of coherence rather than on the PTX memory model's acquire; an op body that read another
// SM's output through L1 would need the acquire back.
__device__ __forceinline__ uint32_t load_counter(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A counter's poll reads the abort flag on every kAbortCheck-th failed poll only: each read is a
// round trip to L2, behind this SM's copies in flight, between seeing what it waits for and
// acting on it. The producer's waits (for a stage, the end of a pause, an open step) check as
// seldom whether the compute warps have left, so that a spin stays one shared-memory read.
inline constexpr uint32_t kAbortCheck = 64;

// Where Instruction::reserved (the executor's tagged bits) lies among the instruction's words.
inline constexpr uint32_t kReservedWord = offsetof(schedule::Instruction, reserved) / 4;
inline constexpr uint32_t kReservedShift = offsetof(schedule::Instruction, reserved) % 4 * 8;
static_assert(kReservedShift == 16, "the tagged bits are the upper half of their word");

// Polls `*at` until it reaches `report.target`; false if the launch is being aborted: this wait
// outlasted `timeout` (recorded as `report`, with the value it saw) or another SM's did.
__device__ __forceinline__ bool poll_until(const KernelParams& p, const uint32_t* at, uint64_t timeout, ErrorRecord report) {
  if (load_counter(at) >= report.target) return true;
  const uint64_t start = global_timer();
  for (uint32_t spin = 1; (report.value = load_counter(at)) < report.target; ++spin) {
    if (spin % kAbortCheck) {  // the abort flag and the clock only on every kAbortCheck-th poll
      __nanosleep(32);
      continue;
    }
    if (*static_cast<volatile uint32_t*>(&p.error->code) != 0) return false;
    if (global_timer() - start > timeout) {
      if (atomicCAS(&p.error->code, 0u, report.code) == 0) {
        *p.error = report;
        __threadfence();
      }
      return false;
    }
  }
  return true;
}

// Warp 0 waits for every counter of the instruction, lane k for waits k, k + 32, ...: the
// counters are polled side by side, so an op with several waits (attention: its q, k and v
// chunks) pays one round trip to L2, not one per counter. False in every lane if the launch is
// being aborted (one of these waits timed out, or another SM's did).
__device__ bool counter_wait(const KernelParams& p, const schedule::Instruction& inst, uint32_t slot, uint32_t generation,
                             bool brief) {
  const schedule::ListRange r = schedule::wait_range(inst, brief);
  bool ok = true;
  for (uint32_t k = threadIdx.x % 32; ok && k < r.count; k += 32) {
    const schedule::Wait w = p.waits[r.begin + k];
    const uint32_t target = w.target * generation;
    ok = poll_until(p, p.counters + w.counter, p.timeout_ns, ErrorRecord{1, blockIdx.x, slot, inst.task, w.counter, 0, target, 0});
  }
  return __all_sync(0xffffffffu, ok);
}

// The weights an instruction's body reads itself, asked of L2 by the compute threads from
// warp 2 on while warp 0 waits (warp 1 may still be signalling the previous instruction), and
// whatever else the op's gpu_prefetch prepares then (the matvec's tile geometry, the attention's
// RoPE and norm tables). Out of line, like the bodies: its switch would otherwise cost the
// kernel's loop registers.
__device__ __noinline__ void prefetch_body_weights(const schedule::Instruction* inst, void* const* tensors, uint32_t pos) {
  const TensorTable mem{tensors};
  const uint32_t thread = threadIdx.x - 64, threads = kThreads - 64;
  schedule::visit_payload(*inst, [&](const auto& payload) { gpu_prefetch(payload, pos, mem, thread, threads); });
}

__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// The queue ahead into L1, by one thread while warp 0 waits: instruction i + 2's record, and
// i + 1's waits and signals (its record was asked for one instruction earlier, so reading where
// they are is an L1 hit). Each is read once per step, so without this every wait began with
// two dependent round trips to L2, the record and then its waits, before the first poll.
__device__ void prefetch_queue(const KernelParams& p, uint32_t i, uint32_t end, bool brief) {
  if (i + 2 < end) prefetch_l1(p.instructions + i + 2);
  if (i + 1 < end) {
    const schedule::Instruction& next = p.instructions[i + 1];
    const schedule::ListRange w = schedule::wait_range(next, brief), s = schedule::signal_range(next, brief);
    if (w.count) prefetch_l1(p.waits + w.begin);  // an empty list may begin past the array's end
    if (s.count) prefetch_l1(p.signals + s.begin);
  }
}

// Count the instruction done with release semantics: after the block barrier, the release
// makes every thread's writes visible device-wide before the increment is. A counter listed n
// times in a row (a task signalling for the attn_reduce tasks it does at short steps) gets one
// increment of n: each release waits for the SM's copies in flight. A counter the executor
// marked kUnwaited (queues.hpp: no wait list of the step's kind names it) gets a relaxed add: at
// such a step it carries no data to anyone.
__device__ void counter_signal(const KernelParams& p, const schedule::Instruction& inst, bool brief) {
  const schedule::ListRange r = schedule::signal_range(inst, brief);
  const uint32_t* list = p.signals + r.begin;
  for (uint32_t k = 0; k < r.count;) {
    const uint32_t c = list[k];
    uint32_t n = 1;
    while (k + n < r.count && list[k + n] == c) ++n;
    if (c & kUnwaited)
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p.counters + (c & ~kUnwaited)), "r"(n) : "memory");
    else
      asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p.counters + c), "r"(n) : "memory");
    k += n;
  }
}

// kRows: a launch of several rows a step, each op's gpu_rows (its own loads into all of shared
// memory); else each op's gpu_run. Two instances of the kernel, so that the rows' bodies take no
// part in the one-row kernel's register allocation (in one kernel, the one-row loop's spills
// went from 8 to 72 bytes and the matvec body's from 0 to 136).
// kF8: an instance with float8 weights' bodies too (WeightKinds), given to the ops that take it.
template <bool kRows, bool kF8>
__device__ void execute(const schedule::Instruction& inst, const schedule::StepContext& ctx, const TensorTable& mem,
                        BlockContext& bc) {
  const WeightKinds<kF8> kinds;
  schedule::visit_payload(inst, [&](const auto& payload) {
    if constexpr (kRows) {
      if constexpr (requires { gpu_rows(payload, ctx, mem, bc, kinds); }) gpu_rows(payload, ctx, mem, bc, kinds);
      else gpu_rows(payload, ctx, mem, bc);
    } else {
      if constexpr (requires { gpu_run(payload, ctx, mem, bc, kinds); }) gpu_run(payload, ctx, mem, bc, kinds);
      else gpu_run(payload, ctx, mem, bc);
    }
  });
}

// The producer warp's loop: the weight tiles of every instruction of this SM, in queue order,
// step after step, each into the next ring stage once that stage's previous tile has been
// consumed. It never waits on a counter, so the next step's first weights stream while this
// step ends. Tiles that read what an earlier step of the launch wrote (the KV cache: positions
// up to the previous one) wait until this SM's compute warps have seen every SM finish that
// step (`step_open`).
//
// On an abort it goes on issuing what the compute warps still consume, and stops only once they
// have left (`gone`): they leave at their next wait that is not met, and until then an op in its
// middle still waits for its tiles. (Stopping at the abort left such an op waiting for ever: a
// wait timing out on one SM while the others streamed their LM head hung the launch.)
//
// (A launch of several rows a step streams nothing: its op bodies load what they read themselves,
// into all of shared memory, BlockContext; the kernel's rows instance has no producer.)
__device__ void produce_weights(const KernelParams& p, WeightRing ring, const volatile uint32_t* step_open,
                                const volatile uint32_t* gone) {
  const uint32_t begin = p.sm_offsets[blockIdx.x], end = p.sm_offsets[blockIdx.x + 1];
  uint32_t stage = 0, parity = 1;  // tile k: stage k % count; its stage was freed in phase k / count - 1
  bool first_round = true;
  const uint64_t policy = evict_first_policy();  // every tile is read once per step
  uint32_t polls = 0;
  auto warps_left = [&] { return ++polls % kAbortCheck == 0 && *gone != 0; };
  uint32_t fenced = 0;  // the last step whose earlier steps' data the copies may read
  auto stream = [&](const auto& tiles, uint32_t step) {
    if (reads_earlier_steps(tiles) && fenced < step && tiles.count()) {
      while (*step_open < step)
        if (warps_left()) return false;
      // The compute warps saw the other SMs' writes (ordinary stores) before they opened the
      // step: acquire what they saw, then order it before the bulk copies (the async proxy).
      // Once a step, whether or not the producer had to wait.
      __threadfence_block();
      asm volatile("fence.proxy.async.global;" ::: "memory");
      fenced = step;
    }
    return walk_tiles(tiles, [&](const WeightTile& t) {
      while (ring.paused())
        if (warps_left()) return false;
      if (!first_round)
        while (!mbar_try_wait(ring.empty + stage, parity))
          if (warps_left()) return false;
      unsigned char* dst = ring.stages + stage * kStageBytes;
      mbar_expect_bytes(ring.full + stage, t.total_bytes());
      for (uint32_t k = 0; k < t.pieces; ++k)
        bulk_copy(dst + k * t.bytes, t.src + uint64_t{k} * t.stride, t.bytes, ring.full + stage, policy);
      if (t.src2) bulk_copy(dst + t.offset2, t.src2, t.bytes, ring.full + stage, policy);
      if (++stage == ring.count) stage = 0, parity ^= 1, first_round = false;
      return true;
    });
  };
  for (uint32_t s = 0; s < p.steps; ++s) {
    for (uint32_t i = begin; i < end; ++i) {
      const schedule::StepContext ctx = step_context(p, s);  // made here: held across the loop, it spilled
      bool ok = true;
      schedule::visit_payload(p.instructions[i], [&](const auto& payload) { ok = stream(gpu_tiles(payload, ctx, p.tensors), s); });
      if (!ok) return;
    }
  }
}

// The compute warps leave the launch on an abort: the producer may stop issuing tiles.
__device__ __forceinline__ void leave(uint32_t* gone) {
  if (threadIdx.x == 0) atomicExch(gone, 1u);  // atomic against the producer's read, as WeightRing::quiet
}

template <bool kRows, bool kF8>
__global__ void __launch_bounds__(kBlockThreads, 1) interpreter_kernel(const __grid_constant__ KernelParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ schedule::Instruction inst;
  __shared__ bool go;
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ uint32_t quiet;      // WeightRing::quiet
  __shared__ uint32_t step_open;  // the launch's steps whose previous step every SM has finished
  __shared__ bool step_go;  // the wait for the previous step ended (not `go`: the first wait writes that unsynchronised)
  __shared__ uint32_t gone;  // the compute warps left on an abort: the producer stops too
  // The step's context, in shared memory rather than the loop's registers (held there, it
  // made the kernel spill).
  __shared__ schedule::StepContext step;
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < p.ring_stages; ++s) mbar_init(full + s, 1), mbar_init(empty + s, WeightRing::kEmptyArrivals);
    mbar_fence_init();
    quiet = 0;
    step_open = 0;
    gone = 0;
    step = step_context(p, 0);
    detail::handoff = Handoff{0, step_bit(step.generation), 0, 0, p.error, p.timeout_ns};
  }
  __syncthreads();
  WeightRing ring{smem, p.ring_stages, full, empty, 0, &quiet};
  if (threadIdx.x / 32 == kWarps) {  // the producer warp
    if (!kRows && threadIdx.x % 32 == 0) produce_weights(p, ring, &step_open, &gone);
    return;
  }
  // One row a step: the ring, then the ops' scratch. Several: all of it is scratch (the producer
  // streams nothing).
  BlockContext bc{kRows ? smem : smem + p.ring_stages * kStageBytes, ring, nullptr,
                  kRows ? p.shared_bytes : p.shared_bytes - p.ring_stages * kStageBytes};
  const uint32_t begin = p.sm_offsets[blockIdx.x], end = p.sm_offsets[blockIdx.x + 1];
  for (uint32_t s = 0; s < p.steps; ++s) {
    if (s > 0) {
      // Every SM finished the previous step: its token is written, and none of its tasks still
      // reads what this step overwrites. The argmax ends the step anyway, so this costs a hop.
      if (threadIdx.x == 0) {
        // Twice a counter's time: an SM stuck on a counter in that step started waiting later,
        // and its report (code 1) is the one that names the cause.
        const uint32_t target = gridDim.x * step.generation;
        step_go = poll_until(p, p.steps_done, 2 * p.timeout_ns, ErrorRecord{2, blockIdx.x, step.pos + 1, 0, ~0u, 0, target, 0});
        step = step_context(p, s);
        detail::handoff.bit = step_bit(step.generation);
        __threadfence();  // with the poll: what the other SMs wrote before they counted, before the producer's copies
        atomicExch(&step_open, s);  // atomic against the producer's read, as WeightRing::quiet
      }
      block_sync();
      if (!step_go) return leave(&gone);
    }
    const bool brief = schedule::short_step(step);  // the short wait and signal lists
    // Warp 0 waits for instruction i while thread 32 still signals instruction i - 1: the
    // release of one and the wait for the next overlap instead of queueing on one thread.
    for (uint32_t i = begin; i < end; ++i) {
      if (threadIdx.x < sizeof(schedule::Instruction) / 4) {
        const uint32_t word = reinterpret_cast<const uint32_t*>(p.instructions + i)[threadIdx.x];
        reinterpret_cast<uint32_t*>(&inst)[threadIdx.x] = word;
        // The executor's tagged bits (tagged_field), from the word this thread copies: no load of its own.
        if (threadIdx.x == kReservedWord) detail::handoff.fields = word >> kReservedShift;
      }
      if (threadIdx.x < 32) {
        if (p.trace && threadIdx.x == 0) p.trace[kTraceSlots * i] = global_timer();
        const bool ok = counter_wait(p, p.instructions[i], i - begin, step.generation, brief);
        if (threadIdx.x == 0) {
          go = ok;
          detail::handoff.slot = i - begin;
          if (p.trace) p.trace[kTraceSlots * i + 1] = global_timer();
        }
      } else if (threadIdx.x >= 64) {
        if (threadIdx.x == 64) prefetch_queue(p, i, end, brief);
        prefetch_body_weights(p.instructions + i, p.tensors.base, step.pos);
      }
      block_sync();
      if (!go) return leave(&gone);
      bc.trace = p.trace ? p.trace + kTraceSlots * i : nullptr;
      execute<kRows, kF8>(inst, step, p.tensors, bc);
      block_sync();
      if (detail::handoff.failed) return leave(&gone);  // a tagged input's poll timed out or saw the abort
      if (threadIdx.x == 32) {
        counter_signal(p, p.instructions[i], brief);
        if (p.trace) p.trace[kTraceSlots * i + 2] = global_timer();
        ring.resume(32);
      }
    }
    if (threadIdx.x == 32)  // after this SM's last signal of the step, by the thread that sent it
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.steps_done) : "memory");
    // Every thread done with `step` and `step_go` before thread 0 moves them on. It costs no
    // time: the next step waits for this SM's count, sent by thread 32 before it gets here.
    block_sync();
  }
}

__global__ void fill_random_kernel(void* data, uint64_t n, schedule::DType dtype, uint32_t seed, float scale) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 2246822519u ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f) * 3.4641f * scale;  // uniform, std = scale
    if (dtype == schedule::DType::bf16) static_cast<uint16_t*>(data)[i] = f32_to_bf16(v);
    else if (dtype == schedule::DType::f8e4m3) static_cast<uint8_t*>(data)[i] = f32_to_f8e4m3(v);
    else static_cast<float*>(data)[i] = v;
  }
}

}  // namespace
}  // namespace mk::device
