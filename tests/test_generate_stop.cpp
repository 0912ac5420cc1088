// generate()'s stop callback: generation ends right after the token it accepts, which is kept;
// on a backend that runs each chunk at once (the emulator) no step runs past it
// (test_generate_queue.cpp: one that queues them).
#include <doctest/doctest.h>

#include "device/runtime.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/temp_dir.hpp"

TEST_CASE("generate: a stop callback ends generation after the token it accepts") {
  const mk::dsl::ModelGraph model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  mk::planner::PlanOptions po;
  po.sm_count = 3;
  const mk::schedule::Schedule s = mk::planner::plan(model, po).schedule;
  mk::test::TempDir dir("mk_generate_stop");
  mk::device::write_random_checkpoint(s, dir.path, 77);
  const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(dir.path);
  mk::device::RuntimeOptions ro;
  ro.max_context = 32;
  mk::device::GenerateOptions go;
  go.prompt = {1, 2, 3};
  go.tokens = 10;
  auto full_backend = mk::device::make_emulator_backend(s, ckpt, ro);
  const mk::device::GenerateResult full = mk::device::generate(*full_backend, s, go, ro.max_context);
  REQUIRE(full.tokens.size() == 10);
  CHECK(!full.stopped);
  CHECK(full.steps == 12);

  // Stop at the third generated token.
  int seen = 0;
  std::vector<int32_t> offered;
  go.stop = [&](int32_t t) {
    offered.push_back(t);
    return ++seen == 3;
  };
  uint32_t last_step = 0;
  go.on_step = [&](uint32_t done, uint32_t, int32_t) { last_step = done; };
  auto backend = mk::device::make_emulator_backend(s, ckpt, ro);
  const mk::device::GenerateResult r = mk::device::generate(*backend, s, go, ro.max_context);
  CHECK(r.stopped);
  CHECK(r.tokens == std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 3));
  CHECK(offered == r.tokens);  // only generated tokens are offered, never prompt steps
  CHECK(r.steps == 5);          // 3 prompt steps + 2 more; the third token is not fed back
  CHECK(last_step == 5);

  // --tokens 0 runs the prompt only and never asks.
  go.tokens = 0;
  offered.clear();
  auto b0 = mk::device::make_emulator_backend(s, ckpt, ro);
  const mk::device::GenerateResult r0 = mk::device::generate(*b0, s, go, ro.max_context);
  CHECK(r0.tokens.empty());
  CHECK(offered.empty());
  CHECK(!r0.stopped);
}
