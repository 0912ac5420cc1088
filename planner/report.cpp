// The mkplan summary and the Graphviz output.
#include <algorithm>
#include <fnmatch.h>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <tuple>

#include "common/show_number.hpp"
#include "planner/op_def.hpp"
#include "planner/plan.hpp"
#include "schedules/cost.hpp"
#include "schedules/op_kinds.hpp"
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

}  // namespace

std::string summary(const Plan& p) {
  const schedule::Schedule& s = p.schedule;
  std::vector<uint32_t> waits, per_sm;
  std::vector<double> mb_per_sm(s.sm_count, 0);
  size_t wait_total = 0;
  for (const Task& t : p.tasks) {
    waits.push_back(static_cast<uint32_t>(t.waits.size()));
    wait_total += t.waits.size();
    mb_per_sm[t.sm] += task_bytes(t) / 1e6;
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
  o << "KV splits:             ";
  if (s.kv_splits.positions == 0) o << "every split at every step";
  else o << "one per " << s.kv_splits.positions << " positions";
  o << " (config kv_split_positions); ";
  if (s.kv_splits.short_positions == 0) o << "no short steps (config short_positions, or no attention op)\n";
  else
    o << "short steps up to position " << s.kv_splits.short_positions << " (config short_positions): "
      << p.short_takeovers << " attn_reduce tasks done by the attention\n";
  o << "tokens a step:         up to " << s.max_tokens << " (config max_tokens, mkplan --max-tokens)\n";
  o << "MB moved per SM:       " << min_median_max(mb_per_sm) << " (" << mk::show_fixed(total_mb) << " MB in all)\n";
  o << "critical path:         " << p.stats.critical_path_tasks << " tasks, " << p.stats.critical_path_us
    << " us by the cost model (floor at full bandwidth " << total_mb * 1e6 / schedule::kStreamBytesPerUs << " us)\n";
  o << "predicted step:        ";
  for (uint32_t context : {32u, 512u, 8192u})
    o << schedule::predict_step_us(s, context) << " us at context " << context << (context == 8192 ? "" : ", ");
  o << " (schedules/cost.hpp; mkbench prints it beside the measured time)\n";
  return o.str();
}

namespace {

// What one op reads of another's output, and the waits left on it after reduction.
struct OpEdge {
  std::set<std::string> fields;         // the consumer's fields that read the producer's output
  std::set<uint32_t> counters, targets;  // counters waited on (after reduction) and their targets
};

// The tensors an op names in its input fields: activations (dataflow) and kv caches, with the field.
std::vector<std::pair<uint32_t, std::string>> reads_of(const Program& prog, const OpInfo& op) {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (const FieldSpec& f : op_def(op.opcode).fields) {
    if (f.kind != FieldKind::input && f.kind != FieldKind::input_list) continue;
    const dsl::Value* v = op.decl ? op.decl->field(f.name) : nullptr;
    if (!v) continue;
    for (const std::string& name : v->items)
      if (const uint32_t id = prog.find(name); id != schedule::kNone && prog.tensors[id].role != schedule::Role::weight)
        out.emplace_back(id, f.name);
  }
  return out;
}

std::map<std::pair<uint32_t, uint32_t>, OpEdge> op_edges(const Plan& p) {
  const Program& prog = p.program;
  std::vector<uint32_t> producer(prog.tensors.size(), schedule::kNone);
  for (uint32_t o = 0; o < prog.ops.size(); ++o) producer[prog.ops[o].out] = o;
  std::map<std::pair<uint32_t, uint32_t>, OpEdge> edges;
  for (uint32_t c = 0; c < prog.ops.size(); ++c)
    for (const auto& [tensor, field] : reads_of(prog, prog.ops[c]))
      if (producer[tensor] != schedule::kNone && producer[tensor] != c) edges[{producer[tensor], c}].fields.insert(field);
  for (const Task& t : p.tasks)
    for (const schedule::Wait& w : t.waits) {
      OpEdge& e = edges[{p.counters[w.counter].op, t.op}];
      e.counters.insert(w.counter);
      e.targets.insert(w.target);
    }
  return edges;
}

std::string join(const std::set<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// "in: 48 chunks, target 1" for a wait; "residual (wait implied)" for a read another wait covers.
std::string edge_label(const OpEdge& e) {
  std::string out = join(e.fields, ", ");
  if (e.counters.empty()) return out + (out.empty() ? "" : "\n") + "(wait implied)";
  out += (out.empty() ? "" : ": ") + std::to_string(e.counters.size()) + (e.counters.size() == 1 ? " chunk" : " chunks");
  out += e.targets.size() == 1 ? ", target " + std::to_string(*e.targets.begin())
                               : ", targets " + std::to_string(*e.targets.begin()) + "-" + std::to_string(*e.targets.rbegin());
  return out;
}

const char* edge_style(const OpEdge& e) {
  return e.counters.empty() ? "style=dashed, color=\"#888888\", fontcolor=\"#666666\", class=\"dataflow\""
                            : "style=solid, color=\"#222222\", penwidth=1.3, class=\"wait\"";
}

std::string layer_range(const std::set<int>& layers) {
  if (layers.empty()) return "";
  if (layers.size() == 1) return "layer " + std::to_string(*layers.begin());
  return "layers " + std::to_string(*layers.begin()) + "–" + std::to_string(*layers.rbegin());
}

void header(std::ostream& out, const Plan& p, const std::string& what, const char* rankdir) {
  out << "digraph schedule {\n  rankdir=" << rankdir << ";\n  newrank=true;\n"
      << "  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=11];\n"
      << "  edge [fontname=Helvetica, fontsize=9];\n  fontname=Helvetica;\n  labelloc=t;\n  label="
      << dot_label({p.program.model->name + " (" + policy_name(p.policy) + ", " + std::to_string(p.schedule.sm_count) + " SMs)",
                    what})
      << ";\n";
}

DotStats write_op_dot(const Plan& p, std::ostream& out, bool expand) {
  const Program& prog = p.program;
  const schedule::OpKinds kinds = schedule::op_kinds(p.schedule.ops);
  const bool fold = !expand && kinds.repeated;
  DotStats st;
  header(out, p, std::string(fold ? "the repeated layer block drawn once (mkplan --dot-expand: every layer)\n" : "") +
                     "solid: counter waits left after reduction (chunks waited, target); dashed: reads whose wait another implies",
         "TB");
  auto node = [&](uint32_t o) {
    return fold && prog.ops[o].layer >= 0 ? "k" + std::to_string(kinds.kind_of[o]) : "op" + std::to_string(o);
  };
  auto op_node = [&](const std::string& id, const std::string& name, uint32_t o) {
    const OpInfo& op = prog.ops[o];
    out << "    " << id << " [label="
        << dot_label({name, std::string(schedule::opcode_name(op.opcode)) + " × " + std::to_string(op.split) +
                                (op.split == 1 ? " task" : " tasks") +
                                (op.chunks > 1 ? ", " + std::to_string(op.chunks) + " chunks" : "")})
        << ", fillcolor=\"" << kinds.kinds[kinds.kind_of[o]].colour << "99\"];\n";  // the trace's colour, lighter
    ++st.nodes;
  };
  // KV caches: one cylinder per (op, cache), read (and appended to) by the op.
  std::map<std::string, std::vector<std::string>> caches;  // node id -> tensor names over layers
  std::vector<std::pair<std::string, std::string>> cache_edges;  // (cache node, op node), once each
  for (uint32_t o = 0; o < prog.ops.size(); ++o)
    for (const auto& [tensor, field] : reads_of(prog, prog.ops[o])) {
      if (prog.tensors[tensor].role != schedule::Role::kv_cache) continue;
      const std::string id = "kv_" + node(o) + "_" + field;
      caches[id].push_back(prog.tensors[tensor].name);
      if (caches[id].size() == 1) cache_edges.emplace_back(id, node(o));
    }
  auto cache_nodes = [&](const std::string& op_id) {
    for (const auto& [id, names] : caches)
      if (id.compare(3, op_id.size() + 1, op_id + "_") == 0) {
        out << "    " << id << " [shape=cylinder, style=filled, fillcolor=\"#eeeeee\", fontsize=9, label="
            << dot_label({schedule::name_range(names), "KV cache"}) << "];\n";
        ++st.nodes;
      }
  };
  // Nodes: ops outside the block, then the block once (folded) or each layer (expanded).
  std::map<int, std::vector<uint32_t>> by_layer;
  for (uint32_t o = 0; o < prog.ops.size(); ++o) by_layer[prog.ops[o].layer].push_back(o);
  for (const auto& [layer, ops] : by_layer) {
    if (layer >= 0 && fold && layer != kinds.first_layer) continue;
    if (layer >= 0) {
      out << "  subgraph cluster_" << (fold ? "block" : "layer" + std::to_string(layer)) << " {\n    style=\"rounded,dashed\";\n    label=";
      const int n = kinds.last_layer - kinds.first_layer + 1;
      out << (fold ? dot_label({"× " + std::to_string(n) + " (layers " + std::to_string(kinds.first_layer) + "–" +
                                std::to_string(kinds.last_layer) + ")"})
                   : dot_label({"layer " + std::to_string(layer)}))
          << ";\n    fontsize=14;\n";
    }
    for (uint32_t o : ops) {
      if (fold && layer >= 0) {
        const schedule::OpKind& kind = kinds.kinds[kinds.kind_of[o]];
        op_node(node(o), kind.label, o);
      } else {
        op_node(node(o), prog.ops[o].name, o);
      }
      cache_nodes(node(o));
    }
    if (layer >= 0) out << "  }\n";
  }
  // Edges, folded over layers: (from, to, how many layers apart) drawn once.
  struct Drawn {
    OpEdge first;
    std::string label;
    bool varies = false;
    std::set<int> layers;  // of the consumer
    int delta = 0;         // consumer layer - producer layer, both in the block
    bool into = false, out_of = false;
  };
  std::map<std::tuple<std::string, std::string, int>, Drawn> drawn;
  std::vector<std::tuple<std::string, std::string, int>> order;
  for (const auto& [e, info] : op_edges(p)) {
    const int lp = prog.ops[e.first].layer, lc = prog.ops[e.second].layer;
    const int delta = lp >= 0 && lc >= 0 ? lc - lp : 0;
    const auto key = std::make_tuple(node(e.first), node(e.second), delta);
    auto [it, fresh] = drawn.try_emplace(key);
    Drawn& d = it->second;
    const std::string label = edge_label(info);
    if (fresh) {
      order.push_back(key);
      d.first = info;
      d.label = label;
      d.delta = delta;
      d.into = lp < 0 && lc >= 0;
      d.out_of = lp >= 0 && lc < 0;
    } else if (label != d.label) {
      d.varies = true;
    }
    d.layers.insert(lc >= 0 ? lc : lp);
  }
  for (const auto& key : order) {
    const Drawn& d = drawn[key];
    std::string label = d.label + (d.varies ? " (varies by layer)" : "");
    std::string extra;
    if (fold) {
      if (d.into) label += "\n→ " + layer_range(d.layers);
      if (d.out_of) label += "\nfrom " + layer_range(d.layers);
      if (d.delta > 0) {
        label = "next layer" + std::string(d.delta > 1 ? " + " + std::to_string(d.delta - 1) : "") + ": " + label;
        extra = ", constraint=false";
      }
    }
    out << "  " << std::get<0>(key) << " -> " << std::get<1>(key) << " [label=" << dot_label({label}) << ", "
        << edge_style(d.first) << extra << "];\n";
    ++st.edges;
  }
  for (const auto& [cache, op] : cache_edges) {
    out << "  " << cache << " -> " << op << " [dir=both, arrowtail=odot, style=dashed, color=\"#888888\", class=\"dataflow\"];\n";
    ++st.edges;
  }
  out << "}\n";
  return st;
}

bool op_selected(const Program& prog, const OpInfo& op, const DotOptions& o) {
  bool named = false;
  for (const std::string& g : o.ops)
    named = named || fnmatch(g.c_str(), op.name.c_str(), 0) == 0 || fnmatch(g.c_str(), schedule::opcode_name(op.opcode), 0) == 0;
  if (!o.ops.empty() && !named) return false;
  if (o.first_layer < 0) return true;
  if (op.layer < 0) return !o.ops.empty();
  (void)prog;
  return op.layer >= o.first_layer && op.layer <= o.last_layer;
}

DotStats write_task_dot(const Plan& p, std::ostream& out, const DotOptions& o) {
  static const char* sm_colours[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                     "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
  const Program& prog = p.program;
  DotStats st;
  std::string what = "tasks (fill: SM, 12 colours repeating) -> counters (chunk, target) -> the tasks that wait on them";
  if (o.first_layer >= 0) what += "; layers " + std::to_string(o.first_layer) + "–" + std::to_string(o.last_layer);
  if (!o.ops.empty()) {
    std::set<std::string> g(o.ops.begin(), o.ops.end());
    what += "; ops " + join(g, ", ");
  }
  if (std::none_of(prog.ops.begin(), prog.ops.end(), [&](const OpInfo& op) { return op_selected(prog, op, o); }))
    throw std::invalid_argument("--dot-layers/--dot-ops: no op is selected (" + what.substr(what.find(';') + 2) + "; the model has " +
                                (prog.model->layers ? "layers 0–" + std::to_string(prog.model->layers - 1) : "no layers") +
                                ")");
  header(out, p, what, "LR");
  out << "  ranksep=1.2;\n  nodesep=0.05;\n";
  std::vector<uint32_t> first_task(prog.ops.size() + 1, 0);
  for (uint32_t op = 0; op < prog.ops.size(); ++op) first_task[op + 1] = first_task[op] + prog.ops[op].split;
  std::vector<char> selected(p.tasks.size(), 0);
  std::set<uint32_t> counters;
  for (uint32_t op = 0; op < prog.ops.size(); ++op) {
    if (!op_selected(prog, prog.ops[op], o)) continue;
    out << "  subgraph cluster_op" << op << " {\n    label=" << dot_label({prog.ops[op].name}) << ";\n    style=rounded;\n    color=\""
        << schedule::op_colour(prog.ops[op].opcode) << "\";\n    penwidth=2;\n";
    for (uint32_t t = first_task[op]; t < first_task[op + 1]; ++t) {
      selected[t] = 1;
      const Task& task = p.tasks[t];
      out << "    t" << t << " [label=" << dot_label({prog.ops[op].name + "[" + std::to_string(task.index) + "]", "SM " + std::to_string(task.sm)})
          << ", fillcolor=\"" << sm_colours[task.sm % 12] << "\", fontsize=9, height=0.3];\n";
      ++st.nodes;
      counters.insert(task.signals.begin(), task.signals.end());
      for (const schedule::Wait& w : task.waits) counters.insert(w.counter);
    }
    out << "  }\n";
  }
  for (uint32_t c : counters) {
    const Counter& k = p.counters[c];
    out << "  c" << c << " [shape=ellipse, style=filled, fillcolor=white, fontsize=8, height=0.25, label="
        << dot_label({"c" + std::to_string(c) + " " + prog.ops[k.op].name + " chunk " + std::to_string(k.chunk),
                      "target " + std::to_string(k.target)})
        << "];\n";
    ++st.nodes;
  }
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    if (!selected[t]) continue;
    for (uint32_t c : p.tasks[t].signals) {
      out << "  t" << t << " -> c" << c << " [color=\"#999999\", arrowsize=0.5, class=\"signal\"];\n";
      ++st.edges;
    }
    for (const schedule::Wait& w : p.tasks[t].waits) {
      out << "  c" << w.counter << " -> t" << t << " [color=\"#222222\", arrowsize=0.5, class=\"wait\"];\n";
      ++st.edges;
    }
  }
  out << "}\n";
  return st;
}

}  // namespace

DotStats write_dot(const Plan& p, std::ostream& out, const DotOptions& o) {
  return o.level == DotLevel::op ? write_op_dot(p, out, o.expand) : write_task_dot(p, out, o);
}
}  // namespace mk::planner
