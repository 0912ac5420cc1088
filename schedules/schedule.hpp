// The in-memory schedule, its writer, its reader and its validator (host only).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedules/format.hpp"

namespace mk::schedule {

struct ScheduleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Tensor {
  std::string name;
  std::string key;  // safetensors key, weights only
  Role role = Role::activation;
  DType dtype = DType::f32;
  std::vector<uint32_t> shape;
  uint64_t elements() const;
};

struct Op {
  std::string name;
  Opcode opcode = Opcode::noop;
  int16_t layer = -1;
  uint32_t task_begin = 0, task_count = 0;
};

struct Schedule {
  uint32_t sm_count = 0;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  uint32_t task_count = 0;
  uint32_t counter_count = 0;
  std::vector<uint32_t> sm_offsets;  // sm_count + 1 entries into instructions
  std::vector<Instruction> instructions;
  std::vector<Wait> waits;
  std::vector<uint32_t> signals;
  uint32_t logits_tensor = kNone;
  uint32_t token_tensor = kNone;
  KvSplitPolicy kv_splits{};  // the default of StepContext::kv_splits
  uint32_t max_tokens = 1;    // rows a step may have: activations hold this many rows

  std::span<const Instruction> queue(uint32_t sm) const {
    return {instructions.data() + sm_offsets[sm], instructions.data() + sm_offsets[sm + 1]};
  }
  // An instruction's lists at a regular step (one argument) or at a step short or not.
  std::span<const Wait> waits_of(const Instruction& i) const { return waits_of(i, false); }
  std::span<const Wait> waits_of(const Instruction& i, bool short_step) const {
    const ListRange r = wait_range(i, short_step);
    return {waits.data() + r.begin, r.count};
  }
  std::span<const uint32_t> signals_of(const Instruction& i) const { return signals_of(i, false); }
  std::span<const uint32_t> signals_of(const Instruction& i, bool short_step) const {
    const ListRange r = signal_range(i, short_step);
    return {signals.data() + r.begin, r.count};
  }
  uint32_t tensor_id(const std::string& name) const;  // kNone if absent
};

// StepContext::kv_splits: each field as `chosen` (a runtime's options), or the schedule's where kNone.
inline KvSplitPolicy kv_split_policy(const Schedule& s, KvSplitPolicy chosen) {
  return {chosen.positions == kNone ? s.kv_splits.positions : chosen.positions,
          chosen.short_positions == kNone ? s.kv_splits.short_positions : chosen.short_positions};
}

const char* dtype_name(DType);
const char* role_name(Role);
uint64_t dtype_bytes(DType);
// Whether `shape` is one that the scales of float8 weight w may have (format.hpp, DType): [1],
// [rows] or [ceil(rows / 128), ceil(cols / 128)].
bool f8_scale_shape(const Tensor& w, const std::vector<uint32_t>& shape);

std::vector<uint8_t> serialize(const Schedule&);
// Reads and fully validates; `source` names the file in error messages.
Schedule deserialize(std::span<const uint8_t> bytes, const std::string& source = "<memory>");
// Through io::OutputFile (throws io::OutputError).
void write_file(const Schedule&, const std::filesystem::path&);
Schedule read_file(const std::filesystem::path&);

// Structural validation: every id in range, every region inside its tensor, every payload
// consistent with the tensor table. Throws ScheduleError naming the SM and instruction.
void validate(const Schedule&);

uint64_t fnv1a64(std::span<const uint8_t> bytes);

}  // namespace mk::schedule
