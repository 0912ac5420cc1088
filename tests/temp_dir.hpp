// A fresh folder under the system temp folder, removed with everything in it.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace mk::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name = "mk_test") {
    static std::atomic<unsigned> counter{0};
    path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()) + "_" +
                                                     std::to_string(counter++) + "_" +
                                                     std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace mk::test
