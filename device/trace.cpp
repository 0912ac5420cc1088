#include "device/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/output_file.hpp"
#include "schedules/cost.hpp"
#include "schedules/op_kinds.hpp"
#include "schedules/ops.hpp"

namespace mk::device {

TraceEvent trace_event(const uint64_t* r) {
  TraceEvent e{r[0], r[1], r[2], {r[3], r[4]}};
  for (uint64_t& m : e.mark)
    if (m < e.start || m > e.end) m = 0;  // an earlier step's: before this step reached the instruction
  return e;
}

namespace {

uint64_t first_start(const std::vector<TraceEvent>& ev) {
  uint64_t t = UINT64_MAX;
  for (const TraceEvent& e : ev) t = std::min(t, e.start);
  return ev.empty() ? 0 : t;
}

void check_sizes(const schedule::Schedule& s, const std::vector<TraceEvent>& ev) {
  if (ev.size() != s.instructions.size())
    throw std::invalid_argument("trace: " + std::to_string(ev.size()) + " events for " + std::to_string(s.instructions.size()) +
                                " instructions");
}

// Text for SVG: markup escaped; control characters (not allowed in XML) and bytes that are not
// UTF-8 shown as '?'.
std::string xml(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
      bool ok = len > 0 && i + len <= text.size();
      for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (ok) {
        out.append(text, i, len);
        i += len - 1;
      } else {
        out += '?';
      }
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&apos;"; break;
      case '"': out += "&quot;"; break;
      default: out += c < 0x20 && c != '\t' ? '?' : static_cast<char>(c);
    }
  }
  return out;
}

const char* unit(const TraceOptions& o) { return o.logical ? "ticks" : "us"; }

// A round step for about `n` ticks over `span`: 1, 2 or 5 times a power of ten.
double tick_step(double span, int n) {
  const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

std::string fmt(double v) {
  std::ostringstream o;
  o.precision(4);
  o << v;
  return o.str();
}

}  // namespace

std::string chrome_trace(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const TraceOptions& opt) {
  check_sizes(s, ev);
  const schedule::OpKinds kinds = schedule::op_kinds(s.ops);
  const uint64_t t0 = first_start(ev);
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", opt.title.empty() ? "decode step" : opt.title}}}});
  for (uint32_t sm = 0; sm < s.sm_count; ++sm) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", sm}, {"args", {{"name", "SM " + std::to_string(sm)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", sm}, {"args", {{"sort_index", sm}}}});
  }
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const schedule::Instruction& inst = s.instructions[i];
      const schedule::Op& op = s.ops[inst.op];
      const TraceEvent& e = ev[i];
      auto event = [&](const std::string& name, uint64_t a, uint64_t b, const std::string& cat) {
        nlohmann::json args = {{"task", inst.task}, {"instruction", i - s.sm_offsets[sm]}, {"op", op.name},
                               {"kind", kinds.kinds[kinds.kind_of[inst.op]].label}, {"layer", op.layer}};
        if (cat == "wait") {
          nlohmann::json waits = nlohmann::json::array();
          for (const schedule::Wait& w : s.waits_of(inst)) waits.push_back({{"counter", w.counter}, {"target", w.target}});
          args["waits"] = std::move(waits);
        }
        events.push_back({{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", sm}, {"ts", (a - t0) / 1e3},
                          {"dur", (b - a) / 1e3}, {"args", std::move(args)}});
      };
      if (e.ready > e.start) event("wait " + op.name, e.start, e.ready, "wait");
      event(op.name, e.ready, e.end, schedule::opcode_name(static_cast<schedule::Opcode>(inst.opcode)));
    }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
  doc["otherData"] = {{"clock", opt.logical ? "emulator logical clock: one instruction is one tick, written as 1 us"
                                            : "GPU globaltimer"}};
  // Names come from the model: invalid UTF-8 is replaced rather than refused.
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void write_chrome_trace(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const std::string& path,
                        const TraceOptions& opt) {
  io::write_file(path, chrome_trace(s, ev, opt));
}

