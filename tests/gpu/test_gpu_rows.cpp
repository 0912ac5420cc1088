// Steps of several rows on the GPU (each op's gpu_rows: its own loads into all of shared memory,
// the tensor cores over the rows): every op against its emulator body at steps of prompt chunks,
// decoding sequences and both together; whole models prefilled in chunks and batches of
// sequences against the emulator, the independent reference, and their one-row runs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "device/bf16.hpp"
#include "device/cuda/interpreter.hpp"
#include "device/emulator.hpp"
#include "device/ops/cpu_ops.hpp"
#include "device/runtime.hpp"
#include "device/speculate.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/reference.hpp"
#include "tests/step_context.hpp"
#include "tests/temp_dir.hpp"

namespace {

using namespace mk;
using test::HostState;
using test::single_op;
using schedule::StepSegment;

const std::string kRoot = std::getenv("MK_SOURCE_DIR") ? std::getenv("MK_SOURCE_DIR") : MK_SOURCE_DIR;

planner::Plan plan_rows(const std::string& example, uint32_t max_tokens) {
  planner::PlanOptions o;
  o.sm_count = static_cast<uint32_t>(device::cuda_device_sm_count());
  o.max_tokens = max_tokens;
  return planner::plan(test::example_graph(kRoot, example), o);
}

// attn_reduce's input as the attention writes it: each record's sum of exponentials at least 1
// (its own maximum's term). Random sums near zero or negative make the reduction ill-conditioned:
// the same inputs one float32 ulp apart then moved tiny-qwen3's output by 3.6e-4, which two
// correct implementations summing in different orders showed as a mismatch.
void realistic_partials(const schedule::Schedule& s, uint32_t op, HostState& state) {
  for (const schedule::Instruction& inst : s.instructions) {
    if (inst.op != op || inst.opcode != static_cast<uint16_t>(schedule::Opcode::attn_reduce)) continue;
    const auto& p = schedule::payload_as<schedule::AttnReducePayload>(inst);
    const schedule::AttentionPartials layout{p.kv_heads, p.kv_splits, p.rep, p.head_dim};
    float* in = reinterpret_cast<float*>(state.bytes[p.in].data());
    const uint64_t records = state.bytes[p.in].size() / sizeof(float) / layout.record();
    for (uint64_t k = 0; k < records; ++k) {
      float& sum = in[k * layout.record() + p.head_dim + 1];
      sum = 1.0f + std::fabs(sum);
    }
    return;
  }
}


// Every op of layer 0 and outside the layers, one step of `segments` on the GPU against the
// emulator's bodies on the same random state.
void compare_ops_rows(const std::string& example, uint32_t max_tokens, std::vector<StepSegment> segments, uint32_t slots,
                      uint32_t max_context, schedule::KvSplitPolicy policy) {
  const int sms = device::cuda_device_sm_count();
  const planner::Plan plan = plan_rows(example, max_tokens);
  const uint64_t vocab = plan.schedule.tensors[plan.schedule.logits_tensor].elements();
  std::vector<int32_t> history(size_t{slots} * (max_context + 1), -1);
  std::mt19937 rng(7);
  uint32_t rows = 0;
  for (StepSegment& g : segments) {
    g.row_begin = rows;
    rows += g.rows;
    for (uint32_t q = g.start; q < g.start + g.rows; ++q) history[size_t{g.slot} * (max_context + 1) + q] = static_cast<int32_t>(rng() % vocab);
  }
  CAPTURE(rows);
  for (uint32_t op = 0; op < plan.schedule.ops.size(); ++op) {
    if (plan.schedule.ops[op].layer > 0) continue;  // layer 0 has every op kind
    const schedule::Schedule s = single_op(plan.schedule, op, static_cast<uint32_t>(sms));
    HostState cpu(s, max_context, slots, 2000 + op);
    realistic_partials(s, op, cpu);
    device::ExecutorOptions eo;
    eo.max_context = max_context;
    eo.slots = slots;
    eo.exact_sm_count = false;
    eo.kv_splits = policy;
    device::CudaExecutor gpu(s, eo);
    for (uint32_t t = 0; t < s.tensors.size(); ++t) gpu.upload(t, cpu.bytes[t].data(), cpu.bytes[t].size());
    for (uint32_t slot = 0; slot < slots; ++slot)
      gpu.set_tokens(slot, 0, history.data() + size_t{slot} * (max_context + 1), max_context + 1);
    gpu.launch(device::StepRun{segments, 1, 1, true});
    gpu.finish();
    std::vector<uint32_t> counters(s.counter_count, 0);
    std::vector<int32_t> cpu_history = history;
    const schedule::StepContext ctx =
        test::step_context(segments, cpu_history, max_context, 1, schedule::kv_split_policy(s, policy), counters.data());
    for (const schedule::Instruction& inst : s.instructions)
      device::cpu_execute(inst, ctx, {cpu.ptrs.data(), static_cast<uint32_t>(cpu.ptrs.size())});
    for (uint32_t t = 0; t < s.tensors.size(); ++t) {
      const schedule::Tensor& tensor = s.tensors[t];
      if (tensor.role == schedule::Role::weight) continue;
      std::vector<uint8_t> got(cpu.bytes[t].size());
      gpu.download(t, got.data(), got.size());
      // Activations: the step's rows only (the rest is never read); caches whole.
      const size_t n = tensor.role == schedule::Role::kv_cache ? got.size() / schedule::dtype_bytes(tensor.dtype)
                                                                : size_t{rows} * tensor.elements();
      size_t mismatched_nan = 0;
      const double err = test::tensor_error(tensor, got.data(), cpu.bytes[t].data(), n, mismatched_nan);
      INFO(example, " op ", s.ops[op].name, " tensor ", tensor.name, " error ", err);
      CHECK(mismatched_nan == 0);
      CHECK(err < 1e-4);
    }
    // The histories: the rows that feed their sequence wrote its next token there.
    for (uint32_t slot = 0; slot < slots; ++slot)
      CHECK(gpu.tokens(slot, 0, max_context + 1) ==
            std::vector<int32_t>(cpu_history.begin() + size_t{slot} * (max_context + 1),
                                 cpu_history.begin() + size_t{slot + 1} * (max_context + 1)));
  }
  MESSAGE(example, ": every op at a step of ", rows, " rows in ", segments.size(), " sequences matches the emulator");
}

struct TempDir : test::TempDir {
  explicit TempDir(const std::string& name) : test::TempDir("mk_gpu_rows_" + name) {}
};

}  // namespace

