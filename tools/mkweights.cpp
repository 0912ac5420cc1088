// mkweights: writes a checkpoint of random weights matching a schedule, so that schedules can be
// run end to end without downloading a real model.
#include <CLI/CLI.hpp>

#include "tools/cli.hpp"
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "device/weights.hpp"
#include "schedules/schedule.hpp"

namespace {

int run(int argc, char** argv) {
  CLI::App app{
      "Write a Hugging Face style checkpoint of random BF16 weights for every weight tensor of a\n"
      "schedule: DIR/model.safetensors and DIR/config.json. Tensors that share a safetensors key\n"
      "(tied embeddings) are written once. Norm weights are drawn near 1, embeddings with std 1,\n"
      "other matrices with std 1/sqrt(columns). The same seed always gives the same bytes.",
      "mkweights"};
  std::string schedule_path, out_dir;
  uint64_t seed = 0;
  app.add_option("SCHEDULE", schedule_path, "schedule file written by mkplan")->required()->type_name("FILE");
  app.add_option("-o,--out", out_dir, "checkpoint folder to write (created if needed)")->required()->type_name("DIR");
  app.add_option("--seed", seed, "random seed")->capture_default_str()->type_name("N");
  app.footer("Example: mkweights schedule.bin -o weights/ --seed 7");

  if (const auto code = mk::tools::parse(app, argc, argv, "mkweights")) return *code;

  const mk::schedule::Schedule schedule = mk::schedule::read_file(schedule_path);
  mk::device::write_random_checkpoint(schedule, out_dir, seed);
  const auto ckpt = mk::device::Checkpoint::open(out_dir);
  mk::device::check_weights(schedule, ckpt);  // what we wrote must be what the runtime accepts
  uint64_t bytes = 0;
  for (const auto& [key, t] : ckpt.tensors()) bytes += t.bytes.size();
  std::cout << "wrote " << ckpt.tensors().size() << " tensors (" << bytes << " bytes) to "
            << (std::filesystem::path(out_dir) / "model.safetensors").string() << " (seed " << seed << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "mkweights: " << e.what() << "\n";
    return 1;
  }
}
