// Model -> tasks -> counters and waits -> per-SM queues -> verified Schedule.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "planner/op_def.hpp"
#include "planner/program.hpp"
#include "schedules/schedule.hpp"

namespace mk::planner {

enum class Policy { round_robin, critical_path };
Policy policy_by_name(const std::string&);  // throws std::invalid_argument
const char* policy_name(Policy);

struct PlanOptions {
  uint32_t sm_count = schedule::kDefaultSmCount;
  Policy policy = Policy::round_robin;
  uint32_t max_tokens = 0;  // tokens a step may run; 0: the model's config max_tokens (default 1)
};

// The context the planner's costs assume (the critical-path policy, the summary's critical path
// and MB per SM); tasks' costs are the device cost model's (schedules/cost.hpp).
inline constexpr uint32_t kPlanContext = 1024;

struct Task {
  uint32_t op = 0, index = 0;  // index within its op
  TaskSpec spec;
  std::vector<uint32_t> signals;         // counters it increments
  std::vector<uint32_t> short_signals;   // at short steps (schedules/format.hpp)
  bool bypassed = false;                 // at short steps its taker does its work: it neither waits nor signals
  std::vector<schedule::Wait> waits;     // after redundant waits are removed
  uint32_t full_wait_count = 0;          // before
  uint32_t sm = 0;
};

// The bytes a task streams from memory at kPlanContext (schedules/cost.hpp).
double task_bytes(const Task&);

struct Counter {
  uint32_t op = 0, chunk = 0;
  uint32_t target = 0;  // tasks that signal it (a ticket, chunk == the op's chunks: tasks that take it)
};

struct PlanStats {
  double critical_path_us = 0;
  uint32_t critical_path_tasks = 0;
  uint32_t waits_removed = 0;
};

struct Plan {
  Program program;
  std::vector<Task> tasks;  // id order: ops in dataflow order, tasks in unit order
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (producer, consumer): a read overlaps a write
  std::vector<std::pair<uint32_t, uint32_t>> short_edges;  // the same at short steps (taken-over producers replaced)
  uint32_t short_takeovers = 0;  // tasks done by another task at short steps
  std::vector<Counter> counters;
  schedule::Schedule schedule;
  PlanStats stats;
  Policy policy = Policy::round_robin;
  uint32_t max_tokens = 1;  // the schedule's
};

Plan plan(const dsl::ModelGraph&, const PlanOptions& = {});

// A schedule the verifier refuses; the message names the tasks and counters involved.
struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Proves that every wait target equals the number of signals of its counter, that every task
// runs exactly once, that every required edge is implied by the waits and queue order, and
// that the schedule cannot deadlock (the graph of waits and queue order is acyclic); then the
// same for short steps, with each instruction's short signal list and `short_edges`.
using Edges = std::vector<std::pair<uint32_t, uint32_t>>;
void verify(const schedule::Schedule&, const Edges& required_edges, const Edges& short_edges);

std::string summary(const Plan&);
enum class DotLevel { op, task };
struct DotOptions {
  DotLevel level = DotLevel::op;
  // Op level: every layer drawn (the unrolled view) instead of the repeated block drawn once.
  bool expand = false;
  // Task level: the tasks of layers [first_layer, last_layer] only (-1: every layer), and of the
  // ops matching one of `ops` (globs over op names and opcode names; empty: every op). Ops
  // outside the repeated block are drawn when no layer range is given or when `ops` names them.
  int first_layer = -1, last_layer = -1;
  std::vector<std::string> ops;
};
// Throws std::invalid_argument when the task-level filters select no op.
struct DotStats {
  size_t nodes = 0, edges = 0;
};
DotStats write_dot(const Plan&, std::ostream&, const DotOptions& = {});
inline DotStats write_dot(const Plan& p, std::ostream& out, DotLevel level) {
  DotOptions o;
  o.level = level;
  return write_dot(p, out, o);
}

}  // namespace mk::planner
