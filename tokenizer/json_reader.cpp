#include "tokenizer/json_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/token_maps.hpp"
#include "tokenizer/utf8.hpp"

namespace mk::tok::json {

class Parser {
 public:
  Parser(Document& d, int max_depth) : d_(d), s_(d.text_), max_depth_(max_depth) {}

  void run() {
    // About one node per 12 bytes in tokenizer.json; reserving avoids most regrowth copies.
    d_.nodes_.reserve(s_.size() / 12 + 8);
    if (s_.starts_with("\xEF\xBB\xBF")) pos_ = 3;  // a UTF-8 byte order mark, as other JSON readers allow
    skip_ws();
    value(0);
    skip_ws();
    if (pos_ < s_.size()) error("unexpected " + found() + " after the top-level value");
  }

 private:
  Document& d_;
  std::string_view s_;
  int max_depth_;
  size_t pos_ = 0;
  std::vector<uint32_t> keys_;  // an object's key nodes, for the duplicate check
  std::vector<uint32_t> seen_;  // open-addressing table of indices into keys_

  [[noreturn]] void error(const std::string& why) const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i)
      if (s_[i] == '\n') ++line, line_start = i + 1;
    throw ParseError(line, pos_ - line_start + 1, why);
  }

  std::string found() const {
    if (pos_ >= s_.size()) return "end of text";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    char buf[16];
    if (c >= 0x21 && c < 0x7f) std::snprintf(buf, sizeof buf, "'%c'", c);
    else std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
    return buf;
  }

  void skip_ws() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }

  uint32_t add(Type t) {
    d_.nodes_.emplace_back(t);
    return static_cast<uint32_t>(d_.nodes_.size() - 1);
  }

  void value(int depth) {
    if (pos_ >= s_.size()) error("unexpected end of text where a value should be");
    const char c = s_[pos_];
    switch (c) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return string();
      case 't': return literal("true", Type::boolean, 1);
      case 'f': return literal("false", Type::boolean, 0);
      case 'n': return literal("null", Type::null, 0);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        error("unexpected " + found() + " where a value should be");
    }
  }

  void literal(std::string_view word, Type t, uint32_t v) {
    if (s_.substr(pos_, word.size()) != word) error("unexpected " + found() + " where a value should be");
    pos_ += word.size();
    const uint32_t n = add(t);
    d_.nodes_[n].set_a(v);
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  void number() {
    const size_t begin = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (pos_ < s_.size() && digit(s_[pos_])) {
      while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
    } else {
      error("a number without digits");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (pos_ >= s_.size() || !digit(s_[pos_])) error("a number with no digit after its '.'");
      while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !digit(s_[pos_])) error("a number with no digit in its exponent");
      while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
    }
    const uint32_t n = add(Type::number);
    d_.nodes_[n].set_a(static_cast<uint32_t>(begin));
    d_.nodes_[n].b = static_cast<uint32_t>(pos_ - begin);
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Four hex digits after "\u" at pos_ (which is at the 'u').
  char32_t hex4() {
    if (pos_ + 5 > s_.size()) error("a \\u escape cut short");
    char32_t v = 0;
    for (size_t k = 1; k <= 4; ++k) {
      const int h = hex(s_[pos_ + k]);
      if (h < 0) error("a \\u escape needs four hex digits");
      v = v * 16 + static_cast<char32_t>(h);
    }
    pos_ += 5;
    return v;
  }

  // Scans the string's content from pos_ (after the quote) up to an escape or its end; checks
  // UTF-8 and control characters. Returns at the '"' or the '\\'.
  void scan_plain() {
    const size_t n = s_.size();
    while (pos_ < n) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"' || c == '\\') return;
      if (c < 0x20) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "a raw control character (U+%04X) inside a string", c);
        error(buf);
      }
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      const size_t k = utf8::valid_length(s_, pos_);
      if (!k) error("ill-formed UTF-8 inside a string");
      pos_ += k;
    }
    error("a string without its closing quote");
  }

  void string() {
    const size_t begin = ++pos_;
    scan_plain();
    const uint32_t n = add(Type::string);
    if (s_[pos_] == '"') {
      d_.nodes_[n].set_a(static_cast<uint32_t>(begin));
      d_.nodes_[n].b = static_cast<uint32_t>(pos_ - begin);
      ++pos_;
      return;
    }
    // Escapes: the decoded string goes to unescaped_.
    std::string& out = d_.unescaped_;
    const size_t start = out.size();
    out.append(s_.substr(begin, pos_ - begin));
    while (s_[pos_] == '\\') {
      if (++pos_ >= s_.size()) error("a string without its closing quote");
      switch (s_[pos_]) {
        case '"': out += '"'; ++pos_; break;
        case '\\': out += '\\'; ++pos_; break;
        case '/': out += '/'; ++pos_; break;
        case 'b': out += '\b'; ++pos_; break;
        case 'f': out += '\f'; ++pos_; break;
        case 'n': out += '\n'; ++pos_; break;
        case 'r': out += '\r'; ++pos_; break;
        case 't': out += '\t'; ++pos_; break;
        case 'u': {
          char32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) error("a \\u escape of a low surrogate without the high one before it");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              error("a \\u escape of a high surrogate without the low one after it");
            ++pos_;
            const char32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("a \\u escape of a high surrogate without the low one after it");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8::append(out, cp);
          break;
        }
        default: error("an unknown escape '\\" + std::string(1, s_[pos_]) + "' inside a string");
      }
      const size_t plain = pos_;
      scan_plain();
      out.append(s_.substr(plain, pos_ - plain));
    }
    ++pos_;  // the closing quote
    d_.nodes_[n].set_unescaped();
    d_.nodes_[n].set_a(static_cast<uint32_t>(start));
    d_.nodes_[n].b = static_cast<uint32_t>(out.size() - start);
  }

  void enter(int depth) const {
    if (depth >= max_depth_) throw ParseError("JSON nested deeper than " + std::to_string(max_depth_) + " levels");
  }

  void close(uint32_t n, uint32_t count) {
    d_.nodes_[n].set_a(static_cast<uint32_t>(d_.nodes_.size()));
    d_.nodes_[n].b = count;
  }

  void array(int depth) {
    enter(depth);
    const uint32_t n = add(Type::array);
    uint32_t count = 0;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
    } else {
      while (true) {
        skip_ws();
        value(depth + 1);
        ++count;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          break;
        }
        error("unexpected " + found() + " where ',' or ']' should be");
      }
    }
    close(n, count);
  }

  void object(int depth) {
    enter(depth);
    const uint32_t n = add(Type::object);
    uint32_t count = 0;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
    } else {
      while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') error("unexpected " + found() + " where a key (a string) should be");
        string();
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') error("unexpected " + found() + " where ':' should be");
        ++pos_;
        skip_ws();
        value(depth + 1);
        ++count;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          break;
        }
        error("unexpected " + found() + " where ',' or '}' should be");
      }
    }
    close(n, count);
    check_keys(n);
  }

  [[noreturn]] void duplicate(std::string_view key) const {
    throw ParseError("JSON key '" + std::string(key.substr(0, 80)) + "' given twice in one object");
  }

  // No key twice in the object at node n.
  void check_keys(uint32_t n) {
    keys_.clear();
    for (uint32_t k = n + 1; k < d_.nodes_[n].a(); k = d_.skip(k + 1)) keys_.push_back(k);
    const size_t members = keys_.size();
    auto key = [&](size_t i) { return d_.view(keys_[i]); };
    if (members <= 16) {
      for (size_t i = 1; i < members; ++i)
        for (size_t j = 0; j < i; ++j)
          if (key(i) == key(j)) duplicate(key(i));
      return;
    }
    size_t cap = 32;
    while (cap < members * 2) cap *= 2;
    seen_.assign(cap, 0);
    constexpr size_t kBatch = 16;  // hashes first, their slots prefetched (tokenizer/token_maps.hpp)
    for (size_t i0 = 0; i0 < members; i0 += kBatch) {
      const size_t m = std::min(kBatch, members - i0);
      size_t start[kBatch];
      for (size_t k = 0; k < m; ++k) {
        start[k] = hash_bytes(key(i0 + k)) & (cap - 1);
        prefetch_address(&seen_[start[k]]);
      }
      for (size_t k = 0; k < m; ++k) {
        const std::string_view kk = key(i0 + k);
        for (size_t slot = start[k];; slot = (slot + 1) & (cap - 1)) {
          if (seen_[slot] == 0) {
            seen_[slot] = static_cast<uint32_t>(i0 + k + 1);
            break;
          }
          if (key(seen_[slot] - 1) == kk) duplicate(kk);
        }
      }
    }
  }
};