TEST_CASE("rows: every op at a step of several rows on the GPU matches its emulator body") {
  using Policy = schedule::KvSplitPolicy;
  for (const char* example : {"tiny-llama", "tiny-qwen3", "tiny-llama/f8-row", "tiny-qwen3/f8-block128", "tiny-llama/f8-tensor"}) {
    CAPTURE(example);
    // A prompt chunk after 9 cached positions, a decoding row, a chunk from position 0.
    compare_ops_rows(example, 16, {{2, 9, 4, 0, 13}, {0, 16, 1, 0, 0}, {1, 0, 3, 0, 3}}, 3, 64, {schedule::kNone, schedule::kNone});
    // The same under every split at every step, and splits of 3 positions.
    compare_ops_rows(example, 16, {{2, 9, 4, 0, 13}, {0, 16, 1, 0, 0}, {1, 0, 3, 0, 3}}, 3, 64, Policy{0, 0});
    compare_ops_rows(example, 16, {{2, 9, 4, 0, 13}, {0, 16, 1, 0, 0}, {1, 0, 3, 0, 3}}, 3, 64, Policy{3, 0});
    // A short step (every row within short_positions).
    compare_ops_rows(example, 16, {{0, 0, 3, 0, 3}, {1, 1, 1, 0, 0}}, 2, 16, Policy{64, 4});
    // A long prompt chunk of 64 after 1100 positions (several tiles of cached positions a split).
    compare_ops_rows(example, 64, {{0, 1100, 64, 0, 1164}}, 1, 1200, {schedule::kNone, schedule::kNone});
    // Eight sequences decoding, ragged contexts.
    std::vector<StepSegment> eight;
    for (uint32_t i = 0; i < 8; ++i) eight.push_back({i, 3 + 97 * i, 1, 0, 0});
    compare_ops_rows(example, 8, eight, 8, 800, {schedule::kNone, schedule::kNone});
  }
}

