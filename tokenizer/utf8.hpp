// UTF-8 helpers for the tokenizer: validation with replacement, code point iteration, and the
// length of the complete prefix of a byte stream (for streaming output).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mk::tok::utf8 {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if the bytes there do not
// start a valid sequence (overlong, surrogate, beyond U+10FFFF, truncated, stray continuation).
size_t valid_length(std::string_view s, size_t i);

// Length of the maximal prefix of an ill-formed sequence at s[i] that a decoder replaces by one
// U+FFFD (the Unicode "maximal subpart" rule, which WHATWG TextDecoder and Python follow).
size_t invalid_length(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// `s` with every ill-formed subsequence replaced by U+FFFD (maximal subparts).
std::string sanitize(std::string_view s);

// Decodes the code point at s[i] of VALID UTF-8 and advances i.
char32_t next(std::string_view s, size_t& i);
void append(std::string& out, char32_t cp);

// Bytes of `s` that can be printed now: everything except a trailing sequence that is a valid
// but incomplete prefix of a character (which more bytes may complete).
size_t complete_prefix(std::string_view s);

}  // namespace mk::tok::utf8
