// The mkplan summary and the Graphviz output.
#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "planner/plan.hpp"
#include "schedules/ops.hpp"

namespace mk::planner {
namespace {

template <class T>
std::string min_median_max(std::vector<T> v, const char* unit = "") {
  if (v.empty()) return "none";
  std::sort(v.begin(), v.end());
  std::ostringstream o;
  o << "min " << v.front() << unit << " / median " << v[v.size() / 2] << unit << " / max " << v.back() << unit;
  return o.str();
}

const char* op_colour(schedule::Opcode op) {
  switch (op) {
    case schedule::Opcode::embed: return "#fde0c5";
    case schedule::Opcode::matvec: return "#c6dbef";
    case schedule::Opcode::attention: return "#c7e9c0";
    case schedule::Opcode::attn_reduce: return "#e5f5e0";
    case schedule::Opcode::argmax: return "#fcbba1";
    default: return "#eeeeee";
  }
}

// A DOT string literal of `lines` joined by line breaks (newlines inside a line break it too);
// names come from the model, so quotes and backslashes in them are escaped.
std::string dot_label(std::initializer_list<std::string> lines) {
  std::string out = "\"";
  bool first = true;
  for (const std::string& line : lines) {
    if (!first) out += "\\n";
    first = false;
    for (char c : line)
      out += c == '\n' ? std::string("\\n") : (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  }
  return out + "\"";
}

// "c4-c6 = 3" style labels for a set of (counter, target) waits.
std::string counter_label(const std::map<uint32_t, uint32_t>& waits) {
  std::ostringstream o;
  auto it = waits.begin();
  while (it != waits.end()) {
    auto run = it;
    auto next = std::next(it);
    while (next != waits.end() && next->first == run->first + 1 && next->second == it->second) run = next++;
    if (o.tellp() > 0) o << '\n';
    o << "c" << it->first;
    if (run != it) o << "-c" << run->first;
    o << " = " << it->second;
    it = next;
  }
  return o.str();
}

}  // namespace

std::string summary(const Plan& p) {
  const schedule::Schedule& s = p.schedule;
  std::vector<uint32_t> waits, per_sm;
  std::vector<double> mb_per_sm(s.sm_count, 0);
  size_t wait_total = 0;
  for (const Task& t : p.tasks) {
    waits.push_back(static_cast<uint32_t>(t.waits.size()));
    wait_total += t.waits.size();
    mb_per_sm[t.sm] += t.spec.bytes / 1e6;
  }
  for (uint32_t sm = 0; sm < s.sm_count; ++sm) per_sm.push_back(s.sm_offsets[sm + 1] - s.sm_offsets[sm]);
  double total_mb = 0;
  for (double b : mb_per_sm) total_mb += b;
  std::ostringstream o;
  o.precision(4);
  o << "model " << p.program.model->name << ": " << p.program.ops.size() << " ops, " << p.tasks.size() << " tasks, "
    << p.counters.size() << " counters, " << s.sm_count << " SMs, policy " << policy_name(p.policy) << "\n";
  o << "waits per instruction: " << min_median_max(waits) << " (" << wait_total << " in all, "
    << p.stats.waits_removed << " implied by others removed)\n";
  o << "instructions per SM:   " << min_median_max(per_sm) << "\n";
  o << "MB moved per SM:       " << min_median_max(mb_per_sm) << " (" << total_mb << " MB in all)\n";
  o << "critical path:         " << p.stats.critical_path_tasks << " tasks, " << p.stats.critical_path_us
    << " us by the cost model (floor at full bandwidth " << total_mb / 4.58e6 * 1e6 << " us)\n";
  return o.str();
}

void write_dot(const Plan& p, std::ostream& out, DotLevel level) {
  const Program& prog = p.program;
  out << "digraph schedule {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=Helvetica];\n"
      << "  edge [fontname=Helvetica, fontsize=9];\n  label=" << dot_label({prog.model->name + " (" + policy_name(p.policy) + ")"}) << ";\n";
  // Nodes, clustered by layer.
  std::map<int, std::vector<uint32_t>> by_layer;
  for (uint32_t o = 0; o < prog.ops.size(); ++o) by_layer[prog.ops[o].layer].push_back(o);
  std::vector<uint32_t> first_task(prog.ops.size() + 1, 0);
  for (uint32_t o = 0; o < prog.ops.size(); ++o) first_task[o + 1] = first_task[o] + prog.ops[o].split;
  for (const auto& [layer, ops] : by_layer) {
    if (layer >= 0) out << "  subgraph cluster_layer" << layer << " {\n    label=\"layer " << layer << "\";\n";
    for (uint32_t o : ops) {
      const OpInfo& op = prog.ops[o];
      const char* colour = op_colour(op.opcode);
      if (level == DotLevel::op) {
        out << "    op" << o << " [label=" << dot_label({op.name, schedule::opcode_name(op.opcode) + std::string(" x") + std::to_string(op.split)})
            << ", fillcolor=\"" << colour << "\"];\n";
      } else {
        for (uint32_t t = first_task[o]; t < first_task[o + 1]; ++t)
          out << "    t" << t << " [label=" << dot_label({op.name + "[" + std::to_string(p.tasks[t].index) + "]", "SM " + std::to_string(p.tasks[t].sm)})
              << ", fillcolor=\"" << colour << "\"];\n";
      }
    }
    if (layer >= 0) out << "  }\n";
  }
  // Edges: what the device waits on, labelled with counters and targets.
  std::vector<std::vector<uint32_t>> signalers(p.counters.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t c : p.tasks[t].signals) signalers[c].push_back(t);
  if (level == DotLevel::op) {
    std::map<std::pair<uint32_t, uint32_t>, std::map<uint32_t, uint32_t>> edges;
    for (const Task& t : p.tasks)
      for (const schedule::Wait& w : t.waits) edges[{p.counters[w.counter].op, t.op}][w.counter] = w.target;
    for (const auto& [e, waits] : edges)
      out << "  op" << e.first << " -> op" << e.second << " [label=" << dot_label({counter_label(waits)}) << "];\n";
  } else {
    for (uint32_t t = 0; t < p.tasks.size(); ++t)
      for (const schedule::Wait& w : p.tasks[t].waits)
        for (uint32_t sig : signalers[w.counter])
          out << "  t" << sig << " -> t" << t << " [label=\"c" << w.counter << " = " << w.target << "\"];\n";
  }
  out << "}\n";
}

}  // namespace mk::planner