namespace {

// One model planned for steps of `max_tokens`, a random checkpoint.
struct RowsModel {
  dsl::ModelGraph graph;
  planner::Plan plan;
  TempDir dir;
  std::unique_ptr<device::Checkpoint> ckpt;
  RowsModel(const std::string& example, uint32_t max_tokens, uint64_t seed)
      : graph(test::example_graph(kRoot, example)), plan(plan_rows(example, max_tokens)), dir(test::file_name(example)) {
    device::write_random_checkpoint(plan.schedule, dir.path, seed);
    ckpt = std::make_unique<device::Checkpoint>(device::Checkpoint::open(dir.path));
  }
};

std::vector<int32_t> random_prompt(uint32_t n, uint64_t vocab, std::mt19937& rng) {
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

}  // namespace

TEST_CASE("rows: a prompt prefilled in chunks on the GPU: the emulator's tokens, the reference's logits") {
  for (const char* example : {"tiny-llama", "tiny-qwen3", "tiny-llama/f8-row", "tiny-qwen3/f8-block128", "tiny-llama/f8-tensor"})
    for (const uint32_t T : {2u, 8u, 64u}) {
      CAPTURE(example);
      CAPTURE(T);
      const RowsModel m(example, T, 17);
      const schedule::Schedule& s = m.plan.schedule;
      device::RuntimeOptions ro;
      ro.max_context = 200;
      auto gpu = device::make_cuda_backend(s, *m.ckpt, ro);
      auto emu = device::make_emulator_backend(s, *m.ckpt, ro);
      std::mt19937 rng(T);
      device::GenerateOptions go;
      go.prompt = random_prompt(150, s.tensors[s.logits_tensor].elements(), rng);
      go.tokens = 12;
      go.keep_logits = true;
      const auto g = device::generate(*gpu, s, go, ro.max_context);
      const auto e = device::generate(*emu, s, go, ro.max_context);
      CHECK(g.tokens == e.tokens);
      REQUIRE(g.logits.size() == e.logits.size());
      test::ReferenceModel ref(*m.ckpt, test::reference_config(m.graph), ro.max_context);
      std::vector<int32_t> fed = go.prompt;
      fed.insert(fed.end(), g.tokens.begin(), g.tokens.end() - 1);
      double worst_emu = 0, worst_ref = 0;
      for (size_t i = 0; i < g.logits.size(); ++i) {
        worst_emu = std::max(worst_emu, test::rel_error(g.logits[i], e.logits[i]));
        worst_ref = std::max(worst_ref, test::rel_error(g.logits[i], ref.step(fed[i])));
      }
      CHECK(worst_emu < 1e-3);
      CHECK(worst_ref < 1e-3);
      // Without the logits kept: chunks of T positions a launch, the same tokens.
      go.keep_logits = false;
      auto gpu2 = device::make_cuda_backend(s, *m.ckpt, ro);
      CHECK(device::generate(*gpu2, s, go, ro.max_context).tokens == e.tokens);
      MESSAGE(example, ", a 150-token prompt in chunks of ", T, ": the emulator's tokens; worst logit error vs emulator ",
              worst_emu, ", vs reference ", worst_ref);
    }
}

TEST_CASE("rows: a batch of sequences on the GPU gives each what its own run gives") {
  for (const char* example : {"tiny-llama", "tiny-qwen3", "tiny-qwen3/f8-row", "tiny-llama/f8-block128"}) {
    CAPTURE(example);
    const RowsModel m(example, 8, 23);
    const schedule::Schedule& s = m.plan.schedule;
    const uint64_t vocab = s.tensors[s.logits_tensor].elements();
    std::mt19937 rng(5);
    std::vector<device::SequenceOptions> seqs(6);
    for (uint32_t i = 0; i < seqs.size(); ++i) {
      seqs[i].prompt = random_prompt(1 + (i * 37) % 90, vocab, rng);
      seqs[i].tokens = 5 + i * 4;
    }
    seqs[2].stop = [n = 0](int32_t) mutable { return ++n == 3; };
    device::RuntimeOptions ro;
    ro.max_context = 160;
    ro.slots = static_cast<uint32_t>(seqs.size());
    auto gpu = device::make_cuda_backend(s, *m.ckpt, ro);
    const auto got = device::generate_batch(*gpu, s, seqs, {true, 0}, ro.max_context);
    ro.slots = 1;
    double worst = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      CAPTURE(i);
      device::SequenceOptions q = seqs[i];
      if (i == 2) q.stop = [n = 0](int32_t) mutable { return ++n == 3; };
      auto emu = device::make_emulator_backend(s, *m.ckpt, ro);
      device::GenerateOptions go;
      static_cast<device::SequenceOptions&>(go) = q;
      go.keep_logits = true;
      const auto want = device::generate(*emu, s, go, ro.max_context);
      CHECK(got[i].tokens == want.tokens);
      REQUIRE(got[i].logits.size() == want.logits.size());
      test::ReferenceModel ref(*m.ckpt, test::reference_config(m.graph), ro.max_context);
      std::vector<int32_t> fed = q.prompt;
      fed.insert(fed.end(), got[i].tokens.begin(), got[i].tokens.end() - 1);
      for (size_t k = 0; k < got[i].logits.size(); ++k) {
        worst = std::max(worst, test::rel_error(got[i].logits[k], want.logits[k]));
        CHECK(test::rel_error(got[i].logits[k], ref.step(fed[k])) < 1e-3);
      }
    }
    CHECK(worst < 1e-3);
    CHECK(got[2].stopped);
    // Without the logits: launches of decode steps over every sequence still going, queued ahead.
    ro.slots = static_cast<uint32_t>(seqs.size());
    auto gpu2 = device::make_cuda_backend(s, *m.ckpt, ro);
    seqs[2].stop = [n = 0](int32_t) mutable { return ++n == 3; };
    const auto fast = device::generate_batch(*gpu2, s, seqs, {false, 0}, ro.max_context);
    for (size_t i = 0; i < seqs.size(); ++i) CHECK(fast[i].tokens == got[i].tokens);
    MESSAGE(example, ": a batch of ", seqs.size(), " sequences (prompts of 1 to 75 tokens, 5 to 25 tokens each, one stopping at ",
            "its third) gives each its own run's tokens; worst logit error vs the emulator ", worst);
  }
}

