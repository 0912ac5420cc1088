// Fuzzes the schedule reader through execution: bytes -> deserialize (every field validated)
// -> three decode steps on the CPU emulator with generated weights. A schedule the reader
// accepts must never make an op body read or write out of bounds (AddressSanitizer sees it).
// Refusals (ScheduleError, DeadlockError) are expected. The harness fixes the checksum and the
// size field, so that mutations reach the validator instead of stopping at the checksum.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device/emulator.hpp"
#include "schedules/schedule.hpp"

namespace {

constexpr uint64_t kMaxBytes = uint64_t{64} << 20;  // generated tensors, in all
constexpr uint32_t kContext = 4;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mk::schedule;
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= sizeof(FileHeader)) {
    const uint64_t file_bytes = bytes.size();
    std::memcpy(bytes.data() + offsetof(FileHeader, file_bytes), &file_bytes, sizeof file_bytes);
    std::memset(bytes.data() + offsetof(FileHeader, checksum), 0, sizeof(uint64_t));
    const uint64_t sum = fnv1a64(bytes);
    std::memcpy(bytes.data() + offsetof(FileHeader, checksum), &sum, sizeof sum);
  }
  Schedule s;
  try {
    s = deserialize(bytes, "fuzz.bin");
  } catch (const ScheduleError&) {
    return 0;
  }
  // Memory for every tensor: weights of small values, everything else poisoned as mkrun does.
  uint64_t total = 0;
  for (const Tensor& t : s.tensors) total += t.elements() * dtype_bytes(t.dtype) * (t.role == Role::kv_cache ? kContext : 1);
  if (total > kMaxBytes) return 0;  // valid but too big to run here
  std::vector<std::vector<uint8_t>> buffers(s.tensors.size());
  std::vector<void*> pointers(s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const Tensor& t = s.tensors[i];
    const uint64_t n = t.elements() * dtype_bytes(t.dtype) * (t.role == Role::kv_cache ? kContext : 1);
    buffers[i].assign(n, t.role == Role::weight ? 0x3c : 0xff);  // 0x3c3c: bf16 0.0115
    pointers[i] = buffers[i].data();
  }
  mk::device::Emulator emulator(s);
  const mk::device::TensorTable table{pointers.data(), static_cast<uint32_t>(pointers.size())};
  try {
    int32_t tokens[4] = {0, 1, 2, 3};  // each step feeds the next, as in mkrun
    // The file's KvSplitPolicy (short steps where its short_positions reach the position), then
    // every split and no short step, so that both signal lists run whatever the file says.
    for (uint32_t pos = 0; pos < 3; ++pos)
      emulator.run_step({pos, kContext, pos + 1, 1, pos < 2 ? s.kv_splits : mk::schedule::KvSplitPolicy{0, 0}, tokens + pos,
                         tokens + pos + 1, nullptr},  // counters: the emulator's own
                        table,
                        size % 2 ? mk::device::Order::shuffled : mk::device::Order::deterministic, pos);
  } catch (const mk::device::DeadlockError&) {
  }
  return 0;
}
