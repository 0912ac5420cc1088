// The mkrun backend on the GPU: a CudaExecutor with the checkpoint's weights uploaded.
#include <cstring>

#include "device/cuda/interpreter.hpp"
#include "device/runtime.hpp"

namespace mk::device {
namespace {

// Refuses KV caches and activations that do not fit beside the weights in the GPU's free
// memory, saying how much they need, before anything is allocated.
const schedule::Schedule& fits_gpu_memory(const schedule::Schedule& s, const RuntimeOptions& opt) {
  const uint64_t free = cuda_free_memory();
  if (free == 0) return s;  // unknown: the allocations report what fails
  uint64_t weights = 0;
  for (const schedule::Tensor& t : s.tensors)
    if (t.role == schedule::Role::weight) weights += t.elements() * schedule::dtype_bytes(t.dtype);
  check_context_memory(s, opt.max_context, free > weights ? free - weights : 0, "GPU memory", opt.slots);
  return s;
}

class CudaBackend : public Backend {
 public:
  CudaBackend(const schedule::Schedule& s, const Checkpoint& ckpt, const RuntimeOptions& opt)
      : s_(s),
        slots_(opt.slots),
        exec_(fits_gpu_memory(s, opt), ExecutorOptions{.max_context = opt.max_context,
                                                       .slots = opt.slots,
                                                       .watchdog_seconds = opt.watchdog_seconds,
                                                       .kv_splits = opt.kv_splits}) {
    check_weights(s, ckpt);  // before anything is uploaded
    for (uint32_t i = 0; i < s.tensors.size(); ++i)
      if (s.tensors[i].role == schedule::Role::weight) {
        const std::span<const uint8_t> bytes = ckpt.data(s.tensors[i].key, s.tensors[i].dtype);
        exec_.upload(i, bytes.data(), bytes.size());
      }
  }

  std::string name() const override { return "cuda"; }
  uint32_t slots() const override { return slots_; }
  void set_history(uint32_t slot, uint32_t first, const std::vector<int32_t>& ids) override {
    exec_.set_tokens(slot, first, ids.data(), static_cast<uint32_t>(ids.size()));
  }

  void set_sampling(uint32_t slot, const schedule::SlotSampling& s) override { exec_.set_sampling(slot, s); }
  void run_steps(const StepRun& run) override { exec_.launch(run); }

  std::vector<int32_t> read_history(uint32_t slot, uint32_t begin, uint32_t end) override {
    return exec_.tokens(slot, begin, end);
  }
  bool queues_runs() const override { return true; }  // launches return at once; tokens() waits for its own

  std::vector<float> logits_rows(uint32_t row, uint32_t rows) override {
    exec_.finish();  // every launch ended, and checked: a watchdog report is thrown, not read past
    const size_t vocab = s_.tensors[s_.logits_tensor].elements();
    if (uint64_t{row} + rows > s_.max_tokens) throw std::invalid_argument("logits: rows beyond the schedule's max_tokens");
    std::vector<float> out(size_t{rows} * vocab);
    exec_.download(s_.logits_tensor, out.data(), out.size() * sizeof(float), size_t{row} * vocab * sizeof(float));
    return out;
  }

  void enable_trace(bool on) override { exec_.enable_trace(on); }
  std::vector<TraceEvent> trace() override { return exec_.read_trace(); }

 private:
  const schedule::Schedule& s_;
  uint32_t slots_;
  CudaExecutor exec_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const schedule::Schedule& s, const Checkpoint& c, const RuntimeOptions& o) {
  return std::make_unique<CudaBackend>(s, c, o);
}

bool cuda_available() { return cuda_device_sm_count() > 0; }

}  // namespace mk::device
