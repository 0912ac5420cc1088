#include "dsl/expr.hpp"

#include <charconv>
#include "schedules/limits.hpp"
#include <cmath>
#include <sstream>

namespace mk::dsl {
namespace {

// Raised inside the evaluator; the caller decides whether it is an Error or just "not a number".
struct ExprFailure {
  std::string message;
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

// A recursive-descent evaluator: one method per precedence level.
class Evaluator {
 public:
  Evaluator(std::string_view text, const Scope& scope) : text_(text), scope_(scope) {}

  double run() {
    double v = sum();
    skip_space();
    if (pos_ != text_.size()) fail_here();
    return v;
  }

 private:
  double sum() {
    double v = product();
    while (true) {
      if (accept('+'))
        v += product();
      else if (accept('-'))
        v -= product();
      else
        return v;
    }
  }

  double product() {
    double v = unary();
    while (true) {
      if (accept('*')) {
        v *= unary();
      } else if (accept('/')) {
        double d = unary();
        if (d == 0) throw ExprFailure{"division by zero"};
        v /= d;
      } else {
        return v;
      }
    }
  }

  // Unary signs and parentheses recurse: their depth is bounded so that no text can exhaust the stack.
  struct Nested {
    explicit Nested(int& depth) : depth_(depth) {
      if (++depth_ > limits::kMaxNesting)
        throw ExprFailure{"nested deeper than " + std::to_string(limits::kMaxNesting) + " levels"};
    }
    ~Nested() { --depth_; }
    int& depth_;
  };

  double unary() {
    Nested guard(depth_);
    if (accept('-')) return -unary();
    if (accept('+')) return unary();
    return primary();
  }

  double primary() {
    skip_space();
    if (accept('(')) {
      Nested guard(depth_);
      double v = sum();
      if (!accept(')')) throw ExprFailure{"missing ')'"};
      return v;
    }
    if (pos_ < text_.size() && (is_digit(text_[pos_]) || text_[pos_] == '.')) return number();
    if (pos_ < text_.size() && is_name_start(text_[pos_])) return name();
    fail_here();
  }

  double number() {
    double v = 0;
    const char* begin = text_.data() + pos_;
    auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), v);
    if (ec != std::errc()) throw ExprFailure{"bad number"};
    pos_ += end - begin;
    return v;
  }

  // Config keys of nested maps are written with dots: rope.theta.
  double name() {
    size_t start = pos_;
    skip_identifier();
    while (pos_ + 1 < text_.size() && text_[pos_] == '.' && is_name_start(text_[pos_ + 1])) {
      ++pos_;
      skip_identifier();
    }
    return lookup(std::string(text_.substr(start, pos_ - start)));
  }

  double lookup(const std::string& name) const {
    if (!scope_.variable.empty() && name == scope_.variable) return double(scope_.value);
    if (scope_.config) {
      auto it = scope_.config->find(name);
      if (it != scope_.config->end()) {
        if (!it->second.number) throw ExprFailure{"'" + name + "' is not a number"};
        return *it->second.number;
      }
    }
    throw ExprFailure{"unknown name '" + name + "'"};
  }

  void skip_identifier() {
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  [[noreturn]] void fail_here() const {
    if (pos_ >= text_.size()) throw ExprFailure{"unexpected end"};
    throw ExprFailure{"unexpected '" + std::string(1, text_[pos_]) + "'"};
  }

  std::string_view text_;
  const Scope& scope_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Doubles hold every integer a model needs exactly, so "integral" is a plain comparison.
std::optional<int64_t> as_integer(double v) {
  if (!std::isfinite(v) || std::floor(v) != v || std::fabs(v) > 9007199254740992.0)
    return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

double evaluate(const std::string& text, const Scope& scope, const Location& where) {
  try {
    return Evaluator(text, scope).run();
  } catch (const ExprFailure& f) {
    throw Error(where, f.message + " in expression '" + text + "'");
  }
}

int64_t evaluate_integer(const std::string& text, const Scope& scope, const Location& where) {
  double v = evaluate(text, scope, where);
  if (auto i = as_integer(v)) return *i;
  throw Error(where, "expression '" + text + "' is not an integer (" + show_number(v) + ")");
}

std::string substitute(const std::string& text, const Scope& scope, const Location& where) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t open = text.find('{', pos);
    if (open == std::string::npos) return out + text.substr(pos);
    size_t close = text.find('}', open);
    if (close == std::string::npos) throw Error(where, "unclosed '{' in '" + text + "'");
    std::string expr = text.substr(open + 1, close - open - 1);
    double v = evaluate(expr, scope, where);
    auto i = as_integer(v);
    if (!i)
      throw Error(where, "'{" + expr + "}' in '" + text + "' is not an integer (" + show_number(v) + ")");
    out += text.substr(pos, open - pos) + std::to_string(*i);
    pos = close + 1;
  }
}

std::optional<double> try_evaluate(const std::string& text, const Scope& scope) {
  try {
    return Evaluator(text, scope).run();
  } catch (const ExprFailure&) {
    return std::nullopt;
  }
}

std::optional<double> parse_number(std::string_view text) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  size_t digits = !text.empty() && text[0] == '-' ? 1 : 0;
  // from_chars would also take "inf" and "nan", which a model means as words.
  if (text.size() <= digits || !(is_digit(text[digits]) || text[digits] == '.'))
    return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

bool is_identifier(std::string_view text) {
  if (text.empty() || !is_name_start(text[0])) return false;
  for (char c : text)
    if (!is_name_char(c)) return false;
  return true;
}

namespace {
template <class T>
std::string shortest(T v) {
  if (v == std::floor(v) && std::fabs(v) < T(1e15)) return std::to_string(static_cast<int64_t>(v));  // 500000, not 5e+05
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back as v
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}
}  // namespace

std::string show_number(double v) { return shortest(v); }
std::string show_number(float v) { return shortest(v); }

}  // namespace mk::dsl
