#include "device/runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include "common/output_file.hpp"
#include "schedules/limits.hpp"

namespace mk::device {
namespace {

class EmulatorBackend : public Backend {
 public:
  EmulatorBackend(const schedule::Schedule& s, const Checkpoint& ckpt, const RuntimeOptions& opt)
      : s_(s), opt_(opt), emulator_(s) {
    check_weights(s, ckpt);
    check_context_memory(s, opt.max_context, physical_memory_bytes(), "host memory", opt.slots);
    // Not a member initializer: that ran before the check above, and a context of 4e9
    // positions allocated 16 GB of token history before it was refused.
    history_.assign((opt.max_context + size_t{1}) * opt.slots, -1);
    sampling_.assign(opt.slots, schedule::SlotSampling{});
    for (const schedule::Wait& w : s.waits) max_target_ = std::max(max_target_, w.target);
    buffers_.resize(s.tensors.size());
    pointers_.resize(s.tensors.size(), nullptr);
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const schedule::Tensor& t = s.tensors[i];
      if (t.role == schedule::Role::weight) {
        // Read-only: op bodies never write weights.
        pointers_[i] = const_cast<uint8_t*>(ckpt.data(t.key, t.dtype).data());
        continue;
      }
      const uint64_t n = t.elements() * (t.role == schedule::Role::kv_cache ? uint64_t{opt.max_context} * opt.slots : s.max_tokens);
      // Poison: all-ones bytes are NaN in f32 and bf16, so a read of anything unwritten shows.
      try {
        buffers_[i].assign(n * schedule::dtype_bytes(t.dtype), 0xff);
      } catch (const std::bad_alloc&) {
        throw std::runtime_error("out of memory: a context of " + std::to_string(opt.max_context) + " positions needs " +
                                 show_bytes(state_bytes(s, opt.max_context, opt.slots)) + " of host memory; lower --max-context");
      }
      pointers_[i] = buffers_[i].data();
    }
  }

  std::string name() const override { return "emulator"; }
  uint32_t slots() const override { return opt_.slots; }

  void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) override {
    if (slot >= opt_.slots || uint64_t{first} + ids.size() > opt_.max_context + uint64_t{1})
      throw std::invalid_argument("set_history: beyond the token history");
    std::copy(ids.begin(), ids.end(), history_.begin() + slot * (opt_.max_context + size_t{1}) + first);
  }
  void set_sampling(uint32_t slot, const schedule::SlotSampling& s) override {
    if (slot >= opt_.slots) throw std::invalid_argument("set_sampling: slot " + std::to_string(slot) + " is outside the backend's");
    sampling_[slot] = s;
  }

  void run_steps(const StepRun& run) override {
    check_step_run(s_, run, opt_.slots, opt_.max_context);
    std::vector<schedule::StepSegment> segments = run.segments;
    for (uint32_t k = 0; k < run.steps; ++k) {
      // Monotonic counters, as on the GPU: zero them before target * generation could wrap.
      if (uint64_t{generation_ + 1} * max_target_ >= 0xffffffffull) {
        emulator_.reset_counters();
        generation_ = 0;
      }
      uint32_t last = 0;  // the step's last position
      for (size_t j = 0; j < segments.size(); ++j) {
        segments[j].start = run.segments[j].start + k * run.advance;
        last = std::max(last, segments[j].start + segments[j].rows - 1);
      }
      const schedule::StepContext ctx{last, opt_.max_context, ++generation_, run.rows(), kv_split_policy(s_, opt_.kv_splits),
                                      static_cast<uint32_t>(segments.size()), 0,
                                      run.all_logits ? schedule::kNone : s_.logits_tensor, segments.data(), history_.data(),
                                      nullptr /* the emulator's own counters */, sampling_.data()};
      emulator_.run_step(ctx, {pointers_.data(), static_cast<uint32_t>(pointers_.size())}, opt_.order, opt_.seed + last);
    }
  }

  std::vector<int32_t> read_history(uint32_t slot, uint32_t begin, uint32_t end) override {
    if (slot >= opt_.slots || begin > end || end > opt_.max_context + uint64_t{1})
      throw std::invalid_argument("history: beyond the token history");
    const auto base = history_.begin() + slot * (opt_.max_context + size_t{1});
    return {base + begin, base + end};
  }

  std::vector<float> logits_rows(uint32_t row, uint32_t rows) override {
    const auto& b = buffers_[s_.logits_tensor];
    const size_t vocab = s_.tensors[s_.logits_tensor].elements();
    if (uint64_t{row} + rows > s_.max_tokens) throw std::invalid_argument("logits: rows beyond the schedule's max_tokens");
    std::vector<float> out(size_t{rows} * vocab);
    std::memcpy(out.data(), b.data() + size_t{row} * vocab * sizeof(float), out.size() * sizeof(float));
    return out;
  }

