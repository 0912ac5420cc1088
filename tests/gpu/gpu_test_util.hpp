// What the GPU tests share: a schedule's tensors as random host copies, and one op's instructions
// as a schedule of their own.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "device/bf16.hpp"
#include "device/fp8.hpp"
#include "dsl/model.hpp"
#include "tests/float8_model.hpp"
#include "schedules/schedule.hpp"
#include "tests/reference.hpp"

namespace mk::test {

// Host copies of every tensor, random: weights of unit-variance rows (norm weights about 1),
// activations of max_tokens rows, KV caches of `slots` slots of max_context positions.
struct HostState {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<void*> ptrs;
  HostState(const schedule::Schedule& s, uint32_t max_context, uint32_t slots, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const schedule::Tensor& t : s.tensors) {
      const uint64_t n = t.elements() * (t.role == schedule::Role::kv_cache ? uint64_t{max_context} * slots
                                         : t.role == schedule::Role::weight ? 1
                                                                            : s.max_tokens);
      bytes.emplace_back(n * schedule::dtype_bytes(t.dtype));
      auto& b = bytes.back();
      // Float8 weights: values over e4m3's range (std 64), and scales (the tensor after) that
      // bring them to std 1/sqrt(cols), each within 10 % of that.
      const bool f8_scales = &t != s.tensors.data() && (&t - 1)->dtype == schedule::DType::f8e4m3;
      for (uint64_t i = 0; i < n; ++i) {
        const float scale = t.role == schedule::Role::weight && t.shape.size() == 2 ? 1.0f / std::sqrt(float(t.shape[1])) : 1.0f;
        const float v = normal(rng) * scale + (t.role == schedule::Role::weight && t.shape.size() == 1 ? 1.0f : 0.0f);
        if (t.dtype == schedule::DType::f8e4m3) b[i] = device::f32_to_f8e4m3(normal(rng) * 64.0f);
        else if (f8_scales)
          reinterpret_cast<float*>(b.data())[i] = (1.0f + 0.1f * normal(rng)) / (64.0f * std::sqrt(float((&t - 1)->shape[1])));
        else if (t.dtype == schedule::DType::bf16) reinterpret_cast<uint16_t*>(b.data())[i] = device::f32_to_bf16(v);
        else if (t.dtype == schedule::DType::f32) reinterpret_cast<float*>(b.data())[i] = v;
        else reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(rng() % 100);
      }
      ptrs.push_back(b.data());
    }
  }
};

// An example model by name: "NAME" (examples/NAME.yaml) or "NAME/f8-LAYOUT", the same with its
// projections float8 of scale layout LAYOUT (tests/float8_model.hpp). `root`: the source tree.
inline dsl::ModelGraph example_graph(const std::string& root, const std::string& name) {
  const size_t slash = name.find("/f8-");
  const std::string file = root + "/examples/" + name.substr(0, slash) + ".yaml";
  if (slash == std::string::npos) return dsl::parse_file(file);
  return dsl::parse_string(yaml_with_float8(file, name.substr(slash + 4)), name);
}

// A name of example_graph's as a file name.
inline std::string file_name(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

// The first n elements of a tensor as the GPU left them (got) and as the emulator did (want),
// as floats; equal infinities (empty attention splits' -inf) as zeros. Returns the relative L2
// error, and counts the places where one side is NaN and the other not.
inline double tensor_error(const schedule::Tensor& t, const uint8_t* got, const uint8_t* want, size_t n, size_t& mismatched_nan) {
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == schedule::DType::bf16) {
      a[i] = device::bf16_to_f32(reinterpret_cast<const uint16_t*>(got)[i]);
      b[i] = device::bf16_to_f32(reinterpret_cast<const uint16_t*>(want)[i]);
    } else if (t.dtype == schedule::DType::f32) {
      a[i] = reinterpret_cast<const float*>(got)[i];
      b[i] = reinterpret_cast<const float*>(want)[i];
    } else {
      a[i] = float(reinterpret_cast<const int32_t*>(got)[i]);
      b[i] = float(reinterpret_cast<const int32_t*>(want)[i]);
    }
  }
  mismatched_nan = 0;
  for (size_t i = 0; i < n; ++i) mismatched_nan += std::isnan(a[i]) != std::isnan(b[i]);
  for (size_t i = 0; i < n; ++i)
    if (std::isinf(a[i]) && a[i] == b[i]) a[i] = b[i] = 0;
  return rel_error(a, b);
}

// The instructions of one op, on as many SMs as its tasks (at most `sms`), with no waits or
// signals. The counters stay (an argmax split in several counts on its ticket); no list names one.
inline schedule::Schedule single_op(const schedule::Schedule& s, uint32_t op, uint32_t sms) {
  schedule::Schedule out = s;
  out.instructions.clear();
  out.waits.clear();
  out.signals.clear();
  std::vector<schedule::Instruction> mine;
  for (const schedule::Instruction& inst : s.instructions)
    if (inst.op == op) mine.push_back(inst);
  const uint32_t n = std::min<uint32_t>(sms, static_cast<uint32_t>(mine.size()));
  out.sm_count = n;
  out.sm_offsets.assign(1, 0);
  for (uint32_t sm = 0; sm < n; ++sm) {
    for (size_t k = sm; k < mine.size(); k += n) {
      schedule::Instruction inst = mine[k];
      inst.wait_count = inst.short_wait_count = 0;
      inst.signal_count = inst.short_signal_count = 0;
      inst.wait_begin = inst.signal_begin = inst.short_signal_begin = 0;
      out.instructions.push_back(inst);
    }
    out.sm_offsets.push_back(static_cast<uint32_t>(out.instructions.size()));
  }
  return out;
}

}  // namespace mk::test
