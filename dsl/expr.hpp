// Internal to dsl/: the arithmetic used in shapes, numeric fields and {…} substitutions.
// Grammar: numbers, names (config keys, dotted ones too, and the repeat variable),
// + - * / with the usual precedence, unary minus and parentheses.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "dsl/model.hpp"

namespace mk::dsl {

// The names an expression may use.
struct Scope {
  const std::map<std::string, ConfigValue>* config = nullptr;
  std::string variable;  // the repeat variable; empty outside a repeat block
  int64_t value = 0;     // its value in the current iteration
};

// Each throws an Error at `where` (the scalar the text came from) when the text is not valid.
double evaluate(const std::string& text, const Scope& scope, const Location& where);
int64_t evaluate_integer(const std::string& text, const Scope& scope, const Location& where);
// Replaces every {expr} in text by the integer value of expr.
std::string substitute(const std::string& text, const Scope& scope, const Location& where);

// The value when text is a valid expression, without complaining when it is not.
std::optional<double> try_evaluate(const std::string& text, const Scope& scope);
// The value when the whole text is one numeric literal ("8", "-1.5", "1.0e-5").
std::optional<double> parse_number(std::string_view text);
bool is_identifier(std::string_view text);

}  // namespace mk::dsl
