// GPU checks (run on the GPU machine by scripts/gpu_check.sh): every op of the CUDA
// interpreter against the emulator's op bodies, whole models against the emulator and the
// independent reference, the watchdog, and the SM-count check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "tests/step_context.hpp"
#include "common/input_file.hpp"
#include "device/bf16.hpp"
#include "device/cuda/interpreter.hpp"
#include "device/ops/cpu_ops.hpp"
#include "device/runtime.hpp"
#include "dsl/hf_config.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/limits.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/reference.hpp"
#include "tests/temp_dir.hpp"

namespace {

using namespace mk;
using test::HostState;
using test::single_op;
namespace fs = std::filesystem;

// The tree sits at another path on the GPU machine: MK_SOURCE_DIR in the environment wins.
const std::string kRoot = std::getenv("MK_SOURCE_DIR") ? std::getenv("MK_SOURCE_DIR") : MK_SOURCE_DIR;

planner::Plan plan_example(const dsl::ModelGraph& model, uint32_t sms) {
  planner::PlanOptions o;
  o.sm_count = sms;
  return planner::plan(model, o);
}

// The tiny example planned for this GPU's SM count.
planner::Plan plan_tiny_llama() {
  return plan_example(dsl::parse_file(kRoot + "/examples/tiny-llama.yaml"), static_cast<uint32_t>(device::cuda_device_sm_count()));
}



void compare_ops(const dsl::ModelGraph& model, uint32_t pos, uint32_t max_context) {
  CAPTURE(pos);
  const std::string& example = model.name;
  const int sms = device::cuda_device_sm_count();
  const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
  const uint32_t token = 11;
  for (uint32_t op = 0; op < plan.schedule.ops.size(); ++op) {
    if (plan.schedule.ops[op].layer > 0) continue;  // layer 0 has every op kind
    const schedule::Schedule s = single_op(plan.schedule, op, static_cast<uint32_t>(sms));
    HostState cpu(s, max_context, 1, 1000 + op);
    device::ExecutorOptions eo;
    eo.max_context = max_context;
    eo.exact_sm_count = false;
    device::CudaExecutor gpu(s, eo);
    for (uint32_t t = 0; t < s.tensors.size(); ++t) gpu.upload(t, cpu.bytes[t].data(), cpu.bytes[t].size());
    gpu.step(token, pos);
    std::vector<uint32_t> counters(s.counter_count, 0);
    const schedule::StepContext ctx = mk::test::step_context(pos, token, max_context, 1, s.kv_splits, counters.data());
    for (const schedule::Instruction& inst : s.instructions)
      device::cpu_execute(inst, ctx, {cpu.ptrs.data(), static_cast<uint32_t>(cpu.ptrs.size())});
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const schedule::Tensor& tensor = s.tensors[t];
      if (tensor.role == schedule::Role::weight) continue;
      std::vector<uint8_t> got(cpu.bytes[t].size());
      gpu.download(t, got.data(), got.size());
      size_t mismatched_nan = 0;
      const double err = test::tensor_error(tensor, got.data(), cpu.bytes[t].data(), got.size() / schedule::dtype_bytes(tensor.dtype), mismatched_nan);
      INFO(example, " op ", s.ops[op].name, " tensor ", tensor.name);
      CHECK(mismatched_nan == 0);
      CHECK(err < 1e-4);
    }
    MESSAGE(example, " op ", s.ops[op].name, " (", std::string(schedule::opcode_name(s.ops[op].opcode)), ", ", s.instructions.size(),
            " tasks): GPU matches the emulator");
  }
}

struct TempDir : test::TempDir {
  explicit TempDir(const std::string& name) : test::TempDir("mk_gpu_" + name) {}
};

}  // namespace

TEST_CASE("a GPU is present") { REQUIRE(device::cuda_device_sm_count() > 0); }

TEST_CASE("every op on the GPU matches its emulator body") {
  // Position 2: a short step (one KV split, the attention writing attn_reduce's output, which
  // does nothing); 5: three of tiny-qwen3's four splits active (tiny-llama: one, with
  // attn_reduce); 37: each attention split reads
  // part of one ring tile; 1100: several batches of tiles per split, the current position in
  // the last one.
  for (const auto& [pos, max_context] :
       {std::pair{2u, 8u}, std::pair{5u, 16u}, std::pair{37u, 64u}, std::pair{1100u, 1200u}}) {
    compare_ops(dsl::parse_file(kRoot + "/examples/tiny-llama.yaml"), pos, max_context);
    compare_ops(dsl::parse_file(kRoot + "/examples/tiny-qwen3.yaml"), pos, max_context);
  }
}

// One generation on the GPU against the emulator and the independent reference: the same greedy
// tokens, and every step's logits within 1e-3 of both (a step that is NaN counts as off). The
// prompt is drawn from the vocabulary; the context holds the prompt and the tokens.
struct Agreement {
  double worst_emu = 0, worst_ref = 0;
  uint32_t steps = 0;
  double us_per_step = 0;
};
Agreement gpu_agrees(const dsl::ModelGraph& model, const schedule::Schedule& s, const device::Checkpoint& ckpt,
                     uint32_t prompt_len, uint32_t tokens, uint32_t seed,
                     schedule::KvSplitPolicy kv_splits = {schedule::kNone, schedule::kNone}) {
  device::RuntimeOptions ro;
  ro.max_context = prompt_len + tokens + 4;
  ro.kv_splits = kv_splits;
  auto gpu = device::make_cuda_backend(s, ckpt, ro);
  auto emu = device::make_emulator_backend(s, ckpt, ro);
  device::GenerateOptions go;
  std::mt19937 rng(seed);
  const uint64_t vocab = s.tensors[s.logits_tensor].elements();
  for (uint32_t i = 0; i < prompt_len; ++i) go.prompt.push_back(static_cast<int32_t>(rng() % vocab));
  go.tokens = tokens;
  go.keep_logits = true;
  const auto g = device::generate(*gpu, s, go, ro.max_context);
  const auto e = device::generate(*emu, s, go, ro.max_context);
  CHECK(g.tokens == e.tokens);
  test::ReferenceModel ref(ckpt, test::reference_config(model), ro.max_context);
  std::vector<int32_t> sequence = go.prompt;
  sequence.insert(sequence.end(), g.tokens.begin(), g.tokens.end() - 1);
  Agreement a;
  size_t off_emu = 0, off_ref = 0;
  for (size_t step = 0; step < g.logits.size(); ++step) {
    const double de = test::rel_error(g.logits[step], e.logits[step]), dr = test::rel_error(g.logits[step], ref.step(sequence[step]));
    off_emu += !(de < 1e-3);
    off_ref += !(dr < 1e-3);
    a.worst_emu = std::max(a.worst_emu, de);
    a.worst_ref = std::max(a.worst_ref, dr);
  }
  CHECK(off_emu == 0);
  CHECK(off_ref == 0);
  CHECK(a.worst_emu < 1e-3);
  CHECK(a.worst_ref < 1e-3);
  a.steps = g.steps;
  a.us_per_step = g.seconds * 1e6 / g.steps;
  return a;
}

