// mkrun --interactive's reading of user messages (tools/mkrun_chat.hpp): a line each, a trailing
// backslash continuing a message on the next line, blank messages skipped, \r\n read as \n.
#include <doctest/doctest.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tools/mkrun_chat.hpp"

namespace {

std::vector<std::string> messages(const std::string& input, std::string* prompts = nullptr, bool terminal = false) {
  std::istringstream in(input);
  std::ostringstream err;
  std::vector<std::string> out;
  while (const std::optional<std::string> m = mk::tools::read_message(in, err, terminal)) out.push_back(*m);
  if (prompts) *prompts = err.str();
  return out;
}

}  // namespace

TEST_CASE("conversation: a message a line, blank ones skipped, the last without its newline, \\r\\n as \\n") {
  CHECK(messages("Hi\nHow are you?\n") == std::vector<std::string>{"Hi", "How are you?"});
  CHECK(messages("Hi\r\n\n \t \r\nthird") == std::vector<std::string>{"Hi", "third"});
  CHECK(messages("").empty());
  CHECK(messages("\n\n  \n").empty());
  CHECK(messages(std::string("a\0b\n", 4)) == std::vector<std::string>{std::string("a\0b", 3)});
}

TEST_CASE("conversation: a line ending in a backslash goes on with the next one") {
  CHECK(messages("line one\\\nline two\nnext\n") == std::vector<std::string>{"line one\nline two", "next"});
  CHECK(messages("a\\\r\nb\\\n\\\nc\n") == std::vector<std::string>{"a\nb\n\nc"});
  CHECK(messages("end\\") == std::vector<std::string>{"end\\"});  // no next line: the backslash is text
  CHECK(messages("\\\n\n") == std::vector<std::string>{});        // a newline alone is blank
  std::string prompts;
  CHECK(messages("a\\\nb\nc\n", &prompts, true).size() == 2);
  CHECK(prompts == "> . > > ");  // at a terminal: a message, its next line, a message, the end
}
