// The planner's output, checked from first principles on the example models: tasks, counters,
// waits, edges, queue order and policies; then the verifier's refusals of hand-broken
// schedules, the DOT output and the size of a real plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/input_file.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/limits.hpp"
#include "schedules/ops.hpp"
#include "schedules/schedule.hpp"

using mk::planner::Plan;
using mk::planner::PlanError;
using mk::planner::PlanOptions;
using mk::planner::Policy;
using mk::schedule::Instruction;
using mk::schedule::Schedule;

namespace {

// Models parsed once; a Plan points into its ModelGraph, so the graphs must stay put.
const mk::dsl::ModelGraph& example(const std::string& name) {
  static std::map<std::string, std::unique_ptr<mk::dsl::ModelGraph>> cache;
  auto& slot = cache[name];
  if (!slot)
    slot = std::make_unique<mk::dsl::ModelGraph>(mk::dsl::parse_file(std::string(MK_SOURCE_DIR "/examples/") + name + ".yaml"));
  return *slot;
}

Plan make_plan(const std::string& name, uint32_t sms, Policy policy = Policy::round_robin) {
  PlanOptions o;
  o.sm_count = sms;
  o.policy = policy;
  return mk::planner::plan(example(name), o);
}

// signalers[c]: the tasks that signal counter c (from the plan's tasks).
std::vector<std::vector<uint32_t>> signalers_of(const Plan& p) {
  std::vector<std::vector<uint32_t>> s(p.counters.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t c : p.tasks[t].signals) s[c].push_back(t);
  return s;
}

// implied[c]: every counter certainly complete once counter c is complete, following the waits
// of c's signalers; computed independently of the planner's bitsets.
std::vector<std::set<uint32_t>> implied_counters(const Plan& p) {
  const auto sig = signalers_of(p);
  std::vector<std::set<uint32_t>> implied(p.counters.size());
  std::vector<int> state(p.counters.size(), 0);  // 0 new, 1 in progress, 2 done
  auto visit = [&](auto&& self, uint32_t c) -> void {
    REQUIRE(state[c] != 1);  // a cycle among counters would be a planner bug
    if (state[c] == 2) return;
    state[c] = 1;
    implied[c].insert(c);
    for (uint32_t t : sig[c])
      for (const mk::schedule::Wait& w : p.tasks[t].waits) {
        self(self, w.counter);
        implied[c].insert(implied[w.counter].begin(), implied[w.counter].end());
      }
    state[c] = 2;
  };
  for (uint32_t c = 0; c < p.counters.size(); ++c) visit(visit, c);
  return implied;
}

// Every structural property of a plan, checked without trusting the planner's own passes.
void check_plan(const Plan& p, uint32_t sms, Policy policy) {
  const Schedule& s = p.schedule;
  const uint32_t n = static_cast<uint32_t>(p.tasks.size());
  REQUIRE(s.sm_count == sms);
  REQUIRE(s.task_count == n);
  REQUIRE(s.sm_offsets.size() == sms + 1);
  REQUIRE(s.counter_count == p.counters.size());

  // Every task appears exactly once across the queues, on the SM its Task records.
  std::vector<uint32_t> seen(n, 0), sm_of(n, 0), slot_of(n, 0);
  for (uint32_t sm = 0; sm < sms; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const uint32_t t = s.instructions[i].task;
      REQUIRE(t < n);
      ++seen[t];
      sm_of[t] = sm;
      slot_of[t] = i - s.sm_offsets[sm];
      CHECK(p.tasks[t].sm == sm);
      CHECK(s.instructions[i].op == p.tasks[t].op);
      CHECK(s.instructions[i].opcode == static_cast<uint16_t>(p.program.ops[p.tasks[t].op].opcode));
    }
  CHECK(std::count(seen.begin(), seen.end(), 1u) == static_cast<long>(n));
  CHECK(s.instructions.size() == n);

  // Ops own contiguous task ranges in the schedule's op table.
  uint32_t first = 0;
  for (uint32_t o = 0; o < s.ops.size(); ++o) {
    CHECK(s.ops[o].task_begin == first);
    CHECK(s.ops[o].task_count == p.program.ops[o].split);
    for (uint32_t t = first; t < first + s.ops[o].task_count; ++t) CHECK(p.tasks[t].op == o);
    first += s.ops[o].task_count;
  }
  CHECK(first == n);

  // Counter targets: the number of instructions that signal each counter.
  std::vector<uint32_t> signal_count(s.counter_count, 0);
  for (const Instruction& inst : s.instructions)
    for (uint32_t c : s.signals_of(inst)) ++signal_count[c];
  for (uint32_t c = 0; c < s.counter_count; ++c) {
    INFO("counter ", c);
    const mk::planner::OpInfo& op = p.program.ops[p.counters[c].op];
    if (c == op.ticket) {  // an op's ticket: its tasks take it in their bodies; no list names it
      CHECK(p.counters[c].chunk == op.chunks);
      CHECK(p.counters[c].target == op.split);
      CHECK(signal_count[c] == 0);
    } else {
      CHECK(p.counters[c].target == signal_count[c]);
    }
    CHECK(p.counters[c].target > 0);
  }
  // Every wait's target is its counter's target.
  for (const Instruction& inst : s.instructions)
    for (const mk::schedule::Wait& w : s.waits_of(inst)) {
      REQUIRE(w.counter < s.counter_count);
      CHECK(w.target == p.counters[w.counter].target);
    }
  // The instruction's waits and signals are the task's.
  for (const Instruction& inst : s.instructions) {
    const auto& task = p.tasks[inst.task];
    const auto waits = s.waits_of(inst);
    REQUIRE(waits.size() == task.waits.size());
    for (size_t k = 0; k < waits.size(); ++k) CHECK(waits[k].counter == task.waits[k].counter);
    const auto signals = s.signals_of(inst);
    CHECK(std::vector<uint32_t>(signals.begin(), signals.end()) == task.signals);
  }

  // The edges are exactly the read-after-write overlaps between tasks.
  std::set<std::pair<uint32_t, uint32_t>> edges(p.edges.begin(), p.edges.end());
  CHECK(edges.size() == p.edges.size());
  std::set<std::pair<uint32_t, uint32_t>> expected;
  for (uint32_t c = 0; c < n; ++c)
    for (const auto& r : p.tasks[c].spec.reads)
      for (uint32_t pr = 0; pr < n; ++pr) {
        const auto& w = p.tasks[pr].spec.write;
        if (w.tensor == r.tensor && w.begin < r.end && r.begin < w.end) expected.insert({pr, c});
      }
  CHECK(edges == expected);

  // Every edge is covered: each counter of the producer's op whose chunk the producer writes and
  // the consumer reads is one the consumer waits on, or is implied by one it waits on.
  const auto implied = implied_counters(p);
  for (const auto& [pr, c] : p.edges) {
    const uint32_t op = p.tasks[pr].op;
    const uint32_t out = p.program.ops[op].out;
    const uint64_t chunk = p.program.tensors[out].elements() / p.program.ops[op].chunks;
    const auto& w = p.tasks[pr].spec.write;
    std::set<uint32_t> covered;
    for (const auto& wt : p.tasks[c].waits) covered.insert(implied[wt.counter].begin(), implied[wt.counter].end());
    bool any = false;
    for (uint32_t k = 0; k < p.counters.size(); ++k) {
      if (p.counters[k].op != op) continue;
      const uint64_t b = p.counters[k].chunk * chunk, e = b + chunk;
      if (!(w.begin < e && b < w.end)) continue;  // the producer does not write this chunk
      bool read = false;
      for (const auto& r : p.tasks[c].spec.reads) read |= r.tensor == out && r.begin < e && b < r.end && r.begin < w.end && w.begin < r.end;
      if (!read) continue;
      any = true;
      INFO("edge ", pr, " -> ", c, ", counter ", k);
      CHECK(covered.count(k) == 1);
      CHECK(std::find(p.tasks[pr].signals.begin(), p.tasks[pr].signals.end(), k) != p.tasks[pr].signals.end());
    }
    INFO("edge ", pr, " -> ", c);
    CHECK(any);
  }

  // No task waits on two counters where one implies the other.
  for (uint32_t t = 0; t < n; ++t)
    for (const auto& a : p.tasks[t].waits)
      for (const auto& b : p.tasks[t].waits) {
        if (a.counter == b.counter) continue;
        INFO("task ", t, " waits on counters ", a.counter, " and ", b.counter);
        CHECK(implied[a.counter].count(b.counter) == 0);
      }

  // One topological order (of edges, waits and queue order) in which every queue increases:
  // Kahn's algorithm must order every task.
  std::vector<std::vector<uint32_t>> succ(n);
  const auto sig = signalers_of(p);
  for (const auto& [pr, c] : p.edges) succ[pr].push_back(c);
  for (uint32_t t = 0; t < n; ++t)
    for (const auto& w : p.tasks[t].waits)
      for (uint32_t pr : sig[w.counter]) succ[pr].push_back(t);
  for (uint32_t sm = 0; sm < sms; ++sm)
    for (uint32_t i = s.sm_offsets[sm] + 1; i < s.sm_offsets[sm + 1]; ++i)
      succ[s.instructions[i - 1].task].push_back(s.instructions[i].task);
  std::vector<uint32_t> indegree(n, 0), order;
  for (const auto& v : succ)
    for (uint32_t t : v) ++indegree[t];
  for (uint32_t t = 0; t < n; ++t)
    if (!indegree[t]) order.push_back(t);
  for (size_t k = 0; k < order.size(); ++k)
    for (uint32_t t : succ[order[k]])
      if (--indegree[t] == 0) order.push_back(t);
  CHECK(order.size() == n);
  std::vector<uint32_t> position(n);
  for (uint32_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  for (uint32_t sm = 0; sm < sms; ++sm)
    for (uint32_t i = s.sm_offsets[sm] + 1; i < s.sm_offsets[sm + 1]; ++i)
      CHECK(position[s.instructions[i - 1].task] < position[s.instructions[i].task]);

  if (policy == Policy::round_robin) {
    for (uint32_t t = 0; t < n; ++t) {
      CHECK(sm_of[t] == t % sms);
      CHECK(slot_of[t] == t / sms);
    }
  }
  CHECK(p.stats.critical_path_us > 0);
  CHECK(p.stats.critical_path_tasks >= 1);

  // The verifier accepts it, and so does the schedule validator.
  CHECK_NOTHROW(mk::planner::verify(s, p.edges, p.short_edges));
  CHECK_NOTHROW(mk::schedule::validate(s));
}

std::vector<double> bytes_per_sm(const Plan& p) {
  std::vector<double> b(p.schedule.sm_count, 0);
  for (const auto& t : p.tasks) b[t.sm] += mk::planner::task_bytes(t);
  return b;
}

// Runs verify and returns its refusal message ("" if it accepted).
std::string refusal(const Schedule& s, const mk::planner::Edges& edges, const mk::planner::Edges& short_edges) {
  try {
    mk::planner::verify(s, edges, short_edges);
  } catch (const PlanError& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Plans both tiny models at 1, 3, 8 and 132 SMs under both policies and hands each plan to f.
template <class F>
void for_each_tiny_plan(F&& f) {
  for (const std::string name : {"tiny-llama", "tiny-qwen3"})
    for (uint32_t sms : {1u, 3u, 8u, 132u})
      for (Policy policy : {Policy::round_robin, Policy::critical_path}) {
        CAPTURE(name);
        CAPTURE(sms);
        const std::string policy_name = mk::planner::policy_name(policy);
        CAPTURE(policy_name);
        f(make_plan(name, sms, policy), name, sms, policy, policy_name);
      }
}

}  // namespace

TEST_CASE("planner: tiny models, several SM counts, both policies") {
  for_each_tiny_plan([](const Plan& p, const std::string&, uint32_t sms, Policy policy, const std::string&) {
    CHECK(p.policy == policy);
    check_plan(p, sms, policy);
  });
}

TEST_CASE("planner: tiny-llama task and counter counts") {
  const Plan p = make_plan("tiny-llama", 8);
  // embed 4 + 3 layers x (12 + 4 + 4 + 6 + 8 + 8) + LM head 8 + argmax 4
  CHECK(p.tasks.size() == 4 + 3 * 42 + 8 + 4);
  // one counter per chunk: embed 1, per layer 3 + 2 + 1 + 1 + 1 + 4, LM head 4, argmax 1; then
  // the argmax's ticket
  CHECK(p.counters.size() == 1 + 3 * 12 + 4 + 1 + 1);
  CHECK(p.program.ops.size() == 1 + 3 * 6 + 2);
  // Argmax task k waits for the LM head's chunk k (128 logits: two of its 8 tasks) alone.
  for (uint32_t k = 0; k < 4; ++k) {
    const auto& argmax = p.tasks[p.tasks.size() - 4 + k];
    REQUIRE(argmax.waits.size() == 1);
    CHECK(argmax.waits[0].counter == p.program.ops.back().ticket - 5 + k);
    CHECK(argmax.waits[0].target == 2);
  }
}

TEST_CASE("planner: an argmax split in tasks gets a workspace and a ticket; each task waits for its chunk of the logits only") {
  const Plan p = make_plan("llama-3.2-1b", 132);
  const mk::planner::OpInfo& head = p.program.ops[p.program.ops.size() - 2];
  const mk::planner::OpInfo& op = p.program.ops.back();
  REQUIRE(op.opcode == mk::schedule::Opcode::argmax);
  REQUIRE(op.split == 96);
  REQUIRE(head.chunks == 96);
  // The workspace: a (value, index) pair per task.
  REQUIRE(op.workspace != mk::schedule::kNone);
  const mk::schedule::Tensor& parts = p.schedule.tensors[op.workspace];
  CHECK(parts.name == "next_token.parts");
  CHECK(parts.dtype == mk::schedule::DType::i32);
  CHECK(parts.role == mk::schedule::Role::activation);
  CHECK(parts.elements() == 2 * 96);
  // The ticket: the last counter, of target 96, in no list.
  CHECK(op.ticket == p.schedule.counter_count - 1);
  CHECK(p.counters[op.ticket].target == 96);
  CHECK(std::count(p.schedule.signals.begin(), p.schedule.signals.end(), op.ticket) == 0);
  for (const mk::schedule::Wait& w : p.schedule.waits) CHECK(w.counter != op.ticket);
  // The tasks cover the logits in order, in ranges of 1336 (the chunks), each waiting for its own.
  uint32_t next = 0;
  for (uint32_t k = 0; k < 96; ++k) {
    const mk::planner::Task& t = p.tasks[p.tasks.size() - 96 + k];
    const auto pl = mk::schedule::payload_as<mk::schedule::ArgmaxPayload>(t.spec.inst);
    CAPTURE(k);
    CHECK(pl.task == k);
    CHECK(pl.tasks == 96);
    CHECK(pl.begin == next);
    CHECK(pl.end == next + 1336);
    CHECK(pl.parts == op.workspace);
    CHECK(pl.ticket == op.ticket);
    REQUIRE(t.waits.size() == 1);
    CHECK(t.waits[0].counter == op.ticket - 1 - 96 + k);  // the head's chunk k (before the argmax's own counter)
    CHECK(p.counters[t.waits[0].counter].op == p.program.ops.size() - 2);
    CHECK(p.counters[t.waits[0].counter].chunk == k);
    next = pl.end;
  }
  CHECK(next == 128256);
  // One task (tiny-llama's argmax with its split left out: 512 logits are one task's): neither.
  std::string yaml = mk::io::read_input_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml", mk::limits::kMaxTextBytes);
  const std::string split = "out: next_token, split: 4}";
  REQUIRE(yaml.find(split) != std::string::npos);
  yaml.replace(yaml.find(split), split.size(), "out: next_token}");
  const mk::dsl::ModelGraph model = mk::dsl::parse_string(yaml, "one.yaml");
  PlanOptions o;
  o.sm_count = 8;
  const Plan one = mk::planner::plan(model, o);
  CHECK(one.program.ops.back().split == 1);
  CHECK(one.program.ops.back().workspace == mk::schedule::kNone);
  CHECK(one.program.ops.back().ticket == mk::schedule::kNone);
  CHECK(one.counters.size() == make_plan("tiny-llama", 8).counters.size() - 1);
  const auto pl = mk::schedule::payload_as<mk::schedule::ArgmaxPayload>(one.tasks.back().spec.inst);
  CHECK(pl.tasks == 1);
  CHECK(pl.task == 0);
  CHECK(pl.begin == 0);
  CHECK(pl.end == 512);
  CHECK(pl.parts == mk::schedule::kNone);
  CHECK(pl.ticket == mk::schedule::kNone);
  CHECK(one.schedule.tensors.size() == make_plan("tiny-llama", 8).schedule.tensors.size() - 1);
}

TEST_CASE("planner: transitive wait reduction") {
  const Plan p = make_plan("tiny-llama", 8);
  CHECK(p.stats.waits_removed > 0);
  uint32_t full = 0, kept = 0;
  for (const auto& t : p.tasks) {
    full += t.full_wait_count;
    kept += static_cast<uint32_t>(t.waits.size());
    CHECK(t.waits.size() <= t.full_wait_count);
  }
  CHECK(full - kept == p.stats.waits_removed);
  // The o projection reads attn (from attn_reduce) and its residual x0 (from embed): waiting
  // for attn implies x0 is complete, so no o-projection task waits on an embed counter.
  for (const auto& t : p.tasks) {
    const auto& op = p.program.ops[t.op];
    if (op.name != "h0") continue;
    for (const auto& w : t.waits) CHECK(p.program.ops[p.counters[w.counter].op].name != "x0");
  }
}

TEST_CASE("planner: bytes per SM are balanced under both policies") {
  for_each_tiny_plan([](const Plan& p, const std::string& name, uint32_t sms, Policy, const std::string& policy_name) {
    CHECK_NOTHROW(mk::planner::verify(p.schedule, p.edges, p.short_edges));
    const auto b = bytes_per_sm(p);
    const double mean = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
    const double max = *std::max_element(b.begin(), b.end());
    double largest = 0;
    for (const auto& t : p.tasks) largest = std::max(largest, mk::planner::task_bytes(t));
    INFO(name, " at ", sms, " SMs, ", policy_name, ": max ", max, " bytes per SM, mean ", mean,
            ", largest task ", largest, ", critical path ", p.stats.critical_path_us, " us");
    // Within 2x of the mean; where a single task is already above that (a tiny model on 132
    // SMs has about one task per SM), no SM may hold more than that one task's worth.
    CHECK(max <= std::max(2 * mean, largest));
  });
}

TEST_CASE("planner: the critical-path policy uses every SM of a real model") {
  // llama-3.2-1b has about 80 tasks per SM at 132 SMs; an SM left without work is lost bandwidth.
  const Plan p = make_plan("llama-3.2-1b", 132, Policy::critical_path);
  CHECK_NOTHROW(mk::planner::verify(p.schedule, p.edges, p.short_edges));
  const auto b = bytes_per_sm(p);
  const double mean = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
  uint32_t idle = 0;
  for (uint32_t sm = 0; sm < 132; ++sm) idle += p.schedule.sm_offsets[sm + 1] == p.schedule.sm_offsets[sm];
  MESSAGE("llama-3.2-1b critical-path at 132 SMs: ", idle, " SMs without work; bytes per SM min ",
          *std::min_element(b.begin(), b.end()), " max ", *std::max_element(b.begin(), b.end()), " mean ", mean);
  CHECK(idle == 0);
  CHECK(*std::max_element(b.begin(), b.end()) <= 2 * mean);
  CHECK(*std::min_element(b.begin(), b.end()) >= 0.5 * mean);
}

TEST_CASE("planner: the policies agree on everything but the queues") {
  const Plan rr = make_plan("tiny-qwen3", 8, Policy::round_robin);
  const Plan cp = make_plan("tiny-qwen3", 8, Policy::critical_path);
  REQUIRE(rr.tasks.size() == cp.tasks.size());
  CHECK(rr.edges == cp.edges);
  REQUIRE(rr.counters.size() == cp.counters.size());
  for (size_t c = 0; c < rr.counters.size(); ++c) CHECK(rr.counters[c].target == cp.counters[c].target);
  CHECK(rr.stats.critical_path_us == doctest::Approx(cp.stats.critical_path_us));
  CHECK(rr.stats.waits_removed == cp.stats.waits_removed);
}

TEST_CASE("planner: policy names and bad SM counts") {
  CHECK(mk::planner::policy_by_name("round-robin") == Policy::round_robin);
  CHECK(mk::planner::policy_by_name("critical-path") == Policy::critical_path);
  CHECK_THROWS_AS(mk::planner::policy_by_name("random"), std::invalid_argument);
  PlanOptions o;
  o.sm_count = 0;
  CHECK_THROWS_AS(mk::planner::plan(example("tiny-llama"), o), std::invalid_argument);
  o.sm_count = 5000;
  CHECK_THROWS_AS(mk::planner::plan(example("tiny-llama"), o), std::invalid_argument);
}

// ---- short steps ----

// The plan's tasks of the op named `name` in layer 0.
std::vector<const mk::planner::Task*> layer0_tasks(const Plan& p, const std::string& name) {
  std::vector<const mk::planner::Task*> out;
  for (const auto& t : p.tasks)
    if (p.program.ops[t.op].name == name) out.push_back(&t);
  return out;
}

TEST_CASE("planner: at short steps each attn_reduce task is done by its kv head's split 0, which signals for it") {
  for (const std::string name : {"tiny-llama", "tiny-qwen3", "llama-3.2-1b"})
    for (const uint32_t sms : {1u, 5u, 132u}) {
      CAPTURE(name);
      CAPTURE(sms);
      const Plan p = make_plan(name, sms, Policy::critical_path);
      uint32_t reduce_tasks = 0;
      // For every counter, the signals it gets are as many at short steps as at others.
      std::vector<int64_t> balance(p.counters.size(), 0);
      for (const auto& t : p.tasks) {
        for (uint32_t c : t.signals) ++balance[c];
        for (uint32_t c : t.short_signals) --balance[c];
      }
      CHECK(std::all_of(balance.begin(), balance.end(), [](int64_t b) { return b == 0; }));
      std::map<uint32_t, uint32_t> taker_of;  // bypassed task -> its taker
      for (const auto& t : p.tasks) {
        if (p.program.ops[t.op].opcode != mk::schedule::Opcode::attn_reduce) {
          CHECK_FALSE(t.bypassed);
          continue;
        }
        ++reduce_tasks;
        const auto& r = mk::schedule::payload_as<mk::schedule::AttnReducePayload>(t.spec.inst);
        CHECK(r.bypassed == 1);
        CHECK(t.bypassed);
        CHECK(t.short_signals.empty());
        // The taker: the attention task of the same layer owning unit (kv head, split 0).
        const uint32_t unit = r.head_begin / r.rep * r.kv_splits;
        const auto taker = std::find_if(p.tasks.begin(), p.tasks.end(), [&](const mk::planner::Task& a) {
          if (p.program.ops[a.op].opcode != mk::schedule::Opcode::attention || p.program.ops[a.op].layer != p.program.ops[t.op].layer)
            return false;
          const auto& ap = mk::schedule::payload_as<mk::schedule::AttentionPayload>(a.spec.inst);
          return ap.unit_begin <= unit && unit < ap.unit_end;
        });
        REQUIRE(taker != p.tasks.end());
        CHECK(mk::schedule::payload_as<mk::schedule::AttentionPayload>(taker->spec.inst).reduce_out == r.out);
        for (uint32_t c : t.signals) CHECK(std::count(taker->short_signals.begin(), taker->short_signals.end(), c) >= 1);
        taker_of[static_cast<uint32_t>(&t - p.tasks.data())] = static_cast<uint32_t>(taker - p.tasks.begin());
      }
      CHECK(p.short_takeovers == reduce_tasks);
      // At short steps a bypassed task reads and produces nothing: no edge goes into it, and its
      // consumers' edges start at its taker; every other edge is as at other steps.
      std::vector<std::pair<uint32_t, uint32_t>> want;
      for (const auto& [a, b] : p.edges) {
        if (p.tasks[b].bypassed) continue;
        const auto taker = taker_of.find(a);
        want.emplace_back(taker == taker_of.end() ? a : taker->second, b);
      }
      CHECK(p.short_edges == want);
      // The schedule file keeps one list where they agree.
      for (const auto& inst : p.schedule.instructions) {
        const auto& t = p.tasks[inst.task];
        if (t.short_signals == t.signals) CHECK(inst.short_signal_begin == inst.signal_begin);
        const auto sig = p.schedule.signals_of(inst, true);
        CHECK(std::vector<uint32_t>(sig.begin(), sig.end()) == t.short_signals);
        // A bypassed task waits for nothing at short steps (it runs at once, doing nothing);
        // every other task for all of its waits.
        CHECK(inst.short_wait_count == (t.bypassed ? 0 : inst.wait_count));
        CHECK(p.schedule.waits_of(inst, true).size() == inst.short_wait_count);
      }
    }
}

TEST_CASE("planner: no short steps for attention partials that two ops read") {
  // A second attn_reduce of the same partials, feeding a second o projection: at short steps the
  // attention could write only one of the two outputs, so neither is taken over.
  std::string yaml = mk::io::read_input_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml", mk::limits::kMaxTextBytes);
  const std::string reduce = "        - {op: attn_reduce, in: \"attn_part{layer}\", out: \"attn{layer}\", split: 4}\n";
  REQUIRE(yaml.find(reduce) != std::string::npos);
  yaml.insert(yaml.find(reduce) + reduce.size(),
              "        - {op: attn_reduce, in: \"attn_part{layer}\", out: \"attnb{layer}\", split: 4}\n"
              "        - {op: matvec, in: \"attnb{layer}\", weight: \"wo{layer}\", out: \"hb{layer}\", split: 4}\n");
  const mk::dsl::ModelGraph model = mk::dsl::parse_string(yaml, "tiny-llama-two-reduces.yaml");
  PlanOptions o;
  o.sm_count = 8;
  const Plan p = mk::planner::plan(model, o);
  CHECK(p.short_takeovers == 0);
  for (const auto& t : p.tasks) {
    CHECK(t.short_signals == t.signals);
    if (p.program.ops[t.op].opcode == mk::schedule::Opcode::attn_reduce)
      CHECK(mk::schedule::payload_as<mk::schedule::AttnReducePayload>(t.spec.inst).bypassed == 0);
  }
}

TEST_CASE("planner: attn_reduce tasks that span two kv heads keep their work at short steps") {
  // tiny-llama has 4 q heads per kv head; attn_reduce split 3 gives heads [0, 2), [2, 5), [5, 8).
  std::string yaml = mk::io::read_input_file(MK_SOURCE_DIR "/examples/tiny-llama.yaml", mk::limits::kMaxTextBytes);
  const std::string from = "out: \"attn{layer}\", split: 4}", to = "out: \"attn{layer}\", split: 3}";
  REQUIRE(yaml.find(from) != std::string::npos);
  yaml.replace(yaml.find(from), from.size(), to);
  const mk::dsl::ModelGraph model = mk::dsl::parse_string(yaml, "tiny-llama-split3.yaml");
  PlanOptions o;
  o.sm_count = 8;
  const Plan p = mk::planner::plan(model, o);
  CHECK(p.short_takeovers == 0);
  CHECK(p.short_edges == p.edges);
  for (const auto& t : p.tasks) {
    CHECK(t.short_signals == t.signals);
    if (p.program.ops[t.op].opcode == mk::schedule::Opcode::attention)
      CHECK(mk::schedule::payload_as<mk::schedule::AttentionPayload>(t.spec.inst).reduce_out == mk::schedule::kNone);
  }
}

TEST_CASE("planner: the KV split policy's defaults follow the attention's head_dim; the config overrides them") {
  // Short steps while one kv head's k and v fit kShortStepBytes (128 KB): head_dim 64 -> 512
  // positions, head_dim 128 -> 256; splits of 64 positions past them.
  for (const auto& [file, head_dim] : std::vector<std::pair<std::string, uint32_t>>{{"llama-3.2-1b", 64}, {"qwen3-4b", 128}}) {
    CAPTURE(file);
    const Plan p = make_plan(file, 132);
    CHECK(mk::planner::attention_head_dim(p.program) == head_dim);
    CHECK(p.schedule.kv_splits.short_positions == (head_dim == 64 ? 512u : 256u));
    CHECK(p.schedule.kv_splits.positions == mk::planner::kDefaultKvSplitPositions);
  }
  const Plan p = make_plan("tiny-qwen3", 8);  // sets both in its config
  CHECK(p.schedule.kv_splits.positions == 2);
  CHECK(p.schedule.kv_splits.short_positions == 3);
  // No attention op: no short steps (the step has nothing to shorten).
  const mk::dsl::ModelGraph mlp = mk::dsl::parse_string(
      "model: mlp\n"
      "config: {vocab: 16, hidden: 8}\n"
      "weights:\n"
      "  e: {key: e, shape: [vocab, hidden]}\n"
      "  w: {key: w, shape: [vocab, hidden]}\n"
      "ops:\n"
      "  - {op: embed, table: e, out: x}\n"
      "  - {op: matvec, in: x, weight: w, out: logits}\n"
      "  - {op: argmax, in: logits, out: t}\n",
      "mlp.yaml");
  PlanOptions o;
  o.sm_count = 8;
  const Plan q = mk::planner::plan(mlp, o);
  CHECK(mk::planner::attention_head_dim(q.program) == 0);
  CHECK(q.schedule.kv_splits.short_positions == 0);
}

// ---- verifier refusals ----

TEST_CASE("verifier: a wait target raised by one can never be met") {
  const Plan p = make_plan("tiny-llama", 8);
  Schedule s = p.schedule;
  REQUIRE(refusal(s, p.edges, p.short_edges).empty());
  // The first instruction with a wait.
  const auto it = std::find_if(s.instructions.begin(), s.instructions.end(), [](const Instruction& i) { return i.wait_count > 0; });
  REQUIRE(it != s.instructions.end());
  mk::schedule::Wait& w = s.waits[it->wait_begin];
  ++w.target;
  const std::string why = refusal(s, p.edges, p.short_edges);
  INFO(why);
  CHECK(contains(why, "can never be met"));
  CHECK(contains(why, "task " + std::to_string(it->task) + " "));
  CHECK(contains(why, "counter " + std::to_string(w.counter) + " "));
  CHECK(contains(why, "to reach " + std::to_string(w.target)));
}

TEST_CASE("verifier: a wait target lowered by one could pass early") {
  const Plan p = make_plan("tiny-llama", 8);
  Schedule s = p.schedule;
  // A wait whose counter has several signalers (the target stays positive).
  uint32_t inst = mk::schedule::kNone;
  for (uint32_t i = 0; i < s.instructions.size() && inst == mk::schedule::kNone; ++i)
    if (s.instructions[i].wait_count > 0 && s.waits[s.instructions[i].wait_begin].target >= 2) inst = i;
  REQUIRE(inst != mk::schedule::kNone);
  mk::schedule::Wait& w = s.waits[s.instructions[inst].wait_begin];
  --w.target;
  const std::string why = refusal(s, p.edges, p.short_edges);
  INFO(why);
  CHECK(contains(why, "could pass"));
  CHECK(contains(why, "task " + std::to_string(s.instructions[inst].task) + " "));
  CHECK(contains(why, "counter " + std::to_string(w.counter) + " "));
}

TEST_CASE("verifier: short steps are proven apart (a taker's short list short of one signal, a bypassed task signalling, a task not bypassed skipping its waits)") {
  const Plan p = make_plan("tiny-llama", 8);
  // The first attention instruction whose short list is its own (a taker).
  uint32_t taker = mk::schedule::kNone;
  for (uint32_t i = 0; i < p.schedule.instructions.size() && taker == mk::schedule::kNone; ++i)
    if (p.schedule.instructions[i].short_signal_begin != p.schedule.instructions[i].signal_begin) taker = i;
  REQUIRE(taker != mk::schedule::kNone);
  {
    Schedule s = p.schedule;
    REQUIRE(s.instructions[taker].short_signal_count > s.instructions[taker].signal_count);
    --s.instructions[taker].short_signal_count;  // the last signal it makes for an attn_reduce task
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "at short steps"));
    CHECK(contains(why, "can never be met"));
  }
  {
    Schedule s = p.schedule;  // a bypassed attn_reduce task signalling at short steps too
    const auto it = std::find_if(s.instructions.begin(), s.instructions.end(), [](const Instruction& i) {
      return i.opcode == static_cast<uint16_t>(mk::schedule::Opcode::attn_reduce);
    });
    REQUIRE(it != s.instructions.end());
    REQUIRE(it->short_signal_count == 0);
    it->short_signal_begin = it->signal_begin;
    it->short_signal_count = it->signal_count;
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "at short steps"));
    CHECK(contains(why, "could pass"));
  }
  {
    Schedule s = p.schedule;  // o-proj (a matvec reading attn_reduce's output) without its waits at short steps
    const auto it = std::find_if(s.instructions.begin(), s.instructions.end(), [&](const Instruction& i) {
      return i.opcode == static_cast<uint16_t>(mk::schedule::Opcode::matvec) && i.wait_count > 0 &&
             s.ops[i.op].name.rfind("h", 0) == 0;
    });
    REQUIRE(it != s.instructions.end());
    REQUIRE(it->short_wait_count == it->wait_count);
    it->short_wait_count = 0;
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "at short steps"));
    CHECK(contains(why, "missing dependency"));
  }
  // The regular edges are not enough at short steps: o-proj reads what the taker writes there.
  const std::string why = refusal(p.schedule, p.edges, p.edges);
  INFO(why);
  CHECK(contains(why, "at short steps"));
  CHECK(contains(why, "missing dependency"));
}

