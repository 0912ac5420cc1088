// The tokenizer's two big tables as flat open-addressing hash tables (linear probing, at most
// two thirds full): the vocabulary (token string -> id) and the merges (pair of ids -> rank and
// merged id). Built with one allocation each, where std::unordered_map allocated a node per
// entry, and looked up with a string_view, without building a std::string.
//
// Loading a 150k-token vocabulary with 280k merges is about a million lookups at random places
// in tables of several MB, so memory latency is most of the cost: a vocabulary slot holds a key
// of up to 8 bytes itself (most tokens), so that a lookup reads one slot and not also the key's
// bytes elsewhere; and both tables take a hash computed in advance (hash(), prefetch()), so that
// a loader can start the memory reads of a batch of lookups before it needs the first result.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mk::tok {

// A 64-bit hash of a byte string (8 bytes a step, multiply-xorshift mixing).
inline uint64_t hash_bytes(std::string_view s) {
  constexpr uint64_t m = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0x243F6A8885A308D3ull ^ (s.size() * m);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * m;
    h ^= h >> 29;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * m;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

// Smallest power of two with `n` entries at most two thirds of it (at least 16).
inline size_t table_capacity(size_t n) {
  size_t cap = 16;
  while (cap * 2 < n * 3) cap *= 2;
  return cap;
}

inline void prefetch_address(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

// Token string -> id (ids >= 0).
class TokenIdMap {
 public:
  static uint64_t hash(std::string_view key) { return hash_bytes(key); }

  // Room for n keys: until there are more, no key moves (find_slot's answers stay true).
  void reserve(size_t n) {
    if (table_capacity(n) > slots_.size()) rehash(table_capacity(n));
  }
  // Adds `key` with `id` unless present; returns whether it was added.
  bool insert(std::string_view key, int32_t id) { return put(key, hash(key), id, false); }
  bool insert(std::string_view key, uint64_t h, int32_t id) { return put(key, h, id, false); }
  // Adds `key` or gives it the new id.
  void assign(std::string_view key, int32_t id) { put(key, hash(key), id, true); }

  // The id of `key`, or -1. `h` is hash(key).
  int32_t find(std::string_view key) const { return find(key, hash(key)); }
  int32_t find(std::string_view key, uint64_t h) const {
    const uint32_t s = find_slot(key, h);
    return s == kNone ? -1 : slots_[s].id;
  }
  // Where `key` is (for key_at), or kNone.
  static constexpr uint32_t kNone = 0xffffffffu;
  uint32_t find_slot(std::string_view key, uint64_t h) const {
    if (slots_.empty()) return kNone;
    const size_t mask = slots_.size() - 1;
    const uint64_t w = word_of(key, h);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id < 0) return kNone;
      if (same(s, key, w)) return static_cast<uint32_t>(i);
    }
  }
  // Slot i's key and id (id -1: an empty slot). A key stays where it is until the table grows.
  size_t slot_count() const { return slots_.size(); }
  int32_t id_at(uint32_t i) const { return slots_[i].id; }
  std::string_view key_at(uint32_t i) const {
    const Slot& s = slots_[i];
    if (s.len <= 8) return std::string_view(reinterpret_cast<const char*>(&s.word), s.len);
    return std::string_view(bytes_.data() + (s.word & 0xffffffffu), s.len);
  }
  // Starts reading the slot where a lookup of a key with hash `h` begins.
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) prefetch_address(&slots_[h & (slots_.size() - 1)]);
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t word = 0;  // len <= 8: the key's bytes, zero-padded; longer: hash (high half), offset in bytes_ (low)
    uint32_t len = 0;
    int32_t id = -1;    // -1: empty
  };
  std::vector<Slot> slots_;
  std::string bytes_;  // keys longer than 8 bytes
  size_t size_ = 0;

  static uint64_t word_of(std::string_view key, uint64_t h) {
    if (key.size() > 8) return h << 32;  // the offset half is compared apart
    uint64_t w = 0;
    std::memcpy(&w, key.data(), key.size());
    return w;
  }
  bool same(const Slot& s, std::string_view key, uint64_t w) const {
    if (s.len != key.size()) return false;
    if (key.size() <= 8) return s.word == w;
    return (s.word >> 32) == (w >> 32) && std::memcmp(bytes_.data() + (s.word & 0xffffffffu), key.data(), key.size()) == 0;
  }

  bool put(std::string_view key, uint64_t h, int32_t id, bool overwrite) {
    if ((size_ + 1) * 3 > slots_.size() * 2) rehash(table_capacity(size_ + 1));
    const size_t mask = slots_.size() - 1;
    const uint64_t w = word_of(key, h);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s.len = static_cast<uint32_t>(key.size());
        s.id = id;
        if (key.size() <= 8) {
          s.word = w;
        } else {
          s.word = w | bytes_.size();
          bytes_.append(key);
        }
        ++size_;
        return true;
      }
      if (same(s, key, w)) {
        if (overwrite) s.id = id;
        return false;
      }
    }
  }

  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    for (uint32_t k = 0; k < old.size(); ++k) {
      const Slot& s = old[k];
      if (s.id < 0) continue;
      const uint64_t h = hash(s.len <= 8 ? std::string_view(reinterpret_cast<const char*>(&s.word), s.len)
                                         : std::string_view(bytes_.data() + (s.word & 0xffffffffu), s.len));
      for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (slots_[i].id < 0) {
          slots_[i] = s;
          break;
        }
    }
  }
};

