// mkplan: YAML model (or a Hugging Face checkpoint folder's config.json) -> verified binary
// schedule (+ Graphviz of its dependencies).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/cli.hpp"

#include "common/output_file.hpp"
#include "common/show_number.hpp"
#include "dsl/hf_config.hpp"
#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/limits.hpp"

int main(int argc, char** argv) {
  CLI::App app;
  mk::tools::describe(
      app, {.tool = "mkplan",
            .usage = {"MODEL.yaml -o SCHEDULE [--sms N] [OPTIONS]", "CHECKPOINT_DIR -o SCHEDULE [--sample] [--emit-yaml MODEL.yaml] [OPTIONS]"},
            .description =
                "Plan a megakernel schedule from a YAML model, or from a Hugging Face checkpoint folder (its\n"
                "config.json: Llama, Mistral, Qwen2, Qwen3) without writing YAML. Lowers every op into tasks,\n"
                "derives counter-based dependencies, assigns tasks to per-SM queues, proves the schedule\n"
                "deadlock-free and writes it as a binary file for mkrun. Outputs never overwrite an input (the\n"
                "model, the checkpoint's files) unless --force.",
            .examples = {{"examples/llama-3.2-1b.yaml -o s.bin", "plan a model YAML for 132 SMs (the H200)"},
                         {"Llama-3.2-1B-Instruct/ -o s.bin --sample",
                          "plan from a checkpoint's config.json, ending in a sample op (mkrun --temperature)"},
                         {"Qwen3-4B/ -o s.bin --emit-yaml qwen3-4b.yaml", "also write the generated model as YAML, to edit"},
                         {"examples/tiny-llama.yaml -o s.bin --sms 8 --dot deps.dot",
                          "plan for 8 SMs and draw the op graph (dot -Tsvg deps.dot -o deps.svg)"}},
            .version_note = "writes schedule format " + std::to_string(mk::schedule::kFormatVersion)});
  std::string model_path, out_path, dot_path, policy = "round-robin", dot_level = "op";
  uint32_t sms = mk::schedule::kDefaultSmCount, max_tokens = 0;
  bool quiet = false, sample = false, force = false;
  std::string emit_yaml;
  app.add_option("MODEL", model_path, "model YAML (see examples/), or a checkpoint folder (or its config.json) to import")
      ->required()
      ->type_name("FILE|DIR");
  app.add_option("--emit-yaml", emit_yaml, "with a checkpoint folder: also write the generated model as YAML (edit it to customise)")
      ->type_name("FILE");
  app.add_flag("--sample", sample,
               "with a checkpoint folder: end the model with a sample op instead of argmax, so that mkrun can sample "
               "(--temperature, --top-k, --top-p; greedy without them)");
  app.add_option("-o,--output", out_path, "schedule file to write")->required()->type_name("FILE");
  app.add_option("--sms", sms, "SM count to plan for (the H200 has 132)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096))
      ->type_name("N");
  app.add_option("--max-tokens", max_tokens,
                 "tokens a step may run (rows of the activations; default: the model's config max_tokens, else 1)")
      ->check(CLI::Range(1u, mk::limits::kMaxStepTokens))
      ->type_name("N");
  app.add_option("--policy", policy, "SM assignment: round-robin, or critical-path (list scheduling by the cost model of schedules/cost.hpp)")
      ->capture_default_str()
      ->check(CLI::IsMember({"round-robin", "critical-path"}));
  app.add_option("--dot", dot_path, "also write the dependency graph as Graphviz DOT (render: dot -Tsvg FILE -o deps.svg)")
      ->type_name("FILE");
  app.add_option("--dot-level", dot_level, "DOT detail: op (one node per op) or task (one node per task)")
      ->capture_default_str()
      ->check(CLI::IsMember({"op", "task"}));
  bool dot_expand = false;
  std::string dot_layers, dot_ops;
  app.add_flag("--dot-expand", dot_expand, "op level: draw every layer instead of the repeated block once");
  app.add_option("--dot-layers", dot_layers, "task level: only the tasks of layers A-B (or one layer A)");
  app.add_option("--dot-ops", dot_ops,
                 "task level: only the tasks of these ops (comma-separated globs over op names and opcodes, e.g. 'qkv*,attention')");
  app.add_flag("-q,--quiet", quiet, "print nothing on success");
  app.add_flag("--force", force, mk::tools::kForceHelp);
  if (const auto code = mk::tools::parse(app, argc, argv, "mkplan")) return *code;

  mk::planner::DotOptions dot_options;
  dot_options.level = dot_level == "op" ? mk::planner::DotLevel::op : mk::planner::DotLevel::task;
  dot_options.expand = dot_expand;
  if ((!dot_layers.empty() || !dot_ops.empty()) && dot_options.level != mk::planner::DotLevel::task) {
    std::cerr << "mkplan: --dot-layers and --dot-ops select tasks; add --dot-level task\n";
    return 1;
  }
  if (dot_expand && dot_options.level != mk::planner::DotLevel::op) {
    std::cerr << "mkplan: --dot-expand is for --dot-level op\n";
    return 1;
  }
  if (!dot_layers.empty()) {
    const auto dash = dot_layers.find('-');
    try {
      size_t used = 0;
      const std::string a = dot_layers.substr(0, dash), b = dash == std::string::npos ? a : dot_layers.substr(dash + 1);
      dot_options.first_layer = std::stoi(a, &used);
      if (used != a.size()) throw std::invalid_argument(a);
      dot_options.last_layer = std::stoi(b, &used);
      if (used != b.size()) throw std::invalid_argument(b);
    } catch (const std::exception&) {
      dot_options.first_layer = -1;
    }
    if (dot_options.first_layer < 0 || dot_options.last_layer < dot_options.first_layer) {
      std::cerr << "mkplan: --dot-layers '" << dot_layers << "': expected A-B with 0 <= A <= B, or one layer A\n";
      return 1;
    }
  }
  for (size_t at = 0; !dot_ops.empty() && at <= dot_ops.size();) {
    const size_t comma = std::min(dot_ops.find(',', at), dot_ops.size());
    if (comma > at) dot_options.ops.push_back(dot_ops.substr(at, comma - at));
    at = comma + 1;
  }

  try {
    const auto start = std::chrono::steady_clock::now();
    const bool import = mk::dsl::is_hf_import(model_path);
    // Before any work: no output may replace the model, nor a file of the checkpoint it comes from.
    std::vector<mk::io::NamedPath> inputs = {{import ? "the checkpoint's" : "the model", model_path}};
    if (import) {
      const std::filesystem::path path(model_path), folder = std::filesystem::is_directory(path) ? path : path.parent_path();
      for (const auto& f : mk::tools::checkpoint_files(folder.empty() ? "." : folder)) inputs.push_back({"the checkpoint's", f});
    }
    mk::io::check_outputs({{"-o", out_path}, {"--dot", dot_path}, {"--emit-yaml", emit_yaml}}, inputs, force);
    if (!emit_yaml.empty() && !import) throw std::invalid_argument("--emit-yaml needs a checkpoint folder (or its config.json), not a YAML model");
    if (sample && !import)
      throw std::invalid_argument("--sample needs a checkpoint folder (or its config.json); in a YAML model write "
                                  "'{op: sample, in: logits, out: next_token}' in place of the argmax op");
    std::string generated;
    const std::optional<mk::dsl::HfConfig> config = import ? std::optional(mk::dsl::read_hf_config(model_path)) : std::nullopt;
    const mk::dsl::ModelGraph model =
        config ? mk::dsl::import_hf_model(*config, &generated, sample ? mk::dsl::NextToken::sample : mk::dsl::NextToken::argmax)
               : mk::dsl::parse_file(model_path);
    mk::planner::PlanOptions options;
    options.sm_count = sms;
    options.max_tokens = max_tokens;
    options.policy = mk::planner::policy_by_name(policy);
    const mk::planner::Plan plan = mk::planner::plan(model, options);
    const std::vector<uint8_t> schedule = mk::schedule::serialize(plan.schedule);
    const size_t bytes = schedule.size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // Both outputs are complete on disk before either is put in place: a failure leaves neither.
    std::optional<mk::io::OutputFile> dot_file;
    if (!dot_path.empty()) {
      std::ostringstream text;  // a selection of no task is refused before any file is touched
      const auto stats = mk::planner::write_dot(plan, text, dot_options);
      dot_file.emplace(dot_path);
      dot_file->write(text.str());
      dot_file->close();
      if (dot_options.level == mk::planner::DotLevel::task && stats.nodes + stats.edges > 20000)
        std::cerr << "mkplan: warning: " << dot_path << " has " << stats.nodes << " nodes and " << stats.edges
                  << " edges; Graphviz will take minutes or fail on it. Pick a few layers and ops: --dot-layers 0-1 --dot-ops 'qkv*,attn*'\n";
    }
    std::optional<mk::io::OutputFile> yaml_file;
    if (!emit_yaml.empty()) {
      yaml_file.emplace(emit_yaml);
      yaml_file->write(generated);
      yaml_file->close();
    }
    mk::io::OutputFile out(out_path);
    out.write(schedule.data(), schedule.size());
    out.commit();
    if (dot_file) dot_file->commit();
    if (yaml_file) yaml_file->commit();
    if (!quiet) {
      if (config) {
        std::cout << "model generated from " << config->file << " (" << config->architecture << ", " << config->layers
                  << " layers, " << config->heads << " q heads over " << config->kv_heads << " kv heads, head_dim "
                  << config->head_dim << (config->qkv_bias ? ", q/k/v biases" : "") << (config->qk_norm ? ", q/k norm" : "")
                  << (config->tie_embeddings ? ", tied embeddings" : "") << ")\n";
        if (config->sliding_window)
          std::cout << "sliding_window " << *config->sliding_window << ": exact up to that context; mkrun refuses a longer one\n";
      }
      std::cout << mk::planner::summary(plan);
      std::cout << "wrote " << out_path << ": " << bytes << " bytes, planned and verified in " << mk::show_fixed(ms) << " ms\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mkplan: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
