// Fuzzes the tokenizer reader. The input is tokenizer.json, then optionally a NUL byte and
// tokenizer_config.json. A tokenizer the reader accepts encodes a few texts (with and without
// its special tokens), and its ids decode back, so that an accepted vocabulary, merge list or
// pattern that misleads the encoder shows up under the sanitizers. TokenizerError is the
// expected refusal; anything else is a finding.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string tokenizer = in.substr(0, nul), config = nul == std::string::npos ? "" : in.substr(nul + 1);
  try {
    const mk::tok::Tokenizer t = mk::tok::Tokenizer::from_json(tokenizer, config, "fuzz/tokenizer.json");
    for (const char* text : {"Hello, world! 123", " a  b\n\tc\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xff\xfe<s></s>"}) {
      for (const bool special : {true, false}) {
        const std::vector<int32_t> ids = t.encode(text, {.add_special = special, .parse_special = special});
        (void)t.decode(ids);
        (void)t.decode(ids, {.skip_special = true});
      }
    }
  } catch (const mk::tok::TokenizerError&) {
  }
  return 0;
}
