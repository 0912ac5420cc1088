// An example model's YAML with its argmax op (split or not) replaced by a sample op, for the
// tests of sampling (the emulator's and the GPU's).
#pragma once
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mk::test {

inline std::string yaml_with_sample_op(const std::string& example_path) {
  std::ifstream f(example_path);
  std::stringstream s;
  s << f.rdbuf();
  std::string yaml = s.str();
  const size_t at = yaml.find("{op: argmax, in: logits, out: next_token");
  if (at == std::string::npos) throw std::runtime_error(example_path + ": no argmax op to replace");
  yaml.replace(at, yaml.find('}', at) + 1 - at, "{op: sample, in: logits, out: next_token}");
  return yaml;
}

}  // namespace mk::test
