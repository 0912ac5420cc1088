// The tools' shared command-line pieces (tools/cli.hpp): the help layout with its examples,
// --version, "did you mean" for a mistyped long option; and how times and rates are printed
// (common/show_number.hpp, tools/mkrun_text.hpp).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/show_number.hpp"
#include "tools/cli.hpp"
#include "tools/mkrun_text.hpp"

namespace {

// A tool with a few options, as the tools declare them.
struct Tool {
  CLI::App app;
  std::string schedule;
  uint32_t tokens = 16;
  float top_k = 0, top_p = 1, temperature = 0;
  bool quiet = false;
  Tool() {
    mk::tools::describe(app, {.tool = "mktool",
                              .usage = {"SCHEDULE [--tokens N] [OPTIONS]", "SCHEDULE --quiet"},
                              .description = "Does a thing to a schedule.",
                              .examples = {{"s.bin --tokens 4", "four tokens"}, {"s.bin -q", "quietly"}},
                              .version_note = "schedule format 6"});
    app.add_option("SCHEDULE", schedule, "a schedule")->required();
    app.add_option("--tokens", tokens, "tokens");
    app.add_option("--top-k", top_k, "k");
    app.add_option("--top-p", top_p, "p");
    app.add_option("--temperature", temperature, "t");
    app.add_flag("-q,--quiet", quiet, "quiet");
  }
  std::optional<std::string> unknown(std::vector<std::string> args) {
    args.insert(args.begin(), "mktool");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return mk::tools::unknown_option(app, static_cast<int>(argv.size()), argv.data());
  }
};

}  // namespace

TEST_CASE("cli: --help shows the usage lines first, then the description, the options and the examples") {
  Tool t;
  const std::string help = t.app.help();
  CHECK(help.rfind("Usage: mktool SCHEDULE [--tokens N] [OPTIONS]\n       mktool SCHEDULE --quiet\n\nDoes a thing", 0) == 0);
  CHECK(help.find("--tokens") != std::string::npos);
  CHECK(help.find("--version") != std::string::npos);
  const size_t examples = help.find("\nExamples:\n  mktool s.bin --tokens 4\n      four tokens\n  mktool s.bin -q\n      quietly\n");
  CHECK(examples != std::string::npos);
  CHECK(examples > help.find("--quiet"));  // after the options
}

TEST_CASE("cli: --version prints the tool, the project version where the build gives one, and the tool's note") {
  Tool t;
  const std::string v = mk::tools::version_text(
      {.tool = "mktool", .usage = {}, .description = "", .examples = {}, .version_note = "schedule format 6"});
  CHECK(v.rfind("mktool, megakernel ", 0) == 0);
  CHECK(v.find("\nschedule format 6") != std::string::npos);
  std::string arg0 = "mktool", arg1 = "--version";
  char* argv[] = {arg0.data(), arg1.data()};
  CHECK(mk::tools::parse(t.app, 2, argv, "mktool") == std::optional<int>(0));  // success, not a usage error
}

TEST_CASE("cli: a mistyped long option is named, with the options it is likely meant for") {
  Tool t;
  CHECK(t.unknown({"s.bin", "--tokns", "4"}) == "unknown option --tokns; did you mean --tokens?");
  CHECK(t.unknown({"s.bin", "--tokesn=4"}) == "unknown option --tokesn; did you mean --tokens?");  // a swap is one edit
  CHECK(t.unknown({"--temp", "0.7", "s.bin"}) == "unknown option --temp; did you mean --temperature?");  // a prefix
  CHECK(t.unknown({"s.bin", "--top", "3"}) == "unknown option --top; did you mean --top-k or --top-p?");
  CHECK(t.unknown({"s.bin", "--quite"}) == "unknown option --quite; did you mean --quiet?");
  CHECK(t.unknown({"s.bin", "--frobnicate"}) == "unknown option --frobnicate");
  CHECK(t.unknown({"s.bin", "--tokens", "4", "-q"}) == std::nullopt);
  CHECK(t.unknown({"s.bin", "--", "--tokns"}) == std::nullopt);  // after "--": a positional
  CHECK(mk::tools::edit_distance("tokens", "tokens") == 0);
  CHECK(mk::tools::edit_distance("tokns", "tokens") == 1);
  CHECK(mk::tools::edit_distance("otkens", "tokens") == 1);
  CHECK(mk::tools::edit_distance("", "abc") == 3);
}

TEST_CASE("cli: times and rates in fixed notation with three significant digits, never an exponent") {
  CHECK(mk::show_fixed(1266440.7) == "1266441");
  CHECK(mk::show_fixed(4478.65) == "4479");
  CHECK(mk::show_fixed(223.282) == "223");
  CHECK(mk::show_fixed(99.6832) == "99.7");
  CHECK(mk::show_fixed(9.2) == "9.2");
  CHECK(mk::show_fixed(10.0) == "10");
  CHECK(mk::show_fixed(0.012345) == "0.0123");
  CHECK(mk::show_fixed(0) == "0");
  CHECK(mk::show_fixed(-2.5) == "-2.5");
  CHECK(mk::show_fixed(1e-9) == "0");
  CHECK(mk::show_fixed(1e300).find('e') == std::string::npos);
}

TEST_CASE("cli: a count of tokens with its rate, and no rate where none was measured") {
  CHECK(mk::tools::count_and_rate(6, 737.372) == "6 tokens, 737 tokens/s");
  CHECK(mk::tools::count_and_rate(1, 9.23) == "1 token, 9.23 tokens/s");
  CHECK(mk::tools::count_and_rate(1, 0) == "1 token");
  mk::device::GenerateResult r;  // --tokens 0 over a prompt of 3: every step was the prompt's
  r.steps = 3, r.prompt_steps = 2, r.seconds = 0.3, r.decode_seconds = 0.1;
  const mk::tools::Timings none = mk::tools::timings(r, 0);
  CHECK(none.prompt_per_s == doctest::Approx(10.0));
  CHECK(none.decode_per_s == 0);
  CHECK(none.decode_seconds == 0);
  const mk::tools::Timings some = mk::tools::timings(r, 1);
  CHECK(some.prompt_per_s == doctest::Approx(10.0));  // 2 steps in 0.2 s
  CHECK(some.decode_per_s == doctest::Approx(10.0));  // 1 step in 0.1 s
}
