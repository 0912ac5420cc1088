// mkweights: writes a checkpoint of random weights matching a schedule, so that schedules can be
// run end to end without downloading a real model.
#include <CLI/CLI.hpp>

#include "tools/cli.hpp"
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/output_file.hpp"
#include "device/weights.hpp"
#include "schedules/format.hpp"
#include "schedules/schedule.hpp"

namespace {

namespace fs = std::filesystem;

// The file that shows `folder` already holds a checkpoint (weights mkweights would replace, or
// an index that would stay in force beside them), if any.
std::optional<fs::path> checkpoint_in(const fs::path& folder) {
  for (const fs::path& f : mk::tools::checkpoint_files(folder))
    if (f.extension() == ".safetensors" || f.filename() == "model.safetensors.index.json") return f;
  return std::nullopt;
}

int run(int argc, char** argv) {
  CLI::App app;
  mk::tools::describe(
      app, {.tool = "mkweights",
            .usage = {"SCHEDULE -o CHECKPOINT_DIR [--seed N] [OPTIONS]"},
            .description =
                "Write a Hugging Face style checkpoint of random weights for every weight tensor of a\n"
                "schedule: DIR/model.safetensors, and DIR/config.json unless the folder has one. Tensors that\n"
                "share a safetensors key (tied embeddings) are written once. Norm weights are drawn near 1,\n"
                "embeddings with std 1, other matrices with std 1/sqrt(columns), in BF16; a weight the schedule\n"
                "declares float8 (f8e4m3) is such a matrix quantized to F8_E4M3, with F32 scales of its layout\n"
                "(tensor, row or 128x128 block), each the largest magnitude it covers over 448: the values span\n"
                "e4m3's range. The same seed always gives the same bytes. A folder that already holds a\n"
                "checkpoint is refused unless --force.",
            .examples = {{"s.bin -o weights/ --seed 7", "random weights for the schedule s.bin, then: mkrun s.bin weights/"},
                         {"s.bin -o my-model/",
                          "random weights beside the config.json that s.bin was planned from (mkplan my-model/ -o s.bin), "
                          "which is kept; an FP8 config.json's folder gets float8 weights of its format"}},
            .version_note = "reads schedule formats " + std::to_string(mk::schedule::kOldestReadVersion) + " to " +
                            std::to_string(mk::schedule::kFormatVersion)});
  std::string schedule_path, out_dir;
  uint64_t seed = 0;
  bool force = false;
  app.add_option("SCHEDULE", schedule_path, "schedule file written by mkplan")->required()->type_name("FILE");
  app.add_option("-o,--out", out_dir, "checkpoint folder to write (created if needed)")->required()->type_name("DIR");
  app.add_option("--seed", seed, "random seed")->capture_default_str()->type_name("N");
  app.add_flag("--force", force, "write into a folder that already holds a checkpoint, replacing its model.safetensors");

  if (const auto code = mk::tools::parse(app, argc, argv, "mkweights")) return *code;

  // Real weights are never replaced by random ones without --force; a sharded checkpoint not even
  // then, since its index would stay in force and the random weights would not be read.
  const fs::path index = fs::path(out_dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec))
    throw std::invalid_argument("-o " + out_dir + " holds a sharded checkpoint (" + index.string() +
                                "), which random weights in model.safetensors would not replace; choose another folder");
  if (const std::optional<fs::path> found = checkpoint_in(out_dir); found && !force)
    throw std::invalid_argument("-o " + out_dir + " already holds a checkpoint (" + found->string() +
                                "); choose another folder, or pass --force to overwrite it with random weights");
  mk::io::check_outputs({{"-o", fs::path(out_dir) / "model.safetensors"}}, {{"the schedule", schedule_path}}, force);

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
