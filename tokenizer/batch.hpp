// Many texts in one call (mktoken --lines / --jsonl): texts read one a line from a stream, their
// ids written one line each, in the order of the input, as each line is read (so that a pipe or
// a terminal gets each answer at once).
//   lines: each line is a text (without its "\n", or "\r\n"); out: the ids, comma-separated.
//   jsonl: each line is a JSON string or an object with a "text" string (other members are
//          ignored); out: {"ids":[...]}.
// A bad line (not JSON, the wrong type, a blank line in JSON lines, a line longer than a text may
// be) stops the reading with TokenizerError "line N: ...", after the lines before it were written.
#pragma once
#include <cstddef>
#include <iosfwd>
#include <string>

#include "tokenizer/tokenizer.hpp"

namespace mk::tok {

enum class LineFormat { lines, jsonl };

struct BatchStats {
  size_t texts = 0, bytes = 0, tokens = 0;  // bytes: of the texts, as encoded
  double encode_seconds = 0;                // in encode() alone
};

BatchStats encode_lines(const Tokenizer& t, std::istream& in, std::ostream& out, LineFormat format,
                        const EncodeOptions& options = {}, bool flush_each_line = false);

// The next line of `in` without its "\n" (and a "\r" before it) into `line`; false at the end of
// input. A line longer than `max_bytes` throws TokenizerError, as does a read error.
bool read_line(std::istream& in, std::string& line, size_t max_bytes);

}  // namespace mk::tok
