// Tokenizer tests: golden ids from an independent implementation on real tokenizer files
// (tests/tokenizer/models/, fetched by scripts/fetch_tokenizers.sh; those tests are skipped, with
// one line saying so, in a checkout without them), round trips, speed, streaming,
// UTF-8 handling, and small hand-made tokenizers for the rules (merge ranks, byte fallback,
// added tokens).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace {

using mk::tok::Tokenizer;
using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kDir = fs::path(MK_SOURCE_DIR) / "tests" / "tokenizer";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), p.string() << " is missing");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The real tokenizer files (not in git: scripts/fetch_tokenizers.sh gets them); MK_TOKENIZER_MODELS
// names another folder of them.
fs::path models_dir() {
  const char* env = std::getenv("MK_TOKENIZER_MODELS");
  return env && *env ? fs::path(env) : kDir / "models";
}

// Whether the tests on the real tokenizer files run. When none of the files is there (a fresh
// checkout) they are skipped, with one line on stderr saying how to get them; when some are, the
// rest must be (real() fails for a missing one), and a wrong file fails the golden tests.
bool have_models() {
  static const bool have = [] {
    for (const char* name : {"llama3_1", "qwen3", "llama2"})
      if (fs::exists(models_dir() / name / "tokenizer.json")) return true;
    std::cerr << "test_tokenizer: no tokenizer files in " << models_dir().string()
              << ": the tests on the real Llama-3.1, Qwen3 and Mistral tokenizers are skipped; run "
                 "scripts/fetch_tokenizers.sh to get them\n";
    return false;
  }();
  return have;
}

// The real tokenizers, loaded once.
const Tokenizer& real(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    const fs::path dir = models_dir() / name;
    REQUIRE_MESSAGE(fs::exists(dir / "tokenizer.json"),
                    dir.string() << "/tokenizer.json is missing: run scripts/fetch_tokenizers.sh (scripts/setup.sh does)");
    it = loaded.emplace(name, Tokenizer::load(dir)).first;
  }
  return it->second;
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const json& e : json::parse(slurp(kDir / "corpus.json")))
    out.push_back(e.contains("text") ? e.at("text").get<std::string>() : from_hex(e.at("hex").get<std::string>()));
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + (ids.size() > 40 ? ",..." : "");
}

Tokenizer tiny(const json& tokenizer, const json& config = json()) {
  return Tokenizer::from_json(tokenizer.dump(), config.is_null() ? "" : config.dump(), "tiny/tokenizer.json");
}

}  // namespace

TEST_CASE("tokenizer: golden ids from the reference implementation on real tokenizer files") {
  if (!have_models()) return;
  const std::vector<std::string> texts = corpus();
  CHECK(texts.size() >= 300);
  for (const std::string name : {"llama3_1", "qwen3", "llama2"}) {
    CAPTURE(name);
    const Tokenizer& t = real(name);
    const json golden = json::parse(slurp(kDir / "golden" / (name + ".json")));
    REQUIRE(golden.size() == texts.size());
    size_t id_mismatches = 0, decode_mismatches = 0, lossless = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<int32_t> want = golden[i].at("ids").get<std::vector<int32_t>>();
      const std::vector<int32_t> got = t.encode(texts[i]);
      if (got != want && ++id_mismatches <= 5)
        FAIL_CHECK("entry " << i << " '" << texts[i].substr(0, 80) << "': got " << show(got) << ", want " << show(want));
      // Our decode keeps the text exactly (no clean-up of spaces before punctuation).
      const std::string decoded = t.decode(want);
      if (decoded != golden[i].at("decoded").get<std::string>() && ++decode_mismatches <= 5)
        FAIL_CHECK("entry " << i << " decodes to '" << decoded << "', want '" << golden[i].at("decoded").get<std::string>() << "'");
      // decode(encode(x)) == x wherever the reference finds the tokenizer lossless (valid UTF-8;
      // for Qwen3, text that NFC leaves alone; for the SentencePiece one, no added token in it).
      const std::string plain = t.decode(t.encode(texts[i], {.add_special = false}));
      const bool valid = mk::tok::utf8::is_valid(texts[i]);
      if (valid && name == "llama3_1") CHECK_MESSAGE(plain == texts[i], "entry " << i << " does not round-trip");
      if (valid && golden[i].at("decoded").get<std::string>() == t.decode(t.encode(texts[i], {.add_special = true})) &&
          plain == texts[i])
        ++lossless;
    }
    CHECK(id_mismatches == 0);
    CHECK(decode_mismatches == 0);
    MESSAGE(name << ": " << texts.size() << " strings encoded as the reference does; " << lossless << " round-trip exactly");
    CHECK(lossless >= 300);
  }
}

