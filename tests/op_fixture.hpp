// Shared helpers for the single-op tests (tests/ops/test_<op>.cpp): a tensor table of plain
// host buffers with poisoned guard bands around each one, random inputs, and the checks every
// op test makes (written exactly where it should, nowhere else, close to a double reference).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "device/bf16.hpp"
#include "device/memory.hpp"

namespace mk::test::op {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr uint16_t kBf16NaN = 0xffff;  // all-ones: NaN in bf16, as the runtime poisons
inline constexpr int32_t kI32Poison = -0x5a5a5a5a;
inline constexpr uint8_t kU8Poison = 0xff;  // NaN in float8 e4m3

// Buffers addressed by tensor id, as op bodies see them. Each buffer sits between guard bands
// of poison so that a write past either end is caught (guards_intact).
class Memory {
 public:
  static constexpr size_t kGuard = 64;

  uint32_t add_f32(const std::vector<float>& v) { return add(f32_, v, kNaN); }
  uint32_t add_bf16(const std::vector<uint16_t>& v) { return add(bf16_, v, kBf16NaN); }
  uint32_t add_i32(const std::vector<int32_t>& v) { return add(i32_, v, kI32Poison); }
  uint32_t add_u8(const std::vector<uint8_t>& v) { return add(u8_, v, kU8Poison); }  // float8 weights
  uint32_t add_f32_poisoned(size_t n) { return add_f32(std::vector<float>(n, kNaN)); }
  uint32_t add_bf16_poisoned(size_t n) { return add_bf16(std::vector<uint16_t>(n, kBf16NaN)); }

  std::span<float> f32(uint32_t id) { return find(f32_, id); }
  std::span<uint16_t> bf16(uint32_t id) { return find(bf16_, id); }
  std::span<int32_t> i32(uint32_t id) { return find(i32_, id); }

  device::TensorTable table() const { return {bases_.data(), static_cast<uint32_t>(bases_.size())}; }

  // Every guard element still holds its poison bit pattern.
  bool guards_intact() const {
    return intact(f32_, kNaN) && intact(bf16_, kBf16NaN) && intact(i32_, kI32Poison) && intact(u8_, kU8Poison);
  }

 private:
  template <class T>
  struct Buffer {
    uint32_t id;
    size_t n;
    std::vector<T> storage;  // guard | data | guard
  };

  template <class T>
  uint32_t add(std::deque<Buffer<T>>& list, const std::vector<T>& v, T poison) {
    Buffer<T> b{static_cast<uint32_t>(bases_.size()), v.size(), std::vector<T>(v.size() + 2 * kGuard, poison)};
    std::copy(v.begin(), v.end(), b.storage.begin() + kGuard);
    list.push_back(std::move(b));
    bases_.push_back(list.back().storage.data() + kGuard);
    return list.back().id;
  }

  template <class T>
  std::span<T> find(std::deque<Buffer<T>>& list, uint32_t id) {
    for (Buffer<T>& b : list)
      if (b.id == id) return {b.storage.data() + kGuard, b.n};
    return {};
  }

  template <class T>
  static bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  }

  template <class T>
  static bool intact(const std::deque<Buffer<T>>& list, T poison) {
    for (const Buffer<T>& b : list)
      for (size_t i = 0; i < kGuard; ++i)
        if (!same_bits(b.storage[i], poison) || !same_bits(b.storage[kGuard + b.n + i], poison)) return false;
    return true;
  }

  std::deque<Buffer<float>> f32_;
  std::deque<Buffer<uint16_t>> bf16_;
  std::deque<Buffer<int32_t>> i32_;
  std::deque<Buffer<uint8_t>> u8_;
  std::vector<void*> bases_;
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, double mean = 0, double stddev = 1) {
  std::normal_distribution<double> d(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = device::f32_to_bf16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(std::span<const uint16_t> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = device::bf16_to_f32(v[i]);
  return out;
}

// ||out - ref|| / ||ref|| over the index range [begin, end), in double.
inline double rel_error(std::span<const float> out, std::span<const double> ref, size_t begin, size_t end) {
  double diff = 0, norm = 0;
  for (size_t i = begin; i < end; ++i) {
    diff += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}
inline double rel_error(std::span<const float> out, std::span<const double> ref) {
  return rel_error(out, ref, 0, ref.size());
}

// Elements in [begin, end) that are not finite, and elements outside it that are not NaN.
struct WriteCheck {
  size_t unwritten_inside = 0;  // not finite: never written, or written NaN/inf
  size_t written_outside = 0;   // no longer NaN
};
inline WriteCheck check_writes(std::span<const float> out, size_t begin, size_t end) {
  WriteCheck c;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= begin && i < end;
    if (inside && !std::isfinite(out[i])) ++c.unwritten_inside;
    if (!inside && !std::isnan(out[i])) ++c.written_outside;
  }
  return c;
}

}  // namespace mk::test::op
