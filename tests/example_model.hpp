// An example model (examples/NAME.yaml) planned for `sms` SMs and steps of up to `max_tokens`
// rows, with a random checkpoint in a folder of its own; `sample`: a sample op in place of its
// argmax (tests/sample_model.hpp). For the tests of generation loops on the emulator.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "device/runtime.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/sample_model.hpp"
#include "tests/temp_dir.hpp"

namespace mk::test {

struct ExampleModel {
  schedule::Schedule s;
  TempDir dir{"mk_test_model"};
  std::unique_ptr<device::Checkpoint> ckpt;
  ExampleModel(const std::string& name, uint32_t sms, uint32_t max_tokens, uint64_t seed, bool sample = false) {
    planner::PlanOptions o;
    o.sm_count = sms;
    o.max_tokens = max_tokens;
    const std::filesystem::path file = std::filesystem::path(MK_SOURCE_DIR) / "examples" / (name + ".yaml");
    s = planner::plan(sample ? dsl::parse_string(yaml_with_sample_op(file.string()), name + ".yaml") : dsl::parse_file(file), o)
            .schedule;
    device::write_random_checkpoint(s, dir.path, seed);
    ckpt = std::make_unique<device::Checkpoint>(device::Checkpoint::open(dir.path));
  }
  uint32_t vocab() const { return static_cast<uint32_t>(s.tensors[s.logits_tensor].elements()); }
  std::unique_ptr<device::Backend> backend(uint32_t slots, uint32_t max_context) const {
    device::RuntimeOptions o;
    o.slots = slots;
    o.max_context = max_context;
    return device::make_emulator_backend(s, *ckpt, o);
  }
};

}  // namespace mk::test
