// Every file the tools read whole (a model YAML, a config.json, a safetensors index or header,
// a schedule, a prompt) goes through read_input_file, the counterpart of OutputFile:
//   - regular files only, checked before opening (opening a FIFO would block, reading /dev/zero
//     would never end);
//   - at most max_bytes, checked before reading;
//   - the whole file or an error: InputError says which problem (its what() is the problem in
//     words, without the path), so that each reader can word it for its own file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace mk::io {

enum class InputProblem { missing, not_regular, cannot_open, too_large, read_failed };

struct InputError : std::runtime_error {
  InputError(InputProblem p, const std::string& what) : std::runtime_error(what), problem(p) {}
  InputProblem problem;
};

std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes);

}  // namespace mk::io
