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
    check_context_memory(s, opt.max_context, physical_memory_bytes(), "host memory");
    // Not a member initializer: that ran before the check above, and a context of 4e9
    // positions allocated 16 GB of token history before it was refused.
    history_.assign(opt.max_context + size_t{1}, -1);
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
      try {
        buffers_[i].assign(n * schedule::dtype_bytes(t.dtype), 0xff);
      } catch (const std::bad_alloc&) {
        throw std::runtime_error("out of memory: a context of " + std::to_string(opt.max_context) + " positions needs " +
                                 show_bytes(state_bytes(s, opt.max_context)) + " of host memory; lower --max-context");
      }
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
      const schedule::StepContext ctx{pos, opt_.max_context, ++generation_, 1, kv_split_policy(s_, opt_.kv_splits),
                                      history_.data() + pos, pos + 1 >= fed_from ? history_.data() + pos + 1 : nullptr,
                                      nullptr};  // the emulator's own counters
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
  std::vector<int32_t> history_;  // [max_context + 1], made once the context is checked
  uint32_t generation_ = 0;
  uint32_t max_target_ = 1;
};

}  // namespace

uint64_t state_bytes(const schedule::Schedule& s, uint64_t max_context) {
  uint64_t total = 0;
  for (const schedule::Tensor& t : s.tensors) {
    if (t.role == schedule::Role::weight) continue;
    uint64_t n = t.elements() * schedule::dtype_bytes(t.dtype);  // at most 2^42: the reader's limit
    if (t.role == schedule::Role::kv_cache && __builtin_mul_overflow(n, max_context, &n)) return UINT64_MAX;
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

void check_context_memory(const schedule::Schedule& s, uint64_t max_context, uint64_t available, const std::string& memory) {
  if (max_context == 0 || max_context > limits::kMaxContext)
    throw std::invalid_argument("a context of " + std::to_string(max_context) + " positions is outside 1 to " +
                                std::to_string(limits::kMaxContext) + "; lower --max-context");
  const uint64_t need = state_bytes(s, max_context);
  if (need > available)
    throw std::invalid_argument("a context of " + std::to_string(max_context) + " positions needs " + show_bytes(need) +
                                " of " + memory + " for the KV caches and activations, more than the " +
                                show_bytes(available) + " there is; lower --max-context");
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

GenerateResult generate(Backend& backend, const schedule::Schedule& s, const GenerateOptions& opt, uint32_t max_context) {
  if (opt.prompt.empty()) throw std::invalid_argument("the prompt needs at least one token");
  const uint64_t vocab = s.tensors[s.logits_tensor].elements();
  for (int32_t id : opt.prompt)
    if (id < 0 || static_cast<uint64_t>(id) >= vocab)
      throw std::invalid_argument("prompt token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
  const uint64_t all_steps = opt.prompt.size() + (opt.tokens ? uint64_t{opt.tokens} - 1 : 0);
  if (opt.start + all_steps > max_context)
    throw std::invalid_argument(std::to_string(all_steps) + " steps" +
                                (opt.start ? " after " + std::to_string(opt.start) + " positions" : std::string()) +
                                " do not fit a context of " + std::to_string(max_context) + " positions; raise --max-context");
  const uint32_t steps = static_cast<uint32_t>(all_steps), at = opt.start;  // at: the first step's position
  const uint32_t prompt = static_cast<uint32_t>(opt.prompt.size());
  GenerateResult r;
  r.prompt_steps = prompt - 1;
  const auto start = std::chrono::steady_clock::now();
  auto decode_start = start;  // a prompt of one token: the first step decodes
  backend.set_tokens(at, opt.prompt);
  // Chunks of kDecodeChunk steps (one step where every step's logits are kept): the prompt's
  // steps up to its last one, then the rest, so that the decode time starts at that step. Each
  // step feeds the next from its own greedy token once past the prompt, on the backend's side;
  // the host reads the tokens back once per chunk.
  const uint32_t chunk = opt.keep_logits ? 1 : kDecodeChunk;
  auto chunk_from = [&](uint32_t done) { return std::min(chunk, (done < prompt - 1 ? prompt - 1 : steps) - done); };
  // Where the backend queues its runs, the next chunk is queued before the host reads one, so
  // that the GPU does not wait while the host copies a chunk's tokens back and hands them on
  // (that wait put mkrun's decode 4 % over mkbench's step on Llama-3.2-1B; bench/NOTES.md 119).
  // The logits are then checked for the first chunk's last step, before a second is queued,
  // and for the last step run: NaN or Inf weights show in every step, and a NaN a step makes
  // before a layer's k and v reaches every later step through the KV cache. Otherwise every
  // chunk's last step is checked (neither reads the other steps' logits).
  const bool ahead = backend.queues_runs() && !opt.keep_logits;
  uint32_t queued = 0;  // steps run or queued
  auto queue = [&] {
    const uint32_t n = chunk_from(queued);
    backend.run(at + queued, n, at + prompt);
    queued += n;
  };
  auto check_logits = [&](uint32_t step) {
    std::vector<float> logits = backend.logits();
    check_finite_logits(logits, step, steps, at);
    if (opt.keep_logits) r.logits.push_back(std::move(logits));
  };
  for (uint32_t done = 0; done < steps && !r.stopped;) {
    const uint32_t n = chunk_from(done);
    if (queued == done) queue();                       // this chunk
    if (ahead && done > 0 && queued < steps) queue();  // and, past the first, the next before reading this one
    const std::vector<int32_t> fed = backend.history(at + done + 1, at + done + n + 1);
    if (!ahead || done == 0) check_logits(done + n - 1);
    if (done + n == prompt - 1) decode_start = std::chrono::steady_clock::now();  // the prompt's steps have run
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t pos = done + i;
      if (pos + 1 >= prompt) r.tokens.push_back(fed[i]);
      if (opt.on_step) opt.on_step(pos + 1, steps, fed[i]);
      r.steps = pos + 1;
      // Generation ends at a stop token, which is kept; steps queued after it are discarded.
      if (pos + 1 >= prompt && opt.tokens && opt.stop && opt.stop(fed[i])) {
        r.stopped = true;
        break;
      }
    }
    done += n;
  }
  const auto end = std::chrono::steady_clock::now();
  if (ahead) check_logits(queued - 1);
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.decode_seconds = std::chrono::duration<double>(end - decode_start).count();
  if (opt.tokens == 0) r.tokens.clear();
  return r;
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
