#include "planner/plan.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <stdexcept>

#include "schedules/cost.hpp"
#include "schedules/limits.hpp"

namespace mk::planner {
namespace {

using Bits = std::vector<uint64_t>;

// At a step of kPlanContext positions with every kv split active: a schedule serves every
// context, and a split idle at kPlanContext still has its share of a long one.
double task_us(const Task& t, const schedule::CostModel& cost) {
  return schedule::instruction_us(t.spec.inst, cost, schedule::cost_step(schedule::KvSplitPolicy{0, 0}, kPlanContext));
}

// Task i of an op owns units [unit_bound(i), unit_bound(i + 1)): near-equal ranges (sizes differ
// by at most one, so a split need not divide the units: 132 SMs can share 3072 rows).
uint32_t unit_bound(const OpInfo& op, uint32_t i) { return static_cast<uint32_t>(uint64_t{i} * op.units / op.split); }

// The task (index within its op) that owns `unit`.
uint32_t task_of_unit(const OpInfo& op, uint32_t unit) {
  uint32_t lo = 0, hi = op.split;  // unit_bound(lo) <= unit < unit_bound(hi)
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (unit_bound(op, mid) <= unit ? lo : hi) = mid;
  }
  return lo;
}

void lower_tasks(Plan& p) {
  for (uint32_t o = 0; o < p.program.ops.size(); ++o) {
    const OpInfo& op = p.program.ops[o];
    for (uint32_t i = 0; i < op.split; ++i) {
      Task t;
      t.op = o;
      t.index = i;
      t.spec = op_def(op.opcode).lower(p.program, op, unit_bound(op, i), unit_bound(op, i + 1));
      p.tasks.push_back(std::move(t));
    }
  }
}

// For each op, the range of its tasks; for each tensor, the op writing it.
struct Index {
  std::vector<uint32_t> first_task;  // per op, plus one past the end
  std::vector<uint32_t> producer;    // per tensor, op or kNone
};

Index index_of(const Plan& p) {
  Index ix;
  ix.producer.assign(p.program.tensors.size(), schedule::kNone);
  uint32_t t = 0;
  for (uint32_t o = 0; o < p.program.ops.size(); ++o) {
    ix.first_task.push_back(t);
    t += p.program.ops[o].split;
    ix.producer[p.program.ops[o].out] = o;
  }
  ix.first_task.push_back(t);
  return ix;
}

// Read-after-write edges: a consumer depends on every producer task whose write overlaps a read.
void derive_edges(Plan& p, const Index& ix) {
  for (uint32_t c = 0; c < p.tasks.size(); ++c) {
    std::vector<uint32_t> preds;
    for (const Region& r : p.tasks[c].spec.reads) {
      const uint32_t op = ix.producer[r.tensor];
      if (op == schedule::kNone) continue;
      auto first = p.tasks.begin() + ix.first_task[op], last = p.tasks.begin() + ix.first_task[op + 1];
      auto it = std::partition_point(first, last, [&](const Task& t) { return t.spec.write.end <= r.begin; });
      for (; it != last && it->spec.write.begin < r.end; ++it) preds.push_back(static_cast<uint32_t>(it - p.tasks.begin()));
    }
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (uint32_t pr : preds) p.edges.emplace_back(pr, c);
  }
}

// One counter per (op, chunk of its output); a task signals every chunk its write overlaps and
// waits on every chunk its reads overlap, then waits implied by other waits are dropped.
void derive_counters(Plan& p, const Index& ix) {
  std::vector<uint32_t> first_counter;
  for (const OpInfo& op : p.program.ops) {
    first_counter.push_back(static_cast<uint32_t>(p.counters.size()));
    for (uint32_t c = 0; c < op.chunks; ++c) p.counters.push_back({static_cast<uint32_t>(first_counter.size() - 1), c, 0});
  }
  for (uint32_t o = 0; o < p.program.ops.size(); ++o)  // tickets: no list waits on or signals them
    if (const OpInfo& op = p.program.ops[o]; op.ticket != schedule::kNone) {
      if (op.ticket != p.counters.size()) throw std::logic_error("ticket counters out of order");
      p.counters.push_back({o, op.chunks, op.split});
    }
  auto chunk_size = [&](uint32_t op) { return p.program.tensors[p.program.ops[op].out].elements() / p.program.ops[op].chunks; };
  std::vector<std::vector<uint32_t>> signalers(p.counters.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const Region& w = p.tasks[t].spec.write;
    const uint64_t cs = chunk_size(p.tasks[t].op);
    for (uint64_t c = w.begin / cs; c <= (w.end - 1) / cs; ++c) {
      const uint32_t id = first_counter[p.tasks[t].op] + static_cast<uint32_t>(c);
      p.tasks[t].signals.push_back(id);
      signalers[id].push_back(t);
      ++p.counters[id].target;
    }
  }
  std::vector<std::vector<uint32_t>> full(p.tasks.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    for (const Region& r : p.tasks[t].spec.reads) {
      const uint32_t op = ix.producer[r.tensor];
      if (op == schedule::kNone) continue;
      const uint64_t cs = chunk_size(op);
      for (uint64_t c = r.begin / cs; c <= (r.end - 1) / cs; ++c) full[t].push_back(first_counter[op] + static_cast<uint32_t>(c));
    }
    std::sort(full[t].begin(), full[t].end());
    full[t].erase(std::unique(full[t].begin(), full[t].end()), full[t].end());
  }

  // done[c]: the counters certainly complete once counter c is complete. Counters are numbered
  // in dataflow order, so every counter a signaler waits on has a lower id.
  const size_t words = (p.counters.size() + 63) / 64;
  std::vector<Bits> done(p.counters.size(), Bits(words, 0));
  for (uint32_t c = 0; c < p.counters.size(); ++c) {
    done[c][c / 64] |= uint64_t{1} << (c % 64);
    for (uint32_t s : signalers[c])
      for (uint32_t w : full[s])
        for (size_t i = 0; i < words; ++i) done[c][i] |= done[w][i];
  }
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    Task& task = p.tasks[t];
    task.full_wait_count = static_cast<uint32_t>(full[t].size());
    for (uint32_t w : full[t]) {
      const bool implied = std::any_of(full[t].begin(), full[t].end(), [&](uint32_t other) {
        return other != w && (done[other][w / 64] >> (w % 64) & 1);
      });
      if (implied) ++p.stats.waits_removed;
      else task.waits.push_back({w, p.counters[w].target});
    }
  }
}