TEST_CASE("whole models: CUDA interpreter vs emulator vs the independent reference") {
  const int sms = device::cuda_device_sm_count();
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"}) {
    for (const planner::Policy policy : {planner::Policy::round_robin, planner::Policy::critical_path}) {
      const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/" + example);
      planner::PlanOptions po;
      po.sm_count = static_cast<uint32_t>(sms);
      po.policy = policy;
      const planner::Plan plan = planner::plan(model, po);
      TempDir dir(std::string("model_") + model.name);
      device::write_random_checkpoint(plan.schedule, dir.path, 4242);
      const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
      // A short prompt, and one past a thousand positions (several batches of KV tiles per split).
      for (const auto& [prompt_len, tokens] : {std::pair{4u, 28u}, std::pair{1100u, 6u}}) {
        CAPTURE(prompt_len);
        const Agreement a = gpu_agrees(model, plan.schedule, ckpt, prompt_len, tokens, prompt_len);
        MESSAGE(model.name, " (", std::string(planner::policy_name(policy)), ", ", a.steps, " steps after a ", prompt_len,
                "-token prompt): same greedy tokens as the emulator; worst logit error vs emulator ", a.worst_emu,
                ", vs reference ", a.worst_ref, "; ", a.us_per_step, " us/step");
      }
    }
  }
}

TEST_CASE("float8 models (each scale layout): every op and whole models vs emulator vs the independent reference") {
  const int sms = device::cuda_device_sm_count();
  for (const char* example : {"tiny-llama/f8-tensor", "tiny-llama/f8-row", "tiny-qwen3/f8-block128", "tiny-qwen3/f8-row"}) {
    CAPTURE(example);
    const dsl::ModelGraph model = test::example_graph(kRoot, example);
    compare_ops(model, 5, 16);
    compare_ops(model, 1100, 1200);
    const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
    TempDir dir(test::file_name(example));
    device::write_random_checkpoint(plan.schedule, dir.path, 4343);
    const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
    for (const auto& [prompt_len, tokens] : {std::pair{4u, 28u}, std::pair{1100u, 6u}}) {
      CAPTURE(prompt_len);
      const Agreement a = gpu_agrees(model, plan.schedule, ckpt, prompt_len, tokens, prompt_len);
      MESSAGE(example, " (", a.steps, " steps after a ", prompt_len, "-token prompt): same greedy tokens as the emulator; ",
              "worst logit error vs emulator ", a.worst_emu, ", vs reference (dequantizing the checkpoint) ", a.worst_ref);
    }
  }
}

TEST_CASE("launches of several steps (mkrun's chunks): the tokens of one step a launch and of the emulator, the prompt kept") {
  // A launch runs kDecodeChunk steps, each SM waiting for every SM between them while its
  // producer already streams the next step's weights; the cache tiles of the previous position
  // wait for that step to end everywhere. Tiny models' short queues put the next step's cache
  // tiles right behind the LM head's, so a tile read too early would read the poisoned
  // (NaN) cache. The prompt's steps run in launches too, writing no tokens over it; tiny-qwen3
  // crosses from short steps to split ones inside a launch.
  const int sms = device::cuda_device_sm_count();
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"}) {
    const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/" + example);
    const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
    const schedule::Schedule& s = plan.schedule;
    TempDir dir(std::string("chunks_") + model.name);
    device::write_random_checkpoint(s, dir.path, 4545);
    const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
    for (const uint32_t prompt_len : {3u, 300u}) {
      CAPTURE(prompt_len);
      device::RuntimeOptions ro;
      ro.max_context = prompt_len + 64;
      device::GenerateOptions go;
      std::mt19937 rng(prompt_len);
      const uint64_t vocab = s.tensors[s.logits_tensor].elements();
      for (uint32_t i = 0; i < prompt_len; ++i) go.prompt.push_back(static_cast<int32_t>(rng() % vocab));
      go.tokens = 50;  // 52 or 349 steps: launches of 16 and a shorter last one
      auto gpu = device::make_cuda_backend(s, ckpt, ro);
      auto emu = device::make_emulator_backend(s, ckpt, ro);
      const auto g = device::generate(*gpu, s, go, ro.max_context);
      const auto e = device::generate(*emu, s, go, ro.max_context);
      REQUIRE(g.tokens.size() == go.tokens);
      CHECK(g.tokens == e.tokens);
      const uint32_t steps = prompt_len + go.tokens - 1;
      const std::vector<int32_t> chunked = gpu->history(0, steps + 1);
      CHECK(std::vector<int32_t>(chunked.begin(), chunked.begin() + prompt_len) == go.prompt);
      // The same steps one launch each: the same tokens, and the last step's logits close (a
      // step that read a stale but valid token would still give a token).
      auto single = device::make_cuda_backend(s, ckpt, ro);
      single->set_tokens(0, go.prompt);
      for (uint32_t pos = 0; pos < steps; ++pos) single->run(pos, 1, prompt_len);
      CHECK(single->history(0, steps + 1) == chunked);
      CHECK(test::rel_error(gpu->logits(), single->logits()) < 1e-4);
      MESSAGE(model.name, ": ", steps, " steps after a ", prompt_len, "-token prompt in launches of ", device::kDecodeChunk,
              ": the tokens of one step a launch and of the emulator");
    }
  }
}

