// The CUDA executor: the schedule's queues (rewritten on the host, queues.hpp), tensors, token
// histories and counters in GPU memory, and the launches of the interpreter kernel (kernel.cuh).
#include "device/cuda/interpreter.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <sstream>
#include <vector>

#include "device/cuda/kernel.cuh"
#include "device/cuda/queues.hpp"

namespace mk::device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
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

// Every instruction's activations as its op's CUDA body touches them (gpu_activations; kNone
// fields included: the k-th is its tagged_field(k)), for the host-side rewrite (queues.hpp).
ActivationLists activation_lists(const schedule::Schedule& s) {
  ActivationLists lists(s.instructions.size());
  for (size_t i = 0; i < s.instructions.size(); ++i)
    schedule::visit_payload(s.instructions[i], [&](const auto& payload) {
      gpu_activations(payload, [&](uint32_t t, bool writes, Tagging w) { lists[i].push_back({t, writes, w}); });
    });
  return lists;
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
  schedule::SlotSampling* sampling = nullptr;  // [slots], zero (each sample op's own) until set
  uint32_t generation = 0;
  uint32_t rows_written = 0;  // rows of the last launch's steps: every tagged row below it is current
  uint32_t max_target = 1;
  uint32_t shared = 0;
  uint32_t stages = 0;
  bool f8 = false;  // the schedule has float8 weights: the kernel instances with their bodies (WeightKinds)
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
  for (const schedule::Tensor& t : s.tensors) st_->f8 |= t.dtype == schedule::DType::f8e4m3;
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
  for (const auto kernel : {interpreter_kernel<false, false>, interpreter_kernel<true, false>, interpreter_kernel<false, true>,
                            interpreter_kernel<true, true>}) {
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
  for (const auto kernel : {interpreter_kernel<false, false>, interpreter_kernel<true, false>, interpreter_kernel<false, true>,
                            interpreter_kernel<true, true>})
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(st_->shared)),
        "cudaFuncSetAttribute");
  int blocks = 0;
  for (const auto kernel : {interpreter_kernel<false, false>, interpreter_kernel<true, false>, interpreter_kernel<false, true>,
                            interpreter_kernel<true, true>}) {
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockThreads, st_->shared), "occupancy");
    if (blocks < 1) break;
  }
  if (blocks < 1) throw CudaError("the interpreter cannot be resident on an SM with this shared memory size");
  check(cudaStreamCreateWithFlags(&st_->stream, cudaStreamNonBlocking), "cudaStreamCreate");

  st_->buffers.assign(s.tensors.size(), nullptr);
  st_->sizes.assign(s.tensors.size(), 0);
  const ActivationLists activations = activation_lists(s);
  st_->layouts = tensor_layouts(s, activations);  // before any allocation: it may refuse the schedule
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
  queues = device_queues(s, activations, opt.tagged_handoff ? st_->layouts : std::vector<uint8_t>(s.tensors.size(), 0));
  for (size_t i = 0; i < queues.instructions.size(); ++i) {  // each body's tagged_field bits (handoff.cuh)
    prepare_instruction(queues.instructions[i]);
    queues.instructions[i].reserved = tagged_fields(activations[i], st_->layouts);
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
  check(cudaMalloc(&st_->sampling, opt.slots * sizeof(schedule::SlotSampling)), "sampling");
  check(cudaMemset(st_->sampling, 0, opt.slots * sizeof(schedule::SlotSampling)), "sampling");
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
  cudaFree(st_->sampling);
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

void CudaExecutor::set_sampling(uint32_t slot, const schedule::SlotSampling& s) {
  if (slot >= st_->opt.slots) throw CudaError("set_sampling: slot " + std::to_string(slot) + " is outside the executor's");
  check(cudaStreamSynchronize(st_->stream), "set_sampling");
  check(cudaMemcpy(st_->sampling + slot, &s, sizeof s, cudaMemcpyHostToDevice), "set_sampling");
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
                                  run.all_logits ? schedule::kNone : st_->s->logits_tensor, nullptr, nullptr, p.counters,
                                  st_->sampling};
    p.steps = per_launch;
    p.advance = run.advance;
    st_->generation += per_launch;
    if (p.trace)  // an instruction whose body marks nothing this step (no active unit) keeps no old marks
      check(cudaMemsetAsync(p.trace, 0, st_->trace_bytes(), st_->stream), "trace reset");
    const auto kernel = st_->f8 ? (rows > 1 ? interpreter_kernel<true, true> : interpreter_kernel<false, true>)
                                : (rows > 1 ? interpreter_kernel<true, false> : interpreter_kernel<false, false>);
    kernel<<<st_->s->sm_count, kBlockThreads, st_->shared, st_->stream>>>(p);
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
  if (t.dtype == schedule::DType::i32) throw CudaError("fill_random: " + t.name + " is not a float tensor");
  if (st_->layouts[tensor]) throw CudaError("fill_random: " + t.name + " is a tagged activation; upload it instead");
  fill_random_kernel<<<1024, 256, 0, st_->stream>>>(st_->buffers[tensor], st_->sizes[tensor] / schedule::dtype_bytes(t.dtype),
                                                    t.dtype, seed, scale);
  check(cudaGetLastError(), "fill_random");
  check(cudaStreamSynchronize(st_->stream), "fill_random");
}

void CudaExecutor::fill_random_weights(uint32_t seed) {
  const std::vector<schedule::Tensor>& ts = st_->s->tensors;
  for (uint32_t t = 0; t < ts.size(); ++t) {
    if (ts[t].role != schedule::Role::weight) continue;
    const bool scales = t > 0 && ts[t - 1].dtype == schedule::DType::f8e4m3;
    const float matrix = 1.0f / std::sqrt(float(ts[scales ? t - 1 : t].shape.back()));
    fill_random(t, seed + t, ts[t].dtype == schedule::DType::f8e4m3 ? 64.0f
                             : scales                                ? matrix / 64.0f
                             : ts[t].shape.size() == 1               ? 0.1f
                                                                     : matrix);
  }
}

void CudaExecutor::step(int32_t token, uint32_t pos) {
  set_tokens(0, pos, &token, 1);
  launch(pos, 1, pos + 2);
  finish();
}

}  // namespace mk::device
