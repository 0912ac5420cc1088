// The trace writers (device/trace.cpp) on a planned schedule with made-up timings, with hostile
// op names, and the emulator's logical-clock trace.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "device/runtime.hpp"
#include "device/trace.hpp"
#include "device/weights.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/cost.hpp"
#include "tests/temp_dir.hpp"

namespace {

mk::planner::Plan tiny_plan(uint32_t sms) {
  static const auto model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  mk::planner::PlanOptions options;
  options.sm_count = sms;
  return mk::planner::plan(model, options);
}

// Each instruction waits 1 us and runs 2 us; matvecs carry both phase marks.
std::vector<mk::device::TraceEvent> made_up_events(const mk::schedule::Schedule& s) {
  std::vector<mk::device::TraceEvent> events(s.instructions.size());
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const uint64_t t = 1000000 + 3000 * (i - s.sm_offsets[sm]);
      const bool matvec = s.instructions[i].opcode == static_cast<uint16_t>(mk::schedule::Opcode::matvec);
      events[i] = {t, t + 1000, t + 3000, {matvec ? t + 1500 : 0, matvec ? t + 2500 : 0}};
    }
  return events;
}

std::string slurp(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("trace: Chrome JSON, SVG and summary describe every instruction") {
  const auto plan = tiny_plan(4);
  const mk::schedule::Schedule& s = plan.schedule;
  const auto events = made_up_events(s);
  mk::test::TempDir dir("mk_test_trace");
  const std::string json_path = (dir.path / "t.json").string(), svg_path = (dir.path / "t.svg").string();
  mk::device::write_chrome_trace(s, events, json_path);
  mk::device::write_trace_svg(s, events, svg_path);

  const auto json = nlohmann::json::parse(std::ifstream(json_path));
  size_t runs = 0, waits = 0, lanes = 0;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "M") {
      lanes += e["name"] == "thread_name";
      continue;
    }
    CHECK(e["ph"] == "X");
    CHECK(e["tid"].get<uint32_t>() < s.sm_count);
    (e["cat"] == "wait" ? waits : runs) += 1;
    if (e["cat"] != "wait") CHECK(e["dur"].get<double>() == doctest::Approx(2.0));
  }
  CHECK(lanes == s.sm_count);
  CHECK(runs == s.instructions.size());
  CHECK(waits == s.instructions.size());

  const std::string svg = slurp(svg_path);
  CHECK(count(svg, "<title>") == s.instructions.size());
  // A time axis in us, SM labels, a mark per layer, one legend entry per op kind and the waits.
  CHECK(svg.find("time (us)") != std::string::npos);
  CHECK(svg.find(">SM 3</text>") != std::string::npos);
  for (const char* layer : {">L0<", ">L1<", ">L2<"}) CHECK(svg.find(layer) != std::string::npos);
  for (const char* entry : {">x0 (embed)<", ">qkv{0..2} (matvec)<", ">x{1..3} (matvec)<", ">logits (matvec)<",
                            ">attn_part{0..2} (attention)<", ">waiting on counters<"})
    CHECK(svg.find(entry) != std::string::npos);
  CHECK(count(svg, "url(#wait)") == s.instructions.size() + 1);

  const std::string summary = mk::device::trace_summary(s, events);
  for (const char* op : {"embed", "matvec", "attention", "attn_reduce", "argmax"}) CHECK(summary.find(op) != std::string::npos);
  CHECK(summary.find("wait 1 us, run 2 us") != std::string::npos);
  CHECK(summary.find("0.5 us to phase 1, 1 us to phase 2, 0.5 us to the signal") != std::string::npos);
  CHECK(summary.find("GB/s") == std::string::npos);  // no context given: no rates

  // Given the step's position, each op of the block gets the bytes its instructions stream
  // (schedules/cost.hpp) and their rate over the 2 us each ran here.
  mk::device::TraceOptions opt;
  opt.context = 64;
  const std::string rated = mk::device::trace_summary(s, events, opt);
  double bytes = 0;
  uint32_t n = 0;
  for (const auto& inst : s.instructions)
    if (s.ops[inst.op].name == "logits") bytes += mk::schedule::instruction_bytes(inst, 64), ++n;
  REQUIRE(n > 0);
  CHECK(bytes == 512.0 * 256 * 2);  // the LM head reads tiny-llama's [vocab 512, hidden 256] bf16 table once
  std::ostringstream want;
  want.precision(3);
  want << "  logits: " << n << ", 1 us, 2 us [0.5, 1, 0.5]; " << bytes / n / 1e3 << " KB, " << bytes / n / 2 / 1e3 << " GB/s, "
       << 100 * bytes / n / 2 / mk::schedule::CostModel{}.stream_bytes_per_us << " %\n";
  CAPTURE(rated);
  CHECK(rated.find(want.str()) != std::string::npos);
  opt.context = 128;  // the attention streams more of the cache at a later position
  CHECK(mk::device::trace_summary(s, events, opt) != rated);
}

