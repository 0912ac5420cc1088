// mkrun --batch: several prompts generated for at once, each sequence in a KV-cache slot of its
// own (device::generate_batch): their prompts prefilled together in steps of up to the schedule's
// max_tokens rows, then every sequence decoding one token a step until its end token or its
// tokens. The file is one prompt a line (text, through the checkpoint's tokenizer), or a JSON list
// whose items are a text, a list of token ids, or an object {"prompt": TEXT | "ids": [IDS],
// "tokens": N}.
#pragma once
#include <cstdint>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
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
#include "tools/mkrun_text.hpp"

namespace mk::tools {

// One prompt of a batch as the file gives it: text, or ids; its own token count, if it has one.
struct BatchPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  std::optional<uint32_t> tokens;
  std::string where;  // "line 3", "item 2": for messages
};

// The prompts of a --batch file (or stdin for "-"). Refuses, naming the line or item, an empty
// prompt, ids that are not token ids, a token count out of range, and anything else than the
// forms above. Empty lines are skipped.
inline std::vector<BatchPrompt> read_batch(const std::string& path) {
  std::string content;
  if (path == "-") {
    std::ostringstream all;
    all << std::cin.rdbuf();
    content = all.str();
    if (content.size() > limits::kMaxTextBytes) throw std::invalid_argument("--batch: stdin holds more than the limit of text");
  } else {
    content = read_text_file(path);
  }
  const std::string name = path == "-" ? "stdin" : path;
  std::vector<BatchPrompt> out;
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (content[first] == '[' || content[first] == '{')) {
    nlohmann::json j;
    try {
      j = io::parse_checked_json(content, limits::kMaxNesting);
    } catch (const io::JsonError& e) {
      throw std::invalid_argument(name + ": " + e.what());
    }
    if (!j.is_array()) throw std::invalid_argument(name + ": expected a JSON list of prompts");
    for (size_t i = 0; i < j.size(); ++i) {
      const nlohmann::json& item = j[i];
      BatchPrompt b;
      b.where = name + " item " + std::to_string(i + 1);
      auto bad = [&](const std::string& what) { return std::invalid_argument(b.where + ": " + what); };
      auto read_ids = [&](const nlohmann::json& list) {
        for (const nlohmann::json& x : list) {
          if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
            throw bad("token ids must be non-negative integers");
          b.ids.push_back(x.get<int32_t>());
        }
      };
      if (item.is_string()) {
        b.text = item.get<std::string>();
      } else if (item.is_array()) {
        read_ids(item);
      } else if (item.is_object()) {
        for (const auto& [key, value] : item.items())
          if (key != "prompt" && key != "ids" && key != "tokens") throw bad("unknown key '" + key + "' (expected prompt, ids, tokens)");
        if (item.contains("prompt") == item.contains("ids")) throw bad("give one of \"prompt\" (text) or \"ids\" (token ids)");
        if (item.contains("prompt")) {
          if (!item["prompt"].is_string()) throw bad("\"prompt\" must be a string");
          b.text = item["prompt"].get<std::string>();
        } else {
          if (!item["ids"].is_array()) throw bad("\"ids\" must be a list of token ids");
          read_ids(item["ids"]);
        }
        if (item.contains("tokens")) {
          const nlohmann::json& t = item["tokens"];
          if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > (1 << 24))
            throw bad("\"tokens\" must be a whole number from 1 to 16777216");
          b.tokens = t.get<uint32_t>();
        }
      } else {
        throw bad("expected a text, a list of token ids, or {\"prompt\" or \"ids\", \"tokens\"}");
      }
      if (b.text ? b.text->empty() : b.ids.empty()) throw bad("the prompt is empty");
      out.push_back(std::move(b));
    }
  } else {
    std::istringstream in(content);
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      out.push_back({line, {}, std::nullopt, name + " line " + std::to_string(n)});
    }
  }
  if (out.empty()) throw std::invalid_argument(name + ": no prompt (one a line, or a JSON list)");
  return out;
}

