// Every file the tools write goes through OutputFile, so that no output is ever half written,
// left behind, written through a planted symlink or put in place of a device node:
//   - a regular file (or a new one) is written to a temporary created exclusively (O_EXCL, a
//     random name) in the same folder, flushed, fsync'ed and closed with every result checked,
//     then renamed over the destination; until commit() the destination is untouched, and a
//     destructor without commit() removes the temporary;
//   - an existing character device or FIFO (/dev/null, /dev/stdout, a pipe) is written straight
//     into, never replaced; any other kind of file (a folder, a socket) is refused;
//   - a destination that is a symbolic link is resolved first: the file it points to is
//     replaced, the link stays.
// Errors are OutputError: "PATH: what went wrong (strerror)".
#pragma once
#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mk::io {

struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class OutputFile {
 public:
  // Opens the temporary (or the device): fails early, before any work, when the destination
  // cannot be written. The destination keeps its contents until commit().
  explicit OutputFile(std::filesystem::path destination);
  ~OutputFile();  // without commit(): removes the temporary; never throws
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, syncs and closes, checking each; the data is then complete on disk. Idempotent.
  void close();
  // close(), then puts the file in place (rename). After commit() the destructor does nothing.
  void commit();

  const std::filesystem::path& path() const { return destination_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;
  void discard() noexcept;

  std::filesystem::path destination_;  // as given, for messages
  std::filesystem::path target_;       // the file put in place (symlinks resolved)
  std::filesystem::path temporary_;    // empty when writing straight into a device
  int fd_ = -1;
  bool committed_ = false;
};

// A file a command reads or writes, as messages name it: for an output the option that names it
// ("-o", "--dot"), for an input its role ("the model", "the schedule").
struct NamedPath {
  std::string what;
  std::filesystem::path path;
};

// Whether `a` and `b` are the same file: the same path, a symbolic link to the other or a hard
// link (std::filesystem::equivalent); for paths that do not exist yet, the same absolute path once
// the parts that exist are resolved.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// The check every tool makes before it writes anything (so that nothing is lost on bad input):
// refuses an output that is one of the command's inputs, unless `force`, and two outputs that are
// the same file. Outputs that are devices or FIFOs (written into, never replaced) are not checked.
// Throws OutputError, e.g. "-o my.yaml would overwrite the model my.yaml; choose another output
// path, or pass --force to overwrite it".
void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs, bool force);

// One-shot helpers: the whole contents at once.
void write_file(const std::filesystem::path& destination, std::span<const std::byte> bytes);
void write_file(const std::filesystem::path& destination, std::string_view text);

}  // namespace mk::io
