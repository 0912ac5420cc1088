// mkserve: an OpenAI-compatible HTTP server over a schedule and a checkpoint, loaded once.
// /v1/completions and /v1/chat/completions (streamed as server-sent events or not), /v1/models,
// /health. Requests share the backend's steps (continuous batching, device/engine.hpp): each
// joins at the next launch in a KV-cache slot of its own and leaves at its end; a schedule
// planned for one token a step serves one request at a time.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/show_number.hpp"
#include "device/cuda_limits.hpp"
#include "device/engine.hpp"
#include "device/runtime.hpp"
#include "schedules/format.hpp"
#include "tools/cli.hpp"
#include "tools/mkrun_config.hpp"
#include "tools/mkrun_text.hpp"
#include "tools/serve_api.hpp"

namespace {

using json = nlohmann::json;
using mk::tools::ApiError;

// One request in flight: what the engine's thread produced, read by the HTTP thread.
struct Live {
  explicit Live(const mk::tok::Tokenizer& t, std::vector<std::string> stop)
      : decoder(t, mk::tok::DecodeOptions{.skip_special = true}), scanner(std::move(stop)) {}
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // text not yet sent (streaming) or all of it (not streaming)
  bool ended = false;
  mk::device::EngineResult result;
  mk::tok::StreamDecoder decoder;     // engine thread only
  mk::tools::StopScanner scanner;     // engine thread only
  uint64_t engine_id = 0;
};

const char* finish_reason(const mk::device::EngineResult& r) { return r.reason == mk::device::EndReason::length ? "length" : "stop"; }

json usage(const mk::device::EngineResult& r) {
  return {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.tokens}, {"total_tokens", r.prompt_tokens + r.tokens}};
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  mk::tools::describe(
      app, {.tool = "mkserve",
            .usage = {"SCHEDULE CHECKPOINT_DIR [--host 127.0.0.1] [--port 8000] [--max-context N] [--api-key K] [OPTIONS]"},
            .description =
                "Serve a schedule planned by mkplan on a Hugging Face style checkpoint over HTTP, with the OpenAI API:\n"
                "POST /v1/completions and /v1/chat/completions (\"stream\": true for server-sent events ending with\n"
                "data: [DONE]), GET /v1/models and /health. The checkpoint loads once. Requests share the steps:\n"
                "each joins at the next launch in a KV-cache slot of its own and leaves at its end token, its\n"
                "max_tokens or a stop string; as many run at once as the schedule's max_tokens (mkplan --max-tokens)\n"
                "and --slots allow, the rest wait in a queue of --queue (beyond it: HTTP 503). A client that\n"
                "disconnects mid-stream frees its slot at the next launch boundary. Chat prompts take the checkpoint's\n"
                "chat format (Llama 3 or ChatML). Sampling follows the schedule: greedy with an argmax op; with a\n"
                "sample op (mkplan --sample) each request's temperature, top_k, top_p and seed, those it leaves out\n"
                "from --temperature, --top-k, --top-p and --seed. SIGINT or SIGTERM ends what runs and exits 0. One\n"
                "log line a request on stderr.",
            .examples = {{"s.bin Llama-3.2-1B-Instruct/ --port 8000", "serve on 127.0.0.1:8000"},
                         {"s8.bin Llama-3.2-1B-Instruct/ --max-context 8192 --api-key secret",
                          "up to 8 requests at once (s8.bin: mkplan --max-tokens 8), 8192 positions each, a key required"}},
            .version_note = "reads schedule formats " + std::to_string(mk::schedule::kOldestReadVersion) + " to " +
                            std::to_string(mk::schedule::kFormatVersion)});
  std::string schedule_path, checkpoint, host = "127.0.0.1", api_key, backend_name = "auto", model_name, tokenizer_dir;
  int port = 8000;
  uint32_t max_context = 4096, slots = 0, queue = 64;
  size_t max_body = 1 << 20;
  double watchdog = 1.0;
  mk::schedule::SamplingParams sampling;
  app.add_option("schedule", schedule_path, "schedule file written by mkplan")->required();
  app.add_option("checkpoint", checkpoint, "checkpoint folder: safetensors, config.json, tokenizer.json")->required();
  app.add_option("--host", host, "address to listen on")->capture_default_str();
  app.add_option("--port", port, "port to listen on (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--max-context", max_context, "positions each request may use: prompt + generated tokens")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, mk::limits::kMaxContext));
  app.add_option("--slots", slots, "requests decoded at once (0: the schedule's max_tokens)")->capture_default_str();
  app.add_option("--queue", queue, "requests that may wait for a slot; more get HTTP 503")->capture_default_str();
  app.add_option("--api-key", api_key, "require 'Authorization: Bearer KEY' on every request (else HTTP 401)");
  app.add_option("--model-name", model_name, "the model's id in /v1/models and responses (default: the checkpoint folder's name)");
  app.add_option("--max-body", max_body, "largest request body in bytes (else HTTP 413)")->capture_default_str();
  app.add_option("--backend", backend_name, "auto (GPU if usable, else CPU emulator), cuda, emulator")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "emulator"}));
  app.add_option("--tokenizer", tokenizer_dir, "folder of tokenizer.json (default: the checkpoint folder)");
  app.add_option("--temperature", sampling.temperature, "with a sample op: the temperature of a request that names none")
      ->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "with a sample op: a request's top_k where it names none (0: all)")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "with a sample op: a request's top_p where it names none")->capture_default_str();
  app.add_option("--seed", sampling.seed, "with a sample op: a request's seed where it names none")->capture_default_str();
  app.add_option("--watchdog", watchdog, "CUDA: seconds a wait may take before the launch stops with a report")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  if (const auto code = mk::tools::parse(app, argc, argv, "mkserve")) return *code;

  // SIGINT and SIGTERM go to one thread (sigwait), blocked in every other one; SIGPIPE (a client
  // gone mid-write) is a failed write, not the end of the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    mk::schedule::Schedule schedule = mk::schedule::read_file(schedule_path);
    mk::tools::ServeLimits limits;
    limits.max_context = max_context;
    limits.sampling = mk::schedule::set_sampling(schedule, sampling) > 0;
    limits.sampling_params = sampling;
    if (!limits.sampling && sampling.temperature > 0)
      throw std::invalid_argument("--temperature: this schedule decodes greedily (argmax); plan it with a sample op (mkplan --sample)");
    const std::filesystem::path folder = mk::tools::checkpoint_folder(checkpoint);
    const mk::device::Checkpoint ckpt = mk::device::Checkpoint::open(checkpoint);
    mk::device::check_weights(schedule, ckpt);
    mk::tools::check_planned_config(schedule, folder, max_context);
    const mk::tok::Tokenizer tokenizer = mk::tok::Tokenizer::load(tokenizer_dir.empty() ? folder : std::filesystem::path(tokenizer_dir));
    std::set<int32_t> stop_ids = mk::tools::eos_ids(folder);
    if (stop_ids.empty() && tokenizer.eos_id()) stop_ids.insert(*tokenizer.eos_id());
    std::set<int32_t> chat_stop_ids = stop_ids;
    try {
      limits.chat = mk::tok::detect_chat_format(tokenizer);
      for (const int32_t id : mk::tok::chat_end_ids(tokenizer)) chat_stop_ids.insert(id);
    } catch (const std::exception&) {
      limits.chat.reset();  // /v1/chat/completions says so
    }
    if (model_name.empty()) model_name = std::filesystem::absolute(folder).lexically_normal().filename().string();
    if (model_name.empty()) model_name = std::filesystem::absolute(folder).lexically_normal().parent_path().filename().string();

    mk::device::RuntimeOptions opt;
    opt.max_context = max_context;
    opt.slots = std::min(slots ? slots : schedule.max_tokens, schedule.max_tokens);
    opt.watchdog_seconds = watchdog;
    if (backend_name == "cuda" && !mk::device::cuda_available())
      throw std::runtime_error("--backend cuda: no usable GPU (or this build has no CUDA interpreter)");
    std::unique_ptr<mk::device::Backend> backend;