  // Back to the poison a fresh cache holds: every KV-cache tensor's entries of those positions,
  // laid out [slot][shape[0]][position][shape[1]] (schedules/format.hpp).
  void forget_positions(uint32_t slot, uint32_t begin, uint32_t end) override {
    if (slot >= opt_.slots || begin > end || end > opt_.max_context)
      throw std::invalid_argument("forget_positions: beyond the KV cache");
    for (size_t i = 0; i < s_.tensors.size(); ++i) {
      const schedule::Tensor& t = s_.tensors[i];
      if (t.role != schedule::Role::kv_cache) continue;
      const uint64_t heads = t.shape[0], width = t.elements() / heads * schedule::dtype_bytes(t.dtype);
      for (uint64_t h = 0; h < heads; ++h) {
        uint8_t* head = buffers_[i].data() + ((uint64_t{slot} * heads + h) * opt_.max_context) * width;
        std::fill(head + begin * width, head + end * width, uint8_t{0xff});
      }
    }
  }

  void enable_trace(bool on) override { emulator_.enable_trace(on); }
  std::vector<TraceEvent> trace() override { return emulator_.trace(); }
  bool trace_is_logical() const override { return true; }

 private:
  const schedule::Schedule& s_;
  RuntimeOptions opt_;
  Emulator emulator_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<void*> pointers_;
  std::vector<int32_t> history_;  // [slots][max_context + 1], made once the context is checked
  std::vector<schedule::SlotSampling> sampling_;  // [slots]
  uint32_t generation_ = 0;
  uint32_t max_target_ = 1;
};

}  // namespace

uint64_t state_bytes(const schedule::Schedule& s, uint64_t max_context, uint64_t slots) {
  uint64_t total = 0;
  for (const schedule::Tensor& t : s.tensors) {
    if (t.role == schedule::Role::weight) continue;
    uint64_t n = t.elements() * schedule::dtype_bytes(t.dtype);  // at most 2^42: the reader's limit
    if (t.role != schedule::Role::kv_cache && __builtin_mul_overflow(n, uint64_t{s.max_tokens}, &n)) return UINT64_MAX;
    if (t.role == schedule::Role::kv_cache &&
        (__builtin_mul_overflow(n, max_context, &n) || __builtin_mul_overflow(n, slots, &n)))
      return UINT64_MAX;
    if (__builtin_add_overflow(total, n, &total)) return UINT64_MAX;
  }
  return total;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

std::string show_bytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "more than 2^64 bytes";
  std::ostringstream o;
  o << bytes << " bytes (";
  o.setf(std::ios::fixed);
  o.precision(1);
  o << double(bytes) / double(1ull << 30) << " GiB)";
  return o.str();
}

void check_context_memory(const schedule::Schedule& s, uint64_t max_context, uint64_t available, const std::string& memory,
                          uint64_t slots) {
  if (max_context == 0 || max_context > limits::kMaxContext)
    throw std::invalid_argument("a context of " + std::to_string(max_context) + " positions is outside 1 to " +
                                std::to_string(limits::kMaxContext) + "; lower --max-context");
  if (slots == 0 || slots > limits::kMaxSlots)
    throw std::invalid_argument(std::to_string(slots) + " sequences at once is outside 1 to " + std::to_string(limits::kMaxSlots));
  const uint64_t need = state_bytes(s, max_context, slots);
  const std::string what = slots > 1 ? std::to_string(slots) + " sequences of " + std::to_string(max_context) + " positions"
                                     : "a context of " + std::to_string(max_context) + " positions";
  if (need > available)
    throw std::invalid_argument(what + " needs " + show_bytes(need) + " of " + memory +
                                " for the KV caches and activations, more than the " + show_bytes(available) +
                                " there is; lower --max-context" + (slots > 1 ? " or the batch" : ""));
}

void check_finite_logits(std::span<const float> logits, uint32_t step, uint32_t steps, uint32_t first_position) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) continue;
    std::ostringstream o;
    o << "step " << step + 1 << " of " << steps << " (position " << uint64_t{first_position} + step
      << ") produced a non-finite logit ("
      << logits[i] << " at vocabulary index " << i
      << "): the weights or the computation hold NaN or Inf, so its token would be meaningless";
    throw std::runtime_error(o.str());
  }
}

std::unique_ptr<Backend> make_emulator_backend(const schedule::Schedule& s, const Checkpoint& c, const RuntimeOptions& o) {
  return std::make_unique<EmulatorBackend>(s, c, o);
}


void write_npy(const std::string& path, const std::vector<std::vector<float>>& rows) {
  io::OutputFile f(path);
  write_npy(f, rows);
}

void write_npy(io::OutputFile& f, const std::vector<std::vector<float>>& rows) {
  const std::string path = f.path().string();
  const size_t cols = rows.empty() ? 0 : rows[0].size();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows.size()) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  for (const auto& row : rows)
    if (row.size() != cols) throw std::runtime_error(path + ": rows of different lengths");
  const uint8_t len[2] = {static_cast<uint8_t>(header.size() & 0xff), static_cast<uint8_t>(header.size() >> 8)};
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(len, 2);
  f.write(header);
  for (const auto& row : rows) f.write(row.data(), row.size() * sizeof(float));
  f.commit();
}

#if !MK_HAVE_CUDA
bool cuda_available() { return false; }
#endif

}  // namespace mk::device
