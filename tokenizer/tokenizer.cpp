// The tokenizer pipeline, in the order Hugging Face tokenizers applies it:
//   added tokens split out of the raw text -> normalizer (per remaining section) ->
//   pre-tokenizer (regex split, byte-level mapping, metaspace) -> BPE model per piece ->
//   post-processor (BOS/EOS).
// and for decoding: token strings -> decoder steps (byte-level, ▁ -> space, byte fallback,
// leading-space strip) -> bytes.
#include "tokenizer/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <functional>
#include <fstream>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "common/input_file.hpp"
#include "schedules/limits.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/token_maps.hpp"
#include "tokenizer/utf8.hpp"

namespace mk::tok {

namespace {

std::string str(const json::Value& v) { return std::string(v.as_string()); }

// A member that is a non-negative integer, or `fallback` when absent or null.
uint64_t uint_or(const json::Value& j, std::string_view key, uint64_t fallback) {
  const auto v = j.find(key);
  if (!v || v->is_null()) return fallback;
  const auto u = v->as_uint();
  if (!u) throw json::StructureError(v->path() + ": expected a non-negative integer, not " + v->describe());
  return *u;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw TokenizerError(where + ": " + what); }

// tokenizer.json and tokenizer_config.json through the tools' one reader of whole files
// (common/input_file.hpp: regular files of at most kMaxTextBytes, so a FIFO cannot block it).
std::string read_file(const std::filesystem::path& p) {
  try {
    return io::read_input_file(p, limits::kMaxTextBytes);
  } catch (const io::InputError& e) {
    throw TokenizerError(p.string() + ": " + e.what());
  }
}

// ---- regex (PCRE2, UTF + Unicode properties) ---------------------------------------------

// Unicode White_Space, which is what \s means in the Rust regex crate that Hugging Face
// tokenizers uses (PCRE2's own \s also takes U+180E, which Unicode no longer counts).
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string rewrite_pattern(const std::string& p, const std::string& where) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) fail(where, "\\S inside a character class is not supported in a pre-tokenizer pattern");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    const std::string p = rewrite_pattern(pattern, where);
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(where, "pattern '" + pattern + "' is not supported: " + reinterpret_cast<const char*>(msg) + " at offset " +
                      std::to_string(off));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for each non-overlapping match, left to right, in valid UTF-8 `s`.
  template <class F>
  void for_each_match(std::string_view s, F&& f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t start = 0;
    while (start <= s.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, PCRE2_NO_UTF_CHECK, md,
                                 nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        throw TokenizerError("pre-tokenizer regex failed (PCRE2 error " + std::to_string(rc) + ")");
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      if (e > b) f(b, e);
      if (e > b) {
        start = e;
      } else {  // an empty match: step over one character
        if (e >= s.size()) break;
        size_t k = e;
        utf8::next(s, k);
        start = k;
      }
    }
    pcre2_match_data_free(md);
  }

 private:
  pcre2_code* code_ = nullptr;
};

// ---- byte-level alphabet (GPT-2's bytes_to_unicode) ----------------------------------------

struct ByteAlphabet {
  std::array<std::string, 256> to_char;         // byte -> UTF-8 of its printable stand-in
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteAlphabet() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8::append(to_char[b], cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

bool is_white_space(char32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string trim_ws(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t k = b;
      if (!is_white_space(utf8::next(s, k))) break;
      b = k;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<uint8_t>(s[k]) & 0xc0) == 0x80) --k;
      size_t j = k;
      if (!is_white_space(utf8::next(s, j))) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t i = 0;
  for (size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size()) {
    out.append(s, i, j - i);
    out += to;
  }
  out.append(s, i);
  s = std::move(out);
}

// ---- normalizers -----------------------------------------------------------------------------

struct Normalizer {
  enum Kind { unicode, prepend, replace } kind;
  int utf8proc_options = 0;  // unicode
  std::string a, b;          // prepend: a; replace: a -> b
};

std::string apply(const Normalizer& n, std::string s) {
  switch (n.kind) {
    case Normalizer::unicode: {
      if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) return s;
      utf8proc_uint8_t* out = nullptr;
      const utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                                static_cast<utf8proc_ssize_t>(s.size()), &out,
                                                static_cast<utf8proc_option_t>(n.utf8proc_options));
      if (len < 0) throw TokenizerError(std::string("Unicode normalization failed: ") + utf8proc_errmsg(len));
      std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
      std::free(out);
      return r;
    }
    case Normalizer::prepend:
      return s.empty() ? s : n.a + s;
    case Normalizer::replace:
      replace_all(s, n.a, n.b);
      return s;
  }
  return s;
}

