// Command-line parsing shared by the tools: a usage error is one line "<tool>: ..." and exit 1.
#pragma once
#include <iostream>
#include <optional>

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

}  // namespace mk::tools
