#include "device/cuda/interpreter.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <sstream>
#include <vector>

#include "device/bf16.hpp"
#include "device/cuda/block.cuh"
#include "device/cuda/handoff.cuh"
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
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

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
// marked kUnwaited (no wait list of the step's kind names it) gets a relaxed add: at such a step
// it carries no data to anyone.
constexpr uint32_t kUnwaited = 1u << 31;
static_assert(limits::kMaxCounters <= kUnwaited, "a counter's index leaves the mark's bit free (schedules/limits.hpp)");
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
template <bool kRows>
__device__ void execute(const schedule::Instruction& inst, const schedule::StepContext& ctx, const TensorTable& mem,
                        BlockContext& bc) {
  if constexpr (kRows) schedule::visit_payload(inst, [&](const auto& payload) { gpu_rows(payload, ctx, mem, bc); });
  else schedule::visit_payload(inst, [&](const auto& payload) { gpu_run(payload, ctx, mem, bc); });
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

template <bool kRows>
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
      execute<kRows>(inst, step, p.tensors, bc);
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

__global__ void fill_random_kernel(void* data, uint64_t n, bool bf16, uint32_t seed, float scale) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 2246822519u ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f) * 3.4641f * scale;  // uniform, std = scale
    if (bf16) static_cast<uint16_t*>(data)[i] = f32_to_bf16(v);
    else static_cast<float*>(data)[i] = v;
  }
}

// The op's gpu_prepare into the instruction's payload past the op's struct (the device copy).
void prepare_instruction(schedule::Instruction& inst) {
  const schedule::Instruction copy = inst;
  schedule::visit_payload(copy, [&](const auto& payload) { gpu_prepare(payload, inst.payload + sizeof(payload)); });
}

uint32_t instruction_shared_bytes(const schedule::Instruction& inst) {
  uint32_t bytes = 0;
  schedule::visit_payload(inst, [&](const auto& payload) { bytes = gpu_shared_bytes(payload); });
  return bytes;
}

// Calls f(tensor, writes, Tagging) for every activation the instruction's op body touches
// (each op's gpu_activations; kNone fields included).
template <class F>
void for_each_activation(const schedule::Instruction& inst, F&& f) {
  schedule::visit_payload(inst, [&](const auto& payload) { gpu_activations(payload, f); });
}

// Each tensor's hand-off (handoff.cuh): kPlain, or tagged and written by the step's
// instructions (kStepTagged) or, where no instruction writes it, by the host (kHostTagged: an
// upload is current for the launch's first step). An f32 activation is tagged unless an op's
// body can never take it so; an op that can only take it tagged (a matvec's input) and one that
// never can make a schedule this executor refuses.
enum Layout : uint8_t { kPlain = 0, kStepTagged = 1, kHostTagged = 2 };
std::vector<uint8_t> tensor_layouts(const schedule::Schedule& s) {
  const size_t n = s.tensors.size();
  std::vector<uint8_t> never(n, 0), always(n, 0), written(n, 0), layout(n, kPlain);
  std::vector<uint32_t> never_op(n), always_op(n);
  for (const schedule::Instruction& inst : s.instructions)
    for_each_activation(inst, [&](uint32_t t, bool writes, Tagging w) {
      if (t >= n) return;
      if (w == Tagging::never) never[t] = 1, never_op[t] = inst.op;
      if (w == Tagging::always) always[t] = 1, always_op[t] = inst.op;
      if (writes) written[t] = 1;
    });
  for (size_t t = 0; t < n; ++t) {
    const schedule::Tensor& tensor = s.tensors[t];
    const bool tag = !never[t] && tensor.role == schedule::Role::activation && tensor.dtype == schedule::DType::f32;
    if (always[t] && !tag)
      throw CudaError("the CUDA backend cannot run this schedule: op '" + s.ops[always_op[t]].name + "' reads '" +
                      tensor.name + "' tagged (an f32 activation), which " +
                      (never[t] ? "op '" + s.ops[never_op[t]].name + "' cannot" : std::string("is not")));
    if (tag) layout[t] = written[t] ? kStepTagged : kHostTagged;
  }
  return layout;
}

