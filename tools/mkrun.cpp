// mkrun: run a schedule on a checkpoint: prefill over the prompt, then greedy decoding.
#include <chrono>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/cli.hpp"

#include "device/runtime.hpp"

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || v < 0 || v > 0x7fffffff)
      throw std::invalid_argument("--prompt-ids: '" + item + "' is not a token id (expected e.g. 128000,791,1888)");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw std::invalid_argument("--prompt-ids is empty");
  if (text.back() == ',') throw std::invalid_argument("--prompt-ids ends with a comma");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mkrun: run a planned schedule (mkplan) on a Hugging Face style checkpoint.\n"
      "Prefills the prompt as decode steps, then decodes greedily; prints the token ids and the\n"
      "time per token. The CPU emulator runs where there is no GPU."};
  std::string schedule_path, weights_path, prompt = "1", backend_name = "auto", dump, order = "deterministic";
  uint32_t tokens = 16, max_context = 0;
  uint64_t seed = 0;
  double watchdog = 1.0;
  app.add_option("schedule", schedule_path, "schedule file written by mkplan")->required();
  app.add_option("weights", weights_path, "checkpoint folder (model.safetensors or shards + index) or .safetensors file")->required();
  app.add_option("--prompt-ids", prompt, "comma-separated prompt token ids")->capture_default_str();
  app.add_option("--tokens", tokens, "greedy tokens to generate")->capture_default_str();
  app.add_option("--backend", backend_name, "auto (the GPU when there is one), cuda or emulator")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "emulator"}));
  app.add_option("--max-context", max_context, "KV-cache capacity in positions (default: prompt + tokens)");
  app.add_option("--dump-logits", dump, "write every step's logits (prompt steps included) as float32 .npy [steps, vocab]");
  app.add_option("--order", order, "emulator execution order: deterministic, or shuffled (seeded)")
      ->capture_default_str()
      ->check(CLI::IsMember({"deterministic", "shuffled"}));
  app.add_option("--seed", seed, "seed for --order shuffled")->capture_default_str();
  app.add_option("--watchdog", watchdog,
                 "CUDA: seconds a counter wait may take before the run is stopped with a report (raise it under "
                 "compute-sanitizer)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  if (const auto code = mk::tools::parse(app, argc, argv, "mkrun")) return *code;

  try {
    const std::vector<int32_t> ids = parse_ids(prompt);
    std::optional<mk::io::OutputFile> dump_file;  // opened now: a bad path fails before the run, an old file stays
    if (!dump.empty()) dump_file.emplace(dump);
    const mk::schedule::Schedule schedule = mk::schedule::read_file(schedule_path);
    const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(weights_path);
    mk::device::check_weights(schedule, ckpt);
    mk::device::RuntimeOptions opt;
    const uint64_t steps = ids.size() + (tokens ? uint64_t{tokens} - 1 : 0);
    if (!max_context && steps > (1u << 24)) throw std::invalid_argument("--tokens is too large");
    opt.max_context = max_context ? max_context : static_cast<uint32_t>(steps);
    opt.order = order == "shuffled" ? mk::device::Order::shuffled : mk::device::Order::deterministic;
    opt.seed = seed;
    opt.watchdog_seconds = watchdog;
    if (backend_name == "cuda" && !mk::device::cuda_available())
      throw std::runtime_error("--backend cuda: no usable GPU (or this build has no CUDA interpreter)");
    std::unique_ptr<mk::device::Backend> backend;
#if MK_HAVE_CUDA
    if (backend_name == "cuda" || (backend_name == "auto" && mk::device::cuda_available()))
      backend = mk::device::make_cuda_backend(schedule, ckpt, opt);
#endif
    if (!backend) backend = mk::device::make_emulator_backend(schedule, ckpt, opt);

    mk::device::GenerateOptions gen;
    gen.prompt = ids;
    gen.tokens = tokens;
    gen.keep_logits = !dump.empty();
    auto last_report = std::chrono::steady_clock::now();
    const auto start = last_report;
    gen.on_step = [&](uint32_t done, uint32_t all, int32_t) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report < std::chrono::seconds(1) && done != all) return;
      if (now - start < std::chrono::seconds(1)) return;  // short runs stay quiet
      last_report = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::cerr << "\r[" << done << "/" << all << " steps, " << done / s << " tokens/s]" << (done == all ? "\n" : "")
                << std::flush;
    };
    const mk::device::GenerateResult r = mk::device::generate(*backend, schedule, gen, opt.max_context);
    std::cout << "tokens:";
    for (int32_t t : r.tokens) std::cout << " " << t;
    std::cout << "\n"
              << r.steps << " steps on " << backend->name() << ": " << r.seconds * 1e6 / r.steps << " us/token ("
              << r.steps / r.seconds << " tokens/s)\n";
    const uint32_t decode_steps = r.steps + 1 - static_cast<uint32_t>(ids.size());
    if (tokens > 1 && ids.size() > 1)
      std::cout << "decode after the prompt: " << decode_steps << " steps, " << r.decode_seconds * 1e6 / decode_steps
                << " us/token at context " << ids.size() << ".." << r.steps << "\n";
    if (!dump.empty()) {
      mk::device::write_npy(*dump_file, r.logits);
      std::cout << "wrote " << dump << ": [" << r.logits.size() << ", " << (r.logits.empty() ? 0 : r.logits[0].size())
                << "] float32\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mkrun: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
