// The CUDA executor's host-side rewrite of a schedule (device/cuda/queues.hpp), on the CPU: which
// activations go tagged, the queues without the counters only tagged tensors were signalled on,
// the relaxed (kUnwaited) signals, and the refusals. The activation lists are given here as the
// ops' CUDA bodies declare them (each device/ops/<op>.cuh's gpu_activations); the executor builds
// the same lists from those functions.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device/cuda/interpreter.hpp"
#include "device/cuda/queues.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/ops.hpp"

namespace {

using namespace mk;
using device::Activation;
using device::ActivationLists;
using device::Tagging;

const std::string kRoot = MK_SOURCE_DIR;

// What each op's gpu_activations lists (in its order: the k-th is its tagged_field(k)).
struct Lister {
  std::vector<Activation> operator()(const schedule::MatvecPayload& p) const {
    return {{p.in, false, Tagging::always}, {p.residual, false, Tagging::either}, {p.out, true, Tagging::either}};
  }
  std::vector<Activation> operator()(const schedule::AttentionPayload& p) const {
    return {{p.qkv, false, Tagging::either}, {p.out, true, Tagging::either}, {p.reduce_out, true, Tagging::either}};
  }
  std::vector<Activation> operator()(const schedule::AttnReducePayload& p) const {
    return {{p.in, false, Tagging::either}, {p.out, true, Tagging::either}};
  }
  std::vector<Activation> operator()(const schedule::EmbedPayload& p) const { return {{p.out, true, Tagging::either}}; }
  std::vector<Activation> operator()(const schedule::ArgmaxPayload& p) const {
    return {{p.in, false, Tagging::never}, {p.out, true, Tagging::never}, {p.parts, true, Tagging::never}};
  }
  std::vector<Activation> operator()(const schedule::SamplePayload& p) const {
    return {{p.in, false, Tagging::never}, {p.out, true, Tagging::never}};
  }
};

ActivationLists lists_of(const schedule::Schedule& s) {
  ActivationLists lists;
  for (const schedule::Instruction& inst : s.instructions)
    schedule::visit_payload(inst, [&](const auto& payload) { lists.push_back(Lister{}(payload)); });
  return lists;
}

planner::Plan plan_example(const std::string& name, uint32_t max_tokens) {
  planner::PlanOptions o;
  o.sm_count = 16;
  o.max_tokens = max_tokens;
  return planner::plan(dsl::parse_file(kRoot + "/examples/" + name + ".yaml"), o);
}

// The schedule with the rewritten queues (the kUnwaited marks taken off), for the verifier.
schedule::Schedule with_queues(const schedule::Schedule& s, const device::Queues& q) {
  schedule::Schedule out = s;
  out.instructions = q.instructions;
  out.waits = q.waits;
  out.signals = q.signals;
  for (uint32_t& c : out.signals) c &= ~device::kUnwaited;
  return out;
}

void check_rewrite(const schedule::Schedule& s, const ActivationLists& acts, const std::vector<uint8_t>& tagged) {
  const device::Queues q = device::device_queues(s, acts, tagged);
  REQUIRE(q.instructions.size() == s.instructions.size());
  // A counter is kept or dropped whole: every signal of a kept one is still sent, and a dropped
  // one's signallers write tagged tensors and nothing else.
  // (Counted over each instruction's two lists: a schedule's short list may share its entries.)
  std::vector<uint32_t> before(s.counter_count, 0), after(s.counter_count, 0);
  for (size_t i = 0; i < s.instructions.size(); ++i)
    for (const bool brief : {false, true}) {
      for (const uint32_t c : s.signals_of(s.instructions[i], brief)) ++before[c];
      const schedule::ListRange r = schedule::signal_range(q.instructions[i], brief);
      for (uint32_t k = 0; k < r.count; ++k) ++after[q.signals[r.begin + k] & ~device::kUnwaited];
    }
  uint32_t dropped = 0;
  for (uint32_t c = 0; c < s.counter_count; ++c) {
    CHECK((after[c] == 0 || after[c] == before[c]));
    if (after[c] || !before[c]) continue;
    ++dropped;
    for (size_t i = 0; i < s.instructions.size(); ++i) {
      const auto sig = s.signals_of(s.instructions[i]);
      if (std::find(sig.begin(), sig.end(), c) == sig.end()) continue;
      bool writes = false;
      for (const Activation& a : acts[i])
        if (a.writes && a.tensor < tagged.size()) {
          writes = true;
          CHECK(tagged[a.tensor]);
        }
      CHECK(writes);
    }
  }
  const bool any_tagged = std::any_of(tagged.begin(), tagged.end(), [](uint8_t t) { return t != 0; });
  CHECK((dropped > 0) == any_tagged);  // the tiny models' matvec inputs go tagged: their counters go
  for (size_t i = 0; i < s.instructions.size(); ++i) {
    const schedule::Instruction &old = s.instructions[i], &now = q.instructions[i];
    CHECK(now.op == old.op);
    CHECK(now.opcode == old.opcode);
    // The waits: the schedule's, in order, less the dropped counters'; the short ones first.
    std::vector<schedule::Wait> kept, kept_short;
    const auto waits = s.waits_of(old);
    for (size_t k = 0; k < waits.size(); ++k)
      if (after[waits[k].counter]) {
        kept.push_back(waits[k]);
        if (k < old.short_wait_count) kept_short.push_back(waits[k]);
      }
    const auto got = std::vector<schedule::Wait>(q.waits.begin() + now.wait_begin, q.waits.begin() + now.wait_begin + now.wait_count);
    REQUIRE(got.size() == kept.size());
    for (size_t k = 0; k < kept.size(); ++k) CHECK((got[k].counter == kept[k].counter && got[k].target == kept[k].target));
    CHECK(now.short_wait_count == kept_short.size());
  }
  // kUnwaited exactly where no wait list of the step's kind names the counter: from the
  // schedule's own lists (a kept counter's waits are all kept), signal by signal in order.
  for (const bool brief : {false, true}) {
    std::vector<uint8_t> waited(s.counter_count, 0);
    for (const schedule::Instruction& inst : s.instructions)
      for (const schedule::Wait& w : s.waits_of(inst, brief)) waited[w.counter] = after[w.counter] > 0;
    for (size_t i = 0; i < s.instructions.size(); ++i) {
      std::vector<uint32_t> want;
      for (const uint32_t c : s.signals_of(s.instructions[i], brief))
        if (after[c]) want.push_back(waited[c] ? c : c | device::kUnwaited);
      const schedule::ListRange r = schedule::signal_range(q.instructions[i], brief);
      CHECK(std::vector<uint32_t>(q.signals.begin() + r.begin, q.signals.begin() + r.begin + r.count) == want);
    }
  }
  // Still every wait met by exactly its signals, every task once, no cycle (the planner's proof).
  CHECK_NOTHROW(planner::verify(with_queues(s, q), {}, {}));
}

TEST_CASE("device queues: the tiny models' rewrite keeps every wait met and drops only tagged hand-offs") {
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    for (const uint32_t max_tokens : {1u, 8u}) {
      CAPTURE(name);
      CAPTURE(max_tokens);
      const planner::Plan plan = plan_example(name, max_tokens);
      const schedule::Schedule& s = plan.schedule;
      const ActivationLists acts = lists_of(s);
      const std::vector<uint8_t> layouts = device::tensor_layouts(s, acts);
      // Tagged: f32 activations only, and every matvec's input; the logits (argmax's) never.
      for (size_t t = 0; t < s.tensors.size(); ++t)
        if (layouts[t])
          CHECK((s.tensors[t].role == schedule::Role::activation && s.tensors[t].dtype == schedule::DType::f32));
      CHECK(layouts[s.logits_tensor] == device::kPlain);
      for (size_t i = 0; i < s.instructions.size(); ++i) {
        const schedule::Instruction& inst = s.instructions[i];
        if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec))
          CHECK(layouts[schedule::payload_as<schedule::MatvecPayload>(inst).in] == device::kStepTagged);
        // tagged_fields: bit k where the k-th listed activation is tagged.
        const uint16_t bits = device::tagged_fields(acts[i], layouts);
        for (size_t k = 0; k < acts[i].size(); ++k)
          CHECK(((bits >> k) & 1) == (acts[i][k].tensor < layouts.size() && layouts[acts[i][k].tensor] != 0));
      }
      check_rewrite(s, acts, layouts);
      check_rewrite(s, acts, std::vector<uint8_t>(s.tensors.size(), 0));  // the hand-off off: every counter kept
    }
  }
}

