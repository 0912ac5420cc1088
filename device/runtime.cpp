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

  void step(uint32_t token, uint32_t pos) override {
    if (pos >= opt_.max_context)
      throw std::invalid_argument("position " + std::to_string(pos) + " is beyond the KV cache (" +
                                  std::to_string(opt_.max_context) + ")");
    // Monotonic counters, as on the GPU: zero them before target * generation could wrap.
    if (uint64_t{generation_ + 1} * max_target_ >= 0xffffffffull) {
      emulator_.reset_counters();
      generation_ = 0;
    }
    const schedule::StepContext ctx{pos, token, opt_.max_context, ++generation_};
    emulator_.run_step(ctx, {pointers_.data(), static_cast<uint32_t>(pointers_.size())}, opt_.order,
                       opt_.seed + pos);
  }

  std::vector<float> logits() override {
    const auto& b = buffers_[s_.logits_tensor];
    std::vector<float> out(b.size() / sizeof(float));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }

  int32_t next_token() override {
    int32_t t;
    std::memcpy(&t, buffers_[s_.token_tensor].data(), sizeof t);
    return t;
  }

 private:
  const schedule::Schedule& s_;
  RuntimeOptions opt_;
  Emulator emulator_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<void*> pointers_;
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
  GenerateResult r;
  const auto start = std::chrono::steady_clock::now();
  uint32_t token = static_cast<uint32_t>(opt.prompt[0]);
  auto decode_start = start;
  for (uint32_t pos = 0; pos < steps; ++pos) {
    if (pos + 1 == opt.prompt.size()) decode_start = std::chrono::steady_clock::now();
    backend.step(token, pos);
    const int32_t next = backend.next_token();
    if (opt.keep_logits) r.logits.push_back(backend.logits());
    if (pos + 1 >= opt.prompt.size()) r.tokens.push_back(next);
    token = pos + 1 < opt.prompt.size() ? static_cast<uint32_t>(opt.prompt[pos + 1]) : static_cast<uint32_t>(next);
    if (opt.on_step) opt.on_step(pos + 1, steps, next);
    r.steps = pos + 1;
    if (pos + 1 >= opt.prompt.size() && opt.tokens && opt.stop && opt.stop(next)) {
      r.stopped = true;
      break;
    }
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
