// GPU check of the sample op (scripts/gpu_check.sh runs mk_gpu_tests): the tiny models with
// sample in place of argmax draw the same tokens on the CUDA interpreter as on the emulator, for
// a fixed seed, with and without top-k / top-p, and equal argmax at temperature 0.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "device/cuda/interpreter.hpp"
#include "device/runtime.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/ops/sample.hpp"
#include "tests/temp_dir.hpp"

namespace {

using namespace mk;

const std::string kSampleRoot = std::getenv("MK_SOURCE_DIR") ? std::getenv("MK_SOURCE_DIR") : MK_SOURCE_DIR;

// An example model with its argmax op (split or not) replaced by a sample op.
dsl::ModelGraph sampling_model(const std::string& example) {
  std::ifstream f(kSampleRoot + "/examples/" + example);
  std::stringstream s;
  s << f.rdbuf();
  std::string yaml = s.str();
  const size_t at = yaml.find("{op: argmax, in: logits, out: next_token");
  REQUIRE(at != std::string::npos);
  yaml.replace(at, yaml.find('}', at) + 1 - at, "{op: sample, in: logits, out: next_token}");
  return dsl::parse_string(yaml, example);
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
