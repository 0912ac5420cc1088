// mkrun --interactive: a conversation, turn by turn. Each user message (a line of stdin, the first
// from --prompt or --prompt-file where given) is wrapped in the model's chat format and decoded
// after the turns before it, which stay in the backend's KV cache (GenerateOptions::start): a
// turn costs its own tokens, not the conversation's.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/runtime.hpp"
#include "schedules/limits.hpp"
#include "tokenizer/chat.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tools/mkrun_text.hpp"

namespace mk::tools {

// The next user message from `in`: a line (\r\n read as \n); a line that ends in a backslash goes
// on with the next one, the backslash read as a newline. Blank messages are skipped; nullopt at the
// end of input. At a terminal, "> " asks for a message and ". " for its next line. A message is
// bounded as a prompt file is.
inline std::optional<std::string> read_message(std::istream& in, std::ostream& err, bool terminal) {
  while (in) {
    std::string message;
    for (bool more = true; more;) {
      if (terminal) err << (message.empty() ? "> " : ". ") << std::flush;
      std::string line;
      int ch;
      while ((ch = in.get()) != '\n' && ch != std::char_traits<char>::eof()) {
        if (message.size() + line.size() == limits::kMaxTextBytes)
          throw std::invalid_argument("a message longer than the " + std::to_string(limits::kMaxTextBytes) +
                                      " bytes a prompt may have");
        line.push_back(static_cast<char>(ch));
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      more = ch == '\n' && !line.empty() && line.back() == '\\';
      if (more) line.back() = '\n';
      message += line;
    }
    if (message.find_first_not_of(" \t\n\r\f\v") != std::string::npos) return message;
  }
  return std::nullopt;
}

// mkrun --interactive's defaults: the whole conversation's context, and the most a reply takes.
inline constexpr uint32_t kConversationContext = 4096, kReplyTokens = 1024;

struct ConversationOptions {
  std::optional<std::string> first;   // the first user message (--prompt, --prompt-file); else stdin's first line
  std::optional<std::string> system;  // --system
  uint32_t reply_tokens = kReplyTokens;  // at most, a reply
  std::set<int32_t> stop_ids;         // end a reply (the format's end of turn, the model's eos)
};

// Reads user messages from `in` (read_message) until its end, streams each
// reply to `out` and a line of timings per turn to `err`. Throws when a turn's prompt does not fit
// in what is left of the backend's context (`max_context` positions), naming the positions used.
inline void run_conversation(device::Backend& backend, const schedule::Schedule& s, const tok::Tokenizer& t,
                             const ConversationOptions& o, uint32_t max_context, std::istream& in, std::ostream& out,
                             std::ostream& err) {
  const bool terminal = &in == &std::cin && isatty(STDIN_FILENO);
  uint32_t at = 0;  // positions the KV cache holds
  // The last token of a reply cut short (by --tokens or the context): shown, not yet decoded, so
  // the next turn decodes it before the end of turn the reply lacks. A reply that stopped at an
  // end token has its end replaced by the format's own (the template renders that one).
  int32_t cut = -1;  // none
  std::optional<std::string> message = o.first;
  for (bool first = true;; first = false, message.reset()) {
    if (!message) {
      const bool prompted = terminal && in;  // read_message prompts while there is input
      message = read_message(in, err, terminal);
      // Input ended (Ctrl-D) at the prompt or after a message's text: end the prompt's line.
      if (prompted && in.eof()) err << "\n" << std::flush;
    }
    if (!message) return;  // the end of input ends the conversation
    const tok::Chat c = first ? tok::make_chat(t, *message, o.system) : tok::make_chat_turn(t, *message);
    std::vector<int32_t> ids = c.ids;
    if (cut >= 0) ids.insert(ids.begin(), cut);
    if (uint64_t{at} + ids.size() > max_context)
      throw std::invalid_argument("the conversation has filled its context: " + std::to_string(at) + " positions used, " +
                                  std::to_string(ids.size()) + " more asked, " + std::to_string(max_context) +
                                  " in all; raise --max-context");
    device::GenerateOptions gen;
    gen.prompt = ids;
    gen.start = at;
    gen.tokens = std::min<uint64_t>(o.reply_tokens, uint64_t{max_context} - at - ids.size() + 1);
    tok::StreamDecoder stream(t, tok::DecodeOptions{.skip_special = true});
    const uint32_t prompt = static_cast<uint32_t>(ids.size());
    gen.stop = [&](int32_t id) { return o.stop_ids.count(id) != 0; };
    gen.on_step = [&](uint32_t done, uint32_t, int32_t id) {
      if (done >= prompt && !o.stop_ids.count(id)) out << stream.push(id) << std::flush;
    };
    const device::GenerateResult r = device::generate(backend, s, gen, max_context);
    out << stream.finish() << "\n" << std::flush;
    at += r.steps;
    cut = !r.stopped && !r.tokens.empty() ? r.tokens.back() : -1;
    err << "[prompt " << count_and_rate(prompt, r.prompt_tokens_per_s()) << "; reply "
        << count_and_rate(r.tokens.size(), r.decode_tokens_per_s()) << (r.stopped ? "" : ", cut at --tokens or the context")
        << "; context " << at << " of " << max_context << "]\n"
        << std::flush;
  }
}

}  // namespace mk::tools