TEST_CASE("a conversation's later turn (mkrun --interactive): after the earlier turn's launches, the emulator's tokens") {
  // Turn 1 stops at its 20th token while the launch after it is queued and runs (it writes k and
  // v past the stop); turn 2 starts where turn 1's tokens ended (GenerateOptions::start), its
  // first launch at a position that is no multiple of the chunk. The emulator runs the whole
  // conversation in one call.
  const int sms = device::cuda_device_sm_count();
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"}) {
    const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/" + example);
    const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
    const schedule::Schedule& s = plan.schedule;
    TempDir dir(std::string("turns_") + model.name);
    device::write_random_checkpoint(s, dir.path, 4646);
    const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
    device::RuntimeOptions ro;
    ro.max_context = 128;
    auto gpu = device::make_cuda_backend(s, ckpt, ro);
    device::GenerateOptions turn1;
    turn1.prompt = {5, 17, 3};
    turn1.tokens = 40;
    int seen = 0;
    turn1.stop = [&](int32_t) { return ++seen == 20; };
    const auto r1 = device::generate(*gpu, s, turn1, ro.max_context);
    REQUIRE(r1.steps == 22);
    device::GenerateOptions turn2;
    turn2.prompt = {9, 2, 11, 4};
    turn2.start = r1.steps;
    turn2.tokens = 40;
    const auto r2 = device::generate(*gpu, s, turn2, ro.max_context);
    device::GenerateOptions whole;
    whole.prompt = turn1.prompt;
    whole.prompt.insert(whole.prompt.end(), r1.tokens.begin(), r1.tokens.end() - 1);
    whole.prompt.insert(whole.prompt.end(), turn2.prompt.begin(), turn2.prompt.end());
    whole.tokens = 40;
    auto emu = device::make_emulator_backend(s, ckpt, ro);
    const auto e = device::generate(*emu, s, whole, ro.max_context);
    REQUIRE(r2.tokens.size() == 40);
    CHECK(r2.tokens == e.tokens);
    CHECK(test::rel_error(gpu->logits(), emu->logits()) < 1e-3);
    MESSAGE(model.name, ": a second turn of ", r2.steps, " steps from position ", r1.steps, ": the emulator's tokens");
  }
}

TEST_CASE("whole models at every number of active KV splits: CUDA interpreter vs emulator vs reference") {
  // tiny-qwen3 has 4 splits per kv head (the schedule's policy, short steps to position 3 and
  // one split per 2 positions past them, runs in the test above). (1, 0) walks 1, 2 and 4 splits
  // with attn_reduce (active_kv_splits); (32, 0) one split with attn_reduce; (0, 0) every split
  // at every step; (1000, 1000) every step short.
  const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/tiny-qwen3.yaml");
  planner::PlanOptions po;
  po.sm_count = static_cast<uint32_t>(device::cuda_device_sm_count());
  const planner::Plan plan = planner::plan(model, po);
  TempDir dir("model_splits");
  device::write_random_checkpoint(plan.schedule, dir.path, 4343);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  for (const schedule::KvSplitPolicy P : {schedule::KvSplitPolicy{1, 0}, schedule::KvSplitPolicy{32, 0},
                                          schedule::KvSplitPolicy{0, 0}, schedule::KvSplitPolicy{1000, 1000}}) {
    CAPTURE(P.positions);
    CAPTURE(P.short_positions);
    const Agreement a = gpu_agrees(model, plan.schedule, ckpt, 4, 20, 77 + P.positions, P);
    MESSAGE("tiny-qwen3 with one KV split per ", P.positions, " positions, short steps to ", P.short_positions, ": ",
            a.steps, " steps agree; worst logit error vs emulator ", a.worst_emu, ", vs reference ", a.worst_ref);
  }
}

namespace {

// A tiny config.json of one family (head_dim 0: left out, hidden / heads), and what it tests in
// words, both from the same fields.
struct TinyConfig {
  const char* arch;
  int hidden, inter, heads, kv_heads, head_dim, layers, vocab;
  double eps, theta;
  bool tied;
  const char* extra = "";  // more fields, as JSON
};
std::string config_json(const TinyConfig& c) {
  std::ostringstream o;
  o << R"({"architectures": [")" << c.arch << R"("], "hidden_size": )" << c.hidden << R"(, "intermediate_size": )" << c.inter
    << R"(, "num_attention_heads": )" << c.heads << R"(, "num_key_value_heads": )" << c.kv_heads;
  if (c.head_dim) o << R"(, "head_dim": )" << c.head_dim;
  o << R"(, "num_hidden_layers": )" << c.layers << R"(, "vocab_size": )" << c.vocab << R"(, "rms_norm_eps": )" << c.eps
    << R"(, "rope_theta": )" << c.theta << R"(, "tie_word_embeddings": )" << (c.tied ? "true" : "false")
    << (*c.extra ? ", " : "") << c.extra << "}";
  return o.str();
}
std::string describe(const TinyConfig& c) {
  std::string family = c.arch;
  family = family.substr(0, family.find("For"));
  std::transform(family.begin(), family.end(), family.begin(), [](unsigned char ch) { return std::tolower(ch); });
  std::ostringstream o;
  o << family << ", " << c.heads << " heads over " << c.kv_heads << " (ratio " << c.heads / c.kv_heads << "), head_dim "
    << (c.head_dim ? c.head_dim : c.hidden / c.heads) << (c.head_dim ? "" : " from hidden / heads")
    << (family == "qwen3" ? ", q/k norm" : family == "qwen2" ? ", q/k/v biases" : "") << ", hidden " << c.hidden
    << ", intermediate " << c.inter << ", vocab " << c.vocab;
  return o.str();
}

}  // namespace

TEST_CASE("models from config.json on the GPU (GQA ratios 1, 2, 3, 4, 5, 6 and 8, head_dim 16, 64, 80, 96, 112 and 128, biases, q/k norm, a vocabulary not a multiple of four) after a 1100-token prompt") {
  const int sms = device::cuda_device_sm_count();
  const TinyConfig configs[] = {
      {"LlamaForCausalLM", 384, 512, 6, 2, 128, 2, 320, 1e-5, 500000, false},
      {"Qwen3ForCausalLM", 256, 384, 8, 2, 128, 2, 320, 1e-6, 1e6, true},
      {"Qwen2ForCausalLM", 768, 512, 12, 2, 0, 1, 301, 1e-6, 1e6, true},
      {"MistralForCausalLM", 1024, 512, 8, 2, 0, 1, 384, 1e-5, 1e6, false, R"("sliding_window": 4096)"},
      // Head widths whose rows are not whole 128-byte lines (the cache layout's other cases).
      {"LlamaForCausalLM", 320, 512, 10, 2, 80, 1, 320, 1e-5, 10000, false},
      {"LlamaForCausalLM", 512, 512, 16, 2, 96, 1, 320, 1e-5, 10000, true},
      {"MistralForCausalLM", 256, 384, 4, 2, 112, 1, 320, 1e-5, 1e6, false},
      {"Qwen3ForCausalLM", 128, 256, 4, 4, 16, 2, 320, 1e-6, 1e6, true},
      // Rows of 4096 columns (down's): tiles of two whole rows, one bulk copy each (matvec.cuh).
      {"LlamaForCausalLM", 512, 4096, 8, 2, 64, 1, 320, 1e-5, 500000, false},
  };
  for (const TinyConfig& config : configs) {
    const std::string what = describe(config), json = config_json(config);
    CAPTURE(what);
    TempDir dir("hf_gpu");
    std::ofstream(dir.path / "config.json") << json;
    const dsl::ModelGraph model = dsl::import_hf_model(dir.path);
    const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
    device::write_random_checkpoint(plan.schedule, dir.path, 77);
    const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
    const Agreement a = gpu_agrees(model, plan.schedule, ckpt, 1100, 4, 11);
    MESSAGE(what, ": ", a.steps, " steps; same greedy tokens as the emulator; worst logit error vs emulator ",
            a.worst_emu, ", vs reference ", a.worst_ref);
  }
}