void parse_normalizer(const json::Value& j, std::vector<Normalizer>& out, const std::string& where) {
  if (j.is_null()) return;
  const std::string type(j.string_or("type", ""));
  if (type == "Sequence") {
    for (const json::Value& x : j.at("normalizers").elements()) parse_normalizer(x, out, where);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    int o = UTF8PROC_STABLE;
    o |= type.back() == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (type.size() == 4) o |= UTF8PROC_COMPAT;
    out.push_back({Normalizer::unicode, o, "", ""});
  } else if (type == "Prepend") {
    out.push_back({Normalizer::prepend, 0, str(j.at("prepend")), ""});
  } else if (type == "Replace") {
    const json::Value p = j.at("pattern");
    if (!p.contains("String")) fail(where, "normalizer Replace with a regex pattern is not supported");
    out.push_back({Normalizer::replace, 0, str(p.at("String")), str(j.at("content"))});
  } else {
    fail(where, "normalizer '" + type + "' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence are)");
  }
}

// ---- pre-tokenizers --------------------------------------------------------------------------

struct PreTokenizer {
  enum Kind { split, prefix_space, byte_level, metaspace } kind;
  explicit PreTokenizer(Kind k) : kind(k) {}
  std::shared_ptr<Regex> regex;    // split; byte_level with use_regex
  enum Behavior { isolated, removed, merged_with_previous, merged_with_next } behavior = isolated;
  std::string replacement;         // metaspace
  enum Prepend { always, first, never } prepend = always;
  bool metaspace_split = true;
};

// The GPT-2 pattern a ByteLevel pre-tokenizer uses with use_regex.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void parse_pre_tokenizer(const json::Value& j, std::vector<PreTokenizer>& out, const std::string& where) {
  if (j.is_null()) return;
  const std::string type(j.string_or("type", ""));
  if (type == "Sequence") {
    for (const json::Value& x : j.at("pretokenizers").elements()) parse_pre_tokenizer(x, out, where);
  } else if (type == "Split") {
    PreTokenizer p{PreTokenizer::split};
    const json::Value pat = j.at("pattern");
    if (pat.contains("Regex")) {
      p.regex = std::make_shared<Regex>(str(pat.at("Regex")), where);
    } else {
      std::string lit = str(pat.at("String")), quoted = "\\Q";
      for (size_t i = 0; i < lit.size(); ++i) quoted += lit.compare(i, 2, "\\E") == 0 ? (++i, "\\E\\\\E\\Q") : std::string(1, lit[i]);
      p.regex = std::make_shared<Regex>(quoted + "\\E", where);
    }
    if (j.bool_or("invert", false)) fail(where, "pre-tokenizer Split with invert is not supported");
    const std::string b(j.string_or("behavior", "Isolated"));
    if (b == "Isolated") p.behavior = PreTokenizer::isolated;
    else if (b == "Removed") p.behavior = PreTokenizer::removed;
    else if (b == "MergedWithPrevious") p.behavior = PreTokenizer::merged_with_previous;
    else if (b == "MergedWithNext") p.behavior = PreTokenizer::merged_with_next;
    else fail(where, "pre-tokenizer Split behavior '" + b + "' is not supported");
    out.push_back(std::move(p));
  } else if (type == "ByteLevel") {
    if (j.bool_or("use_regex", true)) {
      PreTokenizer p{PreTokenizer::split};
      p.regex = std::make_shared<Regex>(kGpt2Pattern, where);
      // The prefix space goes in before the regex split, the byte mapping after it.
      if (j.bool_or("add_prefix_space", false)) out.emplace_back(PreTokenizer::prefix_space);
      out.push_back(std::move(p));
      out.emplace_back(PreTokenizer::byte_level);
    } else {
      if (j.bool_or("add_prefix_space", false)) out.emplace_back(PreTokenizer::prefix_space);
      out.emplace_back(PreTokenizer::byte_level);
    }
  } else if (type == "Metaspace") {
    PreTokenizer p{PreTokenizer::metaspace};
    p.replacement = j.string_or("replacement", "\xE2\x96\x81");
    const std::string scheme(j.string_or("prepend_scheme", j.bool_or("add_prefix_space", true) ? "always" : "never"));
    p.prepend = scheme == "first" ? PreTokenizer::first : scheme == "never" ? PreTokenizer::never : PreTokenizer::always;
    p.metaspace_split = j.bool_or("split", true);
    out.push_back(std::move(p));
  } else {
    fail(where, "pre-tokenizer '" + type + "' is not supported (Split, ByteLevel, Metaspace, Sequence are)");
  }
}