#if MK_HAVE_CUDA
    if (backend_name == "cuda" || (backend_name == "auto" && mk::device::cuda_available())) {
      opt.slots = std::min(opt.slots, mk::device::kMaxLaunchSegments);  // the sequences one launch holds
      backend = mk::device::make_cuda_backend(schedule, ckpt, opt);
    }
#endif
    if (!backend) backend = mk::device::make_emulator_backend(schedule, ckpt, opt);
    mk::device::Engine engine(*backend, schedule, max_context, queue);

    httplib::Server server;
    const size_t workers = engine.slots() + queue + 8;
    server.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    server.set_payload_max_length(max_body);
    // SO_REUSEADDR only: a restart binds at once, but a second server on a port in use fails
    // (cpp-httplib's default, SO_REUSEPORT, let two servers share the port without a word).
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    std::mutex log_mu;
    std::atomic<uint64_t> next_id{1};
    const auto created = [] { return static_cast<int64_t>(std::time(nullptr)); };

    server.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
      if (api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") != "Bearer " + api_key) {
        send_json(res, 401, mk::tools::error_body("missing or wrong API key (Authorization: Bearer ...)", "authentication_error"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404) send_json(res, 404, mk::tools::error_body("no such endpoint: " + req.method + " " + req.path, "invalid_request_error"));
      else if (res.status == 413) send_json(res, 413, mk::tools::error_body("the request body is larger than --max-body", "invalid_request_error"));
      else send_json(res, res.status, mk::tools::error_body("HTTP status " + std::to_string(res.status), "invalid_request_error"));
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_json(res, 500, mk::tools::error_body(what, "server_error"));
    });

    server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
      const mk::device::Engine::Stats st = engine.stats();
      send_json(res, 200, {{"status", "ok"}, {"slots", st.slots}, {"running", st.running}, {"waiting", st.waiting}, {"served", st.served}});
    });
    server.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", model_name}, {"object", "model"}, {"created", created()}, {"owned_by", "mkserve"},
                                        {"max_model_len", max_context}}})}});
    });

    // Both generation endpoints: parse, submit, then answer whole or as a stream.
    auto generate = [&](const httplib::Request& req, httplib::Response& res, bool chat) {
      const uint64_t number = next_id++;
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(number);
      mk::tools::GenRequest g;
      try {
        json body;
        try {
          body = json::parse(req.body);
        } catch (const json::parse_error& e) {
          throw ApiError(400, std::string("the body is not JSON: ") + e.what());
        }
        g = chat ? mk::tools::parse_chat(body, tokenizer, limits) : mk::tools::parse_completion(body, tokenizer, limits);
      } catch (const ApiError& e) {
        send_json(res, e.status, mk::tools::error_body(e));
        return;
      } catch (const std::exception& e) {  // the tokenizer's
        send_json(res, 400, mk::tools::error_body(e.what(), "invalid_request_error"));
        return;
      }
      auto live = std::make_shared<Live>(tokenizer, g.stop);
      const std::set<int32_t>& stops = chat ? chat_stop_ids : stop_ids;
      mk::device::EngineRequest r;
      r.prompt = g.prompt;
      r.max_tokens = g.max_tokens;
      r.sampling = g.sampling;
      r.is_stop = [&stops](int32_t t) { return stops.count(t) != 0; };
      r.on_token = [live](int32_t t) {
        const std::string text = live->scanner.push(live->decoder.push(t));
        std::lock_guard<std::mutex> lock(live->mu);
        live->pending += text;
        live->cv.notify_all();
        return !live->scanner.stopped();
      };
      r.on_end = [live, id, &log_mu](const mk::device::EngineResult& e) {
        std::string tail = live->scanner.push(live->decoder.finish());
        tail += live->scanner.finish();
        {
          std::lock_guard<std::mutex> lock(live->mu);
          if (e.reason == mk::device::EndReason::length || e.reason == mk::device::EndReason::stop) live->pending += tail;
          live->result = e;
          live->ended = true;
          live->cv.notify_all();
        }
        const double decode = e.seconds - e.first_token_seconds;
        std::lock_guard<std::mutex> lock(log_mu);
        std::cerr << "mkserve: " << id << ": prompt " << e.prompt_tokens << " tokens, completion " << e.tokens << " tokens ("
                  << mk::device::end_reason_name(e.reason) << "), first token after " << mk::show_fixed(e.first_token_seconds * 1e3)
                  << " ms, " << (e.tokens > 1 && decode > 0 ? mk::show_fixed((e.tokens - 1) / decode) : std::string("-"))
                  << " tokens/s" << (e.error.empty() ? "" : "; " + e.error) << "\n";
      };
      try {
        live->engine_id = engine.submit(std::move(r));
      } catch (const mk::device::EngineBusy& e) {
        send_json(res, 503, mk::tools::error_body(std::string("the server is busy: ") + e.what() + "; retry later", "server_busy"));
        return;
      } catch (const std::invalid_argument& e) {
        send_json(res, 400, mk::tools::error_body(e.what(), "invalid_request_error"));
        return;
      } catch (const std::exception& e) {
        send_json(res, 503, mk::tools::error_body(e.what(), "server_shutting_down"));
        return;
      }
      const std::string object = chat ? "chat.completion" : "text_completion";
      auto failed = [](const mk::device::EngineResult& e) {
        return e.reason == mk::device::EndReason::error || e.reason == mk::device::EndReason::cancelled;
      };
      if (!g.stream) {
        std::unique_lock<std::mutex> lock(live->mu);
        live->cv.wait(lock, [&] { return live->ended; });
        const mk::device::EngineResult& e = live->result;
        if (failed(e)) {
          const bool error = e.reason == mk::device::EndReason::error;
          send_json(res, error ? 500 : 503,
                    mk::tools::error_body(error ? e.error : "the server is shutting down", error ? "server_error" : "server_shutting_down"));
          return;
        }
        json choice = {{"index", 0}, {"finish_reason", finish_reason(e)}, {"logprobs", nullptr}};
        if (chat) choice["message"] = {{"role", "assistant"}, {"content", live->pending}};
        else choice["text"] = live->pending;
        send_json(res, 200,
                  {{"id", id}, {"object", object}, {"created", created()}, {"model", model_name}, {"choices", json::array({choice})},
                   {"usage", usage(e)}});
        return;
      }
      // Server-sent events: a chunk a piece of text as it comes, the finish reason, the usage if
      // asked, then [DONE]. A failed write (the client gone) cancels the request.
      const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
      auto chunk = [=, &model_name](const json& delta_or_text, const json& finish) {
        json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
        if (chat) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        return "data: " + json{{"id", id}, {"object", chunk_object}, {"created", created()}, {"model", model_name},
                               {"choices", json::array({choice})}}.dump() + "\n\n";
      };
      auto started = std::make_shared<bool>(false);
      const bool include_usage = g.include_usage;
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [=](size_t, httplib::DataSink& sink) {
            std::string out;
            bool ended = false;
            mk::device::EngineResult e;
            {
              std::unique_lock<std::mutex> lock(live->mu);
              live->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return live->ended || !live->pending.empty(); });
              if (!*started && chat) out += chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr);
              *started = true;
              if (!live->pending.empty()) out += chunk(chat ? json{{"content", live->pending}} : json(live->pending), nullptr);
              live->pending.clear();
              ended = live->ended;
              e = live->result;
            }
            if (ended) {
              if (failed(e)) {
                out += "data: " +
                       mk::tools::error_body(e.reason == mk::device::EndReason::error ? e.error : "the server is shutting down",
                                             "server_error")
                           .dump() +
                       "\n\n";
              } else {
                out += chunk(chat ? json::object() : json(""), finish_reason(e));
                if (include_usage)
                  out += "data: " + json{{"id", id}, {"object", chunk_object}, {"created", created()}, {"model", model_name},
                                         {"choices", json::array()}, {"usage", usage(e)}}.dump() + "\n\n";
              }
              out += "data: [DONE]\n\n";
            }
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (!out.empty() || sink.is_writable()) {
              if (ended) sink.done();
              return true;
            }
            return false;
          },
          [live, &engine](bool success) {
            if (!success) engine.cancel(live->engine_id);  // the client went away: free its slot
          });
    };
    server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });

    const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
    if (bound < 0) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
    // The engine's thread from here on; whatever ends main ends it first.
    std::thread engine_thread([&] { engine.run(); });
    struct Stop {
      mk::device::Engine& engine;
      std::thread& thread;
      ~Stop() {
        engine.shutdown();
        if (thread.joinable()) thread.join();
      }
    } stop_engine{engine, engine_thread};
    std::atomic<bool> closing{false};  // listen returned by itself: the signal thread leaves quietly
    std::thread signals([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (closing) return;
      std::cerr << "mkserve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": ending the requests in flight\n";
      engine.shutdown();  // every request ends (cancelled); their handlers answer
      server.stop();
    });
    if (schedule.max_tokens == 1)
      std::cerr << "mkserve: note: the schedule runs one token a step, so requests are served one at a time "
                   "(plan with mkplan --max-tokens N to decode N at once and prefill prompts N positions a step)\n";
    if (!limits.sampling)
      std::cerr << "mkserve: note: the schedule decodes greedily (argmax): a request's temperature above 0 is refused "
                   "(plan with mkplan --sample to sample)\n";
    std::cerr << "mkserve: " << model_name << " on " << backend->name() << ", " << engine.slots() << " slot"
              << (engine.slots() == 1 ? "" : "s") << " of " << max_context << " positions, listening on http://" << host << ":"
              << bound << std::endl;
    const bool ok = server.listen_after_bind();
    closing = true;
    engine.shutdown();
    engine_thread.join();
    if (signals.joinable()) {
      pthread_kill(signals.native_handle(), SIGTERM);  // listen ended by itself: wake the signal thread
      signals.join();
    }
    if (!ok) throw std::runtime_error("the server stopped listening on " + host + ":" + std::to_string(bound));
  } catch (const std::exception& e) {
    std::cerr << "mkserve: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
