// The CUDA executor's host-side rewrite of a schedule, in plain C++ (no CUDA headers): which
// activations go between SMs tagged (handoff.cuh), the queues the GPU runs without the counters
// that only tagged tensors were signalled on, and each instruction's tagged-field bits. The
// executor (interpreter.cu) gives it each instruction's activations from the ops' CUDA bodies
// (gpu_activations); the CPU tests give it the same lists and check the rewrite.
#pragma once
#include <cstdint>
#include <vector>

#include "schedules/schedule.hpp"

namespace mk::device {

// How an op's CUDA body takes one of its activations (its gpu_activations): never tagged,
// either way (it asks tagged_field), or always (a matvec's input).
enum class Tagging : uint8_t { never, either, always };

// One activation an instruction's CUDA body touches; the k-th of its list is its tagged_field(k).
struct Activation {
  uint32_t tensor;  // kNone where the op's field is unused
  bool writes;
  Tagging tagging;
};
using ActivationLists = std::vector<std::vector<Activation>>;  // per instruction of the schedule

// Each tensor's hand-off: kPlain, or tagged and written by the step's instructions
// (kStepTagged) or, where no instruction writes it, by the host (kHostTagged: an upload is
// current for the launch's first step). An f32 activation is tagged unless an op's body can
// never take it so; an op that can only take it tagged (a matvec's input) and one that never can
// make a schedule the executor refuses (CudaError, naming both ops and the tensor).
enum Layout : uint8_t { kPlain = 0, kStepTagged = 1, kHostTagged = 2 };
std::vector<uint8_t> tensor_layouts(const schedule::Schedule&, const ActivationLists&);

// A signal the kernel sends with a relaxed add rather than a release (the counter's bit 31).
inline constexpr uint32_t kUnwaited = 1u << 31;

// The queues as the GPU runs them: without the counters that only tagged tensors were
// signalled on (none where `tagged` is all zero), and the signals marked kUnwaited where no wait
// of the step's kind names their counter. Each instruction's lists keep their order, and its
// short waits stay the first ones.
struct Queues {
  std::vector<schedule::Instruction> instructions;
  std::vector<schedule::Wait> waits;
  std::vector<uint32_t> signals;
};
Queues device_queues(const schedule::Schedule&, const ActivationLists&, const std::vector<uint8_t>& tagged);

// An instruction's tagged_field bits (bit k: its k-th activation is tagged), which the executor
// puts in Instruction::reserved.
uint16_t tagged_fields(const std::vector<Activation>&, const std::vector<uint8_t>& layouts);

}  // namespace mk::device
