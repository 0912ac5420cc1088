// The in-memory model: what a YAML file says, with constants evaluated, the repeat block
// expanded and every item carrying the file position it came from. Op-specific meaning
// (which fields an op takes, shapes) is checked by the planner's op definitions.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mk::dsl {

struct Location {
  std::string file;
  int line = 0, column = 0;  // 1-based; 0 when unknown
  std::string str() const;   // "file:line:col"
};

// Every mistake in a model is one Error: what() is "file:line:col: message".
struct Error : std::runtime_error {
  Location where;
  std::string message;
  Error(Location loc, const std::string& msg);
};

// A number as messages and generated YAML show it: whole numbers without an exponent (500000,
// not 5e+05), others as the shortest text that reads back as the same value (a float read from a
// schedule as 1e-06, not as the double it widens to).
std::string show_number(double v);
std::string show_number(float v);

enum class TensorKind { weight, activation, kv_cache };

struct TensorDecl {
  std::string name;
  TensorKind kind = TensorKind::activation;
  std::vector<int64_t> shape;  // kv_cache: the shape of one position
  std::string key;             // weights: safetensors key
  std::string dtype = "f32";   // activations: f32 (default) or i32; weights bf16 (default) or f8e4m3; caches bf16
  // f8e4m3 weights: the safetensors key of the f32 (or bf16) scales and how they cover the weight:
  // "tensor" (one), "row" (one per row) or "block128" (one per 128 x 128 block); empty otherwise.
  std::string scale_key, scale_layout;
  int layer = -1;              // repeat iteration it was declared in, -1 outside
  Location loc;
};

// A scalar or list written as an op field, after {…} substitution.
struct Value {
  std::vector<std::string> items;  // one item for a scalar
  bool is_list = false;
  std::optional<double> number;  // set when the scalar is a number or an expression over config
  Location loc;
};

struct OpDecl {
  std::string kind;  // an op name from schedules/op_table.def
  std::string name;  // unique; the `name:` field, else "<out>" (the out field's tensor name)
  int layer = -1;
  std::map<std::string, Value> fields;  // every key but `op` and `name`
  Location loc;

  const Value* field(std::string_view key) const;
};

struct ConfigValue {
  std::optional<double> number;
  std::string text;  // the scalar as written
  Location loc;
};

struct ModelGraph {
  std::string name;  // `model:`
  std::string file;
  std::map<std::string, ConfigValue> config;  // nested maps flattened: "rope.theta"
  std::vector<TensorDecl> tensors;            // declaration order
  std::vector<OpDecl> ops;                    // listed order, repeat expanded
  int layers = 0;                             // repeat count (0 without a repeat block)
  Location loc;                               // the `model:` entry: where config lookups fail

  const TensorDecl* find_tensor(std::string_view name) const;
  // Config lookups; the defaulted forms return the default when the key is absent, the others
  // throw an Error located at the model when it is missing or not of the right type.
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  std::string text(const std::string& key, const std::string& fallback) const;
};

ModelGraph parse_file(const std::filesystem::path& path);
ModelGraph parse_string(const std::string& yaml, const std::string& file_name = "<string>");

}  // namespace mk::dsl