// The queues as the GPU runs them: without the counters that only tagged tensors were
// signalled on (none where `tagged` is all zero), and the signals marked kUnwaited where no
// wait of the step's kind names their counter. A dropped counter's signallers all write tagged
// tensors and nothing else, so its waiters read (if anything of theirs) tagged values, whose
// poll is the wait; dropping a wait only removes an edge from the schedule's proven-acyclic
// wait graph. Each instruction's lists keep their order, and its short waits stay the first
// ones.
struct Queues {
  std::vector<schedule::Instruction> instructions;
  std::vector<schedule::Wait> waits;
  std::vector<uint32_t> signals;
};
Queues device_queues(const schedule::Schedule& s, const std::vector<uint8_t>& tagged) {
  // (tagged: tensor_layouts' values, nonzero where tagged)
  std::vector<uint8_t> drop(s.counter_count, 0), kept(s.counter_count, 0);
  for (const schedule::Instruction& inst : s.instructions) {
    bool writes = false, all_tagged = true;
    for_each_activation(inst, [&](uint32_t t, bool w, Tagging) {
      if (!w || t >= tagged.size()) return;
      writes = true;
      all_tagged = all_tagged && tagged[t];
    });
    // The full lists decide. A short list adds the counters of the tasks its instruction does at
    // short steps (planner/plan.cpp, derive_short_signals), whose output it then writes in that
    // tensor's layout: the attention's reduce_out, tagged where attn_reduce's output is.
    for (const uint32_t c : s.signals_of(inst, false)) (writes && all_tagged ? drop : kept)[c] = 1;
  }
  for (uint32_t c = 0; c < s.counter_count; ++c) drop[c] = drop[c] && !kept[c];
  Queues q{s.instructions, {}, {}};
  for (schedule::Instruction& inst : q.instructions) {
    const schedule::Instruction old = inst;
    inst.wait_begin = static_cast<uint32_t>(q.waits.size());
    uint16_t count = 0, brief = 0;
    const std::span<const schedule::Wait> waits = s.waits_of(old);
    for (size_t k = 0; k < waits.size(); ++k) {
      if (drop[waits[k].counter]) continue;
      q.waits.push_back(waits[k]);
      ++count;
      brief += k < old.short_wait_count;
    }
    inst.wait_count = count;
    inst.short_wait_count = brief;
    auto copy_signals = [&](bool short_list, uint32_t& begin, uint16_t& n) {
      begin = static_cast<uint32_t>(q.signals.size());
      n = 0;
      for (const uint32_t c : s.signals_of(old, short_list))
        if (!drop[c]) q.signals.push_back(c), ++n;
    };
    copy_signals(false, inst.signal_begin, inst.signal_count);
    copy_signals(true, inst.short_signal_begin, inst.short_signal_count);
  }
  // A counter that no wait list of a kind (full or short) names carries no data at such a step:
  // a later step's wait counts its signals, but that step's data come with that step's own
  // releases (and the step barrier's). Its signals there are marked kUnwaited: a relaxed add
  // keeps the count without the release's wait for the SM's copies in flight (at a short step,
  // the attention's for the attn_reduce tasks it bypasses).
  for (const bool brief : {false, true}) {
    std::vector<uint8_t> waited(s.counter_count, 0);
    for (const schedule::Instruction& inst : q.instructions) {
      const schedule::ListRange w = schedule::wait_range(inst, brief);
      for (uint32_t k = 0; k < w.count; ++k) waited[q.waits[w.begin + k].counter] = 1;
    }
    for (const schedule::Instruction& inst : q.instructions) {
      const schedule::ListRange r = schedule::signal_range(inst, brief);
      for (uint32_t k = 0; k < r.count; ++k)
        if (!waited[q.signals[r.begin + k]]) q.signals[r.begin + k] |= kUnwaited;
    }
  }
  return q;
}

template <class T>
T* device_copy(const std::vector<T>& v, const char* what) {
  T* d = nullptr;
  const size_t bytes = std::max<size_t>(1, v.size()) * sizeof(T);
  check(cudaMalloc(&d, bytes), what);
  if (!v.empty()) check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  return d;
}

}  // namespace