TEST_CASE("verifier: a consumer before its producer on one SM is a deadlock") {
  const Plan p = make_plan("tiny-qwen3", 1);
  Schedule s = p.schedule;
  const uint32_t n = static_cast<uint32_t>(s.instructions.size());
  // On one SM the queue is the task order: the LM head's last task, then the argmax's first, which
  // waits for the LM head's one counter. Swap them, adjusting nothing else.
  const uint32_t consumer = n - p.program.ops.back().split, producer = consumer - 1;
  REQUIRE(s.instructions[producer].task == producer);
  REQUIRE(s.instructions[consumer].task == consumer);
  REQUIRE(s.instructions[consumer].wait_count == 1);
  const uint32_t counter = s.waits[s.instructions[consumer].wait_begin].counter;
  const auto sig = s.signals_of(s.instructions[producer]);
  REQUIRE(std::find(sig.begin(), sig.end(), counter) != sig.end());
  std::swap(s.instructions[producer], s.instructions[consumer]);
  const std::string why = refusal(s, p.edges, p.short_edges);
  INFO(why);
  CHECK(contains(why, "deadlock: a cycle of 2 instructions"));
  CHECK(contains(why, "task " + std::to_string(consumer) + " (op 'next_token', SM 0 instruction " + std::to_string(producer) + ")"));
  CHECK(contains(why, "task " + std::to_string(producer) + " (op 'logits', SM 0 instruction " + std::to_string(consumer) + ")"));
  CHECK(contains(why, "runs after"));
  CHECK(contains(why, "waits for counter " + std::to_string(counter)));
  CHECK(contains(why, "signals"));
}