TEST_CASE("argmax on the GPU: a vocabulary not a multiple of four, the largest value anywhere, the lowest index on ties, NaN never") {
  const int sms = device::cuda_device_sm_count();
  TempDir dir("argmax");
  std::ofstream(dir.path / "config.json") << config_json({"LlamaForCausalLM", 64, 128, 2, 1, 32, 1, 333, 1e-5, 10000, true});
  std::string yaml;
  dsl::import_hf_model(dir.path, &yaml);
  const std::string one = "{op: argmax, in: logits, out: next_token}";
  REQUIRE(yaml.find(one) != std::string::npos);
  // One task, then seven combining by ticket (ranges of 48 logits, the last of 45), then five of
  // uneven ranges (84 units of four logits: 16 or 17 each).
  for (const uint32_t split : {1u, 7u, 5u}) {
    CAPTURE(split);
    std::string text = yaml;
    if (split > 1)
      text.replace(text.find(one), one.size(), "{op: argmax, in: logits, out: next_token, split: " + std::to_string(split) + "}");
    const dsl::ModelGraph model = dsl::parse_string(text, "argmax.yaml");
    const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
    uint32_t op = 0;
    while (op < plan.schedule.ops.size() && plan.schedule.ops[op].opcode != schedule::Opcode::argmax) ++op;
    REQUIRE(op < plan.schedule.ops.size());
    const schedule::Schedule s = single_op(plan.schedule, op, static_cast<uint32_t>(sms));
    REQUIRE(s.instructions.size() == split);
    const auto& pl = schedule::payload_as<schedule::ArgmaxPayload>(s.instructions.at(0));
    REQUIRE(pl.count == 333);  // 83 float4 and a tail of one
    REQUIRE(pl.tasks == split);
    device::ExecutorOptions eo;
    eo.max_context = 8;
    eo.exact_sm_count = false;
    device::CudaExecutor gpu(s, eo);
    // The planted maximum: in the tail, in the last float4, in the first, in the middle; each a
    // step of its own (the ticket's count goes on from step to step).
    for (const uint32_t planted : {332u, 331u, 328u, 0u, 3u, 201u}) {
      CAPTURE(planted);
      HostState cpu(s, eo.max_context, 1, 900 + planted);
      float* logits = reinterpret_cast<float*>(cpu.bytes[pl.in].data());
      logits[planted] = 100;
      for (uint32_t i = planted + 1; i < pl.count; i += 97) logits[i] = 100;  // ties: the lowest index wins
      if (planted != 332) logits[332] = std::nanf("");                       // NaN never wins
      std::memset(cpu.bytes[pl.out].data(), 0xff, cpu.bytes[pl.out].size());  // -1 unless written
      for (uint32_t t = 0; t < s.tensors.size(); ++t) gpu.upload(t, cpu.bytes[t].data(), cpu.bytes[t].size());
      gpu.step(1, 0);
      int32_t token = -1;
      gpu.download(pl.out, &token, sizeof token);
      CHECK(token == static_cast<int32_t>(planted));
    }
  }
}

// One step at `pos` with the weight ring cut to 2 and 3 stages, against the emulator's op bodies.
// One step at `pos` on the GPU under each variant of the executor's options (their max_context
// set here), against the emulator's op bodies run in task order on the same inputs: random
// weights and cache, activations poisoned with NaN. Returns each variant's error.
std::vector<double> check_step_variants(const dsl::ModelGraph& model, uint32_t pos,
                                        const std::vector<device::ExecutorOptions>& variants) {
  const std::string& example = model.name;
  const planner::Plan plan = plan_example(model, static_cast<uint32_t>(device::cuda_device_sm_count()));
  const schedule::Schedule& s = plan.schedule;
  const uint32_t token = 7, max_context = 1024;
  HostState cpu(s, max_context, 1, 4242 + pos);  // random weights and cache; activations poisoned below
  for (uint32_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::activation || s.tensors[t].role == schedule::Role::io)
      std::memset(cpu.bytes[t].data(), 0xff, cpu.bytes[t].size());
  std::vector<std::vector<float>> gpu_logits;
  for (device::ExecutorOptions eo : variants) {
    eo.max_context = max_context;
    device::CudaExecutor gpu(s, eo);
    if (eo.ring_stages) REQUIRE(gpu.ring_stages() == eo.ring_stages);  // the cap took effect (the default holds ten or more)
    for (uint32_t t = 0; t < s.tensors.size(); ++t) gpu.upload(t, cpu.bytes[t].data(), cpu.bytes[t].size());
    gpu.step(token, pos);
    std::vector<float>& logits = gpu_logits.emplace_back(s.tensors[s.logits_tensor].elements());
    gpu.download(s.logits_tensor, logits.data(), logits.size() * 4);
  }
  // The emulator's op bodies in task order (a topological order), on the same inputs.
  std::vector<schedule::Instruction> order = s.instructions;
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.task < b.task; });
  std::vector<uint32_t> counters(s.counter_count, 0);  // the argmax's ticket
  const schedule::StepContext ctx = mk::test::step_context(pos, token, max_context, 1, {0, 0}, counters.data());
  for (const schedule::Instruction& inst : order)
    device::cpu_execute(inst, ctx, {cpu.ptrs.data(), static_cast<uint32_t>(cpu.ptrs.size())});
  const float* want = reinterpret_cast<const float*>(cpu.bytes[s.logits_tensor].data());
  const std::vector<float> expected(want, want + s.tensors[s.logits_tensor].elements());
  std::vector<double> errors;
  for (const std::vector<float>& got : gpu_logits) {
    INFO(example << " at position " << pos << ", variant " << errors.size());
    CHECK(std::none_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
    errors.push_back(test::rel_error(got, expected));
    CHECK(errors.back() < 1e-3);
  }
  return errors;
}

void check_ring_stages(const dsl::ModelGraph& model, uint32_t pos) {
  std::vector<device::ExecutorOptions> variants(2);
  variants[0].ring_stages = 2;
  variants[1].ring_stages = 3;
  const std::vector<double> e = check_step_variants(model, pos, variants);
  MESSAGE(model.name, " at position ", pos, ": 2 and 3 ring stages, logits within ", e[0], " and ", e[1], " of the emulator");
}