// (left id, right id) -> the merge's rank and the id of the merged token. A slot is 8 bytes:
// left id (21 bits), right id (21), rank (22); the merged ids are a separate array by rank.
class MergeMap {
 public:
  static constexpr int32_t kMaxId = (1 << 21) - 1;
  static constexpr uint32_t kMaxMerges = (1u << 22) - 1;  // ranks below it: a slot is never all ones
  struct Merge {
    uint32_t rank;
    int32_t id;
  };

  // For n merges, ranks 0 to n - 1 (at most kMaxMerges).
  void reserve(size_t n) {
    merged_.reserve(n);
    if (table_capacity(n) > slots_.size()) rehash(table_capacity(n));
  }
  // Adds the pair (ids 0 to kMaxId) as the next rank, unless present (the first, lowest-ranked
  // merge of a pair stays). The caller keeps to kMaxMerges.
  bool insert(int32_t a, int32_t b, int32_t merged) {
    if ((size_ + 1) * 3 > slots_.size() * 2) rehash(table_capacity(size_ + 1));
    const uint64_t k = pair(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
      uint64_t& s = slots_[i];
      if (s == kEmpty) {
        s = (k << 22) | merged_.size();
        merged_.push_back(merged);
        ++size_;
        return true;
      }
      if ((s >> 22) == k) return false;
    }
  }
  std::optional<Merge> find(int32_t a, int32_t b) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t k = pair(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
      const uint64_t s = slots_[i];
      if (s == kEmpty) return std::nullopt;
      if ((s >> 22) == k) {
        const uint32_t rank = static_cast<uint32_t>(s & kMaxMerges);
        return Merge{rank, merged_[rank]};
      }
    }
  }
  void prefetch(int32_t a, int32_t b) const {
    if (!slots_.empty()) prefetch_address(&slots_[mix(pair(a, b)) & (slots_.size() - 1)]);
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<uint64_t> slots_;
  std::vector<int32_t> merged_;  // by rank (only the merges that were kept count ranks here)
  size_t size_ = 0;

  static uint64_t pair(int32_t a, int32_t b) { return (uint64_t{static_cast<uint32_t>(a)} << 21) | static_cast<uint32_t>(b); }
  static size_t mix(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(k ^ (k >> 29));
  }
  void rehash(size_t cap) {
    std::vector<uint64_t> old(cap, kEmpty);
    old.swap(slots_);
    for (const uint64_t s : old) {
      if (s == kEmpty) continue;
      for (size_t i = mix(s >> 22) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (slots_[i] == kEmpty) {
          slots_[i] = s;
          break;
        }
    }
  }
};

}  // namespace mk::tok