struct CudaExecutor::State {
  const schedule::Schedule* s = nullptr;
  ExecutorOptions opt;
  std::vector<void*> buffers;
  std::vector<size_t> sizes;    // as the schedule's tensors: f32 elements of 4 bytes
  std::vector<uint8_t> layouts;  // per tensor: its Layout (nonzero: tagged, handoff.cuh)
  Queues queues;                 // the host copy of the queues the GPU runs (device_queues)
  KernelParams params{};
  void** tensor_table = nullptr;
  ErrorRecord* error = nullptr;
  int32_t* history = nullptr;  // [slots][max_context + 1] token ids
  uint32_t generation = 0;
  uint32_t rows_written = 0;  // rows of the last launch's steps: every tagged row below it is current
  uint32_t max_target = 1;
  uint32_t shared = 0;
  uint32_t stages = 0;
  uint64_t launches = 0;
  cudaStream_t stream = nullptr;
  // The launches not yet waited for, in launch order: the token histories each may write (slot,
  // [begin, end) of its entries) and an event recorded after it, so that tokens() waits only for
  // the launches that write what it reads.
  struct Write {
    uint32_t slot, begin, end;
  };
  struct Pending {
    std::vector<Write> writes;
    cudaEvent_t done;
  };
  std::deque<Pending> pending;
  std::vector<cudaEvent_t> spare_events;

  // The launches up to and including pending[last] have ended: their events go back.
  void release_pending(size_t last) {
    for (size_t j = 0; j <= last; ++j) spare_events.push_back(pending.front().done), pending.pop_front();
  }

  // The launches' report (code 0: none), as far as those that have ended wrote it.
  ErrorRecord read_error() const {
    ErrorRecord e{};
    check(cudaMemcpy(&e, error, sizeof e, cudaMemcpyDeviceToHost), "error record");
    return e;
  }

  size_t trace_bytes() const { return std::max<size_t>(1, s->instructions.size()) * kTraceSlots * sizeof(uint64_t); }

  // Queued behind the launches before (`wait`: and waited for, which clears their report too).
  void reset_counters(bool wait = true) {
    // Tagged values carry the step's parity, and generations start again at 1: poison them
    // (all-ones bytes: bit 1, stale at generation 1).
    for (size_t t = 0; t < buffers.size(); ++t)
      if (layouts[t] == kStepTagged) check(cudaMemsetAsync(buffers[t], 0xff, sizes[t], stream), "tagged reset");
    check(cudaMemsetAsync(params.counters, 0, (s->counter_count + 1) * 4, stream), "counter reset");  // and steps_done
    if (wait) {
      check(cudaMemsetAsync(error, 0, sizeof(ErrorRecord), stream), "error reset");
      check(cudaStreamSynchronize(stream), "counter reset");
    }
    generation = 0;
    rows_written = 0;
  }
};

int cuda_device_sm_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 0;
  return sms;
}

uint64_t cuda_free_memory() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