// Short steps (schedules/format.hpp): a task of an op with a short path is done there by a task
// of the op producing its input (its taker, an ancestor), which signals for it; the task itself
// signals nothing. Each counter thus gets the same number of signals at every step, and a
// consumer that waited for the task now waits for its taker. verify() proves both paths.
void derive_short_signals(Plan& p, const Index& ix) {
  for (Task& t : p.tasks) t.short_signals = t.signals;
  std::vector<uint32_t> taker_of(p.tasks.size(), schedule::kNone);
  for (uint32_t o = 0; o < p.program.ops.size(); ++o) {
    const OpInfo& op = p.program.ops[o];
    const OpDef& def = op_def(op.opcode);
    if (!def.short_taker_unit || op.inputs.empty()) continue;
    const uint32_t from = ix.producer[op.inputs.front()];
    if (from == schedule::kNone) continue;
    // Only the input's one reader: the taker writes this op's output instead of its own, which
    // another reader of it would then not see.
    const auto reads_input = [&](const OpInfo& other) {
      return std::find(other.inputs.begin(), other.inputs.end(), op.inputs.front()) != other.inputs.end();
    };
    if (std::count_if(p.program.ops.begin(), p.program.ops.end(), reads_input) != 1) continue;
    // Every task of the op or none: a taker writes the whole output its unit feeds.
    auto taker_unit = [&](uint32_t t) { return def.short_taker_unit(p.tasks[t].spec.inst); };
    bool all = true;
    for (uint32_t t = ix.first_task[o]; t < ix.first_task[o + 1]; ++t) all &= taker_unit(t) < p.program.ops[from].units;
    if (!all) continue;
    for (uint32_t t = ix.first_task[o]; t < ix.first_task[o + 1]; ++t) {
      Task& taker = p.tasks[ix.first_task[from] + task_of_unit(p.program.ops[from], taker_unit(t))];
      if (!def.take_over(taker.spec.inst, p.tasks[t].spec.inst)) {
        // All or nothing: a task left out would read a partial its taker no longer writes.
        if (t != ix.first_task[o]) throw std::logic_error("short steps: op '" + op.name + "' was taken over in part");
        break;
      }
      taker.short_signals.insert(taker.short_signals.end(), p.tasks[t].signals.begin(), p.tasks[t].signals.end());
      p.tasks[t].short_signals.clear();
      p.tasks[t].bypassed = true;
      taker_of[t] = static_cast<uint32_t>(&taker - p.tasks.data());
      ++p.short_takeovers;
    }
  }
  // A counter listed n times in a row gets one increment of n on the GPU (one release, not n):
  // each taker's list sorted once (the others are as derive_counters made them).
  for (Task& t : p.tasks)
    if (t.short_signals.size() > t.signals.size()) std::sort(t.short_signals.begin(), t.short_signals.end());
  // A bypassed task reads nothing at short steps: no edge into it there.
  for (const auto& [producer, consumer] : p.edges)
    if (!p.tasks[consumer].bypassed)
      p.short_edges.emplace_back(taker_of[producer] == schedule::kNone ? producer : taker_of[producer], consumer);
}

