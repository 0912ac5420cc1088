// mkrun's text side: the checkpoint folder's tokenizer, its end-of-sequence ids, the prompt
// (plain or chat), streaming output and the --json report.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checked_json.hpp"
#include "common/input_file.hpp"
#include "common/show_number.hpp"
#include "device/runtime.hpp"
#include "schedules/limits.hpp"
#include "tokenizer/chat.hpp"
#include "tokenizer/tokenizer.hpp"

namespace mk::tools {

// The folder of a checkpoint given as a folder or as one .safetensors file.
inline std::filesystem::path checkpoint_folder(const std::filesystem::path& weights) {
  return std::filesystem::is_directory(weights) ? weights : weights.parent_path().empty() ? "." : weights.parent_path();
}

// A prompt or a small JSON file: a regular file of at most kMaxTextBytes (common/input_file.hpp).
inline std::string read_text_file(const std::string& path) {
  try {
    return io::read_input_file(path, limits::kMaxTextBytes);
  } catch (const io::InputError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// eos_token_id from generation_config.json, else config.json (an id or a list of ids); empty
// when neither has one.
inline std::set<int32_t> eos_ids(const std::filesystem::path& dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::filesystem::path p = dir / name;
    if (!std::filesystem::exists(p)) continue;
    nlohmann::json j;
    try {
      j = io::parse_checked_json(read_text_file(p.string()), limits::kMaxNesting);
    } catch (const io::JsonError& e) {
      throw std::runtime_error(p.string() + ": " + e.what());
    }
    if (!j.is_object() || !j.contains("eos_token_id") || j.at("eos_token_id").is_null()) continue;
    const nlohmann::json& v = j.at("eos_token_id");
    std::set<int32_t> ids;
    for (const nlohmann::json& x : v.is_array() ? v : nlohmann::json::array({v})) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw std::runtime_error(p.string() + ": eos_token_id must be a token id or a list of them");
      ids.insert(x.get<int32_t>());
    }
    return ids;
  }
  return {};
}

// "N tokens, R tokens/s" ("1 token, ..."), without the rate where none was measured (a rate of 0:
// no step, or steps that took no time).
inline std::string count_and_rate(uint64_t count, double per_s) {
  std::string s = std::to_string(count) + (count == 1 ? " token" : " tokens");
  if (per_s > 0) s += ", " + show_fixed(per_s) + " tokens/s";
  return s;
}

// The prompt's and the generation's times and rates as mkrun reports them. generate() times the
// prompt's last step with the generation (it makes the first token); with --tokens 0 nothing is
// generated and every step was the prompt's.
struct Timings {
  double prompt_seconds = 0, prompt_per_s = 0, decode_seconds = 0, decode_per_s = 0;
};

inline Timings timings(const device::GenerateResult& r, uint32_t tokens) {
  if (tokens == 0) return {r.seconds, r.seconds > 0 ? r.steps / r.seconds : 0.0, 0, 0};
  return {r.prompt_seconds(), r.prompt_tokens_per_s(), r.decode_seconds, r.decode_tokens_per_s()};
}

}  // namespace mk::tools
