// Fuzzes the model reader through planning: YAML text -> ModelGraph -> Plan (verified) ->
// schedule bytes -> read back. A refusal of the model (dsl::Error, "file:line:col: ...") is
// expected; anything else is a finding: a crash, a sanitizer report, any other exception (the
// validator or the verifier refusing what the planner made is a planner bug), or a planned
// schedule that does not read back.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/schedule.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  mk::planner::Plan plan;
  try {
    const mk::dsl::ModelGraph model = mk::dsl::parse_string(text, "fuzz.yaml");
    plan = mk::planner::plan(model, {3, size % 2 ? mk::planner::Policy::critical_path : mk::planner::Policy::round_robin});
  } catch (const mk::dsl::Error&) {
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "the planner failed on a model it accepted: " << e.what() << "\n";
    std::abort();
  }
  // A schedule the planner wrote must read back.
  const std::vector<uint8_t> bytes = mk::schedule::serialize(plan.schedule);
  try {
    mk::schedule::deserialize(bytes, "planned");
  } catch (const std::exception& e) {
    std::cerr << "a planned schedule does not read back: " << e.what() << "\n";
    std::abort();
  }
  return 0;
}
