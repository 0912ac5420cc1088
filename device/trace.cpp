#include "device/trace.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "schedules/ops.hpp"

namespace mk::device {
namespace {

uint64_t first_start(const std::vector<TraceEvent>& ev) {
  uint64_t t = UINT64_MAX;
  for (const TraceEvent& e : ev) t = std::min(t, e.start);
  return ev.empty() ? 0 : t;
}

const char* colour(uint16_t opcode) {
  static const char* colours[] = {"#999999", "#f4a261", "#4e79a7", "#59a14f", "#8cd17d", "#e15759"};
  return colours[opcode < 6 ? opcode : 0];
}

void open_or_throw(std::ofstream& f, const std::string& path) {
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
}

}  // namespace

void write_chrome_trace(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const std::string& path) {
  std::ofstream f(path);
  open_or_throw(f, path);
  const uint64_t t0 = first_start(ev);
  f << "{\"traceEvents\":[\n";
  bool first = true;
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const schedule::Instruction& inst = s.instructions[i];
      const TraceEvent& e = ev[i];
      auto event = [&](const std::string& name, uint64_t a, uint64_t b, const char* cat) {
        f << (first ? "" : ",\n") << "{\"name\":\"" << name << "\",\"cat\":\"" << cat << "\",\"ph\":\"X\",\"pid\":0,\"tid\":" << sm
          << ",\"ts\":" << (a - t0) / 1e3 << ",\"dur\":" << (b - a) / 1e3 << ",\"args\":{\"task\":" << inst.task
          << ",\"instruction\":" << i - s.sm_offsets[sm] << "}}";
        first = false;
      };
      if (e.ready > e.start) event("wait " + s.ops[inst.op].name, e.start, e.ready, "wait");
      event(s.ops[inst.op].name, e.ready, e.end, schedule::opcode_name(static_cast<schedule::Opcode>(inst.opcode)));
    }
  f << "\n]}\n";
  if (!f) throw std::runtime_error(path + ": write failed");
}

void write_trace_svg(const schedule::Schedule& s, const std::vector<TraceEvent>& ev, const std::string& path) {
  std::ofstream f(path);
  open_or_throw(f, path);
  const uint64_t t0 = first_start(ev);
  uint64_t t1 = t0 + 1;
  for (const TraceEvent& e : ev) t1 = std::max(t1, e.end);
  const double width = 1600, lane = 6, left = 40;
  const double scale = (width - left - 10) / double(t1 - t0);
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << s.sm_count * lane + 60
    << "' font-family='Helvetica' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  f << "<text x='" << left << "' y='14'>one lane per SM; grey: waiting on counters; " << (t1 - t0) / 1e3
    << " us in all</text>\n";
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const TraceEvent& e = ev[i];
      const double y = 20 + sm * lane;
      f << "<rect x='" << left + (e.start - t0) * scale << "' y='" << y << "' width='" << std::max(0.2, (e.ready - e.start) * scale)
        << "' height='" << lane - 1 << "' fill='#dddddd'/>";
      f << "<rect x='" << left + (e.ready - t0) * scale << "' y='" << y << "' width='" << std::max(0.2, (e.end - e.ready) * scale)
        << "' height='" << lane - 1 << "' fill='" << colour(s.instructions[i].opcode) << "'><title>"
        << s.ops[s.instructions[i].op].name << " task " << s.instructions[i].task << ": " << (e.end - e.ready) / 1e3
        << " us</title></rect>\n";
    }
  double x = left;
  const double y = 30 + s.sm_count * lane;
  for (uint16_t op = 1; op < 6; ++op) {
    const char* name = schedule::opcode_name(static_cast<schedule::Opcode>(op));
    if (!name) continue;
    f << "<rect x='" << x << "' y='" << y << "' width='12' height='10' fill='" << colour(op) << "'/><text x='" << x + 16
      << "' y='" << y + 9 << "'>" << name << "</text>\n";
    x += 110;
  }
  f << "</svg>\n";
  if (!f) throw std::runtime_error(path + ": write failed");
}

std::string trace_summary(const schedule::Schedule& s, const std::vector<TraceEvent>& ev) {
  struct Sum {
    uint32_t n = 0, marked = 0;
    double wait = 0, run = 0, phase[3] = {0, 0, 0};  // with marks: ready..mark0, mark0..mark1, mark1..end
  };
  std::map<uint16_t, Sum> by_op;
  uint64_t t0 = first_start(ev), t1 = t0;
  for (size_t i = 0; i < ev.size(); ++i) {
    Sum& sum = by_op[s.instructions[i].opcode];
    ++sum.n;
    sum.wait += (ev[i].ready - ev[i].start) / 1e3;
    sum.run += (ev[i].end - ev[i].ready) / 1e3;
    t1 = std::max(t1, ev[i].end);
    if (ev[i].mark[0] && ev[i].mark[1]) {
      ++sum.marked;
      sum.phase[0] += (ev[i].mark[0] - ev[i].ready) / 1e3;
      sum.phase[1] += (ev[i].mark[1] - ev[i].mark[0]) / 1e3;
      sum.phase[2] += (ev[i].end - ev[i].mark[1]) / 1e3;
    }
  }
  std::ostringstream o;
  o.precision(3);
  o << "step span " << (t1 - t0) / 1e3 << " us; per op (summed over all SMs, then per instruction):\n";
  for (const auto& [op, sum] : by_op) {
    o << "  " << schedule::opcode_name(static_cast<schedule::Opcode>(op)) << ": " << sum.n << " instructions, wait "
      << sum.wait / sum.n << " us, run " << sum.run / sum.n << " us (SM-time " << sum.run / s.sm_count << " us run, "
      << sum.wait / s.sm_count << " us wait per SM)\n";
    if (sum.marked)
      o << "    phases per instruction: " << sum.phase[0] / sum.marked << " us to phase 1, " << sum.phase[1] / sum.marked
        << " us to phase 2, " << sum.phase[2] / sum.marked << " us to the signal\n";
  }
  return o.str();
}

}  // namespace mk::device