TEST_CASE("rows cut into column blocks (an input wider than two rows a stage), the last block shorter: ops and whole models match") {
  // tiny-llama with 13000 intermediate rows: down's rows are cut into 7 blocks of 1864 columns
  // (the last 1816), four rows a tile (device/ops/matvec.cuh), as Llama-3.1-8B's 14336 are; the
  // tiny models' own rows all fit a stage two at a time.
  std::string yaml = io::read_input_file(kRoot + "/examples/tiny-llama.yaml", limits::kMaxTextBytes);
  for (const auto& [from, to] : {std::pair{"model: tiny-llama", "model: wide-mlp"}, std::pair{"inter: 512\n", "inter: 13000\n"}}) {
    const size_t at = yaml.find(from);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, std::strlen(from), to);
  }
  const dsl::ModelGraph model = dsl::parse_string(yaml, "wide-mlp.yaml");
  const planner::Plan plan = plan_example(model, static_cast<uint32_t>(device::cuda_device_sm_count()));
  // The test is about down's cut rows: its input must be that wide (13000 f32 columns, not two
  // rows of bf16 a 16 KB stage).
  size_t wide = 0;
  for (const schedule::Instruction& inst : plan.schedule.instructions)
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec))
      wide += schedule::payload_as<schedule::MatvecPayload>(inst).cols == 13000;
  REQUIRE(wide > 0);
  for (const auto& [pos, max_context] : {std::pair{5u, 16u}, std::pair{1100u, 1200u}}) compare_ops(model, pos, max_context);
  TempDir dir("wide_mlp");
  device::write_random_checkpoint(plan.schedule, dir.path, 99);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  const Agreement a = gpu_agrees(model, plan.schedule, ckpt, 20, 12, 5);
  MESSAGE("wide-mlp (", a.steps, " steps): same greedy tokens as the emulator; worst logit error vs emulator ", a.worst_emu,
          ", vs reference ", a.worst_ref);
  // Two and three ring stages: every stage reused many times within a row group's blocks.
  for (const uint32_t pos : {5u, 900u}) check_ring_stages(model, pos);
}

TEST_CASE("whole steps with the weight ring cut to 2 and 3 stages (mkbench --stages) match the emulator") {
  // Every stage is reused many times per instruction, each shared by more warps, the attention's
  // cache tiles too: the ring's phases and arrival counts at their tightest. At position 5 a
  // split is a few positions of one tile; at 900 tiny-llama's splits stream four tiles through
  // the two or three stages, each stage's warps taking every second or third and sharing its
  // blocks, and tiny-qwen3's two (one per stage, its blocks shared by five warps).
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"})
    for (const uint32_t pos : {5u, 900u}) check_ring_stages(dsl::parse_file(kRoot + "/examples/" + example), pos);
  device::ExecutorOptions one;
  one.ring_stages = 1;
  const planner::Plan plan = plan_tiny_llama();
  CHECK_THROWS_WITH_AS(device::CudaExecutor(plan.schedule, one), doctest::Contains("at least 2 stages"), device::CudaError);
}

TEST_CASE("every hand-off by counter (mkbench --handoff counters): whole steps match the emulator, short and split ones") {
  // The tagged hand-off is the default, so only this runs the counters the executor would drop:
  // every release and wait as the schedule lists them, and at a short step the relaxed adds of
  // the signals no short wait names (the attention's for attn_reduce, whose work it does).
  // tiny-llama's steps are short up to position 4; 5 and 900 are split steps.
  for (const char* example : {"tiny-llama.yaml", "tiny-qwen3.yaml"})
    for (const uint32_t pos : {2u, 5u, 900u}) {
      std::vector<device::ExecutorOptions> variants(1);
      variants[0].tagged_handoff = false;
      const std::vector<double> e = check_step_variants(dsl::parse_file(kRoot + "/examples/" + example), pos, variants);
      MESSAGE(std::string(example), " at position ", pos, " with counters: logits within ", e[0], " of the emulator");
    }
  const planner::Plan plan = plan_tiny_llama();
  device::ExecutorOptions eo;
  eo.max_context = 8;
  eo.tagged_handoff = false;
  device::CudaExecutor counters(plan.schedule, eo);
  size_t relaxed = 0;
  for (uint32_t i = 0; i < plan.schedule.instructions.size(); ++i) {
    CHECK(counters.relaxed_signals(i, true) <= counters.device_signals(i, true));
    CHECK(counters.relaxed_signals(i, false) <= counters.device_signals(i, false));
    if (plan.schedule.instructions[i].opcode == static_cast<uint16_t>(schedule::Opcode::attention))
      relaxed += counters.relaxed_signals(i, true);
  }
  CHECK(relaxed > 0);  // the steps at position 2 above sent them
}

namespace {

// Runs `launch` (which must end in a watchdog report) on a thread of its own and returns the
// report; a launch still running 20 s on fails the test and ends the process, since the GPU is
// then held by a kernel that never ends and nothing after it could run.
template <class Launch>
std::optional<device::WatchdogError> watchdog_report(Launch launch) {
  auto run = std::async(std::launch::async, [&]() -> std::optional<device::WatchdogError> {
    try {
      launch();
    } catch (const device::WatchdogError& e) {
      return e;
    }
    return std::nullopt;
  });
  if (run.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    FAIL_CHECK("the launch still runs 20 s after its watchdog fired");
    std::fflush(stdout);
    std::_Exit(1);
  }
  return run.get();
}

// Random weights on the device, tensor t drawn with seed t + 1.
void fill_weights(device::CudaExecutor& exec, const schedule::Schedule& s, float scale) {
  for (uint32_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::weight) exec.fill_random(t, t + 1, scale);
}

// After a watchdog report, the same device runs a correct schedule and matches the emulator.
void agrees_after_a_report(const schedule::Schedule& s, const device::Checkpoint& ckpt) {
  device::RuntimeOptions ro;
  ro.max_context = 8;
  auto gpu = device::make_cuda_backend(s, ckpt, ro);
  auto emu = device::make_emulator_backend(s, ckpt, ro);
  gpu->step(3, 0);
  emu->step(3, 0);
  CHECK(test::rel_error(gpu->logits(), emu->logits()) < 1e-3);
}

}  // namespace