CudaExecutor::CudaExecutor(const schedule::Schedule& s, const ExecutorOptions& opt) : st_(std::make_unique<State>()) {
  st_->s = &s;
  st_->opt = opt;
  const int sms = cuda_device_sm_count();
  if (sms == 0) throw CudaError("no usable CUDA GPU");
  check_cuda_limits(s);  // before any allocation
  if (opt.exact_sm_count ? s.sm_count != static_cast<uint32_t>(sms) : s.sm_count > static_cast<uint32_t>(sms)) {
    std::ostringstream o;
    o << "the schedule was planned for " << s.sm_count << " SMs but this GPU has " << sms << "; re-plan with mkplan --sms "
      << sms;
    throw CudaError(o.str());
  }
  for (const schedule::Instruction& inst : s.instructions) st_->shared = std::max(st_->shared, instruction_shared_bytes(inst));
  st_->max_target = s.sm_count;  // KernelParams::steps_done
  for (const schedule::Wait& w : s.waits) st_->max_target = std::max(st_->max_target, w.target);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (st_->shared > prop.sharedMemPerBlockOptin)
    throw CudaError("the schedule needs " + std::to_string(st_->shared) + " bytes of shared memory per block; the GPU allows " +
                    std::to_string(prop.sharedMemPerBlockOptin));
  // Scratch for the op bodies, then as many ring stages as the rest of shared memory holds
  // beside the kernel's static shared memory (the instruction copy, the ring's barriers, the
  // ops' own: the matvec's tile geometry, the attention's RoPE and norm tables).
  cudaFuncAttributes attr{};
  // (The two instances' static shared memory: the larger.)
  for (const auto kernel : {interpreter_kernel<false>, interpreter_kernel<true>}) {
    cudaFuncAttributes a{};
    check(cudaFuncGetAttributes(&a, kernel), "cudaFuncGetAttributes");
    attr.sharedSizeBytes = std::max(attr.sharedSizeBytes, a.sharedSizeBytes);
  }
  const uint32_t room = static_cast<uint32_t>(prop.sharedMemPerBlockOptin - std::min(attr.sharedSizeBytes, prop.sharedMemPerBlockOptin));
  // At most one stage per compute warp: each stage has its consumer warps.
  st_->stages = std::min({kMaxStages, kWarps, room > st_->shared ? (room - st_->shared) / kStageBytes : 0u});
  if (opt.ring_stages == 1) throw CudaError("the weight ring needs at least 2 stages");
  if (opt.ring_stages) st_->stages = std::min(st_->stages, opt.ring_stages);
  if (st_->stages < 2)
    throw CudaError("the schedule needs " + std::to_string(st_->shared) +
                    " bytes of scratch shared memory per block, too much to leave room for the weight ring");
  st_->shared += st_->stages * kStageBytes;
  for (const auto kernel : {interpreter_kernel<false>, interpreter_kernel<true>})
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(st_->shared)),
        "cudaFuncSetAttribute");
  int blocks = 0;
  for (const auto kernel : {interpreter_kernel<false>, interpreter_kernel<true>}) {
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockThreads, st_->shared), "occupancy");
    if (blocks < 1) break;
  }
  if (blocks < 1) throw CudaError("the interpreter cannot be resident on an SM with this shared memory size");
  check(cudaStreamCreateWithFlags(&st_->stream, cudaStreamNonBlocking), "cudaStreamCreate");

  st_->buffers.assign(s.tensors.size(), nullptr);
  st_->sizes.assign(s.tensors.size(), 0);
  st_->layouts = tensor_layouts(s);  // before any allocation: it may refuse the schedule
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const schedule::Tensor& t = s.tensors[i];
    const size_t n = t.elements() * (t.role == schedule::Role::kv_cache ? size_t{opt.max_context} * opt.slots
                                     : t.role == schedule::Role::weight ? 1
                                                                        : s.max_tokens);
    st_->sizes[i] = n * schedule::dtype_bytes(t.dtype);
    check(cudaMalloc(&st_->buffers[i], st_->sizes[i]), ("cudaMalloc for " + t.name).c_str());
    if (t.role != schedule::Role::weight)  // poison: all-ones bytes are NaN in f32 and bf16 (and stale when tagged)
      check(cudaMemset(st_->buffers[i], 0xff, st_->sizes[i]), "poison");
  }
  st_->tensor_table = device_copy(st_->buffers, "tensor table");
  // Without the tagged hand-off, every counter as the schedule lists it: the values are then
  // already current when a reader's counter wait ends.
  Queues& queues = st_->queues;
  queues = device_queues(s, opt.tagged_handoff ? st_->layouts : std::vector<uint8_t>(s.tensors.size(), 0));
  for (schedule::Instruction& inst : queues.instructions) {  // each body's tagged_field bits (handoff.cuh)
    prepare_instruction(inst);
    uint32_t k = 0, bits = 0;
    for_each_activation(inst, [&](uint32_t t, bool, Tagging) {
      if (t < st_->layouts.size() && st_->layouts[t]) bits |= 1u << k;
      ++k;
    });
    inst.reserved = static_cast<uint16_t>(bits);
  }
  KernelParams& p = st_->params;
  p.instructions = device_copy(queues.instructions, "instructions");
  p.sm_offsets = device_copy(s.sm_offsets, "sm_offsets");
  p.waits = device_copy(queues.waits, "waits");
  p.signals = device_copy(queues.signals, "signals");
  check(cudaMalloc(&p.counters, (s.counter_count + 1) * 4), "counters");
  p.steps_done = p.counters + s.counter_count;
  check(cudaMalloc(&st_->error, sizeof(ErrorRecord)), "error record");
  const uint64_t history = (uint64_t{opt.max_context} + 1) * opt.slots;
  check(cudaMalloc(&st_->history, history * sizeof(int32_t)), "token history");
  check(cudaMemset(st_->history, 0xff, history * sizeof(int32_t)), "token history");
  p.tensors = TensorTable{st_->tensor_table, static_cast<uint32_t>(s.tensors.size())};
  p.history = st_->history;
  p.error = st_->error;
  p.timeout_ns = static_cast<uint64_t>(opt.watchdog_seconds * 1e9);
  p.ring_stages = st_->stages;
  p.shared_bytes = st_->shared;
  st_->reset_counters();
}