// The tasks each task waits for, through its (reduced) waits.
std::vector<std::vector<uint32_t>> wait_preds(const Plan& p) {
  std::vector<std::vector<uint32_t>> signalers(p.counters.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t c : p.tasks[t].signals) signalers[c].push_back(t);
  std::vector<std::vector<uint32_t>> preds(p.tasks.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    for (const schedule::Wait& w : p.tasks[t].waits) preds[t].insert(preds[t].end(), signalers[w.counter].begin(), signalers[w.counter].end());
    std::sort(preds[t].begin(), preds[t].end());
    preds[t].erase(std::unique(preds[t].begin(), preds[t].end()), preds[t].end());
  }
  return preds;
}

// Returns the per-SM queues. Task ids are a topological order of the wait graph (producers
// precede consumers), so round-robin queues are ordered consistently with it.
std::vector<std::vector<uint32_t>> assign_round_robin(Plan& p, uint32_t sms) {
  std::vector<std::vector<uint32_t>> queues(sms);
  for (uint32_t t = 0; t < p.tasks.size(); ++t) queues[t % sms].push_back(t);
  return queues;
}

// List scheduling: repeatedly take the ready task with the longest remaining path (by the cost
// model) and put it on the SM where it can start first. The order tasks are taken in is a
// topological order, and each queue is a subsequence of it.
std::vector<std::vector<uint32_t>> assign_critical_path(Plan& p, uint32_t sms, const std::vector<std::vector<uint32_t>>& preds,
                                                        const std::vector<double>& us) {
  const schedule::CostModel cost;
  const size_t n = p.tasks.size();
  std::vector<std::vector<uint32_t>> succs(n);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t pr : preds[t]) succs[pr].push_back(t);
  std::vector<double> level(n, 0);
  for (size_t t = n; t-- > 0;) {
    double best = 0;
    for (uint32_t s : succs[t]) best = std::max(best, level[s] + cost.latency_us);
    level[t] = best + us[t];
  }
  auto lower_priority = [&](uint32_t a, uint32_t b) { return level[a] != level[b] ? level[a] < level[b] : a > b; };
  std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(lower_priority)> ready(lower_priority);
  std::vector<uint32_t> pending(n);
  for (uint32_t t = 0; t < n; ++t)
    if (!(pending[t] = static_cast<uint32_t>(preds[t].size()))) ready.push(t);
  std::vector<double> finish(n, 0), sm_free(sms, 0), sm_bytes(sms, 0);
  std::vector<std::vector<uint32_t>> queues(sms);
  while (!ready.empty()) {
    const uint32_t t = ready.top();
    ready.pop();
    double start = 0;
    for (uint32_t pr : preds[t]) start = std::max(start, finish[pr] + cost.latency_us);
    // The SM where it starts first; among equals, the one that has moved the fewest bytes.
    uint32_t best = 0;
    for (uint32_t sm = 1; sm < sms; ++sm) {
      const double a = std::max(sm_free[sm], start), b = std::max(sm_free[best], start);
      if (a < b || (a == b && sm_bytes[sm] < sm_bytes[best])) best = sm;
    }
    finish[t] = std::max(sm_free[best], start) + us[t];
    sm_free[best] = finish[t];
    sm_bytes[best] += task_bytes(p.tasks[t]);
    queues[best].push_back(t);
    for (uint32_t s : succs[t])
      if (--pending[s] == 0) ready.push(s);
  }
  return queues;
}

void critical_path(Plan& p, const std::vector<std::vector<uint32_t>>& preds, const std::vector<double>& us) {
  const schedule::CostModel cost;
  std::vector<double> end(p.tasks.size(), 0);
  std::vector<uint32_t> length(p.tasks.size(), 1);
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    double start = 0;
    for (uint32_t pr : preds[t])
      if (end[pr] + cost.latency_us > start) {
        start = end[pr] + cost.latency_us;
        length[t] = length[pr] + 1;
      }
    end[t] = start + us[t];
    if (end[t] > p.stats.critical_path_us) {
      p.stats.critical_path_us = end[t];
      p.stats.critical_path_tasks = length[t];
    }
  }
}

