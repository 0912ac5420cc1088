// mk_eos_fixture SCHEDULE DIR: a checkpoint folder for tests/tokenizer/eos-llama.yaml whose greedy
// continuation is known: every layer's output projections are zero, so the residual stream stays
// the token's embedding, a one-hot vector (slot id mod hidden); lm_head makes the token after
// slot r the one in kNext below. From "Hi" or a chat prompt ending in "\n\n" the model writes
// "oké!" (the é as two byte-level tokens, so streaming must hold back half a character) and then
// <|eot_id|>; past that it writes "." forever. Also writes a byte-level tokenizer.json (ids 0-255
// are the bytes, 256-260 special tokens), tokenizer_config.json with a Llama-3 chat template,
// config.json (eos_token_id 257) and generation_config.json (eos_token_id [257, 260]).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "device/weights.hpp"
#include "schedules/schedule.hpp"
#include "tokenizer/utf8.hpp"

namespace {

using json = nlohmann::json;

// slot -> next token. Slots are token ids mod hidden (256): bytes, and 256 + k for the specials.
const std::map<uint32_t, uint32_t> kNext = {
    {'i', 'o'}, {'\n', 'o'}, {'o', 'k'}, {'k', 0xC3}, {0xC3, 0xA9}, {0xA9, '!'}, {'!', 260}, {260 % 256, '.'}, {'.', '.'}};

void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::trunc);
  f << s;
  if (!f) throw std::runtime_error(p.string() + ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: mk_eos_fixture SCHEDULE DIR\n";
    return 2;
  }
  try {
    const mk::schedule::Schedule s = mk::schedule::read_file(argv[1]);
    const std::filesystem::path dir = argv[2];
    std::filesystem::create_directories(dir);
    std::vector<mk::device::NewTensor> tensors;
    std::map<std::string, bool> seen;
    for (const mk::schedule::Tensor& t : s.tensors) {
      if (t.role != mk::schedule::Role::weight || seen[t.key]) continue;
      seen[t.key] = true;
      mk::device::NewTensor n{t.key, {t.shape.begin(), t.shape.end()}, std::vector<uint16_t>(t.elements(), 0)};
      const uint16_t one = 0x3F80, eight = 0x4100;
      if (t.shape.size() == 1) {
        std::fill(n.bf16.begin(), n.bf16.end(), one);  // norms
      } else if (t.key == "model.embed_tokens.weight") {
        for (uint32_t tok = 0; tok < t.shape[0]; ++tok) n.bf16[uint64_t{tok} * t.shape[1] + tok % t.shape[1]] = one;
      } else if (t.key == "lm_head.weight") {
        for (const auto& [slot, next] : kNext) n.bf16[uint64_t{next} * t.shape[1] + slot] = eight;
      }
      tensors.push_back(std::move(n));
    }
    mk::device::write_safetensors(dir / "model.safetensors", tensors);

    json vocab = json::object();
    const char* specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    int n = 0;
    for (int b = 0; b < 256; ++b) {  // GPT-2's byte-to-character map
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      std::string c;
      mk::tok::utf8::append(c, printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++));
      vocab[c] = b;
    }
    json added = json::array();
    for (int k = 0; k < 5; ++k)
      added.push_back({{"id", 256 + k}, {"content", specials[k]}, {"special", true}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"single_word", false}});
    const json tokenizer = {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {256}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}}}};
    write_text(dir / "tokenizer.json", tokenizer.dump(1) + "\n");
    const json config = {
        {"bos_token", "<|begin_of_text|>"},
        {"eos_token", "<|eot_id|>"},
        {"chat_template",
         "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
         "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
         "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
         "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"}};
    write_text(dir / "tokenizer_config.json", config.dump(1) + "\n");
    write_text(dir / "config.json", json{{"eos_token_id", 257}}.dump() + "\n");
    write_text(dir / "generation_config.json", json{{"eos_token_id", {257, 260}}}.dump() + "\n");
  } catch (const std::exception& e) {
    std::cerr << "mk_eos_fixture: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
