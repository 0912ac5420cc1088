// JSON from untrusted files, parsed with the checks every reader of them needs: nesting at most
// `max_depth` deep (nlohmann walks values recursively when it destroys, compares and dumps them:
// a file of 200,000 nested brackets crashed the reader) and no key twice in one object (nlohmann
// would keep the last one silently). Header-only, for the code that links nlohmann_json: dsl/
// (config.json), device/ (safetensors headers and indexes), tokenizer/ (tokenizer.json,
// tokenizer_config.json) and mkrun (generation_config.json).
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mk::io {

// what(): one phrase every reader prefixes with its file: "not valid JSON: <where and why>", or
// one of the checks above.
struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline nlohmann::json parse_checked_json(std::string_view text, int max_depth) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // per open object
  auto check = [&](int depth, json::parse_event_t event, json& value) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= max_depth) throw JsonError("JSON nested deeper than " + std::to_string(max_depth) + " levels");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(value.get<std::string>()).second)
          throw JsonError("JSON key '" + value.get<std::string>() + "' given twice in one object");
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    // "not valid JSON: parse error at line 1, column 9: ...", without nlohmann's "[json.exception...] " tag
    std::string what = e.what();
    if (const size_t tag = what.find("] "); what.starts_with("[json.exception") && tag != std::string::npos) what.erase(0, tag + 2);
    throw JsonError("not valid JSON: " + what);
  }
}

}  // namespace mk::io