TEST_CASE("the watchdog turns a wait that can never be met into a report, and the GPU stays usable") {
  const int sms = device::cuda_device_sm_count();
  const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/tiny-llama.yaml");
  planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms));
  schedule::Schedule broken = plan.schedule;  // not re-verified: the test skips the planner's proof
  // Warp 0 polls an instruction's counters side by side, lane k the k-th: break the only wait
  // of one instruction, or the last of several (the attention's), polled by another lane.
  uint32_t victim = 0, minimum_waits = 1;
  SUBCASE("an instruction's only wait") {}
  SUBCASE("the last of an instruction's several waits") { minimum_waits = 2; }
  while (victim < broken.instructions.size() && broken.instructions[victim].wait_count < minimum_waits) ++victim;
  REQUIRE(victim < broken.instructions.size());
  const schedule::Instruction& vi = broken.instructions[victim];
  schedule::Wait& w = broken.waits[vi.wait_begin + (minimum_waits == 1 ? 0 : vi.wait_count - 1)];
  w.target += 1;
  TempDir dir("watchdog");
  device::write_random_checkpoint(plan.schedule, dir.path, 7);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);

  device::ExecutorOptions eo;
  eo.max_context = 8;
  eo.watchdog_seconds = 0.5;
  eo.tagged_handoff = false;  // every wait a counter's (the tagged hand-off's watchdog has a test below)
  device::CudaExecutor exec(broken, eo);
  const auto start = std::chrono::steady_clock::now();
  bool reported = false;
  try {
    exec.step(1, 0);
  } catch (const device::WatchdogError& e) {
    reported = true;
    MESSAGE("watchdog report: ", std::string(e.what()));
    const uint32_t sm = std::upper_bound(broken.sm_offsets.begin(), broken.sm_offsets.end(), victim) - broken.sm_offsets.begin() - 1;
    // Another SM may time out first on a wait that depends on the broken one; the report must
    // then name a real instruction and a counter short of its target.
    CHECK(e.report.value < e.report.target);
    CHECK(e.report.sm < broken.sm_count);
    if (e.report.sm == sm) CHECK(e.report.counter == w.counter);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(reported);
  CHECK(seconds < 3.0);
  agrees_after_a_report(plan.schedule, ckpt);
}

TEST_CASE("a launch's watchdog report reaches tokens() when a later launch was queued behind it (mkrun's chunks)") {
  // generate() queues the next launch before it reads a chunk's tokens; launch() takes back the
  // events of launches that have ended, so tokens() may find nothing to wait for. It must still
  // read the report of the launch whose tokens it returns, not hand them on.
  const int sms = device::cuda_device_sm_count();
  const planner::Plan plan = plan_example(dsl::parse_file(kRoot + "/examples/tiny-llama.yaml"), static_cast<uint32_t>(sms));
  schedule::Schedule broken = plan.schedule;  // not re-verified: the test skips the planner's proof
  uint32_t victim = 0;
  while (victim < broken.instructions.size() && broken.instructions[victim].wait_count == 0) ++victim;
  REQUIRE(victim < broken.instructions.size());
  broken.waits[broken.instructions[victim].wait_begin].target += 1;
  device::ExecutorOptions eo;
  eo.max_context = 8;
  eo.watchdog_seconds = 0.2;
  eo.tagged_handoff = false;  // every wait a counter's
  device::CudaExecutor exec(broken, eo);
  const int32_t token = 1;
  exec.set_tokens(0, 0, &token, 1);
  size_t pending = 0;
  const std::optional<device::WatchdogError> report = watchdog_report([&] {
    exec.launch(0, 1, 1);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // its watchdog has ended it by now
    exec.launch(1, 1, 1);  // takes back the first launch's event
    pending = exec.launches_pending();
    exec.tokens(0, 1, 2);  // written by the first launch
  });
  // The case this test is for: the first launch's event already taken back, so that tokens() had
  // nothing to wait for (had it been pending, tokens() would have waited on it and read the
  // report on that path instead).
  CHECK(pending == 1);
  REQUIRE(report.has_value());
  CHECK(report->report.value < report->report.target);
}

TEST_CASE("a wait timing out while the other SMs stream their LM head ends the launch with a report, not a hang") {
  // A Llama-3.1-8B of two layers with a vocabulary of 1032192 (the argmax's 96 chunks of 10752),
  // its LM head split in tasks of 32 rows: each SM runs ~244 of them, 16 tiles each (more than
  // the ring holds) for ~2 ms. One SM's LM head waits for a count that never comes; its
  // watchdog of 20 us fires some 30-130 us into the others' LM heads. A task pauses its ring
  // while it loads its input and from its last tile to its signal, a third of its time, so at
  // the abort some SMs are in such a pause with tiles of their current or next task still to be
  // issued. Their producers must not stop then: the compute warps still wait for those tiles.
  const int sms = device::cuda_device_sm_count();
  std::ifstream in(kRoot + "/examples/llama-3.1-8b.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"vocab: 128256", "vocab: 1032192"},
                                  {"layers: 32", "layers: 2"},
                                  {"out: logits, split: 132,", "out: logits, split: 32256,"}}) {
    const size_t at = yaml.find(from);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, from.size(), to);
  }
  const planner::Plan plan = plan_example(dsl::parse_string(yaml, "llama-3.1-8b, 2 layers, 1032192 tokens, LM head tasks of 32 rows"), static_cast<uint32_t>(sms));
  schedule::Schedule broken = plan.schedule;  // not re-verified: the test skips the planner's proof
  uint32_t victim = 0;
  while (victim < broken.instructions.size() &&
         (broken.ops[broken.instructions[victim].op].name != "logits" || broken.instructions[victim].wait_count == 0))
    ++victim;
  REQUIRE(victim < broken.instructions.size());
  broken.waits[broken.instructions[victim].wait_begin].target += 1;
  device::ExecutorOptions eo;
  eo.max_context = 64;
  eo.watchdog_seconds = 20e-6;
  eo.tagged_handoff = false;  // the LM head's wait a counter's
  device::CudaExecutor exec(broken, eo);
  fill_weights(exec, broken, 0.02f);
  const std::optional<device::WatchdogError> error = watchdog_report([&] { exec.step(1, 0); });
  REQUIRE(error.has_value());
  MESSAGE("watchdog report: ", std::string(error->what()));
  CHECK(error->report.value < error->report.target);
  CHECK(error->report.sm < broken.sm_count);
}

