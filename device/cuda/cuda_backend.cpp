// The mkrun backend on the GPU: a CudaExecutor with the checkpoint's weights uploaded.
#include <cstring>

#include "device/cuda/interpreter.hpp"
#include "device/runtime.hpp"

namespace mk::device {
namespace {

class CudaBackend : public Backend {
 public:
  CudaBackend(const schedule::Schedule& s, const Checkpoint& ckpt, const RuntimeOptions& opt)
      : s_(s), exec_(s, ExecutorOptions{opt.max_context, opt.watchdog_seconds, true}) {
    check_weights(s, ckpt);  // before anything is uploaded
    for (uint32_t i = 0; i < s.tensors.size(); ++i)
      if (s.tensors[i].role == schedule::Role::weight) {
        const CheckpointTensor* t = ckpt.find(s.tensors[i].key);
        exec_.upload(i, t->bytes.data(), t->bytes.size());
      }
  }

  std::string name() const override { return "cuda"; }
  void step(uint32_t token, uint32_t pos) override { exec_.step(token, pos); }

  std::vector<float> logits() override {
    std::vector<float> out(s_.tensors[s_.logits_tensor].elements());
    exec_.download(s_.logits_tensor, out.data(), out.size() * sizeof(float));
    return out;
  }

  int32_t next_token() override {
    int32_t t = 0;
    exec_.download(s_.token_tensor, &t, sizeof t);
    return t;
  }

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