std::string trace_svg(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const TraceOptions& opt) {
  check_sizes(s, ev);
  const schedule::OpKinds kinds = schedule::op_kinds(s.ops);
  const uint64_t t0 = first_start(ev);
  uint64_t t1 = t0 + 1;
  for (const TraceEvent& e : ev) t1 = std::max(t1, e.end);
  const double span = (t1 - t0) / 1e3;  // us (or ticks)
  const double width = 1600, left = 52, right = 16, top = 54;
  const double lane = std::clamp(760.0 / std::max(1u, s.sm_count), 5.0, 18.0);
  const double plot_w = width - left - right, plot_h = s.sm_count * lane;
  auto x_of = [&](uint64_t t) { return left + double(t - t0) / 1e3 / span * plot_w; };
  // Legend rows: one entry per op kind, wrapped.
  const double entry_w = 190;
  const size_t per_row = static_cast<size_t>(plot_w / entry_w);
  const size_t legend_rows = (kinds.kinds.size() + 1 + per_row - 1) / per_row;
  const double legend_y = top + plot_h + 40;
  const double height = legend_y + legend_rows * 18 + 10;

  std::ostringstream f;
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' font-family='Helvetica,Arial,sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
    << "<defs><pattern id='wait' width='4' height='4' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'>"
       "<rect width='4' height='4' fill='#f2f2f2'/><line x1='0' y1='0' x2='0' y2='4' stroke='#a0a0a0' stroke-width='1.5'/>"
       "</pattern></defs>\n";
  f << "<text x='" << left << "' y='16' font-size='13' font-weight='bold'>" << xml(opt.title.empty() ? "decode step" : opt.title)
    << "</text>\n<text x='" << left << "' y='32'>one lane per SM, " << s.instructions.size() << " instructions; step span "
    << fmt(span) << " " << unit(opt) << (opt.logical ? " (the emulator's logical clock: one tick per instruction)" : "")
    << "; hatched: waiting on counters; dashed lines: first task of each layer</text>\n";
  // Time axis with a grid.
  const double step = tick_step(span, 12);
  for (double t = 0; t <= span + 1e-9; t += step) {
    const double x = left + t / span * plot_w;
    f << "<line x1='" << x << "' y1='" << top << "' x2='" << x << "' y2='" << top + plot_h << "' stroke='#eeeeee'/>"
      << "<line x1='" << x << "' y1='" << top + plot_h << "' x2='" << x << "' y2='" << top + plot_h + 4 << "' stroke='black'/>"
      << "<text x='" << x << "' y='" << top + plot_h + 16 << "' text-anchor='middle'>" << fmt(t) << "</text>\n";
  }
  f << "<text x='" << left + plot_w << "' y='" << top + plot_h + 30 << "' text-anchor='end'>time ("
    << (opt.logical ? "logical ticks" : "us") << ")</text>\n";
  // SM labels: every lane when they fit, else every k-th.
  const uint32_t every = std::max(1u, static_cast<uint32_t>(std::ceil(11.0 / lane)));
  for (uint32_t sm = 0; sm < s.sm_count; sm += every)
    f << "<text x='" << left - 4 << "' y='" << top + sm * lane + lane / 2 + 3.5 << "' text-anchor='end' font-size='"
      << (lane < 9 ? 9 : 10) << "'>SM " << sm << "</text>\n";
  f << "<rect x='" << left << "' y='" << top << "' width='" << plot_w << "' height='" << plot_h
    << "' fill='none' stroke='#cccccc'/>\n";
  // The instructions: waits hatched, runs in their kind's colour.
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const TraceEvent& e = ev[i];
      const schedule::Instruction& inst = s.instructions[i];
      const double y = top + sm * lane;
      if (e.ready > e.start)
        f << "<rect x='" << x_of(e.start) << "' y='" << y << "' width='" << std::max(0.2, x_of(e.ready) - x_of(e.start))
          << "' height='" << lane - 1 << "' fill='url(#wait)'/>";
      f << "<rect x='" << x_of(e.ready) << "' y='" << y << "' width='" << std::max(0.3, x_of(e.end) - x_of(e.ready))
        << "' height='" << lane - 1 << "' fill='" << kinds.kinds[kinds.kind_of[inst.op]].colour << "'><title>"
        << xml(s.ops[inst.op].name) << " task " << inst.task << " on SM " << sm << ": waited " << fmt((e.ready - e.start) / 1e3)
        << ", ran " << fmt((e.end - e.ready) / 1e3) << " " << unit(opt) << "</title></rect>\n";
    }
  // Layer boundaries: where each layer's first instruction starts running.
  std::map<int, uint64_t> layer_start;
  for (size_t i = 0; i < ev.size(); ++i) {
    const int layer = s.ops[s.instructions[i].op].layer;
    if (layer < 0) continue;
    auto [it, fresh] = layer_start.emplace(layer, ev[i].ready);
    if (!fresh) it->second = std::min(it->second, ev[i].ready);
  }
  double last_label = -1e9;
  for (const auto& [layer, t] : layer_start) {
    const double x = x_of(t);
    f << "<line x1='" << x << "' y1='" << top - 4 << "' x2='" << x << "' y2='" << top + plot_h
      << "' stroke='#333333' stroke-width='0.8' stroke-dasharray='3,3'/>";
    if (x - last_label >= 22) {  // labels that would overlap are left out; the lines stay
      f << "<text x='" << x + 2 << "' y='" << top - 6 << "' font-size='10'>L" << layer << "</text>";
      last_label = x;
    }
    f << "\n";
  }
  // Legend: one entry per op kind, then the waits.
  for (size_t k = 0; k <= kinds.kinds.size(); ++k) {
    const double x = left + (k % per_row) * entry_w, y = legend_y + (k / per_row) * 18;
    const bool wait = k == kinds.kinds.size();
    const std::string fill = wait ? "url(#wait)" : kinds.kinds[k].colour;
    const std::string label = wait ? "waiting on counters"
                                   : kinds.kinds[k].label + " (" + schedule::opcode_name(kinds.kinds[k].opcode) + ")";
    f << "<rect x='" << x << "' y='" << y << "' width='14' height='11' fill='" << fill << "' stroke='#888888' stroke-width='0.5'/>"
      << "<text x='" << x + 19 << "' y='" << y + 10 << "'>" << xml(label) << "</text>\n";
  }
  f << "</svg>\n";
  return f.str();
}

