// An example model's YAML with its seven per-layer projections declared float8 (dtype f8e4m3,
// scales of one layout under the key "<weight key>_scale"): the tests' float8 models, the same
// transform as scripts/float8_yaml.py (the benchmark's and hf_compare.py's). The embeddings, the
// norms and the LM head stay bf16, as published FP8 checkpoints leave them.
#pragma once
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mk::test {

inline std::string yaml_with_float8(const std::string& example_path, const std::string& layout) {
  std::ifstream f(example_path);
  std::stringstream s;
  s << f.rdbuf();
  const std::regex projection(R"re((w[qkvogud]\{layer\}): \{key: "([^"]+)", shape: (\[[^\]]+\])\})re");
  const std::string yaml = s.str();
  std::string out = std::regex_replace(yaml, projection,
                                       "$1: {key: \"$2\", shape: $3, dtype: f8e4m3, scale: {key: \"$2_scale\", layout: " + layout + "}}");
  if (out == yaml) throw std::runtime_error(example_path + ": no projection weights to declare float8");
  return out;
}

}  // namespace mk::test
