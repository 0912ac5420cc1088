#include "common/input_file.hpp"

#include <fstream>
#include <iterator>

namespace mk::io {

std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(InputProblem::missing, "cannot open");
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(InputProblem::not_regular, "not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(InputProblem::cannot_open, "cannot open");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > max_bytes)
    throw InputError(InputProblem::too_large, "larger than the limit of " + std::to_string(max_bytes) + " bytes");
  std::string text(static_cast<size_t>(size), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (static_cast<uintmax_t>(f.gcount()) != size) throw InputError(InputProblem::read_failed, "read failed");
  return text;
}

}  // namespace mk::io