TEST_CASE("verifier: a longer deadlock cycle through several instructions") {
  const Plan p = make_plan("tiny-llama", 1);
  Schedule s = p.schedule;
  // Move the argmax to the front of the only queue: it waits for the LM head, which now runs
  // (through the whole queue) after it.
  std::rotate(s.instructions.begin(), s.instructions.end() - 1, s.instructions.end());
  const std::string why = refusal(s, p.edges, p.short_edges);
  INFO(why);
  CHECK(contains(why, "deadlock: a cycle of"));
  CHECK(contains(why, "op 'next_token', SM 0 instruction 0"));
}

TEST_CASE("verifier: a dropped wait is a missing dependency") {
  const Plan p = make_plan("tiny-llama", 8);
  SUBCASE("the argmax's only wait") {
    Schedule s = p.schedule;
    const uint32_t argmax = static_cast<uint32_t>(p.tasks.size() - 1);
    auto it = std::find_if(s.instructions.begin(), s.instructions.end(), [&](const Instruction& i) { return i.task == argmax; });
    REQUIRE(it != s.instructions.end());
    REQUIRE(it->wait_count == 1);
    it->wait_count = it->short_wait_count = 0;
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "missing dependency"));
    CHECK(contains(why, "task " + std::to_string(argmax) + " (op 'next_token'"));
    CHECK(contains(why, "op 'logits'"));
  }
  SUBCASE("one wait of a consumer with several") {
    Schedule s = p.schedule;
    const auto sig = signalers_of(p);
    bool done = false;
    for (Instruction& inst : s.instructions) {
      if (inst.wait_count < 2) continue;
      // Drop the first wait if one of its signalers is on another SM (so queue order cannot cover it).
      const uint32_t c = s.waits[inst.wait_begin].counter;
      const bool elsewhere = std::any_of(sig[c].begin(), sig[c].end(), [&](uint32_t t) { return p.tasks[t].sm != p.tasks[inst.task].sm; });
      if (!elsewhere) continue;
      ++inst.wait_begin;
      --inst.wait_count;
      inst.short_wait_count = std::min(inst.short_wait_count, inst.wait_count);
      const std::string why = refusal(s, p.edges, p.short_edges);
      INFO(why);
      CHECK(contains(why, "missing dependency: task " + std::to_string(inst.task) + " "));
      done = true;
      break;
    }
    CHECK(done);
  }
}

