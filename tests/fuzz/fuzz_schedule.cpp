// Fuzzes the schedule reader through execution: bytes -> deserialize (every field validated)
// -> a step of two rows (where the schedule's max_tokens allows) and one-row steps on the CPU emulator with generated weights. A schedule the reader
// accepts must never make an op body read or write out of bounds (AddressSanitizer sees it).
// Refusals (ScheduleError, DeadlockError) are expected. The harness fixes the checksum and the
// size field, so that mutations reach the validator instead of stopping at the checksum.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device/emulator.hpp"
#include "schedules/schedule.hpp"
#include "tests/step_context.hpp"

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
  const auto rows_of = [&](const Tensor& t) -> uint64_t { return t.role == Role::kv_cache ? kContext : s.max_tokens; };
  for (const Tensor& t : s.tensors) total += t.elements() * dtype_bytes(t.dtype) * rows_of(t);
  if (total > kMaxBytes) return 0;  // valid but too big to run here
  std::vector<std::vector<uint8_t>> buffers(s.tensors.size());
  std::vector<void*> pointers(s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const Tensor& t = s.tensors[i];
    const uint64_t n = t.elements() * dtype_bytes(t.dtype) * rows_of(t);
    buffers[i].assign(n, t.role == Role::weight ? 0x3c : 0xff);  // 0x3c3c: bf16 0.0115
    pointers[i] = buffers[i].data();
  }
  mk::device::Emulator emulator(s);
  const mk::device::TensorTable table{pointers.data(), static_cast<uint32_t>(pointers.size())};
  try {
    // A prompt of four tokens (history of slot 0); each step feeds the next, as in mkrun. The
    // first step runs two rows where the schedule allows, then one row a step. The file's
    // KvSplitPolicy first, then every split and no short step, so that both signal lists run.
    std::vector<int32_t> history(kContext + 1, -1);
    for (uint32_t q = 0; q < kContext; ++q) history[q] = static_cast<int32_t>(q);
    const uint32_t first = s.max_tokens >= 2 ? 2 : 1;
    uint32_t generation = 0;
    for (uint32_t pos = 0; pos < 3;) {
      const uint32_t rows = pos == 0 ? first : 1;
      std::vector<StepSegment> segments{{0, pos, rows, 0, pos + rows}};
      const KvSplitPolicy policy = pos < 2 ? s.kv_splits : KvSplitPolicy{0, 0};
      emulator.run_step(mk::test::step_context(segments, history, kContext, ++generation, policy), table,
                        size % 2 ? mk::device::Order::shuffled : mk::device::Order::deterministic, pos);
      pos += rows;
    }
  } catch (const mk::device::DeadlockError&) {
  }
  return 0;
}