TEST_CASE("tokenizer: decode(encode(x)) == x on valid text without added tokens or NFC changes") {
  if (!have_models()) return;
  for (const std::string name : {"llama3_1", "qwen3", "llama2"}) {
    CAPTURE(name);
    const Tokenizer& t = real(name);
    for (const std::string x : {"Hello world", " leading and trailing  ", "\n\n tabs\tand\r\nCRLF", "日本語のテキスト 🎉👨‍👩‍👧",
                                "naïve café", "مرحبا", "x = [1, 2, 3];  // code", "'s 're DON'T"}) {
      CHECK(t.decode(t.encode(x, {.add_special = false})) == x);
      CHECK(t.decode(t.encode(x), {.skip_special = true}) == x);
    }
  }
}

TEST_CASE("tokenizer: special tokens, BOS and configuration") {
  if (!have_models()) return;
  const Tokenizer& l3 = real("llama3_1");
  CHECK(l3.prefix_tokens() == std::vector<int32_t>{128000});
  CHECK(l3.bos_id() == 128000);
  CHECK(l3.eos_id() == 128009);  // tokenizer_config: <|eot_id|>
  CHECK(l3.encode("Hello world") == std::vector<int32_t>{128000, 9906, 1917});
  CHECK(l3.encode("<|eot_id|>", {.add_special = false}) == std::vector<int32_t>{128009});
  // Written literally but not parsed: plain text.
  CHECK(l3.encode("<|eot_id|>", {.add_special = false, .parse_special = false}).size() > 1);
  CHECK(l3.is_special(128009));
  CHECK(l3.decode({128000, 9906, 1917}, {.skip_special = true}) == "Hello world");
  CHECK(l3.chat_template().find("<|start_header_id|>") != std::string::npos);
  const Tokenizer& q3 = real("qwen3");
  CHECK(q3.prefix_tokens().empty());
  CHECK(q3.eos_id() == 151645);  // <|im_end|>
  CHECK(q3.token_id("<think>") == 151667);
  CHECK(!q3.is_special(151667));  // an added token that is not special
  CHECK(q3.encode("e\xCC\x81") == q3.encode("\xC3\xA9"));  // NFC
  const Tokenizer& l2 = real("llama2");
  CHECK(l2.prefix_tokens() == std::vector<int32_t>{1});
  CHECK(l2.decode(l2.encode("Hello")) == "<s> Hello");
  CHECK(l2.encode("\xF0\x9F\xA6\x99", {.add_special = false}).size() == 5);  // ▁ + 4 byte-fallback tokens
}

TEST_CASE("tokenizer: 100 KB of text encodes (the time printed, not checked)") {
  if (!have_models()) return;
  std::string text;
  for (const std::string& s : corpus())
    if (text.size() < 100000) text += s + "\n";
  text.resize(100000);
  for (const std::string name : {"llama3_1", "qwen3", "llama2"}) {
    const Tokenizer& t = real(name);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = t.encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(name << ": 100 KB -> " << ids.size() << " tokens in " << s * 1000 << " ms");
    if (name == "llama3_1") CHECK(t.decode(t.encode(text, {.add_special = false})) == mk::tok::utf8::sanitize(text));
  }
}

TEST_CASE("tokenizer: streaming holds back incomplete UTF-8") {
  if (!have_models()) return;
  const Tokenizer& l3 = real("llama3_1");
  // "👨‍👩‍👧" is several byte-level tokens whose boundaries fall inside characters.
  const std::string text = "ok 👨‍👩‍👧 日本語 done";
  const std::vector<int32_t> ids = l3.encode(text, {.add_special = false});
  mk::tok::StreamDecoder d(l3);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    CHECK(mk::tok::utf8::is_valid(piece));
    out += piece;
  }
  out += d.finish();
  CHECK(out == text);
  // An incomplete tail at the end becomes U+FFFD.
  mk::tok::StreamDecoder e(l3);
  CHECK(e.push(l3.encode("\xF0\x9F\x98\x80", {.add_special = false})[0]).empty());
  CHECK(e.finish() == "\xEF\xBF\xBD");
}

