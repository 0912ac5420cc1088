// Fuzzes the checkpoint reader. The first byte picks what the rest is: even, one .safetensors
// file; odd, a model.safetensors.index.json next to a valid shard "a.safetensors" (keys x, y).
// Every tensor the reader accepts is converted to float where its dtype allows, so that an
// accepted byte range outside the file shows up under AddressSanitizer. WeightError is the
// expected refusal; anything else is a finding.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "device/weights.hpp"

namespace fs = std::filesystem;

namespace {

// A scratch folder for the run, removed at exit.
struct Folder {
  fs::path path = fs::temp_directory_path() / ("mk_fuzz_safetensors_" + std::to_string(getpid()));
  Folder() {
    fs::create_directories(path);
    mk::device::write_safetensors(path / "a.safetensors", {{"x", {2, 2}, {1, 2, 3, 4}}, {"y", {3}, {5, 6, 7}}});
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& folder() {
  static const Folder dir;
  return dir.path;
}

void put(const fs::path& file, const uint8_t* data, size_t size) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool index = data[0] % 2;
  const fs::path& dir = folder();
  fs::path open_at;
  if (index) {
    fs::remove(dir / "model.safetensors");
    put(dir / "model.safetensors.index.json", data + 1, size - 1);
    open_at = dir;
  } else {
    open_at = dir / "single.safetensors";
    put(open_at, data + 1, size - 1);
  }
  try {
    const mk::device::Checkpoint c = mk::device::Checkpoint::open(open_at);
    for (const auto& [key, t] : c.tensors())
      if (t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F32") (void)c.to_float(key);
  } catch (const mk::device::WeightError&) {
  }
  return 0;
}
