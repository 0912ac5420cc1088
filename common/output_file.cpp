#include "common/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace mk::io {
namespace fs = std::filesystem;

namespace {

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  uint64_t x = seed ^ (uint64_t(getpid()) << 20) ^ counter.fetch_add(0x9e3779b97f4a7c15ull);
  x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;  // mix so that names are not sequential
  static const char hex[] = "0123456789abcdef";
  std::string s(12, '0');
  for (char& c : s) c = hex[x & 15], x >>= 4;
  return s;
}

}  // namespace

void OutputFile::fail(const std::string& what, int err) const {
  throw OutputError(destination_.string() + ": " + what + (err ? std::string(": ") + std::strerror(err) : std::string()));
}

OutputFile::OutputFile(fs::path destination) : destination_(std::move(destination)), target_(destination_) {
  if (destination_.empty()) throw OutputError("an output path is empty");
  struct stat st {};
  if (lstat(target_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Replace what the link points to, not the link (the user named the file through it).
    std::error_code ec;
    target_ = fs::canonical(destination_, ec);
    if (ec) fail("is a symbolic link that does not lead to a file", ec.value());
  }
  const bool exists = lstat(target_.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) fail("cannot examine", errno);
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // A device or a pipe: write straight into it, never replace it.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open for writing", errno);
    return;
  }
  if (exists && S_ISDIR(st.st_mode)) fail("is a folder", 0);
  if (exists && !S_ISREG(st.st_mode)) fail("is not a regular file, a device or a FIFO", 0);

  const fs::path folder = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  const std::string name = target_.filename().string();
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temporary_ = folder / ("." + name + ".tmp-" + random_suffix());
    // O_EXCL: never an existing file, never through a symlink planted at the temporary's name.
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) {
      const int err = errno;
      temporary_.clear();
      fail("cannot create a file in " + folder.string(), err);
    }
  }
  if (fd_ < 0) {
    temporary_.clear();
    fail("cannot create a temporary file in " + folder.string(), EEXIST);
  }
  if (exists) fchmod(fd_, st.st_mode & 07777);  // a replaced file keeps its permissions (best effort)
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void OutputFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) fail("write after close", 0);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed", n < 0 ? errno : EIO);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // fsync: a full disk or a failing device may only say so now. Devices and pipes need none.
  if (!temporary_.empty() && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("write failed", err);
  }
  if (::close(fd) != 0) fail("write failed", errno);
}

void OutputFile::commit() {
  if (committed_) return;
  close();
  if (!temporary_.empty() && ::rename(temporary_.c_str(), target_.c_str()) != 0) fail("cannot put the file in place", errno);
  committed_ = true;
  temporary_.clear();
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const bool a_exists = fs::exists(a, ec), b_exists = fs::exists(b, ec);
  if (a_exists && b_exists) return fs::equivalent(a, b, ec) && !ec;
  if (a_exists || b_exists) return false;
  const fs::path x = fs::weakly_canonical(fs::absolute(a, ec), ec);
  if (ec) return false;
  const fs::path y = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return !ec && x == y;
}

namespace {

// A path that exists and is not a regular file (after symbolic links): a device or a FIFO is
// written into, never replaced, and anything else OutputFile refuses on its own.
bool written_into(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  return !ec && fs::exists(st) && !fs::is_regular_file(st);
}

}  // namespace

void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs, bool force) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty() || written_into(out.path)) continue;
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(outputs[j].path, out.path))
        throw OutputError(outputs[j].what + " " + outputs[j].path.string() + " and " + out.what + " " + out.path.string() +
                          " are the same file; choose two different output paths");
    if (force) continue;
    for (const NamedPath& in : inputs) {
      std::error_code ec;
      if (in.path.empty() || !fs::exists(in.path, ec) || !same_file(out.path, in.path)) continue;
      throw OutputError(out.what + " " + out.path.string() + " would overwrite " + in.what + " " + in.path.string() +
                        (out.path.lexically_normal() == in.path.lexically_normal() ? "" : " (the same file)") +
                        "; choose another output path, or pass --force to overwrite it");
    }
  }
}

void write_file(const fs::path& destination, std::span<const std::byte> bytes) {
  OutputFile out(destination);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void write_file(const fs::path& destination, std::string_view text) {
  OutputFile out(destination);
  out.write(text);
  out.commit();
}

}  // namespace mk::io