// A mark recorded before the instruction's `ready` (a diagnostic build stamping when the producer
// issued a tile) is a negative phase, not one wrapped to 2^64 ns.
TEST_CASE("trace: a mark before ready gives a negative phase") {
  const auto plan = tiny_plan(4);
  const mk::schedule::Schedule& s = plan.schedule;
  auto events = made_up_events(s);
  for (auto& e : events)
    if (e.mark[0]) e.mark[0] = e.ready - 500;
  const std::string summary = mk::device::trace_summary(s, events);
  CAPTURE(summary);
  CHECK(summary.find("-0.5 us to phase 1, 2 us to phase 2, 0.5 us to the signal") != std::string::npos);
}

TEST_CASE("trace: a record's marks from an earlier step of its launch are dropped, its own kept") {
  // start, ready, end, then the two marks: the first from this step, the second an earlier step's.
  const uint64_t record[mk::device::kTraceSlots] = {10'000, 11'000, 15'000, 12'000, 4'000};
  const mk::device::TraceEvent e = mk::device::trace_event(record);
  CHECK(e.start == 10'000);
  CHECK(e.ready == 11'000);
  CHECK(e.end == 15'000);
  CHECK(e.mark[0] == 12'000);
  CHECK(e.mark[1] == 0);
  const uint64_t late[mk::device::kTraceSlots] = {10'000, 11'000, 15'000, 10'500, 15'001};  // before ready: kept
  CHECK(mk::device::trace_event(late).mark[0] == 10'500);
  CHECK(mk::device::trace_event(late).mark[1] == 0);
}

// The chain section measures each op as a whole: with every task of the k-th op (program order)
// running from 10k + 1 to 10k + 5 us, each op spans 4 us and starts 6 us after the one before.
TEST_CASE("trace: the summary's chain gives each op's hop and span") {
  const auto plan = tiny_plan(4);
  const mk::schedule::Schedule& s = plan.schedule;
  std::vector<mk::device::TraceEvent> events(s.instructions.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const uint64_t t = 1000000 + 10000 * uint64_t{s.instructions[i].op};
    events[i] = {t, t + 1000, t + 5000, {0, 0}};
  }
  const std::string summary = mk::device::trace_summary(s, events);
  CAPTURE(summary);
  const size_t at = summary.find("the chain, per op of the program");
  REQUIRE(at != std::string::npos);
  const std::string chain = summary.substr(at);
  CHECK(chain.find("  x0: span 4 us, tail 0 us\n") != std::string::npos);  // the embed: the first op, no hop
  for (const char* op : {"qkv{0..2}", "attn_part{0..2}", "attn{0..2}", "h{0..2}", "act{0..2}", "x{1..3}", "logits", "next_token"})
    CHECK(chain.find("  " + std::string(op) + ": hop 6 us, span 4 us, tail 0 us\n") != std::string::npos);
  // In program order: the block's ops before the LM head and the argmax.
  CHECK(chain.find("  qkv{0..2}:") < chain.find("  attn_part{0..2}:"));
  CHECK(chain.find("  act{0..2}:") < chain.find("  logits:"));
}

// The tail: with the j-th task of an op (of n) signalling j us after its first, the last signal
// comes (n - 1) / 2 us after the mean one.
TEST_CASE("trace: the summary's chain gives each op's tail") {
  const auto plan = tiny_plan(4);
  const mk::schedule::Schedule& s = plan.schedule;
  std::vector<mk::device::TraceEvent> events(s.instructions.size());
  std::map<uint32_t, uint32_t> seen;  // op -> its tasks so far
  for (size_t i = 0; i < events.size(); ++i) {
    const uint32_t op = s.instructions[i].op, j = seen[op]++;
    const uint64_t t = 1000000 + 100000 * uint64_t{op};
    events[i] = {t, t + 1000, t + 5000 + 1000 * uint64_t{j}, {0, 0}};
  }
  uint32_t logits = 0;  // the LM head's tasks
  for (size_t op = 0; op < s.ops.size(); ++op)
    if (s.ops[op].name == "logits") logits = seen[static_cast<uint32_t>(op)];
  REQUIRE(logits > 1);
  const std::string summary = mk::device::trace_summary(s, events);
  CAPTURE(summary);
  const size_t line = summary.find("  logits: hop ");
  REQUIRE(line != std::string::npos);
  std::ostringstream want;
  want.precision(3);
  want << ", tail " << (logits - 1) / 2.0 << " us\n";
  CHECK(summary.substr(line, summary.find('\n', line) + 1 - line).ends_with(want.str()));
}

TEST_CASE("trace: hostile op names give valid JSON and SVG") {
  auto plan = tiny_plan(4);
  mk::schedule::Schedule s = plan.schedule;
  const std::vector<std::string> names = {"q\"uote", "back\\slash", "new\nline\ttab\x01\x1f", "ünï名🙂", "<&>'", "\xff\xfe bad utf-8"};
  for (size_t i = 0; i < s.ops.size(); ++i) s.ops[i].name = names[i % names.size()] + std::to_string(i);
  const auto events = made_up_events(s);
  mk::test::TempDir dir("mk_test_trace_names");
  const std::string json_path = (dir.path / "t.json").string(), svg_path = (dir.path / "t.svg").string();
  mk::device::TraceOptions opt;
  opt.title = "title \"with\" <markup> & \\ ü";
  mk::device::write_chrome_trace(s, events, json_path, opt);
  mk::device::write_trace_svg(s, events, svg_path, opt);
  nlohmann::json json;
  REQUIRE_NOTHROW(json = nlohmann::json::parse(std::ifstream(json_path)));
  std::set<std::string> seen;
  for (const auto& e : json["traceEvents"])
    if (e["ph"] == "X" && e["cat"] != "wait") seen.insert(e["name"].get<std::string>());
  for (size_t i = 0; i < s.ops.size(); ++i)
    if (i % names.size() != 5) CHECK(seen.count(s.ops[i].name) == 1);  // valid UTF-8 comes back unchanged
  CHECK(seen.size() == s.ops.size());
  CHECK(json["traceEvents"][0]["args"]["name"] == opt.title);

  const std::string svg = slurp(svg_path);
  CHECK(svg.find("&lt;&amp;&gt;&apos;") != std::string::npos);
  CHECK(svg.find("<&>") == std::string::npos);
  CHECK(svg.find("title &quot;with&quot; &lt;markup&gt; &amp;") != std::string::npos);
  CHECK(svg.find("ünï名🙂") != std::string::npos);
  CHECK(svg.find("\xff") == std::string::npos);
  for (char c = 1; c < 0x20; ++c)
    if (c != '\n' && c != '\t') CHECK(svg.find(c) == std::string::npos);  // the rest is not allowed in XML
}

TEST_CASE("trace: the emulator's logical clock, the same in any execution order") {
  const auto plan = tiny_plan(8);
  const mk::schedule::Schedule& s = plan.schedule;
  mk::test::TempDir dir("mk_test_trace_emulator");
  mk::device::write_random_checkpoint(s, dir.path, 3);
  const auto ckpt = mk::device::Checkpoint::open(dir.path);
  std::vector<mk::device::TraceEvent> traces[2];
  for (int k = 0; k < 2; ++k) {
    mk::device::RuntimeOptions opt;
    opt.max_context = 4;
    opt.order = k ? mk::device::Order::shuffled : mk::device::Order::deterministic;
    opt.seed = 7;
    auto backend = mk::device::make_emulator_backend(s, ckpt, opt);
    CHECK(backend->trace_is_logical());
    backend->step(1, 0);
    CHECK(backend->trace().empty());  // off until asked
    backend->enable_trace(true);
    backend->step(2, 1);
    traces[k] = backend->trace();
  }
  const auto& ev = traces[0];
  REQUIRE(ev.size() == s.instructions.size());
  std::vector<uint64_t> signalled(s.counter_count, 0);
  const bool short_step = mk::schedule::short_step({1, 4, 1, 1, s.kv_splits, 0, 0, mk::schedule::kNone, nullptr, nullptr, nullptr, nullptr});  // the step at 1
  for (uint32_t i = 0; i < ev.size(); ++i)
    for (uint32_t c : s.signals_of(s.instructions[i], short_step)) signalled[c] = std::max(signalled[c], ev[i].end);
  uint64_t span = 0;
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      CHECK(ev[i].start == (i == s.sm_offsets[sm] ? 0 : ev[i - 1].end));  // right after its SM's previous one
      uint64_t ready = ev[i].start;
      for (const auto& w : s.waits_of(s.instructions[i], short_step)) ready = std::max(ready, signalled[w.counter]);
      CHECK(ev[i].ready == ready);  // when its last awaited signal landed
      CHECK(ev[i].end == ev[i].ready + 1000);  // one tick
      span = std::max(span, ev[i].end);
    }
  CHECK(span >= 1000 * plan.stats.critical_path_tasks);
  for (size_t i = 0; i < ev.size(); ++i) {
    CHECK(traces[1][i].start == ev[i].start);
    CHECK(traces[1][i].end == ev[i].end);
  }
  mk::device::TraceOptions opt;
  opt.logical = true;
  CHECK(mk::device::trace_summary(s, ev, opt).find("ticks (logical clock: one tick per instruction)") != std::string::npos);
  const std::string svg_path = (dir.path / "e.svg").string();
  mk::device::write_trace_svg(s, ev, svg_path, opt);
  CHECK(slurp(svg_path).find("time (logical ticks)") != std::string::npos);
}
