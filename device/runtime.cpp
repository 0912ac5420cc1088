#include "device/runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

namespace mk::device {
namespace {

class EmulatorBackend : public Backend {
 public:
  EmulatorBackend(const schedule::Schedule& s, const Checkpoint& ckpt, const RuntimeOptions& opt)
      : s_(s), opt_(opt), emulator_(s) {
    check_weights(s, ckpt);
    for (const schedule::Wait& w : s.waits) max_target_ = std::max(max_target_, w.target);
    buffers_.resize(s.tensors.size());
    pointers_.resize(s.tensors.size(), nullptr);
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const schedule::Tensor& t = s.tensors[i];
      if (t.role == schedule::Role::weight) {
        // Read-only: op bodies never write weights.
        pointers_[i] = const_cast<uint8_t*>(ckpt.find(t.key)->bytes.data());
        continue;
      }
      const uint64_t n = t.elements() * (t.role == schedule::Role::kv_cache ? opt.max_context : 1);
      // Poison: all-ones bytes are NaN in f32 and bf16, so a read of anything unwritten shows.
      buffers_[i].assign(n * schedule::dtype_bytes(t.dtype), 0xff);
      pointers_[i] = buffers_[i].data();
    }
  }

  std::string name() const override { return "emulator"; }

  void set_tokens(uint32_t first, const std::vector<int32_t>& ids) override {
    if (uint64_t{first} + ids.size() > history_.size()) throw std::invalid_argument("set_tokens: beyond the token history");
    std::copy(ids.begin(), ids.end(), history_.begin() + first);
  }

  void run(uint32_t first, uint32_t count, uint32_t fed_from) override {
    for (uint32_t pos = first; pos < first + count; ++pos) {
      if (pos >= opt_.max_context)
        throw std::invalid_argument("position " + std::to_string(pos) + " is beyond the KV cache (" +
                                    std::to_string(opt_.max_context) + ")");
      // Monotonic counters, as on the GPU: zero them before target * generation could wrap.
      if (uint64_t{generation_ + 1} * max_target_ >= 0xffffffffull) {
        emulator_.reset_counters();
        generation_ = 0;
      }
      const schedule::StepContext ctx{pos, opt_.max_context, ++generation_, 1, history_.data() + pos,
                                      pos + 1 >= fed_from ? history_.data() + pos + 1 : nullptr};
      emulator_.run_step(ctx, {pointers_.data(), static_cast<uint32_t>(pointers_.size())}, opt_.order, opt_.seed + pos);
    }
  }

  std::vector<int32_t> history(uint32_t begin, uint32_t end) override {
    if (begin > end || end > history_.size()) throw std::invalid_argument("history: beyond the token history");
    return {history_.begin() + begin, history_.begin() + end};
  }

  std::vector<float> logits() override {
    const auto& b = buffers_[s_.logits_tensor];
    std::vector<float> out(b.size() / sizeof(float));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
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
  std::vector<int32_t> history_ = std::vector<int32_t>(opt_.max_context + size_t{1}, -1);
  uint32_t generation_ = 0;
  uint32_t max_target_ = 1;
};

}  // namespace

std::unique_ptr<Backend> make_emulator_backend(const schedule::Schedule& s, const Checkpoint& c, const RuntimeOptions& o) {
  return std::make_unique<EmulatorBackend>(s, c, o);
}

GenerateResult generate(Backend& backend, const schedule::Schedule& s, const GenerateOptions& opt, uint32_t max_context) {
  if (opt.prompt.empty()) throw std::invalid_argument("the prompt needs at least one token");
  const uint32_t vocab = static_cast<uint32_t>(s.tensors[s.logits_tensor].elements());
  for (int32_t id : opt.prompt)
    if (id < 0 || static_cast<uint32_t>(id) >= vocab)
      throw std::invalid_argument("prompt token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
  const uint64_t all_steps = opt.prompt.size() + (opt.tokens ? uint64_t{opt.tokens} - 1 : 0);
  if (all_steps > max_context)
    throw std::invalid_argument(std::to_string(all_steps) + " steps do not fit a context of " + std::to_string(max_context) +
                                " positions; raise --max-context");
  const uint32_t steps = static_cast<uint32_t>(all_steps);
  const uint32_t prompt = static_cast<uint32_t>(opt.prompt.size());
  GenerateResult r;
  const auto start = std::chrono::steady_clock::now();
  auto decode_start = start;
  backend.set_tokens(0, opt.prompt);
  // Steps [done, done + n): each feeds the next from its own greedy token once past the
  // prompt, on the backend's side; the host reads the tokens back once per chunk. Returns false
  // when `stop` ended generation (steps run after the stopping one are discarded).
  auto run = [&](uint32_t done, uint32_t n) {
    backend.run(done, n, prompt);
    const std::vector<int32_t> fed = backend.history(done + 1, done + n + 1);
    if (opt.keep_logits) r.logits.push_back(backend.logits());
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t pos = done + i;
      if (pos + 1 >= prompt) r.tokens.push_back(fed[i]);
      if (opt.on_step) opt.on_step(pos + 1, steps, fed[i]);
      r.steps = pos + 1;
      if (pos + 1 >= prompt && opt.tokens && opt.stop && opt.stop(fed[i])) {
        r.stopped = true;
        return false;
      }
    }
    return true;
  };
  // Logits are per step, so keeping them runs one step at a time; else chunks of kChunk steps.
  constexpr uint32_t kChunk = 16;
  const uint32_t chunk = opt.keep_logits ? 1 : kChunk;
  for (uint32_t done = 0; done < steps;) {
    if (done == prompt - 1) decode_start = std::chrono::steady_clock::now();
    // The prompt's steps up to the last one, then the rest: decode time starts at that step.
    const uint32_t limit = done < prompt - 1 ? prompt - 1 : steps;
    const uint32_t n = std::min(chunk, limit - done);
    if (!run(done, n)) break;
    done += n;
  }
  const auto end = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.decode_seconds = std::chrono::duration<double>(end - decode_start).count();
  if (opt.tokens == 0) r.tokens.clear();
  return r;
}

void write_npy(const std::string& path, const std::vector<std::vector<float>>& rows) {
  const size_t cols = rows.empty() ? 0 : rows[0].size();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows.size()) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  for (const auto& row : rows) {
    if (row.size() != cols) throw std::runtime_error(path + ": rows of different lengths");
    f.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
  }
  if (!f) throw std::runtime_error(path + ": write failed");
}

#if !MK_HAVE_CUDA
bool cuda_available() { return false; }
#endif

}  // namespace mk::device