CudaExecutor::~CudaExecutor() {
  // Errors are ignored here: a destructor cannot report them and the process may be exiting.
  for (void* b : st_->buffers) cudaFree(b);
  cudaFree(st_->tensor_table);
  cudaFree(const_cast<schedule::Instruction*>(st_->params.instructions));
  cudaFree(const_cast<uint32_t*>(st_->params.sm_offsets));
  cudaFree(const_cast<schedule::Wait*>(st_->params.waits));
  cudaFree(const_cast<uint32_t*>(st_->params.signals));
  cudaFree(st_->params.counters);
  cudaFree(st_->error);
  cudaFree(st_->history);
  cudaFree(st_->params.trace);
  for (const State::Pending& p : st_->pending) cudaEventDestroy(p.done);
  for (cudaEvent_t e : st_->spare_events) cudaEventDestroy(e);
  if (st_->stream) cudaStreamDestroy(st_->stream);
}

// A tagged tensor (handoff.cuh) goes up with the bit of the next launch's first step where the
// host's values are its input (no instruction writes it), else with the other bit (stale: a
// step writes it before any reads it).
void CudaExecutor::upload(uint32_t tensor, const void* data, size_t bytes) {
  if (tensor >= st_->buffers.size() || bytes != st_->sizes[tensor]) throw CudaError("upload: size mismatch");
  check(cudaStreamSynchronize(st_->stream), "upload");
  if (!st_->layouts[tensor]) {
    check(cudaMemcpy(st_->buffers[tensor], data, bytes, cudaMemcpyHostToDevice), "upload");
    return;
  }
  const uint32_t next = step_bit(st_->generation + 1), bit = st_->layouts[tensor] == kHostTagged ? next : next ^ 1u;
  std::vector<uint32_t> values(bytes / 4);
  std::memcpy(values.data(), data, bytes);
  for (uint32_t& v : values) v = (v & ~1u) | bit;
  check(cudaMemcpy(st_->buffers[tensor], values.data(), bytes, cudaMemcpyHostToDevice), "upload");
}

void CudaExecutor::download(uint32_t tensor, void* data, size_t bytes, size_t offset) const {
  if (tensor >= st_->buffers.size() || offset > st_->sizes[tensor] || bytes > st_->sizes[tensor] - offset)
    throw CudaError("download: size mismatch");
  check(cudaStreamSynchronize(st_->stream), "download");
  check(cudaMemcpy(data, static_cast<const char*>(st_->buffers[tensor]) + offset, bytes, cudaMemcpyDeviceToHost), "download");
}

