#include "tokenizer/batch.hpp"

#include <chrono>
#include <istream>
#include <ostream>

#include "schedules/limits.hpp"
#include "tokenizer/json_reader.hpp"

namespace mk::tok {

bool read_line(std::istream& in, std::string& line, size_t max_bytes) {
  line.clear();
  char chunk[1 << 16];
  while (true) {
    in.getline(chunk, sizeof chunk);
    const size_t n = static_cast<size_t>(in.gcount());
    if (in.bad()) throw TokenizerError("reading failed");
    const bool ended = !in.fail() && !in.eof();  // the newline was read (and counted in n)
    const bool full = in.fail() && !in.eof() && n == sizeof chunk - 1;  // the chunk filled up mid-line
    const size_t kept = ended ? n - 1 : n;
    if (line.size() + kept > max_bytes)
      throw TokenizerError("a line longer than the " + std::to_string(max_bytes) + " bytes a text may have");
    line.append(chunk, kept);
    if (full) {
      in.clear(in.rdstate() & ~std::ios::failbit);
      continue;
    }
    if (!ended && line.empty() && n == 0) return false;  // the end of input, nothing read
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!ended) in.clear(in.rdstate() & ~std::ios::failbit);  // keep eof only
    return true;
  }
}

namespace {

// The text of a JSON line: a string, or an object's "text" string.
std::string text_of(const std::string& line) {
  constexpr const char* kExpected = "expected a JSON string or an object with a \"text\" string";
  if (line.find_first_not_of(" \t") == std::string::npos) throw TokenizerError(std::string(kExpected) + ", not a blank line");
  try {
    const json::Document d(line, limits::kMaxNesting);
    const json::Value v = d.root();
    if (v.is_string()) return std::string(v.as_string());
    if (!v.is_object()) throw TokenizerError(std::string(kExpected) + ", not " + v.describe());
    const std::optional<json::Value> text = v.find("text");
    if (!text) throw TokenizerError(std::string(kExpected) + ", not an object without \"text\"");
    if (!text->is_string()) throw TokenizerError("\"text\" is " + text->describe() + ", not a string");
    return std::string(text->as_string());
  } catch (const json::ParseError& e) {
    // A line is one line of JSON: its column, not "line 1".
    throw TokenizerError(e.column ? "column " + std::to_string(e.column) + ": not valid JSON: " + e.why : e.what());
  }
}

}  // namespace

BatchStats encode_lines(const Tokenizer& t, std::istream& in, std::ostream& out, LineFormat format,
                        const EncodeOptions& options, bool flush_each_line) {
  BatchStats stats;
  std::string line, text, ids_text;
  size_t number = 0;
  try {
    while (true) {
      ++number;
      if (!read_line(in, line, limits::kMaxTextBytes)) break;
      const std::string& input = format == LineFormat::lines ? line : (text = text_of(line));
      const auto start = std::chrono::steady_clock::now();
      const std::vector<int32_t> ids = t.encode(input, options);
      stats.encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++stats.texts;
      stats.bytes += input.size();
      stats.tokens += ids.size();
      ids_text.clear();
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) ids_text += ',';
        ids_text += std::to_string(ids[i]);
      }
      if (format == LineFormat::lines) out << ids_text << '\n';
      else out << "{\"ids\":[" << ids_text << "]}\n";
      if (flush_each_line) out.flush();
      if (!out) throw TokenizerError("writing the ids failed");
    }
  } catch (const TokenizerError& e) {
    const std::string what = e.what();
    throw TokenizerError("line " + std::to_string(number) + (what.starts_with("column ") ? ", " : ": ") + what);
  }
  return stats;
}

}  // namespace mk::tok