TEST_CASE("verifier: every task exactly once") {
  const Plan p = make_plan("tiny-llama", 8);
  SUBCASE("a duplicated task") {
    Schedule s = p.schedule;
    const Instruction copy = s.instructions.front();
    s.instructions.push_back(copy);
    ++s.sm_offsets.back();
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "task " + std::to_string(copy.task) + " is scheduled twice"));
    CHECK(contains(why, "SM " + std::to_string(s.sm_count - 1)));
  }
  SUBCASE("a task given another's id") {
    Schedule s = p.schedule;
    s.instructions[s.sm_offsets[1]].task = s.instructions[0].task;
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "task " + std::to_string(s.instructions[0].task) + " is scheduled twice"));
  }
  SUBCASE("a removed task") {
    Schedule s = p.schedule;
    // Remove the last instruction of SM 0's queue.
    const uint32_t at = s.sm_offsets[1] - 1;
    const uint32_t task = s.instructions[at].task;
    s.instructions.erase(s.instructions.begin() + at);
    for (uint32_t sm = 1; sm <= s.sm_count; ++sm) --s.sm_offsets[sm];
    const std::string why = refusal(s, p.edges, p.short_edges);
    INFO(why);
    CHECK(contains(why, "task " + std::to_string(task) + " is on no SM's queue"));
  }
}

