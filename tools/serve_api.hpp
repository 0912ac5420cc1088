// mkserve's OpenAI-style API without the HTTP: the request bodies of /v1/completions and
// /v1/chat/completions checked and turned into prompt ids and limits, the error objects, and the
// stop strings' scanner. Header-only, like mkrun's helpers; the unit tests call it directly.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedules/ops/sample.hpp"
#include "tokenizer/chat.hpp"
#include "tokenizer/tokenizer.hpp"

namespace mk::tools {

// A request the API refuses: its HTTP status and an OpenAI-style error object.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param;
  ApiError(int status_, const std::string& message, std::string param_ = "", std::string type_ = "invalid_request_error")
      : std::runtime_error(message), status(status_), type(std::move(type_)), param(std::move(param_)) {}
};

inline nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "") {
  return {{"error",
           {{"message", message}, {"type", type}, {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)}, {"code", nullptr}}}};
}
inline nlohmann::json error_body(const ApiError& e) { return error_body(e.what(), e.type, e.param); }

// What the server was started with, which every request is checked against.
struct ServeLimits {
  uint32_t max_context = 0;
  bool sampling = false;                 // the schedule has a sample op
  schedule::SamplingParams sampling_params;  // the server's defaults (--temperature, --top-k, --top-p, --seed)
  std::optional<tok::ChatFormat> chat;   // none: /v1/chat/completions is refused
};

// A request turned into what the engine runs.
struct GenRequest {
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 16;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  std::vector<std::string> stop;
  std::optional<schedule::SamplingParams> sampling;  // with a sample op: this request's
};

namespace serve_detail {

inline const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}
[[noreturn]] inline void bad(const std::string& param, const std::string& what) { throw ApiError(400, "'" + param + "' " + what, param); }

inline double number(const nlohmann::json& body, const char* name, double lo, double hi, double fallback) {
  const nlohmann::json* f = field(body, name);
  if (!f) return fallback;
  if (!f->is_number()) bad(name, "must be a number");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi)) bad(name, "must be between " + nlohmann::json(lo).dump() + " and " + nlohmann::json(hi).dump());
  return v;
}
inline std::optional<int64_t> integer(const nlohmann::json& body, const char* name) {
  const nlohmann::json* f = field(body, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) bad(name, "must be an integer");
  return f->get<int64_t>();
}

// The fields both endpoints share, after the prompt is known.
inline void common_fields(const nlohmann::json& body, const ServeLimits& lim, GenRequest& g, uint32_t default_tokens,
                          const std::string& prompt_param) {
  if (const nlohmann::json* f = field(body, "stream")) {
    if (!f->is_boolean()) bad("stream", "must be true or false");
    g.stream = f->get<bool>();
  }
  if (const nlohmann::json* f = field(body, "stream_options")) {
    if (!f->is_object()) bad("stream_options", "must be an object");
    if (const nlohmann::json* u = field(*f, "include_usage")) {
      if (!u->is_boolean()) bad("stream_options.include_usage", "must be true or false");
      g.include_usage = u->get<bool>();
    }
  }
  std::optional<int64_t> tokens = integer(body, "max_completion_tokens");
  const char* tokens_name = "max_completion_tokens";
  if (!tokens) tokens = integer(body, "max_tokens"), tokens_name = "max_tokens";
  if (tokens && *tokens <= 0) bad(tokens_name, "must be at least 1");
  const uint64_t room = lim.max_context - std::min<uint64_t>(lim.max_context, g.prompt.size());
  if (g.prompt.size() > lim.max_context)
    throw ApiError(400, "the prompt is " + std::to_string(g.prompt.size()) + " tokens, more than the context of " +
                            std::to_string(lim.max_context) + " positions", prompt_param);
  if (tokens && uint64_t(*tokens) > room + 1)
    throw ApiError(400, "the prompt (" + std::to_string(g.prompt.size()) + " tokens) and " + tokens_name + " (" +
                            std::to_string(*tokens) + ") do not fit the context of " + std::to_string(lim.max_context) + " positions",
                   tokens_name);
  g.max_tokens = static_cast<uint32_t>(tokens ? *tokens : std::min<uint64_t>(default_tokens, room + 1));
  if (const nlohmann::json* f = field(body, "stop")) {
    if (f->is_string()) g.stop.push_back(f->get<std::string>());
    else if (f->is_array() && f->size() <= 4) {
      for (const auto& s : *f) {
        if (!s.is_string()) bad("stop", "must be a string or a list of up to 4 strings");
        g.stop.push_back(s.get<std::string>());
      }
    } else
      bad("stop", "must be a string or a list of up to 4 strings");
    for (const std::string& s : g.stop)
      if (s.empty()) bad("stop", "holds an empty string");
  }
  if (const std::optional<int64_t> n = integer(body, "n"); n && *n != 1) bad("n", "must be 1 (one choice a request)");
  // Sampling: each request its own with a sample op (what it leaves out, the server's); greedy
  // with an argmax op.
  const schedule::SamplingParams& sp = lim.sampling_params;
  const double temperature = number(body, "temperature", 0, 2, lim.sampling ? sp.temperature : 0);
  const double top_p = number(body, "top_p", 1e-9, 1, lim.sampling ? sp.top_p : 1);
  std::optional<int64_t> top_k = integer(body, "top_k");
  if (top_k && *top_k < -1) bad("top_k", "must be -1 or 0 (every token) or a count of tokens");
  const std::optional<int64_t> seed = integer(body, "seed");
  if (!lim.sampling) {
    if (temperature > 0)
      bad("temperature", "must be 0 here: this server decodes greedily (its schedule has no sample op; plan one with mkplan --sample)");
    return;
  }
  g.sampling = schedule::SamplingParams{static_cast<float>(temperature),
                                        top_k ? static_cast<uint32_t>(std::clamp<int64_t>(*top_k, 0, UINT32_MAX)) : sp.top_k,
                                        static_cast<float>(top_p), seed ? static_cast<uint64_t>(*seed) : sp.seed};
}

