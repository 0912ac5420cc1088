// Many texts in one call (tokenizer/batch.hpp, mktoken --lines / --jsonl): one answer line per
// input line in the input's order, line endings, long lines, and a bad line stopping the run
// with its number after the lines before it.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/batch.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using mk::tok::LineFormat;
using mk::tok::Tokenizer;

// A character's id is its code (printable ASCII, \n, \r; the euro sign 200); <s> = 1 goes in front.
Tokenizer letters() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int c = 32; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c;
  vocab["\n"] = 10;
  vocab["\r"] = 13;
  vocab["<s>"] = 1;
  vocab["\xE2\x82\xAC"] = 200;  // the euro sign
  const nlohmann::json t = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                            {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
                            {"post_processor",
                             {{"type", "TemplateProcessing"},
                              {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                              {"special_tokens", {{"<s>", {{"ids", {1}}}}}}}}};
  return Tokenizer::from_json(t.dump(), "", "letters/tokenizer.json");
}

std::string run(const Tokenizer& t, const std::string& input, LineFormat f, mk::tok::BatchStats* stats = nullptr) {
  std::istringstream in(input);
  std::ostringstream out;
  const mk::tok::BatchStats s = mk::tok::encode_lines(t, in, out, f);
  if (stats) *stats = s;
  return out.str();
}

// The output before the error, and the error.
std::pair<std::string, std::string> run_bad(const Tokenizer& t, const std::string& input, LineFormat f) {
  std::istringstream in(input);
  std::ostringstream out;
  try {
    mk::tok::encode_lines(t, in, out, f);
  } catch (const mk::tok::TokenizerError& e) {
    return {out.str(), e.what()};
  }
  return {out.str(), ""};
}

}  // namespace

TEST_CASE("tokenizer batch: one line of ids per line, in order; line endings; the last line without one") {
  const Tokenizer t = letters();
  mk::tok::BatchStats s;
  CHECK(run(t, "ab\nc\r\n\n d", LineFormat::lines, &s) == "1,97,98\n1,99\n1\n1,32,100\n");
  CHECK(s.texts == 4);
  CHECK(s.bytes == 5);
  CHECK(s.tokens == 9);
  CHECK(run(t, "", LineFormat::lines) == "");
  CHECK(run(t, "\n", LineFormat::lines) == "1\n");  // one empty text
  CHECK(run(t, "a\rb\n", LineFormat::lines) == "1,97,13,98\n");  // a \r inside a line stays
  // Many lines keep their order.
  std::string input, want;
  for (int i = 0; i < 3000; ++i) {
    const std::string line = std::string(static_cast<size_t>(i % 7), 'x') + std::to_string(i);
    input += line + "\n";
    want += "1";
    for (char c : line) want.append(1, ',').append(std::to_string(static_cast<int>(c)));
    want += "\n";
  }
  CHECK(run(t, input, LineFormat::lines) == want);
}

TEST_CASE("tokenizer batch: JSON lines of strings and objects with a text") {
  const Tokenizer t = letters();
  CHECK(run(t, "\"ab\"\n{\"text\": \"c\", \"id\": 7}\n  \"\\u20ac\"  \r\n{\"text\": \"\"}", LineFormat::jsonl) ==
        "{\"ids\":[1,97,98]}\n{\"ids\":[1,99]}\n{\"ids\":[1,200]}\n{\"ids\":[1]}\n");
  // A line of JSON may hold a newline in an escape: the text has it.
  CHECK(run(t, "\"a\\nb\"\n", LineFormat::jsonl) == "{\"ids\":[1,97,10,98]}\n");
}

TEST_CASE("tokenizer batch: a bad line stops the run with its number, after the lines before it") {
  const Tokenizer t = letters();
  auto [out, error] = run_bad(t, "\"a\"\n\"b\"\n{\"text\": \"c\"\n\"d\"\n", LineFormat::jsonl);
  CHECK(out == "{\"ids\":[1,97]}\n{\"ids\":[1,98]}\n");
  CHECK(error == "line 3, column 13: not valid JSON: unexpected end of text where ',' or '}' should be");
  CHECK(run_bad(t, "\"a\"\n5\n", LineFormat::jsonl).second ==
        "line 2: expected a JSON string or an object with a \"text\" string, not 5");
  CHECK(run_bad(t, "[\"a\"]\n", LineFormat::jsonl).second ==
        "line 1: expected a JSON string or an object with a \"text\" string, not an array");
  CHECK(run_bad(t, "{\"txt\": \"a\"}\n", LineFormat::jsonl).second ==
        "line 1: expected a JSON string or an object with a \"text\" string, not an object without \"text\"");
  CHECK(run_bad(t, "{\"text\": [\"a\"]}\n", LineFormat::jsonl).second == "line 1: \"text\" is an array, not a string");
  CHECK(run_bad(t, "\"a\"\n\n\"b\"\n", LineFormat::jsonl).second ==
        "line 2: expected a JSON string or an object with a \"text\" string, not a blank line");
  CHECK(run_bad(t, "\"a\" \"b\"\n", LineFormat::jsonl).second ==
        "line 1, column 5: not valid JSON: unexpected '\"' after the top-level value");
  CHECK(run_bad(t, "{\"text\": \"a\", \"text\": \"b\"}\n", LineFormat::jsonl).second ==
        "line 1: JSON key 'text' given twice in one object");
  CHECK(run_bad(t, "\"\xFF\"\n", LineFormat::jsonl).second.find("line 1, column 2: not valid JSON: ill-formed UTF-8") == 0);
}

TEST_CASE("tokenizer batch: lines longer than a read chunk, and longer than allowed") {
  std::string line;
  const std::string big(200000, 'q');
  std::istringstream in(big + "\nab\r\n" + big);
  CHECK(mk::tok::read_line(in, line, 1 << 20));
  CHECK(line == big);
  CHECK(mk::tok::read_line(in, line, 1 << 20));
  CHECK(line == "ab");
  CHECK(mk::tok::read_line(in, line, 1 << 20));
  CHECK(line == big);
  CHECK(!mk::tok::read_line(in, line, 1 << 20));
  // 65535 bytes (a read chunk less one) then the newline, and then at the end of input.
  const std::string edge(65535, 'e');
  std::istringstream in2(edge + "\n" + edge);
  CHECK(mk::tok::read_line(in2, line, 1 << 20));
  CHECK(line == edge);
  CHECK(mk::tok::read_line(in2, line, 1 << 20));
  CHECK(line == edge);
  CHECK(!mk::tok::read_line(in2, line, 1 << 20));
  std::istringstream in3("short\n" + big + "\n");
  CHECK(mk::tok::read_line(in3, line, 100000));
  CHECK_THROWS_WITH_AS(mk::tok::read_line(in3, line, 100000), "a line longer than the 100000 bytes a text may have",
                       mk::tok::TokenizerError);
}