TEST_CASE("verifier: a required edge the waits do not cover") {
  // An extra required edge between two independent tasks (two embed tasks) on different SMs.
  const Plan p = make_plan("tiny-llama", 8);
  auto edges = p.edges;
  edges.emplace_back(0, 1);
  const std::string why = refusal(p.schedule, edges, p.short_edges);
  INFO(why);
  CHECK(contains(why, "missing dependency: task 1 (op 'x0', SM 1 instruction 0) reads what task 0 (op 'x0', SM 0"));
  // On one SM the queue order covers it.
  const Plan one = make_plan("tiny-llama", 1);
  auto edges1 = one.edges, short1 = one.short_edges;
  edges1.emplace_back(0, 1);
  short1.emplace_back(0, 1);
  CHECK(refusal(one.schedule, edges1, short1).empty());
}

// ---- DOT ----

// Counts of `part` in `text`.
size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string dot_of(const Plan& p, const mk::planner::DotOptions& o) {
  std::ostringstream out;
  mk::planner::write_dot(p, out, o);
  return out.str();
}

// Renders with Graphviz when it is installed; returns whether it rendered (true when skipped).
bool renders(const std::string& dot, const std::string& name) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) return true;
  const auto dir = std::filesystem::temp_directory_path() / ("mk_test_dot_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / (name + ".dot"), svg = dir / (name + ".svg");
  std::ofstream(in) << dot;
  const std::string cmd = "dot -Tsvg '" + in.string() + "' -o '" + svg.string() + "' 2>'" + (dir / "err.txt").string() + "'";
  const bool ok = std::system(cmd.c_str()) == 0 && std::filesystem::file_size(svg) > 1000;
  std::filesystem::remove_all(dir);
  return ok;
}

