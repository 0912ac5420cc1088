// A tokenizer read from a Hugging Face tokenizer.json (+ tokenizer_config.json): the byte-level
// BPE of Llama-3 and Qwen2/Qwen3 (regex pre-tokenizer, optional NFC) and the SentencePiece-style
// BPE with byte fallback of Llama-2 and Mistral. Added tokens are matched before BPE; merges are
// applied by rank. Input text that is not valid UTF-8 is read with every ill-formed sequence
// replaced by U+FFFD, as a UTF-8 decoder would. Added tokens are matched on the raw text
// (their `normalized` and `single_word` flags are not used; lstrip/rstrip are). Where
// JavaScript's and Rust's regex engines disagree (\s and U+0085/U+FEFF), this follows Rust, i.e.
// Hugging Face tokenizers.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mk::tok {

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EncodeOptions {
  bool add_special = true;    // the post-processor's tokens (BOS for Llama), as the model expects
  bool parse_special = true;  // added tokens written in the text become their ids
};

struct DecodeOptions {
  bool skip_special = false;  // leave out tokens marked special (BOS, EOS, <|im_start|>, ...)
};

class Tokenizer {
 public:
  // `dir` holds tokenizer.json and optionally tokenizer_config.json. Throws TokenizerError
  // naming the file and what is not supported.
  static Tokenizer load(const std::filesystem::path& dir);
  // From the contents of tokenizer.json and tokenizer_config.json ("" when absent).
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& config_json,
                             const std::string& where = "tokenizer.json");

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& = {}) const;
  std::string decode(const std::vector<int32_t>& ids, const DecodeOptions& = {}) const;

  // The bytes one token stands for in the middle of a text (no leading-space stripping); may
  // be an incomplete UTF-8 sequence (byte-level and byte-fallback tokens).
  std::string token_bytes(int32_t id) const;
  // The token's string in the vocabulary (as in tokenizer.json); throws when out of range. Valid
  // as long as the tokenizer.
  std::string_view token_string(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token) const;  // vocabulary or added token
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;
  uint32_t vocab_size() const;  // one past the largest id

  // Tokens the post-processor puts before / after a sequence (e.g. BOS).
  const std::vector<int32_t>& prefix_tokens() const;
  const std::vector<int32_t>& suffix_tokens() const;
  std::optional<int32_t> bos_id() const;  // tokenizer_config's bos_token
  std::optional<int32_t> eos_id() const;  // tokenizer_config's eos_token
  const std::string& chat_template() const;  // tokenizer_config's chat_template, or ""

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl>);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming: feed token ids, get the text that is complete so far
// (a trailing incomplete UTF-8 sequence is held back until a later token completes it). Ids
// beyond the tokenizer's vocabulary (models pad theirs) give no text.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, DecodeOptions o = {}) : t_(t), opt_(o) {}
  std::string push(int32_t id);
  std::string finish();  // what is left, with an incomplete tail replaced by U+FFFD

 private:
  const Tokenizer& t_;
  DecodeOptions opt_;
  std::string pending_;
};

}  // namespace mk::tok