void write_trace_svg(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const std::string& path,
                     const TraceOptions& opt) {
  io::write_file(path, trace_svg(s, ev, opt));
}

std::string trace_summary(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const TraceOptions& opt) {
  check_sizes(s, ev);
  struct Sum {
    uint32_t n = 0, marked = 0;
    double wait = 0, run = 0, phase[3] = {0, 0, 0};  // with marks: ready..mark0, mark0..mark1, mark1..end
    double bytes = 0;                                 // streamed from memory (schedules/cost.hpp)
    // From a to b in µs, signed: a diagnostic build may record a mark out of order (before `ready`).
    static double us(uint64_t a, uint64_t b) { return static_cast<double>(static_cast<int64_t>(b - a)) / 1e3; }
    void add(const TraceEvent& e, double streamed) {
      ++n;
      bytes += streamed;
      wait += us(e.start, e.ready);
      run += us(e.ready, e.end);
      if (e.mark[0] && e.mark[1]) {
        ++marked;
        phase[0] += us(e.ready, e.mark[0]);
        phase[1] += us(e.mark[0], e.mark[1]);
        phase[2] += us(e.mark[1], e.end);
      }
    }
  };
  const std::string u = unit(opt);
  std::map<uint16_t, Sum> by_op;
  std::map<std::string, Sum> by_name;  // op names without their layer digits: one line per op of the block
  uint64_t t0 = first_start(ev), t1 = t0;
  const bool rates = opt.context > 0 && !opt.logical;
  for (size_t i = 0; i < ev.size(); ++i) {
    const double streamed = rates ? schedule::instruction_bytes(s.instructions[i], opt.context) : 0;
    by_op[s.instructions[i].opcode].add(ev[i], streamed);
    std::string name = s.ops[s.instructions[i].op].name;
    name.erase(std::remove_if(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }), name.end());
    by_name[name].add(ev[i], streamed);
    t1 = std::max(t1, ev[i].end);
  }
  std::ostringstream o;
  o.precision(3);
  o << "step span " << (t1 - t0) / 1e3 << " " << u << (opt.logical ? " (logical clock: one tick per instruction)" : "")
    << "; per op (summed over all SMs, then per instruction):\n";
  for (const auto& [op, sum] : by_op) {
    o << "  " << schedule::opcode_name(static_cast<schedule::Opcode>(op)) << ": " << sum.n << " instructions, wait "
      << sum.wait / sum.n << " " << u << ", run " << sum.run / sum.n << " " << u << " (SM-time " << sum.run / s.sm_count << " "
      << u << " run, " << sum.wait / s.sm_count << " " << u << " wait per SM)\n";
    if (sum.marked)
      o << "    phases per instruction: " << sum.phase[0] / sum.marked << " " << u << " to phase 1, "
        << sum.phase[1] / sum.marked << " " << u << " to phase 2, " << sum.phase[2] / sum.marked << " " << u
        << " to the signal\n";
  }
  o << "per op name, layer digits dropped (mean per instruction): instructions, wait, run [matvec: input, weights, signal]"
    << (rates ? "; KB streamed, its rate while running and % of one SM's share of the bandwidth" : "") << "\n";
  const double share = schedule::CostModel{}.stream_bytes_per_us;  // bytes per us
  for (const auto& [name, sum] : by_name) {
    o << "  " << name << ": " << sum.n << ", " << sum.wait / sum.n << " " << u << ", " << sum.run / sum.n << " " << u;
    if (sum.marked)
      o << " [" << sum.phase[0] / sum.marked << ", " << sum.phase[1] / sum.marked << ", " << sum.phase[2] / sum.marked << "]";
    if (rates && sum.bytes > 0 && sum.run > 0)
      o << "; " << sum.bytes / sum.n / 1e3 << " KB, " << sum.bytes / sum.run / 1e3 << " GB/s, " << 100 * sum.bytes / sum.run / share
        << " %";
    o << "\n";
  }
  // The chain, op by op in program order: a task's own wait is mostly the previous op's slowest
  // task, so each op is also measured as a whole (docs/notes.md, "Where a layer's time goes"),
  // then averaged over its kind (an op, or one position of the layer block: schedules/op_kinds).
  // Its tail: the last signal after the mean of its tasks' signals, what an op would gain if its
  // work were dealt so that every task ended together.
  std::vector<uint64_t> first(s.ops.size(), UINT64_MAX), last(s.ops.size(), 0);
  std::vector<double> end_sum(s.ops.size(), 0);
  std::vector<uint32_t> tasks(s.ops.size(), 0);
  for (size_t i = 0; i < ev.size(); ++i) {
    const uint32_t op = s.instructions[i].op;
    first[op] = std::min(first[op], ev[i].ready);
    last[op] = std::max(last[op], ev[i].end);
    end_sum[op] += static_cast<double>(ev[i].end - t0), ++tasks[op];
  }
  const schedule::OpKinds kinds = schedule::op_kinds(s.ops);
  std::vector<double> hop(kinds.kinds.size(), 0), span(kinds.kinds.size(), 0), tail(kinds.kinds.size(), 0);
  std::vector<uint32_t> hops(kinds.kinds.size(), 0), spans(kinds.kinds.size(), 0);
  bool have_prev = false;
  uint64_t prev_last = 0;
  for (size_t op = 0; op < s.ops.size(); ++op) {
    if (first[op] == UINT64_MAX) continue;  // no instructions
    const uint32_t k = kinds.kind_of[op];
    span[k] += (last[op] - first[op]) / 1e3, ++spans[k];
    tail[k] += (static_cast<double>(last[op] - t0) - end_sum[op] / tasks[op]) / 1e3;
    if (have_prev) hop[k] += (static_cast<double>(first[op]) - static_cast<double>(prev_last)) / 1e3, ++hops[k];
    have_prev = true;
    prev_last = last[op];
  }
  o << "the chain, per op of the program (a block position: mean over the layers): hop from the previous op's last "
       "signal to its first task running, span from then to its own last signal, tail from its tasks' mean signal to the last\n";
  for (size_t k = 0; k < kinds.kinds.size(); ++k) {
    if (!spans[k]) continue;
    o << "  " << kinds.kinds[k].label << ": ";
    if (hops[k]) o << "hop " << hop[k] / hops[k] << " " << u << ", ";
    o << "span " << span[k] / spans[k] << " " << u << ", tail " << tail[k] / spans[k] << " " << u << "\n";
  }
  return o.str();
}

}  // namespace mk::device
