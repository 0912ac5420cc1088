// A StepContext decoding one token, for tests that call op bodies or the emulator directly.
#pragma once
#include <cstdint>

#include "schedules/format.hpp"

namespace mk::test {

// The token lives in a per-thread slot: use the context before making the next one. `counters`:
// the executing side's, for ops that combine their tasks by ticket (argmax split in several).
inline schedule::StepContext step_context(uint32_t pos, int32_t token, uint32_t max_context, uint32_t generation,
                                         schedule::KvSplitPolicy kv_splits = {0, 0}, uint32_t* counters = nullptr) {
  thread_local int32_t slot;
  slot = token;
  return {pos, max_context, generation, 1, kv_splits, &slot, nullptr, counters};
}

}  // namespace mk::test
