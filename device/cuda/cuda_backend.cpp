// The mkrun backend on the GPU: a CudaExecutor with the checkpoint's weights uploaded.
#include <cstring>

#include "device/cuda/interpreter.hpp"
#include "device/runtime.hpp"

namespace mk::device {
namespace {

// Refuses a context whose KV caches and activations do not fit beside the weights in the GPU's
// free memory, saying how much they need, before anything is allocated.
const schedule::Schedule& fits_gpu_memory(const schedule::Schedule& s, uint32_t max_context) {
  const uint64_t free = cuda_free_memory();
  if (free == 0) return s;  // unknown: the allocations report what fails
  uint64_t weights = 0;
  for (const schedule::Tensor& t : s.tensors)
    if (t.role == schedule::Role::weight) weights += t.elements() * schedule::dtype_bytes(t.dtype);
  check_context_memory(s, max_context, free > weights ? free - weights : 0, "GPU memory");
  return s;
}

class CudaBackend : public Backend {
 public:
  CudaBackend(const schedule::Schedule& s, const Checkpoint& ckpt, const RuntimeOptions& opt)
      : s_(s), exec_(fits_gpu_memory(s, opt.max_context), ExecutorOptions{.max_context = opt.max_context, .watchdog_seconds = opt.watchdog_seconds, .kv_splits = opt.kv_splits}) {
    check_weights(s, ckpt);  // before anything is uploaded
    for (uint32_t i = 0; i < s.tensors.size(); ++i)
      if (s.tensors[i].role == schedule::Role::weight) {
        const CheckpointTensor* t = ckpt.find(s.tensors[i].key);
        exec_.upload(i, t->bytes.data(), t->bytes.size());
      }
  }

  std::string name() const override { return "cuda"; }
  void set_tokens(uint32_t first, const std::vector<int32_t>& ids) override {
    exec_.set_tokens(first, ids.data(), static_cast<uint32_t>(ids.size()));
  }

  void run(uint32_t first, uint32_t count, uint32_t fed_from) override {
    exec_.launch(first, count, fed_from);
  }

  std::vector<int32_t> history(uint32_t begin, uint32_t end) override { return exec_.tokens(begin, end); }
  bool queues_runs() const override { return true; }  // launches return at once; tokens() waits for its own

  std::vector<float> logits() override {
    exec_.finish();  // every launch ended, and checked: a watchdog report is thrown, not read past
    std::vector<float> out(s_.tensors[s_.logits_tensor].elements());
    exec_.download(s_.logits_tensor, out.data(), out.size() * sizeof(float));
    return out;
  }

  void enable_trace(bool on) override { exec_.enable_trace(on); }
  std::vector<TraceEvent> trace() override { return exec_.read_trace(); }

 private:
  const schedule::Schedule& s_;
  CudaExecutor exec_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const schedule::Schedule& s, const Checkpoint& c, const RuntimeOptions& o) {
  return std::make_unique<CudaBackend>(s, c, o);
}

bool cuda_available() { return cuda_device_sm_count() > 0; }

}  // namespace mk::device
