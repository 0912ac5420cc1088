// mktoken: encode text to token ids, or decode ids to text, with a checkpoint's tokenizer.json.
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tokenizer/tokenizer.hpp"
#include "tools/cli.hpp"
#include "tools/mkrun_text.hpp"


int main(int argc, char** argv) {
  CLI::App app{
      "mktoken: the tokenizer of a checkpoint folder (tokenizer.json + tokenizer_config.json).\n"
      "Prints the token ids of TEXT (comma-separated, with the BOS the model's tokenizer adds), or\n"
      "with --decode the text of comma-separated ids.",
      "mktoken"};
  std::string dir, text, file, decode;
  bool no_special = false, parse_special_off = false, skip_special = false, show_tokens = false;
  app.add_option("DIR", dir, "folder with tokenizer.json")->required()->type_name("DIR");
  app.add_option("TEXT", text, "text to encode");
  app.add_option("--file", file, "read the text to encode from a file (bytes as they are)")->type_name("FILE");
  app.add_option("--decode", decode, "comma-separated token ids to turn into text")->type_name("IDS");
  app.add_flag("--no-add-special", no_special, "do not add BOS/EOS around the text");
  app.add_flag("--no-parse-special", parse_special_off, "special tokens written in the text are plain text");
  app.add_flag("--skip-special", skip_special, "--decode: leave special tokens out of the text");
  app.add_flag("--tokens", show_tokens, "print id and token string per line instead of the id list");
  app.footer("Examples:\n  mktoken weights/ 'Hello world'\n  mktoken weights/ --decode 128000,9906,1917\n"
             "  mktoken weights/ --file prompt.txt");
  if (const auto code = mk::tools::parse(app, argc, argv, "mktoken")) return *code;
  try {
    const int given = !text.empty() + !file.empty() + !decode.empty();
    if (given != 1) throw std::invalid_argument("give exactly one of TEXT, --file F or --decode IDS");
    const mk::tok::Tokenizer t = mk::tok::Tokenizer::load(dir);
    if (!decode.empty()) {
      const std::vector<int32_t> ids = mk::tools::parse_ids(decode, "--decode", "9906,1917");
      for (int32_t id : ids) t.token_string(id);  // range check, with a clear message
      std::cout << t.decode(ids, {skip_special}) << "\n";
      return 0;
    }
    const std::string input = file.empty() ? text : mk::tools::read_text_file(file);
    const std::vector<int32_t> ids = t.encode(input, {!no_special, !parse_special_off});
    if (show_tokens) {
      for (int32_t id : ids) std::cout << id << "\t" << t.token_string(id) << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
      std::cout << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mktoken: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