TEST_CASE("planner: op-level DOT draws the repeated block once") {
  for (const std::string name : {"tiny-llama", "llama-3.2-1b"}) {
    INFO(name);
    const Plan p = make_plan(name, name[0] == 't' ? 8 : 132);
    const auto& ops = p.program.ops;
    const int layers = p.program.model->layers;
    const size_t per_layer = std::count_if(ops.begin(), ops.end(), [](const auto& op) { return op.layer == 0; });
    const size_t outside = std::count_if(ops.begin(), ops.end(), [](const auto& op) { return op.layer < 0; });
    const std::string dot = dot_of(p, {});
    CHECK(dot.rfind("digraph", 0) == 0);
    // One cluster marked with the layer count, one node per op of the block, the others once.
    CHECK(count(dot, "subgraph cluster_") == 1);
    CHECK(contains(dot, "label=\"× " + std::to_string(layers) + " (layers 0–" + std::to_string(layers - 1) + ")\""));
    CHECK_FALSE(contains(dot, "cluster_layer"));
    CHECK(std::regex_search(dot, std::regex("\n    k[0-9]+ \\[label=\"qkv\\{0\\.\\." + std::to_string(layers - 1) + "\\}\\\\nmatvec")));
    const std::regex block_node("\n    k[0-9]+ \\[");
    CHECK(std::distance(std::sregex_iterator(dot.begin(), dot.end(), block_node), std::sregex_iterator()) == per_layer);
    CHECK(count(dot, "\n    op") == outside);
    // Dataflow (a residual whose wait another implies) and wait edges; labels summarised.
    CHECK(contains(dot, "class=\"wait\""));
    CHECK(contains(dot, "class=\"dataflow\""));
    CHECK(contains(dot, "residual\\n(wait implied)"));
    CHECK(contains(dot, "qkv: 48 chunks, targets") == (name[0] == 'l'));
    CHECK(std::regex_search(dot, std::regex("in: [0-9]+ chunks?, target [0-9]+")));
    CHECK_FALSE(std::regex_search(dot, std::regex("c[0-9]+ = [0-9]+")));
    // Into the block from the embedding, out of it to the LM head, and layer to layer, once each.
    CHECK(contains(dot, "→ layer 0"));
    CHECK(contains(dot, "from layer " + std::to_string(layers - 1)));
    CHECK(count(dot, "next layer: in:") == 1);
    CHECK(count(dot, "shape=cylinder") == 2);  // the k and v caches
    CHECK(renders(dot, name));
  }
}