bool CudaExecutor::tagged(uint32_t tensor) const { return st_->layouts.at(tensor) != 0; }
uint32_t CudaExecutor::device_waits(uint32_t instruction, bool short_step) const {
  return schedule::wait_range(st_->queues.instructions.at(instruction), short_step).count;
}
size_t CudaExecutor::launches_pending() const { return st_->pending.size(); }
uint32_t CudaExecutor::device_signals(uint32_t instruction, bool short_step) const {
  return schedule::signal_range(st_->queues.instructions.at(instruction), short_step).count;
}
uint32_t CudaExecutor::relaxed_signals(uint32_t instruction, bool short_step) const {
  const schedule::ListRange r = schedule::signal_range(st_->queues.instructions.at(instruction), short_step);
  const auto list = std::span(st_->queues.signals).subspan(r.begin, r.count);
  return static_cast<uint32_t>(std::count_if(list.begin(), list.end(), [](uint32_t c) { return (c & kUnwaited) != 0; }));
}

size_t CudaExecutor::tensor_bytes(uint32_t tensor) const { return st_->sizes.at(tensor); }

uint32_t CudaExecutor::shared_bytes() const { return st_->shared; }

uint32_t CudaExecutor::ring_stages() const { return st_->stages; }
uint64_t CudaExecutor::launches() const { return st_->launches; }

void CudaExecutor::set_tokens(uint32_t slot, uint32_t first, const int32_t* ids, uint32_t n) {
  if (slot >= st_->opt.slots || uint64_t{first} + n > uint64_t{st_->opt.max_context} + 1)
    throw CudaError("set_tokens: beyond the token history");
  check(cudaStreamSynchronize(st_->stream), "set_tokens");
  check(cudaMemcpy(st_->history + uint64_t{slot} * (st_->opt.max_context + 1) + first, ids, n * sizeof(int32_t),
                   cudaMemcpyHostToDevice),
        "set_tokens");
}

std::vector<int32_t> CudaExecutor::tokens(uint32_t slot, uint32_t begin, uint32_t end) {
  if (slot >= st_->opt.slots || begin > end || end > st_->opt.max_context + 1) throw CudaError("tokens: beyond the token history");
  // Wait for the last launch that writes this slot's history below `end` (and so for every launch
  // before it), not for those queued after it, which write past it or other slots (the stream is
  // not the legacy one: these copies do not wait for them either).
  size_t last = st_->pending.size();
  for (size_t j = 0; j < st_->pending.size(); ++j)
    for (const State::Write& w : st_->pending[j].writes)
      if (w.slot == slot && w.begin < end && w.begin < w.end) last = j;
  if (last < st_->pending.size()) {
    check(cudaEventSynchronize(st_->pending[last].done), "interpreter");
    st_->release_pending(last);
  }
  // Every launch that has ended, these included, wrote its report before its event: read it
  // whether or not this call waited (launch() takes back the events of ended launches too).
  if (st_->read_error().code != 0) finish();  // waits for every launch, then reports
  std::vector<int32_t> out(end - begin);
  check(cudaMemcpy(out.data(), st_->history + uint64_t{slot} * (st_->opt.max_context + 1) + begin, out.size() * sizeof(int32_t),
                   cudaMemcpyDeviceToHost),
        "tokens");
  return out;
}

void CudaExecutor::launch(uint32_t first, uint32_t count, uint32_t fed_from) {
  launch(StepRun::decode(first, count, fed_from));
}

