// A small JSON reader for tokenizer.json and tokenizer_config.json, written for load speed: the
// whole text becomes one flat table of nodes (no allocation per value), strings without escapes
// stay views into the text, and objects keep their members in file order. A 10 MB tokenizer.json
// (150k vocabulary entries, 280k merges) parses in a few tens of milliseconds, where a general
// JSON library building a tree of maps took most of a second.
//
// It checks what every reader of untrusted JSON needs (as common/checked_json.hpp does for the
// nlohmann readers): nesting at most `max_depth` deep, no key twice in one object, strings of
// valid UTF-8 without raw control characters, escapes that decode (surrogates in pairs), numbers
// as the JSON grammar writes them and nothing after the top-level value (a UTF-8 byte order mark
// before it is skipped). ParseError::what() is
// one phrase ("not valid JSON: line 3, column 7: ...", "JSON nested deeper than 64 levels",
// "JSON key 'model' given twice in one object") that the caller prefixes with its file.
//
// Typed access (Value::at, as_string, ...) throws StructureError naming the value's path in the
// document ("model.merges[3]: expected a string, not a number").
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mk::tok::json {

struct ParseError : std::runtime_error {
  explicit ParseError(const std::string& what) : std::runtime_error(what) {}
  // Malformed text: where (from 1) and why, what() being "not valid JSON: line L, column C: why".
  ParseError(size_t line, size_t column, const std::string& why)
      : std::runtime_error("not valid JSON: line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + why),
        line(line), column(column), why(why) {}
  size_t line = 0, column = 0;  // 0: not a place in the text (nesting too deep, a key twice)
  std::string why;
};

struct StructureError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Type : uint8_t { null, boolean, number, string, array, object };

class Document;
class Value;
struct Member;

// The elements of an array or the members of an object, in file order, for a range-for.
template <class Item>
class Children {
 public:
  class iterator {
   public:
    Item operator*() const;
    iterator& operator++();
    bool operator!=(const iterator& o) const { return node_ != o.node_; }

   private:
    friend class Children;
    iterator(const Document* d, uint32_t n) : doc_(d), node_(n) {}
    const Document* doc_;
    uint32_t node_;
  };
  iterator begin() const { return {doc_, begin_}; }
  iterator end() const { return {doc_, end_}; }

 private:
  friend class Value;
  Children(const Document* d, uint32_t b, uint32_t e) : doc_(d), begin_(b), end_(e) {}
  const Document* doc_;
  uint32_t begin_, end_;
};

// A handle to one value of a Document (which must outlive it).
class Value {
 public:
  Type type() const;
  bool is_null() const { return type() == Type::null; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_number() const { return type() == Type::number; }
  bool is_string() const { return type() == Type::string; }
  bool is_array() const { return type() == Type::array; }
  bool is_object() const { return type() == Type::object; }

  // The value as the type asked for, else StructureError ("<path>: expected a string, not ...").
  bool as_bool() const;
  std::string_view as_string() const;
  double as_double() const;
  // A number written as a non-negative integer (no sign, fraction or exponent) that fits in 64
  // bits; nullopt for any other value.
  std::optional<uint64_t> as_uint() const;
  // The number as written in the file (for messages).
  std::string_view number_text() const;
  void expect(Type t) const;  // StructureError unless the value is of type t

  // Arrays and objects: the number of elements or members (StructureError for other types).
  size_t size() const;
  Children<Value> elements() const;   // an array's elements
  Children<Member> members() const;   // an object's members
  Value operator[](size_t i) const;   // an array's element i (walks the elements before it)

  // Objects: the member named `key` (StructureError when this is not an object).
  std::optional<Value> find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key).has_value(); }
  Value at(std::string_view key) const;  // StructureError when absent
  // A member of the type asked for, or `fallback` when absent or null.
  std::string_view string_or(std::string_view key, std::string_view fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;

  // Where the value is: "model.vocab", "added_tokens[2].content"; "the top level" for the root.
  std::string path() const;
  // "null", "a boolean", "a number", "a string", "an array", "an object".
  const char* type_name() const;
  // The value's text in words for a message: a number or literal as written, a string quoted
  // (cut at 40 bytes), else its type name.
  std::string describe() const;

 private:
  friend class Document;
  template <class>
  friend class Children;
  Value(const Document* d, uint32_t n) : doc_(d), node_(n) {}
  [[noreturn]] void wrong_type(const char* expected) const;
  const Document* doc_;
  uint32_t node_;
};

struct Member {
  std::string_view key;
  Value value;
};

class Document {
 public:
  // Parses `text`, which must outlive the document (strings without escapes point into it).
  Document(std::string_view text, int max_depth);
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;
  Value root() const { return Value(this, 0); }

 private:
  friend class Value;
  friend class Parser;
  template <class>
  friend class Children;
  // Nodes in document order: a container's elements (an object's key and value nodes in turn)
  // follow it, each child's subtree before the next child. 8 bytes each (a 10 MB tokenizer.json
  // has about 600k): the type, whether a string was unescaped, and a, in the first word.
  struct Node {
    uint32_t head;   // type (3 bits), unescaped (1 bit: the string is in unescaped_, else in text_), a (28 bits)
    uint32_t b = 0;  // string/number: length; array/object: the number of elements or members
    // a: string/number: offset; boolean: 0/1; array/object: the node after its subtree.
    explicit Node(Type t) : head(static_cast<uint32_t>(t) << 29) {}
    Type type() const { return static_cast<Type>(head >> 29); }
    bool unescaped() const { return (head >> 28) & 1; }
    uint32_t a() const { return head & kMaxA; }
    void set_a(uint32_t v) { head = (head & ~kMaxA) | v; }
    void set_unescaped() { head |= 1u << 28; }
  };
  static constexpr uint32_t kMaxA = (1u << 28) - 1;  // texts are shorter (checked), so offsets and node counts fit
  std::string_view text_;
  std::string unescaped_;    // strings that had escapes, decoded
  std::vector<Node> nodes_;  // node 0 is the root
  std::string_view view(uint32_t n) const {
    const Node& x = nodes_[n];
    return (x.unescaped() ? std::string_view(unescaped_) : text_).substr(x.a(), x.b);
  }
  // The node after n's subtree.
  uint32_t skip(uint32_t n) const {
    const Node& x = nodes_[n];
    return x.type() == Type::array || x.type() == Type::object ? x.a() : n + 1;
  }
};

template <>
inline Value Children<Value>::iterator::operator*() const {
  return Value(doc_, node_);
}
template <>
inline Children<Value>::iterator& Children<Value>::iterator::operator++() {
  node_ = doc_->skip(node_);
  return *this;
}
template <>
inline Member Children<Member>::iterator::operator*() const {
  return {doc_->view(node_), Value(doc_, node_ + 1)};
}
template <>
inline Children<Member>::iterator& Children<Member>::iterator::operator++() {
  node_ = doc_->skip(node_ + 1);
  return *this;
}

}  // namespace mk::tok::json