TEST_CASE("the watchdog of a tagged hand-off (code 3) names the tensor never written, and the GPU stays usable") {
  // The last layer's down projection (it writes what the LM head reads, a tagged tensor) loses
  // its task's last row: every LM head task polls that value for ever, and the report is the
  // tagged poll's.
  const planner::Plan plan = plan_tiny_llama();
  schedule::Schedule broken = plan.schedule;  // not re-verified: the test skips the planner's proof
  uint32_t final_x = schedule::kNone;
  for (const schedule::Instruction& inst : broken.instructions)
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec) &&
        schedule::payload_as<schedule::MatvecPayload>(inst).out == broken.logits_tensor)
      final_x = schedule::payload_as<schedule::MatvecPayload>(inst).in;
  REQUIRE(final_x != schedule::kNone);
  uint32_t victim = 0;
  for (; victim < broken.instructions.size(); ++victim) {
    const schedule::Instruction& inst = broken.instructions[victim];
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec) &&
        schedule::payload_as<schedule::MatvecPayload>(inst).out == final_x &&
        schedule::payload_as<schedule::MatvecPayload>(inst).row_end - schedule::payload_as<schedule::MatvecPayload>(inst).row_begin > 1)
      break;
  }
  REQUIRE(victim < broken.instructions.size());
  reinterpret_cast<schedule::MatvecPayload*>(broken.instructions[victim].payload)->row_end -= 1;
  // The argmax tasks wait for nothing: on SMs without an LM head task their counter waits would
  // start at the step's start and could time out before the LM head's polls do.
  for (schedule::Instruction& inst : broken.instructions)
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::argmax)) inst.wait_count = inst.short_wait_count = 0;
  TempDir dir("watchdog_tagged");
  device::write_random_checkpoint(plan.schedule, dir.path, 9);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  device::ExecutorOptions eo;
  eo.max_context = 8;
  eo.watchdog_seconds = 0.5;
  device::CudaExecutor exec(broken, eo);
  REQUIRE(exec.tagged(final_x));
  const auto start = std::chrono::steady_clock::now();
  const std::optional<device::WatchdogError> error = watchdog_report([&] { exec.step(1, 0); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(error.has_value());
  MESSAGE("watchdog report: ", std::string(error->what()));
  CHECK(error->report.tensor == final_x);
  CHECK(error->report.counter == schedule::kNone);
  CHECK(error->report.sm < broken.sm_count);
  CHECK(error->report.value != error->report.target);
  CHECK(std::string(error->what()).find("for tensor '" + broken.tensors[final_x].name + "'") != std::string::npos);
  CHECK(seconds < 3.0);
  agrees_after_a_report(plan.schedule, ckpt);
}

TEST_CASE("the tagged hand-off drops the counters that only tagged activations were signalled on") {
  const planner::Plan plan = plan_tiny_llama();
  const schedule::Schedule& s = plan.schedule;
  device::ExecutorOptions eo;
  eo.max_context = 8;
  device::CudaExecutor tags(s, eo);
  eo.tagged_handoff = false;
  device::CudaExecutor counters(s, eo);
  size_t matvecs = 0, lm_heads = 0, attentions = 0, reduces = 0, dropped = 0;
  for (uint32_t i = 0; i < s.instructions.size(); ++i) {
    const schedule::Instruction& inst = s.instructions[i];
    CHECK(counters.device_waits(i, false) == inst.wait_count);
    CHECK(counters.device_waits(i, true) == inst.short_wait_count);
    dropped += inst.wait_count - tags.device_waits(i, false);
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec)) {
      const auto& p = schedule::payload_as<schedule::MatvecPayload>(inst);
      CHECK(tags.tagged(p.in));
      CHECK(tags.tagged(p.out) == (p.out != s.logits_tensor));  // the argmax reads the logits with a counter
      // Its input and residual are tagged, written by ops that write nothing else (at a short
      // step o-proj's input by the attention, whose partials are tagged too): no counter is
      // left for it to wait on, at either kind of step.
      CHECK(tags.device_waits(i, false) == 0);
      CHECK(tags.device_waits(i, true) == 0);
      if (p.out == s.logits_tensor) {  // the argmax waits for the LM head's counters at every step: releases
        CHECK(tags.relaxed_signals(i, false) == 0);
        CHECK(tags.relaxed_signals(i, true) == 0);
        ++lm_heads;
      }
      ++matvecs;
    }
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::attention)) {
      const auto& p = schedule::payload_as<schedule::AttentionPayload>(inst);
      CHECK(tags.tagged(p.qkv));  // its set-up polls q, k and v
      CHECK(tags.device_waits(i, false) == 0);  // its q, k and v: polled, their counters dropped
      // Its partials (attn_reduce polls them) and, at a short step, attn_reduce's output in
      // attn_reduce's place (o-proj polls it) are tagged: nothing left to signal at either kind
      // of step. With counters attn_reduce waits for its release.
      CHECK(tags.tagged(p.out));
      CHECK(tags.device_signals(i, false) == 0);
      CHECK(tags.device_signals(i, true) == 0);
      CHECK(counters.device_signals(i, false) > 0);
      CHECK(counters.relaxed_signals(i, false) == 0);
      ++attentions;
    }
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::attn_reduce)) {
      CHECK(tags.tagged(schedule::payload_as<schedule::AttnReducePayload>(inst).in));
      CHECK(tags.device_waits(i, false) == 0);  // the partials: polled
      CHECK(inst.wait_count > 0);  // the schedule's waits for the attention, which the executor dropped
      ++reduces;
    }
  }
  REQUIRE(matvecs > 0);
  REQUIRE(lm_heads > 0);
  REQUIRE(attentions > 0);
  REQUIRE(reduces > 0);
  CHECK(dropped > 0);
}