void CudaExecutor::launch(const StepRun& run) {
  check_step_run(*st_->s, run, st_->opt.slots, st_->opt.max_context);
  if (run.steps == 0) return;
  if (run.segments.size() > kMaxLaunchSegments)
    throw CudaError("a launch holds at most " + std::to_string(kMaxLaunchSegments) + " sequences; this one has " +
                    std::to_string(run.segments.size()));
  const uint32_t rows = run.rows();
  // Tagged rows that the last launch's steps did not write may hold a value of an older step of
  // this step's parity: poison them all and start the generations again, queued behind the
  // launches before (a step of more rows than the one before: a prompt after decoding).
  if (rows > st_->rows_written && st_->rows_written != 0) st_->reset_counters(false);
  st_->rows_written = rows;
  // A launch's counters must not wrap within it: at most kCounterSpan / max_target steps. (A
  // traced launch's record of each instruction is its last step's.)
  constexpr uint64_t kCounterSpan = 0xffffffffull;
  const uint32_t most = static_cast<uint32_t>(std::max<uint64_t>(1, kCounterSpan / st_->max_target - 1));
  for (uint32_t done = 0; done < run.steps;) {
    const uint32_t per_launch = std::min(most, run.steps - done);
    // Monotonic counters: targets scale with the generation; zero them before they could wrap,
    // after the launches before have ended (a reset also clears their error record).
    if ((uint64_t{st_->generation} + per_launch) * st_->max_target >= kCounterSpan) {
      finish();
      st_->reset_counters();
    }
    KernelParams p = st_->params;
    uint32_t last = 0;  // the first step's last position
    State::Pending pending{{}, nullptr};
    for (size_t j = 0; j < run.segments.size(); ++j) {
      schedule::StepSegment g = run.segments[j];
      g.start += done * run.advance;
      p.segments[j] = g;
      last = std::max(last, g.start + g.rows - 1);
      const uint32_t from = std::max(g.fed_from, g.start + 1), to = g.start + (per_launch - 1) * run.advance + g.rows + 1;
      if (from < to) pending.writes.push_back({g.slot, from, to});
    }
    p.ctx = schedule::StepContext{last, st_->opt.max_context, st_->generation + 1, rows,
                                  schedule::kv_split_policy(*st_->s, st_->opt.kv_splits),
                                  static_cast<uint32_t>(run.segments.size()), 0,
                                  run.all_logits ? schedule::kNone : st_->s->logits_tensor, nullptr, nullptr, p.counters};
    p.steps = per_launch;
    p.advance = run.advance;
    st_->generation += per_launch;
    if (p.trace)  // an instruction whose body marks nothing this step (no active unit) keeps no old marks
      check(cudaMemsetAsync(p.trace, 0, st_->trace_bytes(), st_->stream), "trace reset");
    if (rows > 1) interpreter_kernel<true><<<st_->s->sm_count, kBlockThreads, st_->shared, st_->stream>>>(p);
    else interpreter_kernel<false><<<st_->s->sm_count, kBlockThreads, st_->shared, st_->stream>>>(p);
    check(cudaGetLastError(), "interpreter launch");
    ++st_->launches;
    // Its event, for tokens(); the events of launches that have ended are taken back first.
    while (!st_->pending.empty()) {
      const cudaError_t q = cudaEventQuery(st_->pending.front().done);
      if (q == cudaSuccess) {
        st_->release_pending(0);
        continue;
      }
      if (q != cudaErrorNotReady) check(q, "cudaEventQuery");
      cudaGetLastError();  // "not ready" is no error: not for the next launch's check to find
      break;
    }
    if (st_->spare_events.empty()) check(cudaEventCreateWithFlags(&pending.done, cudaEventDisableTiming), "cudaEventCreate");
    else pending.done = st_->spare_events.back(), st_->spare_events.pop_back();
    check(cudaEventRecord(pending.done, st_->stream), "cudaEventRecord");
    st_->pending.push_back(std::move(pending));
    done += per_launch;
  }
}

