// mkplan: YAML model -> verified binary schedule (+ Graphviz of its dependencies).
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/cli.hpp"

#include "common/output_file.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "mkplan: plan a megakernel schedule from a YAML model.\n"
      "Lowers every op into tasks, derives counter-based dependencies, assigns tasks to per-SM\n"
      "queues, proves the schedule deadlock-free and writes it as a binary file for mkrun."};
  std::string model_path, out_path, dot_path, policy = "round-robin", dot_level = "op";
  uint32_t sms = 132;
  bool quiet = false;
  app.add_option("model", model_path, "model YAML (see examples/)")->required();
  app.add_option("-o,--output", out_path, "schedule file to write")->required();
  app.add_option("--sms", sms, "SM count to plan for (the H200 has 132)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--policy", policy, "SM assignment: round-robin, or critical-path (list scheduling by a bytes-moved cost model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"round-robin", "critical-path"}));
  app.add_option("--dot", dot_path, "also write the dependency graph as Graphviz DOT (render: dot -Tsvg FILE -o deps.svg)");
  app.add_option("--dot-level", dot_level, "DOT detail: op (one node per op) or task (one node per task)")
      ->capture_default_str()
      ->check(CLI::IsMember({"op", "task"}));
  app.add_flag("-q,--quiet", quiet, "print nothing on success");
  if (const auto code = mk::tools::parse(app, argc, argv, "mkplan")) return *code;

  try {
    const auto start = std::chrono::steady_clock::now();
    const mk::dsl::ModelGraph model = mk::dsl::parse_file(model_path);
    mk::planner::PlanOptions options;
    options.sm_count = sms;
    options.policy = mk::planner::policy_by_name(policy);
    const mk::planner::Plan plan = mk::planner::plan(model, options);
    const std::vector<uint8_t> schedule = mk::schedule::serialize(plan.schedule);
    const size_t bytes = schedule.size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // Both outputs are complete on disk before either is put in place: a failure leaves neither.
    std::optional<mk::io::OutputFile> dot_file;
    if (!dot_path.empty()) {
      std::ostringstream dot;
      mk::planner::write_dot(plan, dot, dot_level == "op" ? mk::planner::DotLevel::op : mk::planner::DotLevel::task);
      dot_file.emplace(dot_path);
      dot_file->write(dot.str());
      dot_file->close();
    }
    mk::io::OutputFile out(out_path);
    out.write(schedule.data(), schedule.size());
    out.commit();
    if (dot_file) dot_file->commit();
    if (!quiet) {
      std::cout << mk::planner::summary(plan);
      std::cout << "wrote " << out_path << ": " << bytes << " bytes, planned and verified in " << ms << " ms\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mkplan: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
