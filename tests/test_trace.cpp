// The trace writers (device/trace.cpp) on a planned schedule with made-up timings.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "device/trace.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "tests/temp_dir.hpp"

TEST_CASE("trace: Chrome JSON, SVG and summary describe every instruction") {
  const auto model = mk::dsl::parse_file(std::string(MK_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  mk::planner::PlanOptions options;
  options.sm_count = 4;
  const auto plan = mk::planner::plan(model, options);
  const mk::schedule::Schedule& s = plan.schedule;
  // Each instruction waits 1 us and runs 2 us; matvecs carry both phase marks.
  std::vector<mk::device::TraceEvent> events(s.instructions.size());
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const uint64_t t = 1000000 + 3000 * (i - s.sm_offsets[sm]);
      const bool matvec = s.instructions[i].opcode == static_cast<uint16_t>(mk::schedule::Opcode::matvec);
      events[i] = {t, t + 1000, t + 3000, {matvec ? t + 1500 : 0, matvec ? t + 2500 : 0}};
    }
  mk::test::TempDir dir("mk_test_trace");
  const std::string json_path = (dir.path / "t.json").string(), svg_path = (dir.path / "t.svg").string();
  mk::device::write_chrome_trace(s, events, json_path);
  mk::device::write_trace_svg(s, events, svg_path);

  const auto json = nlohmann::json::parse(std::ifstream(json_path));
  size_t runs = 0, waits = 0;
  for (const auto& e : json["traceEvents"]) {
    CHECK(e["ph"] == "X");
    CHECK(e["tid"].get<uint32_t>() < s.sm_count);
    (e["cat"] == "wait" ? waits : runs) += 1;
    if (e["cat"] != "wait") CHECK(e["dur"].get<double>() == doctest::Approx(2.0));
  }
  CHECK(runs == s.instructions.size());
  CHECK(waits == s.instructions.size());

  std::stringstream svg;
  svg << std::ifstream(svg_path).rdbuf();
  size_t titles = 0;
  for (size_t at = svg.str().find("<title>"); at != std::string::npos; at = svg.str().find("<title>", at + 1)) ++titles;
  CHECK(titles == s.instructions.size());

  const std::string summary = mk::device::trace_summary(s, events);
  for (const char* op : {"embed", "matvec", "attention", "attn_reduce", "argmax"}) CHECK(summary.find(op) != std::string::npos);
  CHECK(summary.find("wait 1 us, run 2 us") != std::string::npos);
  CHECK(summary.find("0.5 us to phase 1, 1 us to phase 2, 0.5 us to the signal") != std::string::npos);
}