void CudaExecutor::finish() {
  check(cudaStreamSynchronize(st_->stream), "interpreter");
  if (!st_->pending.empty()) st_->release_pending(st_->pending.size() - 1);
  const ErrorRecord e = st_->read_error();
  if (e.code == 0) return;
  st_->reset_counters();
  const schedule::Schedule& s = *st_->s;
  if (e.code == 3) {  // a tagged input (handoff.cuh): counter holds the tensor, value and target the step bits
    const schedule::Instruction& inst = s.instructions[s.sm_offsets[e.sm] + e.instruction];
    std::ostringstream o;
    o << "watchdog: SM " << e.sm << " instruction " << e.instruction << " (task " << inst.task << ", op '"
      << s.ops[inst.op].name << "') waited more than " << st_->opt.watchdog_seconds << " s for tensor '"
      << s.tensors.at(e.counter).name << "' to be written at this step (its values carry bit " << e.target << " of the step; one had "
      << e.value << ")";
    throw WatchdogError(o.str(), WatchdogReport{e.sm, e.instruction, inst.task, schedule::kNone, e.value, e.target, e.counter});
  }
  if (e.code == 2) {  // value and target count step ends since the counters were zeroed
    const uint32_t finished = e.value + s.sm_count - e.target;
    std::ostringstream o;
    o << "watchdog: SM " << e.sm << " waited more than " << 2 * st_->opt.watchdog_seconds
      << " s for every SM to finish the step before position " << e.instruction << "; " << finished << " of "
      << s.sm_count << " SMs had";
    throw WatchdogError(o.str(), WatchdogReport{e.sm, 0, 0, e.counter, finished, s.sm_count});
  }
  const schedule::Instruction& inst = s.instructions[s.sm_offsets[e.sm] + e.instruction];
  std::ostringstream o;
  o << "watchdog: SM " << e.sm << " instruction " << e.instruction << " (task " << e.task << ", op '"
    << s.ops[inst.op].name << "') waited more than " << st_->opt.watchdog_seconds << " s for counter " << e.counter
    << " to reach " << e.target << "; it is " << e.value;
  throw WatchdogError(o.str(), WatchdogReport{e.sm, e.instruction, e.task, e.counter, e.value, e.target});
}

float CudaExecutor::timed_step(int32_t token, uint32_t pos) {
  return timed_steps(token, pos, 1);
}

float CudaExecutor::timed_steps(int32_t token, uint32_t pos, uint32_t count) {
  set_tokens(0, pos, &token, 1);
  return timed_run(StepRun::decode(pos, count, pos + 1));
}

float CudaExecutor::timed_run(const StepRun& run) {
  struct Event {  // destroyed however the timing ends
    cudaEvent_t e = nullptr;
    Event() { check(cudaEventCreate(&e), "cudaEventCreate"); }
    ~Event() { cudaEventDestroy(e); }
  } a, b;
  check(cudaEventRecord(a.e, st_->stream), "cudaEventRecord");
  launch(run);
  check(cudaEventRecord(b.e, st_->stream), "cudaEventRecord");
  finish();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a.e, b.e), "cudaEventElapsedTime");
  return ms;
}

void CudaExecutor::enable_trace(bool on) {
  if (on && !st_->params.trace) {
    check(cudaMalloc(&st_->params.trace, st_->trace_bytes()), "trace");
    check(cudaMemset(st_->params.trace, 0, st_->trace_bytes()), "trace");
  } else if (!on && st_->params.trace) {
    cudaFree(st_->params.trace);
    st_->params.trace = nullptr;
  }
}

std::vector<TraceEvent> CudaExecutor::read_trace() const {
  if (!st_->params.trace) throw CudaError("read_trace: tracing is off");
  std::vector<uint64_t> raw(st_->s->instructions.size() * kTraceSlots);
  check(cudaStreamSynchronize(st_->stream), "trace");
  check(cudaMemcpy(raw.data(), st_->params.trace, raw.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "trace");
  std::vector<TraceEvent> events(st_->s->instructions.size());
  for (size_t i = 0; i < events.size(); ++i) events[i] = trace_event(raw.data() + kTraceSlots * i);
  return events;
}

void CudaExecutor::fill_random(uint32_t tensor, uint32_t seed, float scale) {
  const schedule::Tensor& t = st_->s->tensors.at(tensor);
  const bool bf16 = t.dtype == schedule::DType::bf16;
  if (!bf16 && t.dtype != schedule::DType::f32) throw CudaError("fill_random: " + t.name + " is not a float tensor");
  if (st_->layouts[tensor]) throw CudaError("fill_random: " + t.name + " is a tagged activation; upload it instead");
  fill_random_kernel<<<1024, 256, 0, st_->stream>>>(st_->buffers[tensor], st_->sizes[tensor] / (bf16 ? 2 : 4), bf16, seed,
                                                    scale);
  check(cudaGetLastError(), "fill_random");
  check(cudaStreamSynchronize(st_->stream), "fill_random");
}

void CudaExecutor::step(int32_t token, uint32_t pos) {
  set_tokens(0, pos, &token, 1);
  launch(pos, 1, pos + 2);
  finish();
}

}  // namespace mk::device
