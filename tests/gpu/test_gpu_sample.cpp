// GPU check of the sample op (scripts/gpu_check.sh runs mk_gpu_tests): the tiny models with
// sample in place of argmax draw the same tokens on the CUDA interpreter as on the emulator, for
// a fixed seed, with and without top-k / top-p, and equal argmax at temperature 0; and sequences
// decoding together with parameters of their own.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "device/cuda/interpreter.hpp"
#include "device/engine.hpp"
#include "device/runtime.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/ops/sample.hpp"
#include "tests/sample_model.hpp"
#include "tests/temp_dir.hpp"

namespace {

using namespace mk;

const std::string kSampleRoot = std::getenv("MK_SOURCE_DIR") ? std::getenv("MK_SOURCE_DIR") : MK_SOURCE_DIR;

// An example model with its argmax op (split or not) replaced by a sample op.
dsl::ModelGraph sampling_model(const std::string& example) {
  return dsl::parse_string(test::yaml_with_sample_op(kSampleRoot + "/examples/" + example), example);
}

}  // namespace

TEST_CASE("sample: the GPU draws the emulator's tokens for a fixed seed") {
  const int sms = device::cuda_device_sm_count();
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"}) {
    const dsl::ModelGraph model = sampling_model(example);
    planner::PlanOptions po;
    po.sm_count = static_cast<uint32_t>(sms);
    const schedule::Schedule base = planner::plan(model, po).schedule;
    test::TempDir dir("mk_gpu_sample");
    device::write_random_checkpoint(base, dir.path, 4243);
    const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
    struct Case {
      schedule::SamplingParams p;
      const char* what;
    };
    // Random tiny models are peaked: a high temperature makes the draws vary.
    for (const Case& c : {Case{{0, 0, 1, 0}, "greedy"}, Case{{300, 0, 1, 7}, "T=300"}, Case{{300, 0, 1, 8}, "T=300 seed 8"},
                          Case{{300, 20, 1, 9}, "T=300 top-k 20"}, Case{{300, 0, 0.5f, 10}, "T=300 top-p 0.5"},
                          Case{{300, 50, 0.9f, 11}, "T=300 top-k 50 top-p 0.9"}}) {
      schedule::Schedule s = base;
      schedule::set_sampling(s, c.p);
      device::RuntimeOptions ro;
      ro.max_context = 48;
      auto gpu = device::make_cuda_backend(s, ckpt, ro);
      auto emu = device::make_emulator_backend(s, ckpt, ro);
      device::GenerateOptions go;
      go.prompt = {5, 17, 3};
      go.tokens = 40;
      const auto g = device::generate(*gpu, s, go, ro.max_context);
      const auto e = device::generate(*emu, s, go, ro.max_context);
      INFO(example, " ", c.what);
      CHECK(g.tokens == e.tokens);
      MESSAGE(example, " ", c.what, ": the GPU drew the emulator's ", g.tokens.size(), " tokens");
    }
  }
}

// Sequences decoding together, each with its own sampling (StepContext::sampling, set through the
// engine): the GPU draws what the emulator draws for each.
TEST_CASE("sample: per-sequence parameters in one batch, the GPU against the emulator") {
  const int sms = device::cuda_device_sm_count();
  const dsl::ModelGraph model = sampling_model("tiny-llama.yaml");
  planner::PlanOptions po;
  po.sm_count = static_cast<uint32_t>(sms);
  po.max_tokens = 4;
  const schedule::Schedule s = planner::plan(model, po).schedule;
  test::TempDir dir("mk_gpu_sample_slots");
  device::write_random_checkpoint(s, dir.path, 4244);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  const std::vector<std::optional<schedule::SamplingParams>> params = {
      schedule::SamplingParams{300, 0, 1, 7}, std::nullopt, schedule::SamplingParams{300, 20, 0.9f, 8},
      schedule::SamplingParams{300, 0, 0.5f, 9}};
  auto run = [&](device::Backend& b) {
    device::Engine engine(b, s, 64, 8);
    std::vector<std::vector<int32_t>> tokens(params.size());
    std::atomic<int> ended{0};
    for (size_t i = 0; i < params.size(); ++i) {
      device::EngineRequest r;
      r.prompt = {static_cast<int32_t>(5 + i), 17, 3};
      r.max_tokens = 30;
      r.sampling = params[i];
      r.on_token = [&tokens, i](int32_t t) {
        tokens[i].push_back(t);
        return true;
      };
      r.on_end = [&ended](const device::EngineResult&) { ++ended; };
      engine.submit(std::move(r));
    }
    std::thread runner([&] { engine.run(); });
    while (ended < static_cast<int>(params.size())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    engine.shutdown();
    runner.join();
    return tokens;
  };
  device::RuntimeOptions ro;
  ro.max_context = 64;
  ro.slots = 4;
  auto gpu = device::make_cuda_backend(s, ckpt, ro);
  auto emu = device::make_emulator_backend(s, ckpt, ro);
  const auto g = run(*gpu), e = run(*emu);
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == e[i]);
    CHECK(g[i].size() == 30);
  }
  MESSAGE("per-sequence sampling: the GPU drew the emulator's tokens for 4 sequences at once");
}