TEST_CASE("tokenizer: UTF-8 validation replaces maximal subparts") {
  using namespace mk::tok::utf8;
  CHECK(sanitize("abc") == "abc");
  CHECK(sanitize("\xFF") == "\xEF\xBF\xBD");
  CHECK(sanitize("\xE2\x82") == "\xEF\xBF\xBD");              // one maximal subpart
  CHECK(sanitize("\xE2\x82(") == "\xEF\xBF\xBD(");
  CHECK(sanitize("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  CHECK(sanitize("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(sanitize("\xF4\x90\x80\x80").size() == 12);          // beyond U+10FFFF
  CHECK(complete_prefix("ab\xF0\x9F\x98") == 2);
  CHECK(complete_prefix("ab\xF0\x9F\x98\x80") == 6);
  CHECK(complete_prefix("ab\xFF") == 3);  // invalid, not incomplete: printed (as U+FFFD)
}

TEST_CASE("tokenizer: merges by rank, leftmost first; byte fallback; unknown characters") {
  json t = {{"model",
             {{"type", "BPE"},
              {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"aa", 3}, {"ab", 4}, {"aab", 5}, {"<0xC3>", 6}, {"<0xA9>", 7}, {"\xE2\x96\x81", 8}}},
              {"merges", {"a b", "a a", "aa b"}},
              {"unk_token", "<unk>"},
              {"byte_fallback", true},
              {"fuse_unk", true}}},
            {"added_tokens", json::array({{{"id", 9}, {"content", "<X>"}, {"special", true}, {"lstrip", true}, {"rstrip", false}},
                                          {{"id", 10}, {"content", "<XY>"}, {"special", false}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                                             {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}}};
  const Tokenizer tk = tiny(t);
  // "a b" has the lowest rank: "aab" -> a,ab (not aa,b -> aab).
  CHECK(tk.encode("aab") == std::vector<int32_t>{1, 4});
  // Equal ranks: leftmost first. "aaa" -> aa,a.
  CHECK(tk.encode("aaa") == std::vector<int32_t>{3, 1});
  // é is not in the vocabulary: its bytes.
  CHECK(tk.encode("\xC3\xA9") == std::vector<int32_t>{6, 7});
  CHECK(tk.decode({6, 7}) == "\xC3\xA9");
  // No byte tokens for "z": unk, fused.
  CHECK(tk.encode("zzab") == std::vector<int32_t>{0, 4});
  // Added tokens: longest match; lstrip eats the spaces before it.
  CHECK(tk.encode("a  <X>b") == std::vector<int32_t>{1, 9, 2});
  CHECK(tk.encode("<XY>") == std::vector<int32_t>{10});
  CHECK(tk.encode("<X>", {.add_special = true, .parse_special = false}) == std::vector<int32_t>{0});  // plain text: unk
  CHECK(tk.decode({1, 9, 2}, {.skip_special = true}) == "ab");
}

TEST_CASE("tokenizer: configurations that are not supported are named") {
  json t = {{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}};
  CHECK_THROWS_WITH_AS(tiny(t), doctest::Contains("model type 'WordPiece' is not supported"), mk::tok::TokenizerError);
  json u = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
            {"pre_tokenizer", {{"type", "Whitespace"}}}};
  CHECK_THROWS_WITH_AS(tiny(u), doctest::Contains("pre-tokenizer 'Whitespace' is not supported"), mk::tok::TokenizerError);
  json v = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"a b"}}}}};
  CHECK_THROWS_WITH_AS(tiny(v), doctest::Contains("outside the vocabulary"), mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::from_json("{", "", "x/tokenizer.json"), doctest::Contains("x/tokenizer.json: not valid JSON"),
                       mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::load("/nonexistent"), doctest::Contains("tokenizer.json: not found"), mk::tok::TokenizerError);
  // Hostile structure: refused when parsed, before anything walks it (300,000 levels of
  // added_tokens crashed the reader), and a key given twice is not silently the last one.
  const std::string vocab = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, )";
  const std::string deep = vocab + R"("added_tokens": )" + std::string(300000, '[') + std::string(300000, ']') + "}";
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(deep, "", "x/tokenizer.json"),
                       doctest::Contains("x/tokenizer.json: JSON nested deeper than 64 levels"), mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(vocab + R"("model": 1})", "", "x/tokenizer.json"),
                       doctest::Contains("x/tokenizer.json: JSON key 'model' given twice"), mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(vocab.substr(0, vocab.size() - 2) + "}", "{\"a\": [[[", "x/tokenizer.json"),
                       doctest::Contains("x/tokenizer_config.json: not valid JSON"), mk::tok::TokenizerError);
  // Ids: integers in range only (a float id was an undefined conversion, a huge one sized the id
  // table), found by fuzz_tokenizer.
  for (const char* id : {"4.3e128", "-1", "2097152", "\"0\"", "[0]"}) {
    json t = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
    t["model"]["vocab"]["b"] = json::parse(id);
    CAPTURE(id);
    CHECK_THROWS_WITH_AS(tiny(t), doctest::Contains("the id of 'b' must be a token id (an integer from 0 to 2097151)"),
                         mk::tok::TokenizerError);
  }
  json added = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
                {"added_tokens", {{{"id", 1.5}, {"content", "<s>"}}}}};
  CHECK_THROWS_WITH_AS(tiny(added), doctest::Contains("an added token's id must be a token id"), mk::tok::TokenizerError);
  json ok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
  CHECK_THROWS_WITH_AS(tiny(ok, {{"added_tokens_decoder", {{"x1", {{"content", "<s>"}}}}}}),
                       doctest::Contains("tiny/tokenizer_config.json: added_tokens_decoder key 'x1' is not a token id"),
                       mk::tok::TokenizerError);
  // The place of a value of the wrong type, in either file.
  json bad_merge = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {5}}}}};
  CHECK_THROWS_WITH_AS(tiny(bad_merge), doctest::Contains("tiny/tokenizer.json: model.merges[0]: expected a string, not 5"),
                       mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(tiny(ok, {{"chat_template", {{{"name", 3}}}}}),
                       doctest::Contains("tiny/tokenizer_config.json: chat_template[0].name: expected a string, not 3"),
                       mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(tiny(ok, {{"added_tokens_decoder", {{"7", {{"special", true}}}}}}),
                       doctest::Contains("tiny/tokenizer_config.json: added_tokens_decoder.7: no 'content'"),
                       mk::tok::TokenizerError);
  json post = ok;
  post["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                            {"special_tokens", {{"<s>", {{"ids", {7}}}}}}};
  CHECK_THROWS_WITH_AS(tiny(post), doctest::Contains("the post-processor's token id 7 is outside the vocabulary"),
                       mk::tok::TokenizerError);
}

TEST_CASE("chat: Llama-3 header format as the reference renders the model's template") {
  if (!have_models()) return;
  const Tokenizer& t = real("llama3_1");
  CHECK(mk::tok::detect_chat_format(t) == mk::tok::ChatFormat::llama3);
  const json golden = json::parse(slurp(kDir / "golden" / "llama3_1-chat.json"));
  REQUIRE(golden.size() == 3);
  for (const json& g : golden) {
    const std::optional<std::string> system = g.at("system").is_null() ? std::nullopt : std::optional(g.at("system").get<std::string>());
    const mk::tok::Chat c = mk::tok::make_chat(t, g.at("user").get<std::string>(), system);
    CHECK(c.text == g.at("text").get<std::string>());
    CHECK(c.ids == g.at("ids").get<std::vector<int32_t>>());
    CHECK(c.end_ids == std::vector<int32_t>{128009});
  }
}

TEST_CASE("chat: a conversation's later turns read as the reference renders the whole conversation") {
  if (!have_models()) return;
  const Tokenizer& t = real("llama3_1");
  const json golden = json::parse(slurp(kDir / "golden" / "llama3_1-chat-turns.json"));
  REQUIRE(golden.size() == 2);
  for (const json& g : golden) {
    const std::optional<std::string> system = g.at("system").is_null() ? std::nullopt : std::optional(g.at("system").get<std::string>());
    const auto turns = g.at("turns").get<std::vector<std::string>>();
    // Turn by turn as mkrun --interactive feeds them: the first prompt, the reply as the model
    // wrote it (up to its end token), the next turn's prompt, ...
    mk::tok::Chat first = mk::tok::make_chat(t, turns[0], system);
    std::string text = first.text;
    std::vector<int32_t> ids = first.ids;
    for (size_t i = 1; i < turns.size(); ++i) {
      const mk::tok::Chat next = mk::tok::make_chat_turn(t, turns[i]);
      const bool reply = i % 2 == 1;
      const std::vector<int32_t> more = reply ? t.encode(turns[i], {.add_special = false}) : next.ids;
      text += reply ? turns[i] : next.text;
      ids.insert(ids.end(), more.begin(), more.end());
      if (!reply) CHECK(next.end_ids == std::vector<int32_t>{128009});
    }
    CHECK(text == g.at("text").get<std::string>());
    CHECK(ids == g.at("ids").get<std::vector<int32_t>>());
  }
}

TEST_CASE("chat: ChatML for Qwen3, as its template writes it") {
  if (!have_models()) return;
  const Tokenizer& t = real("qwen3");
  CHECK(mk::tok::detect_chat_format(t) == mk::tok::ChatFormat::chatml);
  const mk::tok::Chat a = mk::tok::make_chat(t, "Write a haiku about GPUs", std::nullopt);
  CHECK(a.text == "<|im_start|>user\nWrite a haiku about GPUs<|im_end|>\n<|im_start|>assistant\n");
  CHECK(a.ids.front() == 151644);
  CHECK(a.ids.back() == 198);  // "\n"
  CHECK(a.end_ids == std::vector<int32_t>{151645});
  const mk::tok::Chat b = mk::tok::make_chat(t, "Hi", std::string("Be brief."));
  CHECK(b.text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(b.ids == t.encode(b.text));
  // A later turn closes the reply before it (<|im_end|>, then the newline the template writes).
  const mk::tok::Chat c = mk::tok::make_chat_turn(t, "And now?");
  CHECK(c.text == "<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(c.ids.front() == 151645);
  CHECK(c.ids == t.encode(c.text, {.add_special = false}));
  CHECK(c.end_ids == std::vector<int32_t>{151645});
}

TEST_CASE("chat: a template that is neither format is a clear error") {
  const json base = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
  CHECK_THROWS_WITH_AS(mk::tok::detect_chat_format(tiny(base, {{"chat_template", "{{ messages }}"}})),
                       doctest::Contains("not a format --chat knows"), mk::tok::TokenizerError);
  CHECK_THROWS_WITH_AS(mk::tok::detect_chat_format(tiny(base)), doctest::Contains("does not know this model's chat format"),
                       mk::tok::TokenizerError);
  if (have_models())
    CHECK_THROWS_WITH_AS(mk::tok::make_chat(real("llama2"), "Hi", std::nullopt), doctest::Contains("--chat"),
                         mk::tok::TokenizerError);
}

TEST_CASE("tokenizer: ids and strings when added tokens and the vocabulary overlap") {
  // <s> is in the vocabulary as 1 and added as 1; <x> is in the vocabulary as 2 but added as 5
  // (the added id wins for the string); id 3 has no string; 4 is the vocabulary's "b" and also
  // given to the added <y> (an id's string is the added token's).
  const json t = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"<s>", 1}, {"<x>", 2}, {"b", 4}}}, {"merges", json::array()}}},
                  {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 5}, {"content", "<x>"}},
                                    {{"id", 4}, {"content", "<y>"}}}}};
  const Tokenizer tk = tiny(t);
  CHECK(tk.vocab_size() == 6);
  CHECK(tk.token_id("<s>") == 1);
  CHECK(tk.token_id("<x>") == 5);
  CHECK(tk.token_id("<y>") == 4);
  CHECK(tk.token_id("b") == 4);
  CHECK(tk.token_string(1) == "<s>");
  CHECK(tk.token_string(2) == "<x>");
  CHECK(tk.token_string(3) == "");
  CHECK(tk.token_string(4) == "<y>");
  CHECK(tk.token_string(5) == "<x>");
  CHECK(tk.encode("a<x>b<y>") == std::vector<int32_t>{0, 5, 4, 4});
  CHECK(tk.decode({0, 5, 4, 1}) == "a<x><y><s>");
  CHECK_THROWS_WITH_AS(tk.token_string(6), doctest::Contains("token id 6 is outside the vocabulary [0, 6)"), mk::tok::TokenizerError);
}