void pre_tokenize(const PreTokenizer& p, std::vector<std::string>& pieces, bool first_section) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string& s = pieces[i];
    switch (p.kind) {
      case PreTokenizer::split: {
        size_t prev = 0;
        std::string carry;  // merged_with_next: the delimiter waiting for what follows
        p.regex->for_each_match(s, [&](size_t b, size_t e) {
          const std::string_view before(s.data() + prev, b - prev), match(s.data() + b, e - b);
          switch (p.behavior) {
            case PreTokenizer::isolated:
              if (!before.empty()) out.emplace_back(before);
              out.emplace_back(match);
              break;
            case PreTokenizer::removed:
              if (!before.empty()) out.emplace_back(before);
              break;
            case PreTokenizer::merged_with_previous:
              out.emplace_back(std::string(before) + std::string(match));
              break;
            case PreTokenizer::merged_with_next:
              if (!carry.empty() || !before.empty()) out.push_back(carry + std::string(before));
              carry = std::string(match);
              break;
          }
          prev = e;
        });
        std::string rest = carry + s.substr(prev);
        if (!rest.empty()) out.push_back(std::move(rest));
        break;
      }
      case PreTokenizer::prefix_space:  // ByteLevel's add_prefix_space
        if (s.empty() || s[0] != ' ') s.insert(s.begin(), ' ');
        out.push_back(std::move(s));
        break;
      case PreTokenizer::byte_level: {
        const ByteAlphabet& a = byte_alphabet();
        std::string m;
        m.reserve(s.size() * 2);
        for (char c : s) m += a.to_char[static_cast<uint8_t>(c)];
        out.push_back(std::move(m));
        break;
      }
      case PreTokenizer::metaspace: {
        std::string m = s;
        replace_all(m, " ", p.replacement);
        const bool prepend = p.prepend == PreTokenizer::always || (p.prepend == PreTokenizer::first && first_section && i == 0);
        if (prepend && m.compare(0, p.replacement.size(), p.replacement) != 0) m = p.replacement + m;
        if (!p.metaspace_split) {
          out.push_back(std::move(m));
          break;
        }
        size_t start = 0;
        for (size_t k = m.find(p.replacement, 1); k != std::string::npos; k = m.find(p.replacement, k + 1)) {
          out.push_back(m.substr(start, k - start));
          start = k;
        }
        if (start < m.size()) out.push_back(m.substr(start));
        break;
      }
    }
  }
  pieces = std::move(out);
}

// ---- decoders --------------------------------------------------------------------------------

struct DecodeStep {
  enum Kind { byte_level, replace, byte_fallback } kind;
  std::string a, b;
};

struct Decoder {
  std::vector<DecodeStep> steps;
  std::string strip_content;  // leading characters removed from the whole text
  size_t strip_start = 0;
};

