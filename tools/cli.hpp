// Command-line parsing shared by the tools: a usage error is one line "<tool>: ..." and exit 1.
#pragma once
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace mk::tools {

// nullopt when the arguments parsed; else the exit code (0 for --help).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << tool << ": " << e.what() << " (see --help)\n";
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

}  // namespace mk::tools
