#include "tokenizer/chat.hpp"

namespace mk::tok {
namespace {

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// Jinja's |trim: leading and trailing whitespace (ASCII is what the templates meet).
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

int32_t need(const Tokenizer& t, const char* token) {
  const auto id = t.token_id(token);
  if (!id) throw TokenizerError(std::string("the chat format needs the token ") + token + ", which this tokenizer lacks");
  return *id;
}

std::string llama3_header(const std::string& role) { return "<|start_header_id|>" + role + "<|end_header_id|>\n\n"; }

// The user's message and the assistant's generation prompt, in either format.
std::string user_turn(ChatFormat f, const std::string& user) {
  if (f == ChatFormat::llama3) return llama3_header("user") + trim(user) + "<|eot_id|>" + llama3_header("assistant");
  return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

// The format, and the tokens that end the assistant's turn (checked present in the vocabulary).
Chat chat_of(const Tokenizer& t) {
  Chat c;
  c.format = detect_chat_format(t);
  if (c.format == ChatFormat::llama3) {
    need(t, "<|start_header_id|>");
    c.end_ids.push_back(need(t, "<|eot_id|>"));
  } else {
    c.end_ids.push_back(need(t, "<|im_end|>"));
  }
  return c;
}

void encode(const Tokenizer& t, Chat& c) { c.ids = t.encode(c.text, {.add_special = false, .parse_special = true}); }

}  // namespace

ChatFormat detect_chat_format(const Tokenizer& t) {
  const std::string& tpl = t.chat_template();
  if (!tpl.empty()) {
    if (has(tpl, "<|start_header_id|>") && has(tpl, "<|end_header_id|>")) return ChatFormat::llama3;
    if (has(tpl, "<|im_start|>") && has(tpl, "<|im_end|>")) return ChatFormat::chatml;
    throw TokenizerError("the chat_template in tokenizer_config.json is not a format --chat knows (the Llama-3 header "
                         "format with <|start_header_id|>, or ChatML with <|im_start|>); it begins: " +
                         tpl.substr(0, 120));
  }
  if (t.token_id("<|start_header_id|>") && t.token_id("<|end_header_id|>") && t.token_id("<|eot_id|>"))
    return ChatFormat::llama3;
  if (t.token_id("<|im_start|>") && t.token_id("<|im_end|>")) return ChatFormat::chatml;
  throw TokenizerError("no chat template in tokenizer_config.json and no Llama-3 or ChatML special tokens: --chat "
                       "does not know this model's chat format");
}

std::vector<int32_t> chat_end_ids(const Tokenizer& t) { return chat_of(t).end_ids; }

Chat make_chat(const Tokenizer& t, const std::string& user, const std::optional<std::string>& system) {
  Chat c = chat_of(t);
  const std::string& tpl = t.chat_template();
  std::string text;
  if (c.format == ChatFormat::llama3) {
    if (t.bos_id()) text += t.token_string(*t.bos_id());  // the template's bos_token
    if (has(tpl, "Cutting Knowledge Date")) {
      // Llama 3.1+: the system turn is always there, with the template's default dates.
      text += llama3_header("system") + "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" +
              (system ? trim(*system) : "") + "<|eot_id|>";
    } else if (system) {
      text += llama3_header("system") + trim(*system) + "<|eot_id|>";
    }
  } else {
    std::optional<std::string> sys = system;
    // Qwen2.5's template puts in a default system message when none is given.
    const char* qwen25 = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    if (!sys && has(tpl, qwen25)) sys = qwen25;
    if (sys) text += "<|im_start|>system\n" + *sys + "<|im_end|>\n";
  }
  c.text = text + user_turn(c.format, user);
  encode(t, c);
  return c;
}

Chat make_chat_turn(const Tokenizer& t, const std::string& user) {
  Chat c = chat_of(t);
  c.text = (c.format == ChatFormat::llama3 ? "<|eot_id|>" : "<|im_end|>\n") + user_turn(c.format, user);
  encode(t, c);
  return c;
}

}  // namespace mk::tok
