// Command-line parsing shared by the tools: one help layout (usage lines, description, options,
// examples), --version, "did you mean" for a mistyped option, and a usage error as one line
// "<tool>: ..." with exit 1.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace mk::tools {

// What a tool's --help says besides its options. Every tool fills one and calls describe().
struct Help {
  std::string tool;                  // "mkplan"
  std::vector<std::string> usage;    // the forms of a command line, each after the tool's name
  std::string description;           // what the tool does, a paragraph
  // Command lines (after the tool's name) and what each does: the "Examples:" section.
  std::vector<std::pair<std::string, std::string>> examples;
  std::string version_note;          // a line --version adds (e.g. the schedule format)
};

// --version's text: the tool, the project version and the commit it was built from, where the
// build defines them (MK_VERSION, MK_GIT_COMMIT), then the tool's note.
inline std::string version_text(const Help& help) {
  std::string v = help.tool + ", megakernel";
#ifdef MK_VERSION
  v += std::string(" ") + MK_VERSION;
#else
  v += " version unknown (the build defines no MK_VERSION)";
#endif
#ifdef MK_GIT_COMMIT
  v += std::string(", commit ") + MK_GIT_COMMIT;
#endif
  if (!help.version_note.empty()) v += "\n" + help.version_note;
  return v;
}

// The help layout: "Usage:" lines, the description, positionals and options, "Examples:".
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(Help help) : help_(std::move(help)) { column_width(30); }
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    std::ostringstream out;
    for (size_t i = 0; i < help_.usage.size(); ++i)
      out << (i ? "       " : "Usage: ") << help_.tool << " " << help_.usage[i] << "\n";
    if (!help_.description.empty()) out << "\n" << help_.description << "\n";
    out << make_positionals(app) << make_groups(app, mode);
    if (!help_.examples.empty()) {
      out << "\nExamples:\n";
      for (const auto& [command, what] : help_.examples) out << "  " << help_.tool << " " << command << "\n      " << what << "\n";
    }
    return out.str();
  }

 private:
  Help help_;
};

// Gives `app` the tools' help layout and --version. Call before adding options.
inline void describe(CLI::App& app, const Help& help) {
  app.name(help.tool);
  app.description(help.description);
  app.formatter(std::make_shared<HelpFormatter>(help));
  app.set_version_flag("--version", version_text(help), "print the version and exit");
}

// The edit distance of `a` and `b` (insertions, deletions, substitutions and swaps of two
// neighbouring characters, each 1).
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// For the first argument that looks like a long option (--name or --name=value, before a lone
// "--") and that `app` does not have: "unknown option --tokns; did you mean --tokens?". The
// suggestions are the options one edit away, else those it begins (--temp: --temperature), else
// (from five letters) those two edits away. nullopt when every long option is known.
inline std::optional<std::string> unknown_option(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& n : opt->get_lnames()) names.push_back(n);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.substr(0, 2) != "--") continue;
    const std::string name(arg.substr(2, arg.find('=') == std::string_view::npos ? std::string_view::npos : arg.find('=') - 2));
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::vector<std::string> one, begun, two;
    for (const std::string& n : names) {
      const size_t d = edit_distance(name, n);
      if (d == 1) one.push_back(n);
      if (name.size() >= 3 && n.compare(0, name.size(), name) == 0) begun.push_back(n);
      if (d == 2 && name.size() >= 5) two.push_back(n);
    }
    const std::vector<std::string>& guesses = !one.empty() ? one : !begun.empty() ? begun : two;
    std::string message = "unknown option --" + name;
    const size_t shown = std::min<size_t>(guesses.size(), 3);
    for (size_t k = 0; k < shown; ++k)
      message += (k == 0 ? "; did you mean --" : k + 1 == shown ? " or --" : ", --") + guesses[k];
    return message + (shown ? "?" : "");
  }
  return std::nullopt;
}

// nullopt when the arguments parsed; else the exit code (0 for --help and --version).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A mistyped option is the likeliest cause of any parse error (a value or a positional it
    // left over): name it first.
    const std::optional<std::string> unknown = unknown_option(app, argc, argv);
    std::cerr << tool << ": " << (unknown ? *unknown : e.what()) << " (see --help)\n";
    return 1;
  }
  return std::nullopt;
}

// A comma-separated list of token ids; `option` and `example` make the error message.
inline std::vector<int32_t> parse_ids(const std::string& text, const std::string& option, const std::string& example) {
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
      throw std::invalid_argument(option + ": '" + item + "' is not a token id (expected e.g. " + example + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw std::invalid_argument(option + " is empty");
  if (text.back() == ',') throw std::invalid_argument(option + " ends with a comma");
  return ids;
}

// --force's help, the same in every tool.
inline constexpr const char* kForceHelp = "write an output even where it would overwrite one of the command's inputs";

// The files of a checkpoint folder that the tools read and that exist: its weights (every
// *.safetensors, the index) and the JSON files beside them (config, generation config, tokenizer).
inline std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return files;
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "model.safetensors.index.json"})
    if (std::filesystem::exists(folder / name, ec)) files.push_back(folder / name);
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".safetensors") files.push_back(it->path());
  return files;
}

}  // namespace mk::tools