TEST_CASE("the watchdog of the wait between a launch's steps reports an SM still in the step before (code 2), and the GPU stays usable") {
  // Before a launch's second step every SM waits, for twice the watchdog, until every SM has
  // finished the first. One SM's last instruction, an LM head task, gets 20000 copies behind it
  // without waits or signals: that SM runs them for milliseconds after its last signal, while the
  // others, waiting on nothing of it, finish the step and wait at the barrier. No counter wait can
  // time out (code 1): none waits on the copies, and the copies wait on nothing. The watchdog is an
  // eighth of the copies' time (measured in launches of one step, which have no barrier), so the
  // barrier's wait times out with three quarters of the copies still to run.
  const planner::Plan plan = plan_tiny_llama();
  schedule::Schedule broken = plan.schedule;  // not re-verified: the test skips the planner's proof
  auto lm_head_last = [&](uint32_t sm) {
    if (broken.sm_offsets[sm] == broken.sm_offsets[sm + 1]) return false;
    const schedule::Instruction& last = broken.instructions[broken.sm_offsets[sm + 1] - 1];
    return last.opcode == static_cast<uint16_t>(schedule::Opcode::matvec) &&
           schedule::payload_as<schedule::MatvecPayload>(last).out == broken.logits_tensor;
  };
  uint32_t slow = 0;
  while (slow < broken.sm_count && !lm_head_last(slow)) ++slow;
  REQUIRE(slow < broken.sm_count);
  schedule::Instruction copy = broken.instructions[broken.sm_offsets[slow + 1] - 1];
  copy.wait_count = copy.short_wait_count = 0;
  copy.signal_count = copy.short_signal_count = 0;
  copy.wait_begin = copy.signal_begin = copy.short_signal_begin = 0;
  constexpr uint32_t kCopies = 20000;
  broken.instructions.insert(broken.instructions.begin() + broken.sm_offsets[slow + 1], kCopies, copy);
  for (uint32_t sm = slow + 1; sm <= broken.sm_count; ++sm) broken.sm_offsets[sm] += kCopies;
  device::ExecutorOptions eo;
  eo.max_context = 8;
  float slow_ms = 0;
  {
    device::CudaExecutor exec(broken, eo);
    fill_weights(exec, broken, 0.05f);
    exec.timed_step(1, 0);  // timed: the second launch, not one that may also load the kernel
    slow_ms = exec.timed_step(1, 1);
  }
  REQUIRE(slow_ms > 5.0f);  // a watchdog of over 0.6 ms: far beyond any wait of a tiny-llama step
  eo.watchdog_seconds = slow_ms / 8e3;
  device::CudaExecutor exec(broken, eo);
  fill_weights(exec, broken, 0.05f);
  const uint64_t launches = exec.launches();
  const auto start = std::chrono::steady_clock::now();
  const std::optional<device::WatchdogError> error = watchdog_report([&] { exec.timed_steps(1, 0, 2); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(error.has_value());
  MESSAGE("SM ", slow, "'s ", kCopies, " copies: ", slow_ms, " ms; watchdog ", eo.watchdog_seconds * 1e3,
          " ms; the launch ended after ", seconds * 1e3, " ms with: ", std::string(error->what()));
  CHECK(exec.launches() == launches + 1);  // both steps in one launch: the barrier is the kernel's
  CHECK(error->report.counter == ~0u);     // the step report, not a counter's
  CHECK(error->report.sm != slow);
  CHECK(error->report.sm < broken.sm_count);
  CHECK(error->report.value == broken.sm_count - 1);  // every SM but the slow one had finished
  CHECK(error->report.target == broken.sm_count);
  CHECK(std::string(error->what()).find("for every SM to finish the step before position 1; ") != std::string::npos);
  CHECK(seconds < 3.0);
  TempDir dir("watchdog_step");
  device::write_random_checkpoint(plan.schedule, dir.path, 8);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  agrees_after_a_report(plan.schedule, ckpt);
}

TEST_CASE("a schedule planned for another SM count is refused with a way out") {
  const int sms = device::cuda_device_sm_count();
  const dsl::ModelGraph model = dsl::parse_file(kRoot + "/examples/tiny-llama.yaml");
  const planner::Plan plan = plan_example(model, static_cast<uint32_t>(sms - 4));
  device::ExecutorOptions eo;
  std::string message;
  try {
    device::CudaExecutor exec(plan.schedule, eo);
  } catch (const device::CudaError& e) {
    message = e.what();
  }
  CHECK(message.find("mkplan --sms " + std::to_string(sms)) != std::string::npos);
}

TEST_CASE("the CUDA backend traces a step (mkrun --trace): every instruction, in order on its SM") {
  const planner::Plan plan = plan_tiny_llama();
  const schedule::Schedule& s = plan.schedule;
  TempDir dir("trace");
  device::write_random_checkpoint(s, dir.path, 11);
  const device::Checkpoint ckpt = device::Checkpoint::open(dir.path);
  device::RuntimeOptions ro;
  ro.max_context = 8;
  auto gpu = device::make_cuda_backend(s, ckpt, ro);
  CHECK_FALSE(gpu->trace_is_logical());
  gpu->step(3, 0);
  gpu->enable_trace(true);
  gpu->step(4, 1);
  const std::vector<device::TraceEvent> ev = gpu->trace();
  REQUIRE(ev.size() == s.instructions.size());
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      CHECK(ev[i].start <= ev[i].ready);
      CHECK(ev[i].ready <= ev[i].end);
      // Thread 0 reaches the next instruction while another warp still signals this one, so
      // the next start may precede this end, but not this one's execution.
      if (i > s.sm_offsets[sm]) CHECK(ev[i - 1].ready <= ev[i].start);
    }
  device::write_chrome_trace(s, ev, (dir.path / "t.json").string());
  device::write_trace_svg(s, ev, (dir.path / "t.svg").string());
  MESSAGE(device::trace_summary(s, ev));
}

TEST_CASE("a traced launch of several steps records its last step") {
  const planner::Plan plan = plan_tiny_llama();
  const schedule::Schedule& s = plan.schedule;
  device::ExecutorOptions eo;
  eo.max_context = 160;
  device::CudaExecutor exec(s, eo);
  for (uint32_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::weight || s.tensors[t].role == schedule::Role::kv_cache)
      exec.fill_random(t, t + 1, 0.05f);
  exec.enable_trace(true);
  // Positions 120 to 135: tiny-llama's second KV split is idle up to 128 and active from 129
  // (one split per 64 positions, half of the two until three would be due), so the attention
  // tasks of split 1 mark their phases only in the launch's last steps.
  const uint64_t launches = exec.launches();
  exec.timed_steps(3, 120, 16);
  CHECK(exec.launches() == launches + 1);  // traced, the 16 steps still run as one launch
  const std::vector<device::TraceEvent> last = exec.read_trace();
  exec.timed_step(5, 135);  // the last step's position, in a launch of its own
  const std::vector<device::TraceEvent> one = exec.read_trace();
  REQUIRE(last.size() == s.instructions.size());
  uint64_t first_start = ~uint64_t{0}, last_end = 0;
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      CHECK(last[i].start <= last[i].ready);
      CHECK(last[i].ready <= last[i].end);
      for (const uint64_t m : last[i].mark) CHECK((m == 0 || (last[i].start <= m && m <= last[i].end)));
      if (i > s.sm_offsets[sm]) CHECK(last[i - 1].ready <= last[i].start);
      first_start = std::min(first_start, last[i].start);
      last_end = std::max(last_end, last[i].end);
      // The same instructions mark phases at the same position, in a launch of 16 or of one.
      for (uint32_t k = 0; k < 2; ++k) CHECK((last[i].mark[k] == 0) == (one[i].mark[k] == 0));
    }
  // One step's span, not sixteen: well under a millisecond for tiny-llama (a step takes tens of us).
  CHECK(last_end - first_start < 1'000'000);
}