Document::Document(std::string_view text, int max_depth) : text_(text) {
  if (text.size() >= kMaxA) throw ParseError("JSON text larger than " + std::to_string(kMaxA) + " bytes");
  Parser(*this, max_depth).run();
}

// ---- Value --------------------------------------------------------------------------------------

Type Value::type() const { return doc_->nodes_[node_].type(); }

const char* Value::type_name() const {
  switch (type()) {
    case Type::null: return "null";
    case Type::boolean: return "a boolean";
    case Type::number: return "a number";
    case Type::string: return "a string";
    case Type::array: return "an array";
    case Type::object: return "an object";
  }
  return "a value";
}

std::string Value::describe() const {
  switch (type()) {
    case Type::null: return "null";
    case Type::boolean: return as_bool() ? "true" : "false";
    case Type::number: return std::string(number_text());
    case Type::string: {
      const std::string_view s = as_string();
      std::string out(1, '\'');
      out.append(s.substr(0, 40));
      out.append(s.size() > 40 ? "...'" : "'");
      return out;
    }
    default: return type_name();
  }
}

std::string Value::path() const {
  // Down from the root: at each container, the child whose subtree holds the node.
  std::string out;
  for (uint32_t n = 0; n != node_;) {
    const Document::Node& c = doc_->nodes_[n];
    uint32_t index = 0;
    for (uint32_t k = n + 1; k < c.a(); ++index) {
      const uint32_t v = c.type() == Type::object ? k + 1 : k, next = doc_->skip(v);
      if (node_ >= v && node_ < next) {
        if (c.type() == Type::object) out.append(out.empty() ? "" : ".").append(doc_->view(k));
        else out.append(1, '[').append(std::to_string(index)).append(1, ']');
        n = v;
        break;
      }
      k = next;
    }
  }
  return out.empty() ? "the top level" : out;
}

