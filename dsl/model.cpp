#include "dsl/model.hpp"

namespace mk::dsl {

std::string Location::str() const {
  // A position that is unknown is left out rather than printed as 0.
  if (line <= 0) return file;
  if (column <= 0) return file + ":" + std::to_string(line);
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

Error::Error(Location loc, const std::string& msg)
    : std::runtime_error(loc.str() + ": " + msg), where(std::move(loc)), message(msg) {}

const Value* OpDecl::field(std::string_view key) const {
  auto it = fields.find(std::string(key));
  return it == fields.end() ? nullptr : &it->second;
}

const TensorDecl* ModelGraph::find_tensor(std::string_view name) const {
  for (const TensorDecl& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

double ModelGraph::number(const std::string& key) const {
  if (!config.count(key)) throw Error(loc, "config '" + key + "' is missing");
  return number(key, 0);
}

double ModelGraph::number(const std::string& key, double fallback) const {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  if (!it->second.number)
    throw Error(loc, "config '" + key + "' is '" + it->second.text + "', not a number");
  return *it->second.number;
}

std::string ModelGraph::text(const std::string& key, const std::string& fallback) const {
  auto it = config.find(key);
  return it == config.end() ? fallback : it->second.text;
}

}  // namespace mk::dsl
