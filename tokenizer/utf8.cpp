#include "tokenizer/utf8.hpp"

namespace mk::tok::utf8 {
namespace {

// The allowed range of the second byte for a given lead byte (Unicode Table 3-7); 0,0 when
// the lead byte is not a lead byte.
struct Lead {
  int len;
  uint8_t lo, hi;
};

Lead lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xc2 && b <= 0xdf) return {2, 0x80, 0xbf};
  if (b == 0xe0) return {3, 0xa0, 0xbf};
  if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) return {3, 0x80, 0xbf};
  if (b == 0xed) return {3, 0x80, 0x9f};
  if (b == 0xf0) return {4, 0x90, 0xbf};
  if (b >= 0xf1 && b <= 0xf3) return {4, 0x80, 0xbf};
  if (b == 0xf4) return {4, 0x80, 0x8f};
  return {0, 0, 0};
}

// How many bytes from s[i] form a valid prefix of a sequence (1..len), and the full length.
size_t valid_prefix(std::string_view s, size_t i, int& len) {
  const Lead l = lead(static_cast<uint8_t>(s[i]));
  len = l.len;
  if (l.len <= 1) return l.len;
  size_t k = 1;
  if (i + 1 < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i + 1]);
    if (b < l.lo || b > l.hi) return 1;
    k = 2;
    while (k < static_cast<size_t>(l.len) && i + k < s.size()) {
      const uint8_t c = static_cast<uint8_t>(s[i + k]);
      if (c < 0x80 || c > 0xbf) break;
      ++k;
    }
  }
  return k;
}

}  // namespace

size_t valid_length(std::string_view s, size_t i) {
  int len = 0;
  const size_t k = valid_prefix(s, i, len);
  return len > 0 && k == static_cast<size_t>(len) ? k : 0;
}

size_t invalid_length(std::string_view s, size_t i) {
  int len = 0;
  const size_t k = valid_prefix(s, i, len);
  return len == 0 ? 1 : k;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_length(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = valid_length(s, i)) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_length(s, i);
    }
  }
  return out;
}

char32_t next(std::string_view s, size_t& i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const int len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
  char32_t cp = b & (0x7f >> len);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3f);
  i += len;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

size_t complete_prefix(std::string_view s) {
  // Only the last 3 bytes can start an incomplete sequence.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    int len = 0;
    const size_t k = valid_prefix(s, i, len);
    if (len > 1 && k == s.size() - i && k < static_cast<size_t>(len)) return i;
  }
  return s.size();
}

}  // namespace mk::tok::utf8
