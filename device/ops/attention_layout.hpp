// The KV cache layout, the contract between the emulator and the GPU: [kv_head][position]
// [head_dim] in bf16, each position's 16-byte chunks permuted (chunk c stored at chunk
// c ^ swizzle(position)) so that the tensor-core loads of the attention, which read one chunk
// of 8 consecutive positions at a time, hit 8 distinct shared-memory bank groups when a tile of
// the cache is copied into shared memory as it is (bulk copies cannot permute).
#pragma once
#include <cstdint>

#include "schedules/format.hpp"

namespace mk::device {

MK_HD inline uint32_t kv_chunk_swizzle(uint32_t pos, uint32_t head_dim) {
  const uint32_t chunks = head_dim / 8;  // a row of 8 chunks or more: rows are whole 128-byte lines
  if (head_dim % 8 != 0) return 0;
  if (chunks % 8 == 0) return pos % 8;
  if (chunks == 4 || chunks == 2) return pos / (8 / chunks) % chunks;  // 2 or 4 rows per line
  return 0;  // other widths: correct, with bank conflicts
}

// Element i of `pos` within one kv head's cache.
MK_HD inline uint64_t kv_index(uint32_t pos, uint32_t i, uint32_t head_dim) {
  return uint64_t{pos} * head_dim + ((i / 8) ^ kv_chunk_swizzle(pos, head_dim)) * 8 + i % 8;
}

}  // namespace mk::device
