// mktoken: encode text to token ids, or decode ids to text, with a checkpoint's tokenizer.json.
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "common/show_number.hpp"
#include "tokenizer/batch.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tools/cli.hpp"
#include "tools/mkrun_text.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string ms(double seconds) { return mk::show_fixed(seconds * 1000) + " ms"; }

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  CLI::App app;
  mk::tools::describe(
      app, {.tool = "mktoken",
            .usage = {"DIR TEXT | --file FILE [--tokens] [OPTIONS]", "DIR --lines FILE | --jsonl FILE [OPTIONS]",
                      "DIR --decode IDS [--skip-special] [OPTIONS]"},
            .description =
                "The tokenizer of a checkpoint folder (tokenizer.json + tokenizer_config.json): prints the token ids\n"
                "of TEXT, comma-separated, with the BOS the model's tokenizer adds; with --decode, the text of\n"
                "comma-separated ids.\n"
                "Many texts in one call: --lines reads one text a line (the line ending not part of it) and prints\n"
                "one line of ids for each; --jsonl reads JSON lines, each a string or an object with a \"text\"\n"
                "string, and prints {\"ids\":[...]} for each. Both keep the input's order, answer each line as it\n"
                "is read (FILE - is stdin), and stop at the first bad line with its number (exit 1).",
            .examples = {{"weights/ 'Hello world'", "128000,9906,1917 for Llama-3.1"},
                         {"weights/ --decode 128000,9906,1917 --skip-special", "Hello world"},
                         {"weights/ --tokens 'Hello world'", "each id with its string in the vocabulary, one a line"},
                         {"weights/ --lines prompts.txt", "one line of ids for each line of prompts.txt"},
                         {"weights/ --jsonl - --time < data.jsonl",
                          "{\"ids\":[...]} for each line of stdin; the load and encode times on stderr"}},
            .version_note = "reads tokenizer.json BPE models: byte-level (Llama-3, Qwen2/3) and SentencePiece-style (Llama-2, Mistral)"});
  std::string dir, text, file, lines, jsonl, decode;
  bool no_special = false, parse_special_off = false, skip_special = false, show_tokens = false, show_time = false;
  app.add_option("DIR", dir, "folder with tokenizer.json")->required()->type_name("DIR");
  app.add_option("TEXT", text, "text to encode");
  app.add_option("--file", file, "read the text to encode from a file (bytes as they are)")->type_name("FILE");
  app.add_option("--lines", lines, "encode each line of FILE (- for stdin) as one text; one line of ids each")->type_name("FILE");
  app.add_option("--jsonl", jsonl, "encode each JSON line of FILE (- for stdin): a string or {\"text\": ...}; {\"ids\":[...]} each")
      ->type_name("FILE");
  app.add_option("--decode", decode, "comma-separated token ids to turn into text")->type_name("IDS");
  app.add_flag("--no-add-special", no_special, "do not add BOS/EOS around the text");
  app.add_flag("--no-parse-special", parse_special_off, "special tokens written in the text are plain text");
  app.add_flag("--skip-special", skip_special, "--decode: leave special tokens out of the text");
  app.add_flag("--tokens", show_tokens, "print id and token string per line instead of the id list (one text)");
  app.add_flag("--time", show_time, "print the time loading the tokenizer took, and encoding or decoding, to stderr");
  if (const auto code = mk::tools::parse(app, argc, argv, "mktoken")) return *code;
  try {
    const int given = !text.empty() + !file.empty() + !lines.empty() + !jsonl.empty() + !decode.empty();
    if (given != 1) throw std::invalid_argument("give exactly one of TEXT, --file F, --lines F, --jsonl F or --decode IDS");
    const bool batch = !lines.empty() || !jsonl.empty();
    if (show_tokens && (batch || !decode.empty())) throw std::invalid_argument("--tokens goes with one text (TEXT or --file)");
    const mk::tok::EncodeOptions options{!no_special, !parse_special_off};

    const auto load_start = std::chrono::steady_clock::now();
    const mk::tok::Tokenizer t = mk::tok::Tokenizer::load(dir);
    const double load_seconds = seconds_since(load_start);
    if (show_time)
      std::cerr << "mktoken: loaded " << (std::filesystem::path(dir) / "tokenizer.json").string() << " (" << t.vocab_size()
                << " ids) in " << ms(load_seconds) << "\n";

    if (!decode.empty()) {
      const std::vector<int32_t> ids = mk::tools::parse_ids(decode, "--decode", "9906,1917");
      for (int32_t id : ids) t.token_string(id);  // range check, with a clear message
      const auto start = std::chrono::steady_clock::now();
      const std::string out = t.decode(ids, {skip_special});
      if (show_time) std::cerr << "mktoken: decoded " << ids.size() << " ids in " << ms(seconds_since(start)) << "\n";
      std::cout << out << "\n";
      return 0;
    }
    if (batch) {
      const std::string& source = lines.empty() ? jsonl : lines;
      const mk::tok::LineFormat format = lines.empty() ? mk::tok::LineFormat::jsonl : mk::tok::LineFormat::lines;
      const auto start = std::chrono::steady_clock::now();
      mk::tok::BatchStats stats;
      try {
        if (source == "-") {
          stats = mk::tok::encode_lines(t, std::cin, std::cout, format, options, true);
        } else {
          std::istringstream in(mk::tools::read_text_file(source));
          stats = mk::tok::encode_lines(t, in, std::cout, format, options);
        }
      } catch (const mk::tok::TokenizerError& e) {
        std::cout.flush();  // the lines before the bad one
        throw std::runtime_error((source == "-" ? std::string("stdin") : source) + ": " + e.what());
      }
      if (show_time)
        std::cerr << "mktoken: encoded " << stats.texts << " texts (" << stats.bytes << " bytes, " << stats.tokens << " ids) in "
                  << ms(stats.encode_seconds) << "; " << ms(seconds_since(start)) << " with reading and writing\n";
      return 0;
    }
    const std::string input = file.empty() ? text : mk::tools::read_text_file(file);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = t.encode(input, options);
    if (show_time)
      std::cerr << "mktoken: encoded " << input.size() << " bytes to " << ids.size() << " ids in " << ms(seconds_since(start)) << "\n";
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