void parse_decoder(const json::Value& j, Decoder& d, const std::string& where) {
  if (j.is_null()) return;
  const std::string type(j.string_or("type", ""));
  if (type == "Sequence") {
    for (const json::Value& x : j.at("decoders").elements()) parse_decoder(x, d, where);
  } else if (type == "ByteLevel") {
    d.steps.push_back({DecodeStep::byte_level, "", ""});
  } else if (type == "Replace") {
    const json::Value p = j.at("pattern");
    if (!p.contains("String")) fail(where, "decoder Replace with a regex pattern is not supported");
    d.steps.push_back({DecodeStep::replace, str(p.at("String")), str(j.at("content"))});
  } else if (type == "ByteFallback") {
    d.steps.push_back({DecodeStep::byte_fallback, "", ""});
  } else if (type == "Fuse") {
    // Tokens are always concatenated.
  } else if (type == "Strip") {
    d.strip_content = str(j.at("content"));
    d.strip_start = uint_or(j, "start", 0);
    if (uint_or(j, "stop", 0) != 0) fail(where, "decoder Strip with stop > 0 is not supported");
  } else if (type == "Metaspace") {
    const std::string rep(j.string_or("replacement", "\xE2\x96\x81"));
    d.steps.push_back({DecodeStep::replace, rep, " "});
    const std::string scheme(j.string_or("prepend_scheme", j.bool_or("add_prefix_space", true) ? "always" : "never"));
    if (scheme != "never") {
      d.strip_content = " ";
      d.strip_start = 1;
    }
  } else {
    fail(where, "decoder '" + type + "' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, "
                "Sequence are)");
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB, else -1.
int byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int h = hex_digit(t[3]), l = hex_digit(t[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip;
};

// A byte trie over the added tokens: leftmost-longest matching.
struct Trie {
  struct Node {
    std::unordered_map<uint8_t, int32_t> next;
    int32_t token = -1;  // index into the added tokens
  };
  std::vector<Node> nodes{1};
  void insert(const std::string& s, int32_t token) {
    int32_t n = 0;
    for (char c : s) {
      auto it = nodes[n].next.find(static_cast<uint8_t>(c));
      if (it == nodes[n].next.end()) {
        nodes.emplace_back();
        const int32_t k = static_cast<int32_t>(nodes.size() - 1);
        nodes[n].next[static_cast<uint8_t>(c)] = k;
        n = k;
      } else {
        n = it->second;
      }
    }
    nodes[n].token = token;
  }
};

}  // namespace

// ---- the tokenizer ---------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string where;
  // model
  TokenIdMap vocab;
  std::vector<uint32_t> id_to_slot;  // where each id's string is in `vocab` (TokenIdMap::kNone: none)
  MergeMap merges;
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  std::optional<int32_t> unk;
  std::array<int32_t, 256> byte_ids{};
  // pipeline
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  Trie trie;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  Decoder decoder;
  std::vector<int32_t> prefix, suffix;
  std::optional<int32_t> bos, eos;
  std::string chat_template;
  // cache of BPE results per piece
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void bpe(const std::string& word, std::vector<int32_t>& out) const;
  void encode_section(std::string text, bool first_section, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::bpe(const std::string& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const int32_t id = vocab.find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() < 256;
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    if (auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Symbol {
    int32_t id;  // -1: a character outside the vocabulary
    uint32_t begin, len;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    size_t k = i;
    utf8::next(word, k);
    const int32_t id = vocab.find(std::string_view(word).substr(i, k - i));
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(k - i), n - 1, n + 1});
    i = k;
  }
  sym.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos, left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    if (nx < 0 || sym[pos].id < 0 || sym[nx].id < 0) return;
    if (const auto m = merges.find(sym[pos].id, sym[nx].id)) queue.push({m->rank, pos, sym[pos].id, sym[nx].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& s = sym[c.pos];
    if (s.len == 0 || s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    Symbol& r = sym[s.next];
    s.id = merges.find(c.left, c.right)->id;
    s.len += r.len;
    r.len = 0;
    s.next = r.next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }

  std::vector<int32_t> ids;
  bool last_unk = false;
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(sym.size()); i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id >= 0) {
      ids.push_back(s.id);
      last_unk = false;
      continue;
    }
    bool done = false;
    if (byte_fallback) {
      bool all = true;
      for (uint32_t k = 0; k < s.len; ++k) all = all && byte_ids[static_cast<uint8_t>(word[s.begin + k])] >= 0;
      if (all) {
        for (uint32_t k = 0; k < s.len; ++k) ids.push_back(byte_ids[static_cast<uint8_t>(word[s.begin + k])]);
        done = true;
        last_unk = false;
      }
    }
    if (done) continue;
    if (!unk) throw TokenizerError("'" + word.substr(s.begin, s.len) + "' is not in the vocabulary and there is no unk_token");
    if (!(fuse_unk && last_unk)) ids.push_back(*unk);
    last_unk = true;
  }
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    if (cache.size() > 200000) cache.clear();
    cache.emplace(word, ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void Tokenizer::Impl::encode_section(std::string text, bool first_section, std::vector<int32_t>& out) const {
  for (const Normalizer& n : normalizers) text = apply(n, std::move(text));
  if (text.empty()) return;
  std::vector<std::string> pieces{std::move(text)};
  for (const PreTokenizer& p : pre_tokenizers) pre_tokenize(p, pieces, first_section);
  for (const std::string& piece : pieces) bpe(piece, out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> i) : impl_(std::move(i)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const auto tj = dir / "tokenizer.json", cj = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(tj))
    throw TokenizerError(tj.string() + ": not found (the checkpoint folder needs the model's tokenizer.json)");
  std::string config;
  if (std::filesystem::exists(cj)) config = read_file(cj);
  return from_json(read_file(tj), config, tj.string());
}

namespace {

// Token ids: integers from 0 to kMaxTokenId. Real vocabularies stay under 2^18; the bound keeps
// a hostile id from sizing the id table (and a float or huge id from an undefined conversion).
constexpr int64_t kMaxTokenId = (int64_t{1} << 21) - 1;
static_assert(kMaxTokenId == MergeMap::kMaxId);

// `what` is only called to word the error (it builds a string; the vocabulary has 150k ids).
template <class What>
int32_t id_field(const json::Value& v, const std::string& where, What&& what) {
  const std::optional<uint64_t> u = v.as_uint();
  if (!u || *u > static_cast<uint64_t>(kMaxTokenId))
    fail(where, what() + " must be a token id (an integer from 0 to " + std::to_string(kMaxTokenId) + "), not " +
                    v.describe());
  return static_cast<int32_t>(*u);
}

std::optional<std::string> token_content(const json::Value& v) {
  if (v.is_string()) return str(v);
  if (v.is_object()) {
    if (const auto c = v.find("content"); c && c->is_string()) return str(*c);
  }
  return std::nullopt;
}

// Reads tokenizer.json's model, added tokens and pipeline into `t` (and the added tokens that
// tokenizer_config.json declares); `have_template`: the post-processor had a template.
void read_tokenizer(Tokenizer::Impl& t, const json::Value& j, const json::Value* cfg, const std::string& where,
                    const std::string& cfg_where, bool& have_template) {
  j.expect(json::Type::object);
  const json::Value model = j.at("model");
  const std::string type(model.string_or("type", "BPE"));
  if (type != "BPE") fail(where, "model type '" + type + "' is not supported (only BPE)");
  if (!model.string_or("continuing_subword_prefix", "").empty()) fail(where, "BPE continuing_subword_prefix is not supported");
  if (!model.string_or("end_of_word_suffix", "").empty()) fail(where, "BPE end_of_word_suffix is not supported");
  if (const auto d = model.find("dropout"); d && !d->is_null() && d->as_double() != 0)
    fail(where, "BPE dropout is not supported");

  // The vocabulary, in file order (the reader has refused a token given twice). The lookups go
  // in batches: each batch's hashes first, with their table slots prefetched (token_maps.hpp).
  const json::Value vocab = model.at("vocab");
  vocab.expect(json::Type::object);
  const size_t n_vocab = vocab.size();
  t.vocab.reserve(n_vocab);
  int32_t max_id = -1;
  constexpr size_t kBatch = 16;
  auto entry = vocab.members().begin();
  for (size_t i0 = 0; i0 < n_vocab; i0 += kBatch) {
    const size_t n = std::min(kBatch, n_vocab - i0);
    uint64_t h[kBatch];
    auto batch = entry;
    for (size_t k = 0; k < n; ++k, ++entry) {
      h[k] = TokenIdMap::hash((*entry).key);
      t.vocab.prefetch(h[k]);
    }
    for (size_t k = 0; k < n; ++k, ++batch) {
      const json::Member m = *batch;
      const int32_t id = id_field(m.value, where, [&] { return "the id of '" + std::string(m.key) + "'"; });
      t.vocab.insert(m.key, h[k], id);
      max_id = std::max(max_id, id);
    }
  }
  if (const auto added = j.find("added_tokens"); added && !added->is_null()) {
    for (const json::Value& a : added->elements()) {
      AddedToken at{id_field(a.at("id"), where, [] { return std::string("an added token's id"); }), str(a.at("content")),
                    a.bool_or("special", false), a.bool_or("lstrip", false), a.bool_or("rstrip", false)};
      if (at.content.empty()) fail(where, "an added token with empty content");
      max_id = std::max(max_id, at.id);
      t.added_by_id[at.id] = t.added.size();
      t.added.push_back(std::move(at));
    }
  }
  // tokenizer_config.json may declare added tokens that tokenizer.json lacks.
  if (cfg) {
    try {
      if (const auto decl = cfg->find("added_tokens_decoder")) {
        for (const auto& [key, v] : decl->members()) {
          const std::string k(key);
          const bool digits = !k.empty() && k.size() <= 7 && k.find_first_not_of("0123456789") == std::string::npos;
          if (!digits || std::stoll(k) > kMaxTokenId)
            fail(cfg_where, "added_tokens_decoder key '" + k + "' is not a token id (an integer from 0 to " +
                                std::to_string(kMaxTokenId) + ")");
          const int32_t id = static_cast<int32_t>(std::stoll(k));
          if (t.added_by_id.count(id)) continue;
          AddedToken at{id, str(v.at("content")), v.bool_or("special", false), v.bool_or("lstrip", false),
                        v.bool_or("rstrip", false)};
          max_id = std::max(max_id, id);
          t.added_by_id[id] = t.added.size();
          t.added.push_back(std::move(at));
        }
      }
    } catch (const json::StructureError& e) {
      fail(cfg_where, e.what());
    }
  }
  // Each id's string: where it is in the vocabulary, which makes room for the added tokens first
  // so that nothing moves after this; an added token's content wins over the vocabulary's
  // string for its id, and its id over the vocabulary's for its content.
  t.vocab.reserve(t.vocab.size() + t.added.size());
  t.id_to_slot.assign(static_cast<size_t>(max_id + 1), TokenIdMap::kNone);
  for (uint32_t i = 0; i < t.vocab.slot_count(); ++i)
    if (const int32_t id = t.vocab.id_at(i); id >= 0) t.id_to_slot[id] = i;
  for (const AddedToken& a : t.added) t.vocab.assign(a.content, a.id);
  for (const AddedToken& a : t.added) t.id_to_slot[a.id] = t.vocab.find_slot(a.content, TokenIdMap::hash(a.content));
  for (size_t i = 0; i < t.added.size(); ++i) t.trie.insert(t.added[i].content, static_cast<int32_t>(i));

  // Merges: "a b" or ["a", "b"], by rank; the first of a pair given twice counts. In batches
  // as the vocabulary: split and hash, then look up the tokens, then add the pairs.
  const json::Value merges = model.at("merges");
  merges.expect(json::Type::array);
  if (merges.size() > MergeMap::kMaxMerges)
    fail(where, "more than " + std::to_string(MergeMap::kMaxMerges) + " merges (" + std::to_string(merges.size()) + ")");
  t.merges.reserve(merges.size());
  auto split = [&](const json::Value& m, std::string_view& a, std::string_view& b) {
    if (m.is_array()) {
      a = m[0].as_string();
      b = m[1].as_string();
      return;
    }
    const std::string_view s = m.as_string();
    const size_t sp = s.find(' ', 1);
    if (sp == std::string_view::npos) fail(where, "merge '" + std::string(s) + "' is not two tokens separated by a space");
    a = s.substr(0, sp);
    b = s.substr(sp + 1);
  };
  std::array<std::string, kBatch> joined;
  auto merge = merges.elements().begin();
  for (size_t r0 = 0; r0 < merges.size(); r0 += kBatch) {
    size_t n = std::min(kBatch, merges.size() - r0);
    std::string_view a[kBatch], b[kBatch];
    uint64_t ha[kBatch], hb[kBatch], hab[kBatch];
    int32_t ia[kBatch], ib[kBatch], iab[kBatch];
    std::exception_ptr bad;  // a malformed merge: the ones before it still count, in order
    for (size_t k = 0; k < n; ++k, ++merge) {
      try {
        split(*merge, a[k], b[k]);
      } catch (...) {
        bad = std::current_exception();
        n = k;
        break;
      }
      joined[k].assign(a[k]).append(b[k]);
      ha[k] = TokenIdMap::hash(a[k]);
      hb[k] = TokenIdMap::hash(b[k]);
      hab[k] = TokenIdMap::hash(joined[k]);
      t.vocab.prefetch(ha[k]);
      t.vocab.prefetch(hb[k]);
      t.vocab.prefetch(hab[k]);
    }
    for (size_t k = 0; k < n; ++k) {
      ia[k] = t.vocab.find(a[k], ha[k]);
      ib[k] = t.vocab.find(b[k], hb[k]);
      iab[k] = t.vocab.find(joined[k], hab[k]);
      if (ia[k] < 0 || ib[k] < 0 || iab[k] < 0)
        fail(where, "merge " + std::to_string(r0 + k) + " ('" + std::string(a[k]) + "' '" + std::string(b[k]) +
                        "') uses a token outside the vocabulary");
      t.merges.prefetch(ia[k], ib[k]);
    }
    for (size_t k = 0; k < n; ++k) t.merges.insert(ia[k], ib[k], iab[k]);
    if (bad) std::rethrow_exception(bad);
  }
  t.byte_fallback = model.bool_or("byte_fallback", false);
  t.ignore_merges = model.bool_or("ignore_merges", false);
  t.fuse_unk = model.bool_or("fuse_unk", false);
  if (const auto unk = model.find("unk_token"); unk && unk->is_string()) {
    const int32_t id = t.vocab.find(unk->as_string());
    if (id < 0) fail(where, "unk_token is not in the vocabulary");
    t.unk = id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    t.byte_ids[b] = t.vocab.find(name);
  }

  if (const auto v = j.find("normalizer")) parse_normalizer(*v, t.normalizers, where);
  if (const auto v = j.find("pre_tokenizer")) parse_pre_tokenizer(*v, t.pre_tokenizers, where);
  if (const auto v = j.find("decoder")) parse_decoder(*v, t.decoder, where);

  // Post-processor: the template for a single sequence (BOS / EOS around it).
  std::function<void(const json::Value&)> post = [&](const json::Value& p) {
    if (p.is_null()) return;
    const std::string pt(p.string_or("type", ""));
    if (pt == "Sequence") {
      for (const json::Value& x : p.at("processors").elements()) post(x);
    } else if (pt == "TemplateProcessing") {
      have_template = true;
      bool seen_sequence = false;
      for (const json::Value& item : p.at("single").elements()) {
        if (item.contains("Sequence")) {
          seen_sequence = true;
        } else if (item.contains("SpecialToken")) {
          const std::string_view name = item.at("SpecialToken").at("id").as_string();
          const json::Value st = p.at("special_tokens").at(name);
          for (const json::Value& id : st.at("ids").elements())
            (seen_sequence ? t.suffix : t.prefix).push_back(id_field(id, where, [] { return std::string("a post-processor token id"); }));
        }
      }
    } else if (pt == "ByteLevel" || pt.empty()) {
      // offsets only
    } else {
      fail(where, "post-processor '" + pt + "' is not supported (TemplateProcessing, ByteLevel, Sequence are)");
    }
  };
  if (const auto v = j.find("post_processor")) post(*v);
  for (const std::vector<int32_t>* ids : {&t.prefix, &t.suffix})
    for (int32_t id : *ids)
      if (static_cast<size_t>(id) >= t.id_to_slot.size())
        fail(where, "the post-processor's token id " + std::to_string(id) + " is outside the vocabulary");
}


// Reads tokenizer_config.json's special tokens, their use when tokenizer.json has no template,
// and the chat template.
void read_config(Tokenizer::Impl& t, const json::Value& cfg, const std::string& cfg_where, bool have_template) {
  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    const auto v = cfg.find(key);
    if (!v) return std::nullopt;
    const auto c = token_content(*v);
    if (!c) return std::nullopt;
    const int32_t id = t.vocab.find(*c);
    if (id < 0) fail(cfg_where, std::string(key) + " '" + *c + "' is not a token");
    return id;
  };
  t.bos = lookup("bos_token");
  t.eos = lookup("eos_token");
  if (!have_template) {
    if (cfg.bool_or("add_bos_token", false) && t.bos) t.prefix.push_back(*t.bos);
    if (cfg.bool_or("add_eos_token", false) && t.eos) t.suffix.push_back(*t.eos);
  }
  if (const auto ct = cfg.find("chat_template")) {
    if (ct->is_string()) {
      t.chat_template = str(*ct);
    } else if (ct->is_array()) {
      for (const json::Value& x : ct->elements())
        if (x.string_or("name", "") == "default" || t.chat_template.empty()) t.chat_template = x.string_or("template", "");
    }
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& config_json, const std::string& where) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.where = where;
  // With the checks every reader of untrusted JSON needs (tokenizer/json_reader.hpp): a deeply
  // nested added_tokens crashed an earlier reader's walk.
  auto parse = [](const std::string& text, const std::string& file) {
    try {
      return std::make_unique<json::Document>(text, limits::kMaxNesting);
    } catch (const json::ParseError& e) {
      fail(file, e.what());
    }
  };
  const std::string cfg_where = std::filesystem::path(where).parent_path().append("tokenizer_config.json").string();
  const std::unique_ptr<json::Document> doc = parse(tokenizer_json, where);
  const std::unique_ptr<json::Document> cfg_doc = config_json.empty() ? nullptr : parse(config_json, cfg_where);
  // tokenizer_config.json counts only when it is an object.
  std::optional<json::Value> cfg;
  if (cfg_doc && cfg_doc->root().is_object()) cfg = cfg_doc->root();
  bool have_template = false;
  try {
    read_tokenizer(t, doc->root(), cfg ? &*cfg : nullptr, where, cfg_where, have_template);
  } catch (const json::StructureError& e) {
    fail(where, e.what());
  }
  if (!cfg) return Tokenizer(std::move(impl));
  try {
    read_config(t, *cfg, cfg_where, have_template);
  } catch (const json::StructureError& e) {
    fail(cfg_where, e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& opt) const {
  const Impl& t = *impl_;
  const std::string text = utf8::sanitize(input);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (opt.add_special) out.insert(out.end(), t.prefix.begin(), t.prefix.end());

  // Split out added tokens (leftmost-longest), then encode the sections between them.
  struct Section {
    std::string text;
    int32_t added = -1;  // index into t.added
  };
  std::vector<Section> sections;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t n = 0, match = -1;
    size_t match_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      auto it = t.trie.nodes[n].next.find(static_cast<uint8_t>(text[j]));
      if (it == t.trie.nodes[n].next.end()) break;
      n = it->second;
      const int32_t tok = t.trie.nodes[n].token;
      if (tok >= 0 && (opt.parse_special || !t.added[tok].special)) {
        match = tok;
        match_end = j + 1;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({text.substr(start, i - start), -1});
    sections.push_back({"", match});
    i = start = match_end;
  }
  if (start < text.size()) sections.push_back({text.substr(start), -1});
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k].added < 0) continue;
    const AddedToken& a = t.added[sections[k].added];
    if (a.lstrip && k > 0 && sections[k - 1].added < 0) sections[k - 1].text = trim_ws(sections[k - 1].text, false, true);
    if (a.rstrip && k + 1 < sections.size() && sections[k + 1].added < 0)
      sections[k + 1].text = trim_ws(sections[k + 1].text, true, false);
  }
  for (size_t k = 0; k < sections.size(); ++k) {
    if (sections[k].added >= 0)
      out.push_back(t.added[sections[k].added].id);
    else if (!sections[k].text.empty())
      t.encode_section(std::move(sections[k].text), k == 0, out);
  }
  if (opt.add_special) out.insert(out.end(), t.suffix.begin(), t.suffix.end());
  return out;
}

std::string_view Tokenizer::token_string(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_slot.size())
    throw TokenizerError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(impl_->id_to_slot.size()) + ")");
  const uint32_t slot = impl_->id_to_slot[id];
  return slot == TokenIdMap::kNone ? std::string_view() : impl_->vocab.key_at(slot);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::string_view s = token_string(id);
  if (impl_->added_by_id.count(id)) return std::string(s);
  std::string out(s);
  for (const DecodeStep& d : impl_->decoder.steps) {
    switch (d.kind) {
      case DecodeStep::byte_level: {
        const ByteAlphabet& a = byte_alphabet();
        std::string b;
        for (size_t i = 0; i < out.size();) {
          const size_t k0 = i;
          const char32_t c = utf8::next(out, i);
          auto it = a.to_byte.find(c);
          if (it != a.to_byte.end())
            b += static_cast<char>(it->second);
          else
            b.append(out, k0, i - k0);
        }
        out = std::move(b);
        break;
      }
      case DecodeStep::replace:
        replace_all(out, d.a, d.b);
        break;
      case DecodeStep::byte_fallback:
        if (const int b = byte_token(out); b >= 0) out = std::string(1, static_cast<char>(b));
        break;
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, const DecodeOptions& opt) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (opt.skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  const Decoder& d = impl_->decoder;
  for (size_t k = 0; k < d.strip_start && !d.strip_content.empty(); ++k) {
    if (bytes.compare(0, d.strip_content.size(), d.strip_content) != 0) break;
    bytes.erase(0, d.strip_content.size());
  }
  return utf8::sanitize(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const int32_t id = impl_->vocab.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}
bool Tokenizer::is_added(int32_t id) const { return impl_->added_by_id.count(id) != 0; }
uint32_t Tokenizer::vocab_size() const { return static_cast<uint32_t>(impl_->id_to_slot.size()); }
const std::vector<int32_t>& Tokenizer::prefix_tokens() const { return impl_->prefix; }
const std::vector<int32_t>& Tokenizer::suffix_tokens() const { return impl_->suffix; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || static_cast<uint32_t>(id) >= t_.vocab_size()) return "";  // a model's padding ids
  if (opt_.skip_special && t_.is_special(id)) return "";
  pending_ += t_.token_bytes(id);
  const size_t n = utf8::complete_prefix(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace mk::tok