TEST_CASE("planner: --dot-expand draws every layer, labels break lines with DOT's \\n") {
  const Plan p = make_plan("tiny-llama", 8);
  mk::planner::DotOptions o;
  o.expand = true;
  const std::string dot = dot_of(p, o);
  CHECK(contains(dot, "cluster_layer0"));
  CHECK(contains(dot, "cluster_layer2"));
  CHECK_FALSE(contains(dot, "cluster_layer3"));
  CHECK(count(dot, "\n    op") == p.program.ops.size());
  CHECK(contains(dot, "op20 [label=\"next_token\\nargmax × 4 tasks\""));
  CHECK(contains(dot, "[label=\"x0\\nembed × 4 tasks\""));
  CHECK_FALSE(contains(dot, "\\\\n"));
  // The argmax waits for the LM head's four chunks, each of target 2.
  CHECK(contains(dot, "op19 -> op20 [label=\"in: 4 chunks, target 2\", style=solid"));
  CHECK(count(dot, "shape=cylinder") == 6);
  CHECK(renders(dot, "expand"));
}

TEST_CASE("planner: task-level DOT, whole and filtered by layers and ops") {
  const Plan p = make_plan("tiny-llama", 8);
  mk::planner::DotOptions o;
  o.level = mk::planner::DotLevel::task;
  const std::string all = dot_of(p, o);
  CHECK(count(all, "\n    t") == p.tasks.size());
  CHECK(contains(all, "t" + std::to_string(p.tasks.size() - 1) + " [label=\"next_token[3]\\nSM "));  // the argmax's 4th task
  CHECK(count(all, " [shape=ellipse") == p.counters.size() - 1);  // not the argmax's ticket, which no list names
  CHECK(count(all, "class=\"wait\"") == p.schedule.waits.size());
  size_t signals = 0;  // the regular lists (the short steps' lists are not drawn)
  for (const auto& inst : p.schedule.instructions) signals += inst.signal_count;
  CHECK(count(all, "class=\"signal\"") == signals);
  CHECK(renders(all, "task"));

  o.first_layer = o.last_layer = 1;
  const std::string layer = dot_of(p, o);
  size_t tasks = 0;
  for (const auto& t : p.tasks) tasks += p.program.ops[t.op].layer == 1;
  CHECK(count(layer, "\n    t") == tasks);
  CHECK(contains(layer, "layers 1–1"));
  CHECK(renders(layer, "layer1"));

  o.ops = {"attn*", "embed"};  // embed is outside the block: drawn because it is named
  const std::string some = dot_of(p, o);
  tasks = 0;
  for (const auto& t : p.tasks) {
    const auto& op = p.program.ops[t.op];
    tasks += (op.layer == 1 && op.name.rfind("attn", 0) == 0) || op.opcode == mk::schedule::Opcode::embed;
  }
  CHECK(count(some, "\n    t") == tasks);
  CHECK(contains(some, "cluster_op0 "));
}

// ---- a real model ----

TEST_CASE("planner: llama-3.1-8b at 132 SMs") {
  const auto& model = example("llama-3.1-8b");
  const auto start = std::chrono::steady_clock::now();
  const Plan p = make_plan("llama-3.1-8b", 132);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("planned and verified llama-3.1-8b (", p.tasks.size(), " tasks, ", p.counters.size(), " counters, ",
          p.schedule.waits.size(), " waits) in ", ms, " ms");
  CHECK(p.tasks.size() > 10000);
  CHECK(model.layers == 32);
  CHECK(p.stats.waits_removed > 0);
  // Round robin: the queues differ in length by at most one.
  uint32_t lo = UINT32_MAX, hi = 0;
  for (uint32_t sm = 0; sm < 132; ++sm) {
    const uint32_t len = p.schedule.sm_offsets[sm + 1] - p.schedule.sm_offsets[sm];
    lo = std::min(lo, len);
    hi = std::max(hi, len);
  }
  CHECK(hi - lo <= 1);
}
