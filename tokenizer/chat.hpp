// Chat prompts without a Jinja engine: the formats of the common instruction-tuned models,
// recognised from the tokenizer's chat_template text or, without one, from its special tokens.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace mk::tok {

enum class ChatFormat {
  llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> (Llama 3, 3.1, 3.2, 3.3)
  chatml,  // <|im_start|>role\ncontent<|im_end|>\n (Qwen2, Qwen2.5, Qwen3, ...)
};

struct Chat {
  ChatFormat format;
  std::string text;              // the prompt, special tokens written out
  std::vector<int32_t> ids;      // its tokens (BOS included where the format has it)
  std::vector<int32_t> end_ids;  // tokens that end the assistant's turn
};

// Throws TokenizerError when the template is not one of the formats above (naming what it saw).
ChatFormat detect_chat_format(const Tokenizer&);
// The tokens that end the assistant's turn in that format (throws as detect_chat_format does, or
// when the tokenizer lacks the format's tokens).
std::vector<int32_t> chat_end_ids(const Tokenizer&);

// One user message (and an optional system message) with the assistant's generation prompt
// appended, as the model's chat template renders it.
Chat make_chat(const Tokenizer&, const std::string& user, const std::optional<std::string>& system);

// A later turn of the same conversation, to follow the assistant's reply to the one before: the
// end of that reply (its end token: the one generation stopped at, or the one a reply cut short
// lacks), then the user's message and the assistant's generation prompt, so that the turns
// concatenated read as the template renders the whole conversation.
Chat make_chat_turn(const Tokenizer&, const std::string& user);

}  // namespace mk::tok
