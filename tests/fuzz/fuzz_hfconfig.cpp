// Fuzzes the config.json importer (mkplan DIR): the input is config.json, read, turned into the
// model's YAML and parsed back into a model graph. dsl::Error is the expected refusal; anything
// else is a finding (a crash, a sanitizer report, any other exception), and so is a config the
// importer accepts but whose YAML the model reader then refuses with anything but dsl::Error.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "dsl/hf_config.hpp"
#include "dsl/model.hpp"

namespace fs = std::filesystem;

namespace {

// A scratch folder for the run, removed at exit.
struct Folder {
  fs::path path = fs::temp_directory_path() / ("mk_fuzz_hfconfig_" + std::to_string(getpid()));
  Folder() { fs::create_directories(path); }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Folder dir;
  {
    std::ofstream f(dir.path / "config.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    std::string yaml;
    (void)mk::dsl::import_hf_model(dir.path, &yaml);
  } catch (const mk::dsl::Error&) {
  }
  return 0;
}