TEST_CASE("device queues: an activation one op needs tagged and another cannot take so is refused, naming both") {
  const planner::Plan plan = plan_example("tiny-llama", 1);
  const schedule::Schedule& s = plan.schedule;
  ActivationLists acts = lists_of(s);
  // Pretend the argmax's body cannot take a matvec's input (which the matvec takes only tagged) so.
  uint32_t argmax = 0, x = schedule::kNone, reader = 0;
  for (size_t i = 0; i < s.instructions.size(); ++i) {
    if (s.instructions[i].opcode == static_cast<uint16_t>(schedule::Opcode::argmax)) argmax = static_cast<uint32_t>(i);
    if (s.instructions[i].opcode == static_cast<uint16_t>(schedule::Opcode::matvec))
      x = schedule::payload_as<schedule::MatvecPayload>(s.instructions[i]).in, reader = static_cast<uint32_t>(i);
  }
  REQUIRE(x != schedule::kNone);
  acts[argmax].push_back({x, false, Tagging::never});
  try {
    device::tensor_layouts(s, acts);
    FAIL("refused nothing");
  } catch (const device::CudaError& e) {
    const std::string what = e.what();
    CHECK(what.find("'" + s.ops[s.instructions[reader].op].name + "'") != std::string::npos);
    CHECK(what.find("'" + s.ops[s.instructions[argmax].op].name + "' cannot") != std::string::npos);
    CHECK(what.find("'" + s.tensors[x].name + "'") != std::string::npos);
  }
  // Weights and caches are never tagged.
  const std::vector<uint8_t> layouts = device::tensor_layouts(s, lists_of(s));
  for (size_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::weight || s.tensors[t].role == schedule::Role::kv_cache) CHECK(layouts[t] == device::kPlain);
}

}  // namespace