struct BatchRun {
  std::vector<BatchPrompt> prompts;
  uint32_t tokens = 16;  // each sequence's, unless its item gives its own
  const tok::Tokenizer* tokenizer = nullptr;  // for text prompts and text out (null: ids only)
  bool chat = false;
  std::optional<std::string> system;
  std::set<int32_t> stop_ids;  // each sequence's end tokens (text mode)
};

// The token ids of each prompt (tokenized, in the chat format with --chat); refuses a text prompt
// without a tokenizer and one that tokenizes to nothing.
inline std::vector<std::vector<int32_t>> batch_ids(const BatchRun& b) {
  std::vector<std::vector<int32_t>> ids;
  for (const BatchPrompt& p : b.prompts) {
    if (!p.text) {
      if (b.chat) throw std::invalid_argument(p.where + ": --chat takes text prompts, not token ids");
      ids.push_back(p.ids);
      continue;
    }
    if (!b.tokenizer) throw std::invalid_argument(p.where + ": a text prompt needs the checkpoint's tokenizer.json");
    ids.push_back(b.chat ? tok::make_chat(*b.tokenizer, *p.text, b.system).ids : b.tokenizer->encode(*p.text));
    if (ids.back().empty()) throw std::invalid_argument(p.where + ": the prompt is empty (and the tokenizer adds no BOS)");
  }
  return ids;
}

// Each sequence's tokens (its own, else --tokens) and the positions it needs.
inline uint32_t batch_tokens(const BatchRun& b, size_t i) { return b.prompts[i].tokens.value_or(b.tokens); }

// Prints each sequence's result in order: text (or ids) a block each, or with `as_json` one JSON
// object a line; the batch's timings on stderr.
inline void print_batch(const BatchRun& b, const std::vector<std::vector<int32_t>>& ids,
                        const std::vector<device::GenerateResult>& r, const std::string& backend, double seconds,
                        bool as_json, std::ostream& out, std::ostream& err) {
  uint64_t prompt_tokens = 0, generated = 0;
  double first_token = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    prompt_tokens += ids[i].size();
    generated += r[i].tokens.size();
    first_token = std::max(first_token, r[i].prompt_seconds());
    std::string text;
    if (b.tokenizer) {
      std::vector<int32_t> shown;
      for (int32_t t : r[i].tokens)
        if (!b.stop_ids.count(t)) shown.push_back(t);
      text = b.tokenizer->decode(shown, tok::DecodeOptions{.skip_special = true});
    }
    if (as_json) {
      nlohmann::json j = {{"index", i},
                          {"prompt_ids", ids[i]},
                          {"ids", r[i].tokens},
                          {"stop", r[i].stopped ? "eos" : "length"},
                          {"backend", backend},
                          {"timings",
                           {{"prompt_tokens", ids[i].size()},
                            {"first_token_seconds", r[i].prompt_seconds()},
                            {"generated_tokens", r[i].tokens.size()},
                            {"decode_seconds", r[i].decode_seconds},
                            {"decode_tokens_per_s", r[i].decode_tokens_per_s()}}}};
      if (b.tokenizer) j["text"] = text;
      out << j.dump() << "\n";
      continue;
    }
    out << "=== " << i + 1 << " of " << r.size() << " (" << b.prompts[i].where << "): " << r[i].tokens.size()
        << (r[i].tokens.size() == 1 ? " token" : " tokens") << (r[i].stopped ? ", stopped at end of sequence" : "") << " ===\n";
    if (b.tokenizer) {
      out << text << "\n";
    } else {
      out << "tokens:";
      for (int32_t t : r[i].tokens) out << " " << t;
      out << "\n";
    }
  }
  out << std::flush;
  err << "batch of " << r.size() << " on " << backend << ": prompts " << count_and_rate(prompt_tokens, first_token > 0 ? prompt_tokens / first_token : 0)
      << " (the last first token after " << show_fixed(first_token * 1e3) << " ms); generated "
      << count_and_rate(generated, seconds > first_token ? (generated - std::min<uint64_t>(generated, r.size())) / (seconds - first_token) : 0)
      << " in all; " << show_fixed(seconds) << " s\n";
}

}  // namespace mk::tools