TEST_CASE("tokenizer: GPT-2 style ByteLevel (regex, prefix space) and Metaspace pipelines") {
  const json gpt2 = {{"model", {{"type", "BPE"}, {"vocab", {{"\xC4\xA0", 0}, {"h", 1}, {"i", 2}, {"\xC4\xA0h", 3}}}, {"merges", {"\xC4\xA0 h"}}}},
                     {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
                     {"decoder", {{"type", "ByteLevel"}}}};
  const Tokenizer g = tiny(gpt2);
  CHECK(g.encode("hi hi") == std::vector<int32_t>{3, 2, 3, 2});
  CHECK(g.decode({3, 2, 3, 2}) == " hi hi");
  const json sp = {{"model", {{"type", "BPE"}, {"vocab", {{"\xE2\x96\x81", 0}, {"a", 1}, {"b", 2}, {"\xE2\x96\x81" "a", 3}}},
                              {"merges", {"\xE2\x96\x81 a"}}}},
                   {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}}},
                   {"decoder", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}}}};
  const Tokenizer m = tiny(sp);
  CHECK(m.encode("a b") == std::vector<int32_t>{3, 0, 2});
  CHECK(m.decode({3, 0, 2}) == "a b");
}

TEST_CASE("chat: the Llama-3.1 system header and Qwen2.5's default system message") {
  json vocab = json::object();
  for (int c = 32; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c;
  vocab["\n"] = 10;
  json added = json::array();
  int id = 200;
  for (const char* s : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"})
    added.push_back({{"id", id++}, {"content", s}, {"special", true}});
  const json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}, {"added_tokens", added}};
  const Tokenizer l31 = tiny(tok, {{"bos_token", "<|begin_of_text|>"},
                                   {"chat_template", "{{- bos_token }}... {{- \"Cutting Knowledge Date: December 2023\\n\" }} "
                                                     "<|start_header_id|> <|end_header_id|>"}});
  CHECK(mk::tok::make_chat(l31, "Hi", std::nullopt).text ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
        "2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(mk::tok::make_chat(l31, " Hi ", std::string(" Be brief. ")).text.find("2024\n\nBe brief.<|eot_id|>") != std::string::npos);
  const Tokenizer q25 = tiny(tok, {{"chat_template", "{%- if messages[0]['role'] == 'system' %}...{%- else %}{{- '<|im_start|>system\\nYou "
                                                     "are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"}});
  const mk::tok::Chat c = mk::tok::make_chat(q25, "Hi", std::nullopt);
  CHECK(c.text ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(c.ids.front() == 204);
  CHECK(c.end_ids == std::vector<int32_t>{205});
  // No template: recognised from the special tokens.
  CHECK(mk::tok::detect_chat_format(tiny(tok)) == mk::tok::ChatFormat::llama3);
}

TEST_CASE("tokenizer: random mixtures of scripts, whitespace, invalid bytes and token fragments") {
  if (!have_models()) return;
  const std::vector<std::string> pool = {"a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "7", "2026", ".", ",", "'s", "'LL", "é", "e\xCC\x81",
                                         "日本", "語", "😀", "\xE2\x80\x8D", "👨‍👩‍👧", "مرحبا", "\xFF", "\x80", "\xE2\x82", "<|", "|>", "<s", "eot_id",
                                         "<|eot_id|>", "<|im_end|>", "<s>", "\xC2\xA0", "\xE3\x80\x80", "!!!", "->", "ſ"};
  std::mt19937 rng(1010);
  for (const std::string name : {"llama3_1", "qwen3", "llama2"}) {
    CAPTURE(name);
    const Tokenizer& t = real(name);
    for (int rep = 0; rep < 500; ++rep) {
      std::string x;
      const int n = static_cast<int>(rng() % 30);
      for (int k = 0; k < n; ++k) x += pool[rng() % pool.size()];
      CAPTURE(x);
      const std::vector<int32_t> ids = t.encode(x, {.add_special = false, .parse_special = false});
      for (int32_t id : ids) REQUIRE((id >= 0 && static_cast<uint32_t>(id) < t.vocab_size()));
      const std::string clean = mk::tok::utf8::sanitize(x);
      // Byte-level without a normalizer and the SentencePiece BPE (no added token parsed) are lossless.
      if (name != "qwen3") CHECK(t.decode(ids) == clean);
      // Streaming gives the same text as decoding at once.
      mk::tok::StreamDecoder d(t);
      std::string streamed;
      for (int32_t id : ids) streamed += d.push(id);
      streamed += d.finish();
      if (name != "llama2") CHECK(streamed == t.decode(ids));  // (llama2's decode also strips the prepended space)
    }
  }
}
