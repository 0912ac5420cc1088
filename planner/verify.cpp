#include <algorithm>
#include <sstream>

#include "planner/graph.hpp"
#include "planner/plan.hpp"

namespace mk::planner {
namespace {

using schedule::Instruction;
using schedule::Schedule;

struct Where {
  std::vector<uint32_t> sm, slot;       // per instruction
  std::vector<uint32_t> instruction;    // per task
};

std::string describe(const Schedule& s, const Where& w, uint32_t i) {
  const Instruction& inst = s.instructions[i];
  std::ostringstream o;
  o << "task " << inst.task << " (op '" << (inst.op < s.ops.size() ? s.ops[inst.op].name : "?") << "', SM " << w.sm[i]
    << " instruction " << w.slot[i] << ")";
  return o.str();
}

std::string counter_name(const Schedule& s, const std::vector<std::vector<uint32_t>>& signalers, uint32_t c) {
  std::ostringstream o;
  o << "counter " << c;
  if (!signalers[c].empty()) {
    const Instruction& first = s.instructions[signalers[c].front()];
    if (first.op < s.ops.size()) o << " (of op '" << s.ops[first.op].name << "')";
  }
  return o.str();
}

[[noreturn]] void refuse(const std::string& why) { throw PlanError("schedule refused: " + why); }

// One path's proof: every step signals with `short_step`'s lists; `why` begins each refusal.
void verify_path(const Schedule& s, const Where& w, const Edges& required_edges, bool short_step, const std::string& why) {
  const uint32_t n = static_cast<uint32_t>(s.instructions.size());
  auto refuse = [&](const std::string& what) { ::mk::planner::refuse(why + what); };
  auto signals_of = [&](const Instruction& inst) { return s.signals_of(inst, short_step); };
  auto waits_of = [&](const Instruction& inst) { return s.waits_of(inst, short_step); };

  // Exact targets: each wait's target is the number of signals its counter gets.
  std::vector<std::vector<uint32_t>> signalers(s.counter_count);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t c : signals_of(s.instructions[i])) signalers[c].push_back(i);
  for (uint32_t i = 0; i < n; ++i)
    for (const schedule::Wait& wt : waits_of(s.instructions[i])) {
      const size_t have = signalers[wt.counter].size();
      if (wt.target == have) continue;
      std::ostringstream o;
      o << describe(s, w, i) << " waits for " << counter_name(s, signalers, wt.counter) << " to reach " << wt.target
        << " but it gets " << have << " signal" << (have == 1 ? "" : "s") << ": "
        << (have < wt.target ? "the wait can never be met (deadlock)" : "the wait could pass before all its producers finish");
      refuse(o.str());
    }

  // Deadlock freedom: with one resident block per SM, the schedule makes progress iff the graph
  // of (signaller -> waiter) and (queue predecessor -> successor) edges is acyclic: the earliest
  // unfinished instruction in a topological order is then at the head of its queue with every
  // wait met.
  Dag g(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (w.slot[i] > 0) boost::add_edge(i - 1, i, g);
    for (const schedule::Wait& wt : waits_of(s.instructions[i]))
      for (uint32_t sig : signalers[wt.counter]) boost::add_edge(sig, i, g);
  }
  const auto order = topological_order(g);
  if (!order) {
    const std::vector<uint32_t> cycle = find_cycle(g);
    std::ostringstream o;
    o << "deadlock: a cycle of " << cycle.size() << " instructions:";
    for (size_t k = 0; k < cycle.size(); ++k) {
      const uint32_t a = cycle[k], b = cycle[(k + 1) % cycle.size()];
      o << "\n  " << describe(s, w, b);
      if (w.sm[a] == w.sm[b] && w.slot[a] + 1 == w.slot[b]) o << " runs after " << describe(s, w, a) << " on its SM";
      for (const schedule::Wait& wt : waits_of(s.instructions[b]))
        for (uint32_t sig : signalers[wt.counter])
          if (sig == a) o << " waits for " << counter_name(s, signalers, wt.counter) << ", which " << describe(s, w, a) << " signals";
    }
    refuse(o.str());
  }

  // done[c]: counters certainly complete once counter c is complete (through waits).
  const size_t words = (s.counter_count + 63) / 64;
  std::vector<std::vector<uint64_t>> done(s.counter_count, std::vector<uint64_t>(words, 0));
  for (uint32_t c = 0; c < s.counter_count; ++c) done[c][c / 64] |= uint64_t{1} << (c % 64);
  for (uint32_t i : *order)
    for (uint32_t c : signals_of(s.instructions[i]))
      for (const schedule::Wait& wt : waits_of(s.instructions[i]))
        for (size_t k = 0; k < words; ++k) done[c][k] |= done[wt.counter][k];

  // Every read-after-write edge must be implied by the consumer's waits (or queue order).
  for (const auto& [producer, consumer] : required_edges) {
    if (producer >= s.task_count || consumer >= s.task_count) refuse("a required edge names a task out of range");
    const uint32_t pi = w.instruction[producer], ci = w.instruction[consumer];
    if (w.sm[pi] == w.sm[ci] && w.slot[pi] < w.slot[ci]) continue;
    bool covered = false;
    for (const schedule::Wait& wt : waits_of(s.instructions[ci]))
      for (uint32_t c : signals_of(s.instructions[pi]))
        covered |= (done[wt.counter][c / 64] >> (c % 64)) & 1;
    if (!covered)
      refuse("missing dependency: " + describe(s, w, ci) + " reads what " + describe(s, w, pi) +
             " writes, but none of its waits implies that the producer has finished");
  }
}

}  // namespace

void verify(const Schedule& s, const Edges& required_edges, const Edges& short_edges) {
  try {
    schedule::validate(s);  // every id in range before it is used as an index
  } catch (const schedule::ScheduleError& e) {
    refuse(e.what());
  }
  const uint32_t n = static_cast<uint32_t>(s.instructions.size());
  Where w;
  w.sm.resize(n);
  w.slot.resize(n);
  w.instruction.assign(s.task_count, schedule::kNone);
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      w.sm[i] = sm;
      w.slot[i] = i - s.sm_offsets[sm];
      const uint32_t task = s.instructions[i].task;
      if (w.instruction[task] != schedule::kNone)
        refuse("task " + std::to_string(task) + " is scheduled twice: " + describe(s, w, w.instruction[task]) + " and " +
               describe(s, w, i));
      w.instruction[task] = i;
    }
  for (uint32_t t = 0; t < s.task_count; ++t)
    if (w.instruction[t] == schedule::kNone) refuse("task " + std::to_string(t) + " is on no SM's queue");

  verify_path(s, w, required_edges, false, "");
  // Short steps need a proof of their own only where some list or edge differs.
  const bool same = short_edges == required_edges && std::all_of(s.instructions.begin(), s.instructions.end(), [](const Instruction& i) {
                      return i.short_signal_begin == i.signal_begin && i.short_signal_count == i.signal_count &&
                             i.short_wait_count == i.wait_count;
                    });
  if (!same) verify_path(s, w, short_edges, true, "at short steps (positions up to short_positions): ");
}

}  // namespace mk::planner
