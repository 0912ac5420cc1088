// mkrun: run a schedule on a checkpoint: prefill over the prompt, then greedy decoding (or
// sampling, with a sample op). Prompt ids in, ids out; or text in, streamed text out.
#include <chrono>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/cli.hpp"
#include "tools/mkrun_config.hpp"

#include "common/output_file.hpp"
#include "common/show_number.hpp"
#include "schedules/format.hpp"

#include "device/runtime.hpp"
#include "device/speculate.hpp"
#include "schedules/ops/sample.hpp"
#include "tools/mkrun_batch.hpp"
#include "tools/mkrun_chat.hpp"
#include "tools/mkrun_text.hpp"


int main(int argc, char** argv) {
  CLI::App app;
  mk::tools::describe(
      app, {.tool = "mkrun",
            .usage = {"SCHEDULE CHECKPOINT [--prompt-ids IDS] [--tokens N] [OPTIONS]",
                      "SCHEDULE CHECKPOINT --prompt TEXT | --prompt-file FILE [--chat [--system TEXT]] [OPTIONS]",
                      "SCHEDULE CHECKPOINT --interactive [--prompt FIRST] [--system TEXT] [OPTIONS]",
                      "SCHEDULE CHECKPOINT --batch FILE [--chat] [--json] [OPTIONS]"},
            .description =
                "Run a schedule planned by mkplan on a Hugging Face style checkpoint: prefill the prompt, as many\n"
                "positions a step as the schedule was planned for (mkplan --max-tokens; one by default), then\n"
                "decode greedily (or sample: --temperature); print the token ids and the time per token. The CPU\n"
                "emulator runs where there is no GPU. Without a prompt, decoding starts from token id 1 (said on\n"
                "stderr).\n"
                "With --prompt, --prompt-file or --chat the text goes through the checkpoint's tokenizer.json, the\n"
                "generated text streams to stdout (timings on stderr), and generation stops at the model's\n"
                "eos_token_id (generation_config.json, else config.json) unless --ignore-eos.\n"
                "With --interactive it holds a conversation: one user message a line of stdin (the first may come\n"
                "from --prompt), each reply streamed, earlier turns kept in the KV cache; the end of input ends it.\n"
                "Outputs (--dump-logits, --trace) never overwrite an input (the schedule, the checkpoint's files)\n"
                "unless --force.\n"
                "With --batch FILE it generates for every prompt of FILE at once (one a line, or a JSON list of texts,\n"
                "id lists or {\"prompt\"|\"ids\", \"tokens\"}; - reads stdin), each sequence in a KV cache of its own,\n"
                "decoding together and each stopping at its own end: as many prompts as the schedule's max_tokens.\n"
                "The results print in order when all are done (--json: one object a line; --dump-logits F: each\n"
                "sequence's logits to F with its index before .npy).",
            .examples = {{"s.bin weights/ --prompt-ids 128000,791,1888 --tokens 64",
                          "decode 64 tokens after three prompt ids; print the ids and us/token"},
                         {"s.bin Llama-3.2-1B-Instruct/ --chat --prompt \"Write a haiku about GPUs\" --tokens 200",
                          "a chat reply, streamed as text"},
                         {"s.bin Llama-3.2-1B-Instruct/ -i --system \"Be brief.\"", "a conversation, a message a line of stdin"},
                         {"s64.bin Llama-3.2-1B-Instruct/ --batch prompts.txt --chat --json",
                          "every line of prompts.txt answered at once (s64.bin: mkplan --max-tokens 64)"},
                         {"s.bin weights/ --backend emulator --tokens 4 --trace step",
                          "trace the last step on the CPU emulator into step.json and step.svg"}},
            .version_note = "reads schedule formats " + std::to_string(mk::schedule::kOldestReadVersion) + " to " +
                            std::to_string(mk::schedule::kFormatVersion)});
  std::string schedule_path, weights_path, prompt, backend_name = "auto", dump, order = "deterministic";
  uint32_t tokens = 16, max_context = 0;
  uint64_t seed = 0;
  std::string text, text_file, system, tokenizer_dir;
  bool chat = false, ignore_eos = false, as_json = false, interactive = false, force = false;
  double watchdog = 1.0;
  app.add_option("SCHEDULE", schedule_path, "schedule file written by mkplan")->required()->type_name("FILE");
  app.add_option("CHECKPOINT", weights_path, "checkpoint folder (model.safetensors, or shards and their index), or a .safetensors file")
      ->required()
      ->type_name("DIR|FILE");
  auto* ids_opt = app.add_option("--prompt-ids", prompt, "comma-separated prompt token ids (none: the one id 1, said on stderr)")
                      ->type_name("IDS");
  auto* text_opt = app.add_option("--prompt", text, "prompt text (tokenized with the BOS the model's tokenizer adds)");
  auto* file_opt = app.add_option("--prompt-file", text_file, "read the prompt text from a file")->type_name("FILE");
  app.add_flag("--chat", chat, "wrap the prompt in the model's chat format (Llama-3 headers or ChatML)");
  app.add_flag("-i,--interactive", interactive,
               "a conversation (implies --chat): user messages a line each from stdin (a line ending in \\ goes on), after "
               "--prompt if given; the KV cache keeps every turn (--max-context default " +
                   std::to_string(mk::tools::kConversationContext) + ", --tokens default " +
                   std::to_string(mk::tools::kReplyTokens) + " a reply)");
  app.add_option("--system", system, "--chat: the system message");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at the end-of-sequence tokens");
  app.add_option("--tokenizer", tokenizer_dir, "folder with tokenizer.json (default: the checkpoint's folder)")->type_name("DIR");
  app.add_flag("--json", as_json, "print one JSON object (prompt ids, ids, text, stop reason, timings) instead");
  text_opt->excludes(ids_opt)->excludes(file_opt);
  file_opt->excludes(ids_opt);
  auto* tokens_opt =
      app.add_option("--tokens", tokens, "tokens to generate (at most, with a text prompt)")->capture_default_str();
  app.add_option("--backend", backend_name, "auto (the GPU when there is one), cuda or emulator")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "emulator"}));
  app.add_option("--max-context", max_context, "KV-cache capacity in positions (default: prompt + tokens)")
      ->check(CLI::Range(1u, UINT32_MAX));
  app.add_option("--dump-logits", dump, "write every step's logits (prompt steps included) as float32 .npy [steps, vocab]")
      ->type_name("FILE");
  app.add_option("--order", order, "emulator execution order: deterministic, or shuffled (seeded)")
      ->capture_default_str()
      ->check(CLI::IsMember({"deterministic", "shuffled"}));
  app.add_option("--seed", seed, "seed for --order shuffled, and for sampling")->capture_default_str();
  mk::schedule::SamplingParams sampling;
  auto* temp_opt = app.add_option("--temperature", sampling.temperature,
                                  "sample at this temperature (default 0: greedy); needs a schedule with a sample op");
  auto* topk_opt = app.add_option("--top-k", sampling.top_k, "sample among the K most likely tokens (0: all)");
  auto* topp_opt = app.add_option("--top-p", sampling.top_p, "sample among the most likely tokens of mass P (1: all)");
  std::string trace;
  app.add_option("--trace", trace,
                 "trace the last step: writes PREFIX.json (Chrome/Perfetto) and PREFIX.svg (one lane per SM), prints where the "
                 "time went; on the GPU in us, on the emulator on a logical clock (one tick per instruction)")
      ->type_name("PREFIX");
  app.add_option("--watchdog", watchdog,
                 "CUDA: seconds a counter wait may take before the run is stopped with a report (raise it under "
                 "compute-sanitizer)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  std::string batch;
  auto* batch_opt = app.add_option("--batch", batch,
                                   "generate for every prompt of FILE at once: one a line, or a JSON list (- : stdin)")
                        ->type_name("FILE");
  batch_opt->excludes(ids_opt)->excludes(text_opt)->excludes(file_opt);
  std::string speculate;
  auto* speculate_opt =
      app.add_option("--speculate", speculate,
                     "speculative decoding: ngram[:K] drafts up to K tokens (default 4) from where the context's last "
                     "2-3 tokens occurred before, checked in one step of K + 1 positions; the output is decoding's own "
                     "(needs a schedule of mkplan --max-tokens K + 1 or more)")
          ->type_name("ngram[:K]");
  app.add_flag("--force", force, mk::tools::kForceHelp);
  if (const auto code = mk::tools::parse(app, argc, argv, "mkrun")) return *code;

  try {
    if (interactive) {
      if (ids_opt->count()) throw std::invalid_argument("--interactive takes text (stdin, --prompt, --prompt-file), not --prompt-ids");
      for (const char* o : {"--json", "--dump-logits", "--trace"})
        if (app.get_option(o)->count()) throw std::invalid_argument(std::string("--interactive does not take ") + o);
      if (!tokens_opt->count()) tokens = mk::tools::kReplyTokens;
      if (tokens == 0) throw std::invalid_argument("--interactive needs --tokens of at least 1");
      if (!max_context) max_context = mk::tools::kConversationContext;
      chat = true;
    }
    const bool batch_mode = batch_opt->count() > 0;
    if (batch_mode) {
      if (interactive) throw std::invalid_argument("--batch and --interactive do not go together");
      if (!trace.empty()) throw std::invalid_argument("--batch does not take --trace");
      if (tokens == 0) throw std::invalid_argument("--batch needs --tokens of at least 1");
    }
    std::optional<mk::device::SpeculateOptions> spec;
    if (speculate_opt->count()) {
      spec = mk::device::parse_speculate(speculate);
      for (const char* o : {"--batch", "--interactive", "--trace"})
        if (app.get_option(o)->count()) throw std::invalid_argument(std::string("--speculate does not take ") + o);
    }
    const bool text_mode = !batch_mode && (text_opt->count() || file_opt->count() || chat);
    if (!system.empty() && !chat) throw std::invalid_argument("--system needs --chat");
    if (chat && ids_opt->count()) throw std::invalid_argument("--chat takes --prompt or --prompt-file, not --prompt-ids");
    if (chat && !interactive && !batch_mode && !text_opt->count() && !file_opt->count())
      throw std::invalid_argument("--chat needs --prompt or --prompt-file (or --interactive, --batch)");
    const std::filesystem::path checkpoint_folder = mk::tools::checkpoint_folder(weights_path);
    std::optional<mk::tok::Tokenizer> tokenizer;
    std::set<int32_t> stop_ids;
    std::vector<int32_t> ids;
    mk::tools::ConversationOptions conversation;
    mk::tools::BatchRun batch_run;
    std::vector<std::vector<int32_t>> batch_ids;
    if (batch_mode) {
      batch_run.prompts = mk::tools::read_batch(batch);
      batch_run.tokens = tokens;
      batch_run.chat = chat;
      if (!system.empty()) batch_run.system = system;
      bool any_text = chat;
      for (const mk::tools::BatchPrompt& b : batch_run.prompts) any_text = any_text || b.text.has_value();
      if (any_text) {  // text in, text out: the tokenizer, the end tokens
        tokenizer = mk::tok::Tokenizer::load(tokenizer_dir.empty() ? checkpoint_folder : std::filesystem::path(tokenizer_dir));
        batch_run.tokenizer = &*tokenizer;
        if (chat) {
          const std::vector<int32_t> end = mk::tok::chat_end_ids(*tokenizer);
          stop_ids.insert(end.begin(), end.end());
        }
        std::set<int32_t> eos = mk::tools::eos_ids(checkpoint_folder);
        if (eos.empty() && tokenizer->eos_id()) eos.insert(*tokenizer->eos_id());
        stop_ids.insert(eos.begin(), eos.end());
        if (ignore_eos) stop_ids.clear();
        batch_run.stop_ids = stop_ids;
      }
      batch_ids = mk::tools::batch_ids(batch_run);
    } else if (text_mode) {
      const std::filesystem::path folder = tokenizer_dir.empty() ? checkpoint_folder : std::filesystem::path(tokenizer_dir);
      tokenizer = mk::tok::Tokenizer::load(folder);
      const std::string input = file_opt->count() ? mk::tools::read_text_file(text_file) : text;
      if (interactive) {
        if (text_opt->count() || file_opt->count()) conversation.first = input;
        if (!system.empty()) conversation.system = system;
        conversation.reply_tokens = tokens;
        const std::vector<int32_t> end = mk::tok::chat_end_ids(*tokenizer);  // refuses a model without a chat format
        stop_ids.insert(end.begin(), end.end());
      } else if (chat) {
        const mk::tok::Chat c =
            mk::tok::make_chat(*tokenizer, input, system.empty() ? std::nullopt : std::optional<std::string>(system));
        ids = c.ids;
        stop_ids.insert(c.end_ids.begin(), c.end_ids.end());
      } else {
        ids = tokenizer->encode(input);
        if (ids.empty()) throw std::invalid_argument("the prompt is empty (and the tokenizer adds no BOS)");
      }
      std::set<int32_t> eos = mk::tools::eos_ids(checkpoint_folder);
      if (eos.empty() && tokenizer->eos_id()) eos.insert(*tokenizer->eos_id());
      stop_ids.insert(eos.begin(), eos.end());
      if (ignore_eos) stop_ids.clear();
      conversation.stop_ids = stop_ids;
    } else if (ids_opt->count()) {
      ids = mk::tools::parse_ids(prompt, "--prompt-ids", "128000,791,1888");
    } else if (!batch_mode) {
      ids = {1};  // said on stderr once the run starts
    }
    // No output may replace an input (unless --force): the schedule, the checkpoint's files, the
    // tokenizer's, the prompt file.
    std::vector<mk::io::NamedPath> inputs = {{"the schedule", schedule_path}};
    if (std::filesystem::is_regular_file(weights_path)) inputs.push_back({"the checkpoint", weights_path});
    for (const auto& f : mk::tools::checkpoint_files(checkpoint_folder)) inputs.push_back({"the checkpoint's", f});
    if (!tokenizer_dir.empty())
      for (const auto& f : mk::tools::checkpoint_files(tokenizer_dir)) inputs.push_back({"the tokenizer's", f});
    if (file_opt->count()) inputs.push_back({"the prompt file", text_file});
    if (batch_mode && batch != "-") inputs.push_back({"the batch file", batch});
    // With --batch, sequence i's logits go to the --dump-logits path with ".i" before its extension.
    auto batch_dump = [&](size_t i) {
      const std::filesystem::path p(dump);
      return (p.parent_path() / (p.stem().string() + "." + std::to_string(i) + p.extension().string())).string();
    };
    std::vector<mk::io::NamedPath> outputs = {{"--dump-logits", batch_mode ? "" : dump},
                                              {"--trace", trace.empty() ? "" : trace + ".json"},
                                              {"--trace", trace.empty() ? "" : trace + ".svg"}};
    for (size_t i = 0; batch_mode && !dump.empty() && i < batch_ids.size(); ++i) outputs.push_back({"--dump-logits", batch_dump(i)});
    mk::io::check_outputs(outputs, inputs, force);
    // Outputs are opened now: a bad path fails before the run, and an old file stays until the end.
    std::optional<mk::io::OutputFile> dump_file, trace_json, trace_svg;
    if (!dump.empty() && !batch_mode) dump_file.emplace(dump);
    if (!trace.empty()) trace_json.emplace(trace + ".json"), trace_svg.emplace(trace + ".svg");
    mk::schedule::Schedule schedule = mk::schedule::read_file(schedule_path);
    sampling.seed = seed;
    const bool sampling_asked = temp_opt->count() || topk_opt->count() || topp_opt->count();
    if (mk::schedule::set_sampling(schedule, sampling) == 0 && sampling_asked && sampling.temperature > 0)
      throw std::invalid_argument("this schedule decodes greedily (argmax); to sample, plan it with a sample op: "
                                  "mkplan CHECKPOINT_DIR --sample, or '{op: sample, in: logits, out: next_token}' in "
                                  "place of the YAML model's argmax op");
    const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(weights_path);
    mk::device::check_weights(schedule, ckpt);
    mk::device::RuntimeOptions opt;
    uint64_t steps = ids.size() + (tokens ? uint64_t{tokens} - 1 : 0);
    for (size_t i = 0; i < batch_ids.size(); ++i)  // each sequence's positions: the longest sets the context
      steps = std::max<uint64_t>(steps, batch_ids[i].size() + uint64_t{mk::tools::batch_tokens(batch_run, i)} - 1);
    if (!max_context && steps > (1u << 24)) throw std::invalid_argument("--tokens is too large");
    opt.max_context = max_context ? max_context : static_cast<uint32_t>(steps);
    if (batch_mode) opt.slots = static_cast<uint32_t>(batch_ids.size());
    mk::tools::check_planned_config(schedule, checkpoint_folder, opt.max_context);
    opt.order = order == "shuffled" ? mk::device::Order::shuffled : mk::device::Order::deterministic;
    opt.seed = seed;
    opt.watchdog_seconds = watchdog;
    if (backend_name == "cuda" && !mk::device::cuda_available())
      throw std::runtime_error("--backend cuda: no usable GPU (or this build has no CUDA interpreter)");
    std::unique_ptr<mk::device::Backend> backend;
#if MK_HAVE_CUDA
    if (backend_name == "cuda" || (backend_name == "auto" && mk::device::cuda_available()))
      backend = mk::device::make_cuda_backend(schedule, ckpt, opt);
#endif
    if (!backend) backend = mk::device::make_emulator_backend(schedule, ckpt, opt);
    if (interactive) {
      mk::tools::run_conversation(*backend, schedule, *tokenizer, conversation, opt.max_context, std::cin, std::cout, std::cerr);
      return 0;
    }
    if (batch_mode) {
      std::vector<mk::device::SequenceOptions> seqs(batch_ids.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        seqs[i].prompt = batch_ids[i];
        seqs[i].tokens = mk::tools::batch_tokens(batch_run, i);
        if (!stop_ids.empty()) seqs[i].stop = [&](int32_t t) { return stop_ids.count(t) != 0; };
      }
      const auto start = std::chrono::steady_clock::now();
      const std::vector<mk::device::GenerateResult> r =
          mk::device::generate_batch(*backend, schedule, seqs, {!dump.empty(), 0}, opt.max_context);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      mk::tools::print_batch(batch_run, batch_ids, r, backend->name(), seconds, as_json, std::cout, std::cerr);
      for (size_t i = 0; i < r.size() && !dump.empty(); ++i) {
        mk::device::write_npy(batch_dump(i), r[i].logits);
        std::cerr << "wrote " << batch_dump(i) << ": [" << r[i].logits.size() << ", "
                  << (r[i].logits.empty() ? 0 : r[i].logits[0].size()) << "] float32\n";
      }
      return 0;
    }

    mk::device::GenerateOptions gen;
    gen.prompt = ids;
    gen.tokens = tokens;
    gen.keep_logits = !dump.empty();
    // Every step records its trace (steps run in chunks on the device); the last one is kept.
    if (!trace.empty()) backend->enable_trace(true);
    auto last_report = std::chrono::steady_clock::now();
    const auto start = last_report;
    std::optional<mk::tok::StreamDecoder> stream;
    std::string generated_text;
    if (tokenizer) stream.emplace(*tokenizer, mk::tok::DecodeOptions{.skip_special = true});
    gen.stop = [&](int32_t t) { return stop_ids.count(t) != 0; };
    // Said once the run has started (its checks passed), so that a refused run prints one line.
    bool say_no_prompt = !text_mode && !ids_opt->count();
    gen.on_step = [&](uint32_t done, uint32_t all, int32_t t) {
      if (say_no_prompt) {
        std::cerr << "mkrun: note: no prompt given; decoding started from token id 1 (give one with --prompt-ids IDS or --prompt TEXT)\n";
        say_no_prompt = false;
      }
      if (stream) {  // text mode: stream the generated text, no progress line
        if (done < ids.size() || tokens == 0 || stop_ids.count(t)) return;
        const std::string piece = stream->push(t);
        generated_text += piece;
        if (!as_json) std::cout << piece << std::flush;
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report < std::chrono::seconds(1) && done != all) return;
      if (now - start < std::chrono::seconds(1)) return;  // short runs stay quiet
      last_report = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::cerr << "\r[" << done << "/" << all << " steps, " << mk::show_fixed(done / s) << " tokens/s]" << (done == all ? "\n" : "")
                << std::flush;
    };
    mk::device::SpeculationStats spec_stats;
    const mk::device::GenerateResult r =
        spec ? mk::device::generate_speculative(*backend, schedule, gen, *spec, opt.max_context, &spec_stats)
             : mk::device::generate(*backend, schedule, gen, opt.max_context);
    // What speculation did: its steps after the prompt against the tokens they made.
    const std::string spec_line =
        spec ? "speculation: " + std::to_string(spec_stats.accepted) + " of " + std::to_string(spec_stats.drafted) +
                   " drafted tokens kept (" + mk::show_fixed(100 * spec_stats.acceptance()) + " %) in " +
                   std::to_string(spec_stats.checks) + " check steps; " +
                   std::to_string(r.tokens.size() > 0 ? r.tokens.size() - 1 : 0) + " tokens after the first in " +
                   std::to_string(spec_stats.steps) + " steps\n"
             : std::string();
    if (stream) {
      const std::string tail = stream->finish();
      generated_text += tail;
      if (!as_json) std::cout << tail << "\n" << std::flush;
    }
    const mk::tools::Timings time = mk::tools::timings(r, tokens);
    if (as_json) {
      nlohmann::json j = {{"prompt_ids", ids},
                          {"ids", r.tokens},
                          {"stop", r.stopped ? "eos" : "length"},
                          {"backend", backend->name()},
                          {"timings",
                           {{"prompt_tokens", ids.size()},
                            {"prompt_seconds", time.prompt_seconds},
                            {"prompt_tokens_per_s", time.prompt_per_s},
                            {"generated_tokens", r.tokens.size()},
                            {"decode_seconds", time.decode_seconds},
                            {"decode_tokens_per_s", time.decode_per_s}}}};
      if (spec)
        j["speculation"] = {{"steps", spec_stats.steps},
                            {"check_steps", spec_stats.checks},
                            {"drafted", spec_stats.drafted},
                            {"accepted", spec_stats.accepted}};
      if (stream) j["text"] = generated_text;
      std::cout << j.dump() << "\n";
      if (!dump.empty()) mk::device::write_npy(dump, r.logits);
      return 0;
    }
    if (stream) {
      std::cerr << "prompt: " << mk::tools::count_and_rate(ids.size(), time.prompt_per_s) << "; generated: "
                << (tokens == 0 ? "none (--tokens 0)" : mk::tools::count_and_rate(r.tokens.size(), time.decode_per_s))
                << " on " << backend->name()
                << (tokens == 0 ? "" : r.stopped ? " (stopped at end of sequence)" : " (--tokens reached)") << "\n"
                << spec_line;
      if (!dump.empty()) mk::device::write_npy(dump, r.logits);
      return 0;
    }
    std::cout << "tokens:";
    for (int32_t t : r.tokens) std::cout << " " << t;
    std::cout << "\n"
              << r.steps << (tokens == 0 ? " prompt step" : " step") << (r.steps == 1 ? "" : "s") << " on " << backend->name() << ": "
              << mk::show_fixed(r.seconds * 1e6 / r.steps) << " us/token";
    if (r.seconds > 0) std::cout << " (" << mk::show_fixed(r.steps / r.seconds) << " tokens/s)";
    std::cout << (tokens == 0 ? "; no token generated (--tokens 0)" : "") << "\n";
    const uint32_t decode_steps = r.decode_steps();
    if (tokens > 1 && ids.size() > 1)
      std::cout << "decode after the prompt: " << decode_steps << " steps, "
                << mk::show_fixed(r.decode_seconds * 1e6 / decode_steps) << " us/token at context " << ids.size() << ".."
                << r.steps << "\n";
    std::cout << spec_line;
    if (!trace.empty()) {
      mk::device::TraceOptions topt;
      topt.logical = backend->trace_is_logical();
      topt.context = static_cast<uint32_t>(r.steps - 1);
      topt.title = schedule_path + ": the step at position " + std::to_string(r.steps - 1) + " on " + backend->name() +
                   (topt.logical ? " (logical clock)" : "");
      const std::vector<mk::device::TraceEvent> events = backend->trace();
      std::cout << mk::device::trace_summary(schedule, events, topt);
      trace_json->write(mk::device::chrome_trace(schedule, events, topt));
      trace_json->commit();
      trace_svg->write(mk::device::trace_svg(schedule, events, topt));
      trace_svg->commit();
      std::cout << "wrote " << trace << ".json and " << trace << ".svg\n";
    }
    if (!dump.empty()) {
      mk::device::write_npy(*dump_file, r.logits);
      std::cout << "wrote " << dump << ": [" << r.logits.size() << ", " << (r.logits.empty() ? 0 : r.logits[0].size())
                << "] float32\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mkrun: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