void build_schedule(Plan& p, uint32_t sms, const std::vector<std::vector<uint32_t>>& queues) {
  schedule::Schedule& s = p.schedule;
  s.sm_count = sms;
  s.task_count = static_cast<uint32_t>(p.tasks.size());
  s.counter_count = static_cast<uint32_t>(p.counters.size());
  s.logits_tensor = p.program.logits;
  s.token_tensor = p.program.token;
  s.kv_splits = kv_split_policy(*p.program.model, attention_head_dim(p.program));
  s.max_tokens = p.max_tokens;
  for (const TensorInfo& t : p.program.tensors) s.tensors.push_back({t.name, t.key, t.role, t.dtype, t.shape});
  uint32_t first = 0;
  for (const OpInfo& op : p.program.ops) {
    s.ops.push_back({op.name, op.opcode, static_cast<int16_t>(op.layer), first, op.split});
    first += op.split;
  }
  s.sm_offsets.push_back(0);
  for (uint32_t sm = 0; sm < sms; ++sm) {
    for (uint32_t t : queues[sm]) {
      Task& task = p.tasks[t];
      task.sm = sm;
      schedule::Instruction inst = task.spec.inst;
      inst.op = task.op;
      inst.task = t;
      inst.wait_begin = static_cast<uint32_t>(s.waits.size());
      inst.wait_count = static_cast<uint16_t>(task.waits.size());
      inst.short_wait_count = task.bypassed ? 0 : inst.wait_count;
      inst.signal_begin = static_cast<uint32_t>(s.signals.size());
      inst.signal_count = static_cast<uint16_t>(task.signals.size());
      s.waits.insert(s.waits.end(), task.waits.begin(), task.waits.end());
      s.signals.insert(s.signals.end(), task.signals.begin(), task.signals.end());
      inst.short_signal_begin = inst.signal_begin;  // the same list where they agree
      inst.short_signal_count = static_cast<uint16_t>(task.short_signals.size());
      if (task.short_signals != task.signals) {
        inst.short_signal_begin = static_cast<uint32_t>(s.signals.size());
        s.signals.insert(s.signals.end(), task.short_signals.begin(), task.short_signals.end());
      }
      s.instructions.push_back(inst);
    }
    s.sm_offsets.push_back(static_cast<uint32_t>(s.instructions.size()));
  }
}

}  // namespace

Policy policy_by_name(const std::string& name) {
  if (name == "round-robin") return Policy::round_robin;
  if (name == "critical-path") return Policy::critical_path;
  throw std::invalid_argument("unknown policy '" + name + "'; expected round-robin or critical-path");
}

const char* policy_name(Policy p) { return p == Policy::round_robin ? "round-robin" : "critical-path"; }

double task_bytes(const Task& t) { return schedule::instruction_bytes(t.spec.inst, kPlanContext); }

Plan plan(const dsl::ModelGraph& model, const PlanOptions& options) {
  if (options.sm_count == 0 || options.sm_count > 4096) throw std::invalid_argument("the SM count must be 1 to 4096");
  if (options.max_tokens > limits::kMaxStepTokens)
    throw std::invalid_argument("max_tokens " + std::to_string(options.max_tokens) + " is outside 1 to " +
                                std::to_string(limits::kMaxStepTokens));
  Plan p;
  p.policy = options.policy;
  p.program = analyze(model, options.sm_count);
  p.max_tokens = options.max_tokens ? options.max_tokens : max_tokens(model);
  lower_tasks(p);
  const Index ix = index_of(p);
  derive_edges(p, ix);
  derive_counters(p, ix);
  derive_short_signals(p, ix);
  for (const Task& t : p.tasks)
    if (t.waits.size() > 0xffff || t.signals.size() > 0xffff || t.short_signals.size() > 0xffff)
      throw dsl::Error(p.program.ops[t.op].decl->loc, "op '" + p.program.ops[t.op].name + "' has a task with over 65535 waits or signals; use fewer chunks");
  const auto preds = wait_preds(p);
  std::vector<double> us;  // each task's cost by the cost model, computed once
  for (const Task& t : p.tasks) us.push_back(task_us(t, schedule::CostModel{}));
  const auto queues = options.policy == Policy::round_robin ? assign_round_robin(p, options.sm_count)
                                                            : assign_critical_path(p, options.sm_count, preds, us);
  critical_path(p, preds, us);
  build_schedule(p, options.sm_count, queues);
  schedule::validate(p.schedule);
  verify(p.schedule, p.edges, p.short_edges);
  return p;
}

}  // namespace mk::planner