void Value::wrong_type(const char* expected) const {
  throw StructureError(path() + ": expected " + expected + ", not " + describe());
}

void Value::expect(Type t) const {
  if (type() == t) return;
  switch (t) {
    case Type::null: wrong_type("null");
    case Type::boolean: wrong_type("true or false");
    case Type::number: wrong_type("a number");
    case Type::string: wrong_type("a string");
    case Type::array: wrong_type("an array");
    case Type::object: wrong_type("an object");
  }
}

bool Value::as_bool() const {
  expect(Type::boolean);
  return doc_->nodes_[node_].a() != 0;
}

std::string_view Value::as_string() const {
  expect(Type::string);
  return doc_->view(node_);
}

std::string_view Value::number_text() const {
  expect(Type::number);
  const Document::Node& n = doc_->nodes_[node_];
  return doc_->text_.substr(n.a(), n.b);
}

double Value::as_double() const {
  // strtod: a magnitude out of range is infinity or zero (the grammar was checked when parsed).
  return std::strtod(std::string(number_text()).c_str(), nullptr);
}

std::optional<uint64_t> Value::as_uint() const {
  if (type() != Type::number) return std::nullopt;
  const std::string_view t = number_text();
  uint64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

size_t Value::size() const {
  const Type t = type();
  if (t != Type::array && t != Type::object) wrong_type("an array or an object");
  return doc_->nodes_[node_].b;
}

Children<Value> Value::elements() const {
  expect(Type::array);
  return Children<Value>(doc_, node_ + 1, doc_->nodes_[node_].a());
}

Children<Member> Value::members() const {
  expect(Type::object);
  return Children<Member>(doc_, node_ + 1, doc_->nodes_[node_].a());
}

Value Value::operator[](size_t i) const {
  expect(Type::array);
  if (i >= doc_->nodes_[node_].b) throw StructureError(path() + ": has no element " + std::to_string(i));
  uint32_t n = node_ + 1;
  for (size_t k = 0; k < i; ++k) n = doc_->skip(n);
  return Value(doc_, n);
}

std::optional<Value> Value::find(std::string_view key) const {
  for (const Member m : members())
    if (m.key == key) return m.value;
  return std::nullopt;
}

Value Value::at(std::string_view key) const {
  if (const auto v = find(key)) return *v;
  const std::string p = path();
  throw StructureError((node_ == 0 ? std::string() : p + ": ") + "no '" + std::string(key) + "'" +
                       (node_ == 0 ? " at the top level" : ""));
}

std::string_view Value::string_or(std::string_view key, std::string_view fallback) const {
  const auto v = find(key);
  return !v || v->is_null() ? fallback : v->as_string();
}

bool Value::bool_or(std::string_view key, bool fallback) const {
  const auto v = find(key);
  return !v || v->is_null() ? fallback : v->as_bool();
}

}  // namespace mk::tok::json