TEST_CASE("rows: speculative decoding on the GPU gives the tokens of decoding one token a step") {
  for (const char* example : {"tiny-llama", "tiny-qwen3"}) {
    CAPTURE(example);
    const RowsModel m(example, 5, 29);
    const schedule::Schedule& s = m.plan.schedule;
    const uint64_t vocab = s.tensors[s.logits_tensor].elements();
    std::mt19937 rng(11);
    device::GenerateOptions go;
    const std::vector<int32_t> phrase = random_prompt(9, vocab, rng);
    for (int i = 0; i < 3; ++i) go.prompt.insert(go.prompt.end(), phrase.begin(), phrase.end());
    go.tokens = 60;
    go.keep_logits = true;
    device::RuntimeOptions ro;
    ro.max_context = 128;
    auto plain_gpu = device::make_cuda_backend(s, *m.ckpt, ro);
    const auto plain = device::generate(*plain_gpu, s, go, ro.max_context);
    // n-gram drafts, and drafts that agree with the plain run's next 0, 1, ..., k tokens in turn
    // (the rest wrong): every number of kept drafts, rejected positions written over.
    for (const bool oracle : {false, true}) {
      CAPTURE(oracle);
      device::SpeculateOptions spec;
      spec.cost_aware = false;  // draft every step: the counts below need checks (the policy: test_speculate.cpp)
      uint32_t calls = 0;
      if (oracle)
        spec.drafter = [&](std::span<const int32_t> context, uint32_t k) {
          const size_t at = context.size() - go.prompt.size();
          const uint32_t agree = calls++ % (k + 1);
          std::vector<int32_t> d;
          for (uint32_t j = 0; j < k; ++j) {
            const int32_t truth = plain.tokens.at(at + j);
            d.push_back(j < agree ? truth : static_cast<int32_t>((truth + 1 + j) % vocab));
          }
          return d;
        };
      auto gpu = device::make_cuda_backend(s, *m.ckpt, ro);
      device::SpeculationStats st;
      const auto got = device::generate_speculative(*gpu, s, go, spec, ro.max_context, &st);
      CHECK(got.tokens == plain.tokens);
      REQUIRE(got.logits.size() == plain.logits.size());
      double worst = 0;
      for (size_t i = 0; i < got.logits.size(); ++i) worst = std::max(worst, test::rel_error(got.logits[i], plain.logits[i]));
      CHECK(worst < 1e-3);
      CHECK(st.checks > 0);
      CHECK(st.accepted > 0);
      if (oracle) CHECK(st.drafted - st.accepted > 10);
      MESSAGE(example, oracle ? ", drafts agreeing 0..k in turn" : ", n-gram drafts", ": ", st.checks, " check steps, ", st.accepted,
              " of ", st.drafted, " drafts kept, the plain run's 60 tokens; worst logit error vs the plain run ", worst);
    }
  }
}