inline std::string message_text(const nlohmann::json& content, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "must be a string or a list of text parts");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(param, "parts must be {\"type\": \"text\", \"text\": ...} (only text is understood)");
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace serve_detail

// A /v1/completions body: "prompt" a string (or a list of one string, or of token ids).
inline GenRequest parse_completion(const nlohmann::json& body, const tok::Tokenizer& t, const ServeLimits& lim) {
  using namespace serve_detail;
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  GenRequest g;
  const nlohmann::json* p = field(body, "prompt");
  if (!p) bad("prompt", "is required");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) {
    g.prompt = t.encode(p->get<std::string>());
  } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const auto& v) { return v.is_number_integer(); })) {
    for (const auto& v : *p) {
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= int64_t(t.vocab_size())) bad("prompt", "holds token id " + std::to_string(id) + ", outside the vocabulary");
      g.prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    bad("prompt", "must be a string, a list of one string, or a list of token ids");
  }
  if (g.prompt.empty()) bad("prompt", "is empty (and the tokenizer adds no BOS)");
  common_fields(body, lim, g, 16, "prompt");  // OpenAI's default for completions
  return g;
}

// A /v1/chat/completions body: "messages", an optional system message first, then user and
// assistant in turn, ending with the user's; rendered in the checkpoint's chat format.
inline GenRequest parse_chat(const nlohmann::json& body, const tok::Tokenizer& t, const ServeLimits& lim) {
  using namespace serve_detail;
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  if (!lim.chat) throw ApiError(400, "this checkpoint's tokenizer has no chat format that mkserve knows (Llama 3 or ChatML); use /v1/completions");
  const nlohmann::json* m = field(body, "messages");
  if (!m) bad("messages", "is required");
  if (!m->is_array() || m->empty()) bad("messages", "must be a non-empty list");
  std::optional<std::string> system;
  std::vector<std::pair<std::string, std::string>> turns;  // role, text
  for (size_t i = 0; i < m->size(); ++i) {
    const nlohmann::json& msg = (*m)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) bad(param, "must be an object with a string 'role'");
    const std::string role = msg["role"].get<std::string>();
    if (!msg.contains("content") || msg["content"].is_null()) bad(param + ".content", "is required");
    const std::string text = message_text(msg["content"], i);
    if ((role == "system" || role == "developer") && i == 0) {
      system = text;
      continue;
    }
    const std::string want = turns.empty() || turns.back().first == "assistant" ? "user" : "assistant";
    if (role != want) bad(param + ".role", "is '" + role + "' where '" + want + "' was expected (an optional system message first, then user and assistant in turn)");
    turns.emplace_back(role, text);
  }
  if (turns.empty() || turns.back().first != "user") bad("messages", "must end with a user message");
  GenRequest g;
  g.prompt = tok::make_chat(t, turns[0].second, system).ids;
  for (size_t i = 1; i + 1 < turns.size(); i += 2) {
    const std::vector<int32_t> reply = t.encode(turns[i].second, {.add_special = false, .parse_special = false});
    g.prompt.insert(g.prompt.end(), reply.begin(), reply.end());
    const std::vector<int32_t> next = tok::make_chat_turn(t, turns[i + 1].second).ids;
    g.prompt.insert(g.prompt.end(), next.begin(), next.end());
  }
  common_fields(body, lim, g, lim.max_context, "messages");  // OpenAI's chat default: up to the context's end
  return g;
}

// The generated text with the stop strings taken out: push() each decoded piece, and send what
// it returns; the text held back may still begin a stop string. stopped() once one appeared
// (what precedes it was returned; the stop string and what follows never are).
class StopScanner {
 public:
  explicit StopScanner(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string push(const std::string& piece) {
    if (stopped_) return {};
    text_ += piece;
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t at = text_.find(s, sent_ > s.size() ? sent_ - s.size() : 0);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      stopped_ = true;
      return take(std::max(cut, sent_));
    }
    size_t keep = 0;  // the longest tail that begins some stop string
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, text_.size() - sent_); n > keep; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
    return take(text_.size() - keep);
  }
  // What is held back, at the end of generation (no stop string came).
  std::string finish() { return stopped_ ? std::string() : take(text_.size()); }
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }

 private:
  std::string take(size_t end) {
    std::string out = text_.substr(sent_, end - sent_);
    sent_ = end;
    return out;
  }
  std::vector<std::string> stops_;
  std::string text_;
  size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace mk::tools
