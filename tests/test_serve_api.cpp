// mkserve's API without HTTP (tools/serve_api.hpp): request bodies checked field by field, the
// context and sampling limits, chat messages rendered in the checkpoint's format, and the stop
// strings' scanner over pieces that split them.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/fixtures/byte_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tools/serve_api.hpp"

namespace {

using mk::tools::ApiError;
using mk::tools::GenRequest;
using mk::tools::ServeLimits;
using mk::tools::StopScanner;
using json = nlohmann::json;

// The test checkpoints' byte-level tokenizer (ids 0-255 the bytes) with Llama 3's chat tokens.
mk::tok::Tokenizer byte_tokenizer() {
  return mk::tok::Tokenizer::from_json(mk::test::byte_tokenizer_json().dump(), mk::test::byte_tokenizer_config().dump(), "test");
}

ServeLimits limits(uint32_t context = 64) {
  ServeLimits l;
  l.max_context = context;
  l.chat = mk::tok::ChatFormat::llama3;
  return l;
}

// The request's refusal: its status and the field it names.
std::pair<int, std::string> refusal(const json& body, bool chat, const ServeLimits& l = limits()) {
  static const mk::tok::Tokenizer t = byte_tokenizer();
  try {
    chat ? mk::tools::parse_chat(body, t, l) : mk::tools::parse_completion(body, t, l);
  } catch (const ApiError& e) {
    CHECK(std::string(e.what()).size() > 5);
    return {e.status, e.param};
  }
  return {0, ""};
}

TEST_CASE("serve api: completion bodies, their defaults and every refusal naming its field") {
  const mk::tok::Tokenizer t = byte_tokenizer();
  GenRequest g = mk::tools::parse_completion(json{{"prompt", "Hi"}}, t, limits());
  CHECK(g.prompt == std::vector<int32_t>{256, 'H', 'i'});
  CHECK(g.max_tokens == 16);
  CHECK(!g.stream);
  g = mk::tools::parse_completion(json{{"prompt", {7, 8}}, {"max_tokens", 62}, {"stream", true}, {"stop", "x"}}, t, limits());
  CHECK(g.prompt == std::vector<int32_t>{7, 8});
  CHECK(g.max_tokens == 62);  // 2 + 62 - 1 = 63 positions of 64
  CHECK(g.stream);
  CHECK(g.stop == std::vector<std::string>{"x"});
  CHECK(mk::tools::parse_completion(json{{"prompt", {"Hi"}}, {"max_completion_tokens", 3}, {"max_tokens", 9}}, t, limits()).max_tokens == 3);
  CHECK(mk::tools::parse_completion(json{{"prompt", std::string(60, 'a')}}, t, limits()).max_tokens == 4);  // up to the context

  CHECK(refusal(json::array({1}), false) == std::pair<int, std::string>{400, ""});
  CHECK(refusal(json{{"max_tokens", 3}}, false) == std::pair<int, std::string>{400, "prompt"});
  CHECK(refusal(json{{"prompt", 5}}, false) == std::pair<int, std::string>{400, "prompt"});
  CHECK(refusal(json{{"prompt", {1, 99999}}}, false) == std::pair<int, std::string>{400, "prompt"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"max_tokens", 0}}, false) == std::pair<int, std::string>{400, "max_tokens"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"max_tokens", -1}}, false) == std::pair<int, std::string>{400, "max_tokens"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"max_tokens", 2.5}}, false) == std::pair<int, std::string>{400, "max_tokens"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"max_tokens", 63}}, false) == std::pair<int, std::string>{400, "max_tokens"});  // 3 + 63 - 1 > 64
  CHECK(refusal(json{{"prompt", std::string(70, 'a')}}, false) == std::pair<int, std::string>{400, "prompt"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"stream", 1}}, false) == std::pair<int, std::string>{400, "stream"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"stop", {"a", 3}}}, false) == std::pair<int, std::string>{400, "stop"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"stop", {"a", "b", "c", "d", "e"}}}, false) == std::pair<int, std::string>{400, "stop"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"stop", ""}}, false) == std::pair<int, std::string>{400, "stop"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"n", 2}}, false) == std::pair<int, std::string>{400, "n"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"temperature", "hot"}}, false) == std::pair<int, std::string>{400, "temperature"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"temperature", 0.5}}, false) == std::pair<int, std::string>{400, "temperature"});  // greedy
  CHECK(refusal(json{{"prompt", "Hi"}, {"temperature", 0}, {"user", "x"}}, false) == std::pair<int, std::string>{0, ""});
  CHECK(refusal(json{{"prompt", "Hi"}, {"stream_options", {{"include_usage", "yes"}}}}, false).first == 400);
  CHECK(!mk::tools::parse_completion(json{{"prompt", "Hi"}, {"temperature", 0}, {"seed", 3}}, t, limits()).sampling);  // greedy
  // A sample op: each request's own parameters, the server's where it names none.
  ServeLimits s = limits();
  s.sampling = true;
  s.sampling_params = {0.7f, 40, 0.9f, 5};
  g = mk::tools::parse_completion(json{{"prompt", "Hi"}}, t, s);
  REQUIRE(g.sampling);
  CHECK(g.sampling->temperature == 0.7f);
  CHECK(g.sampling->top_k == 40);
  CHECK(g.sampling->top_p == 0.9f);
  CHECK(g.sampling->seed == 5);
  g = mk::tools::parse_completion(json{{"prompt", "Hi"}, {"temperature", 1.2}, {"top_k", -1}, {"top_p", 0.5}, {"seed", 99}}, t, s);
  REQUIRE(g.sampling);
  CHECK(g.sampling->temperature == 1.2f);
  CHECK(g.sampling->top_k == 0);
  CHECK(g.sampling->top_p == 0.5f);
  CHECK(g.sampling->seed == 99);
  CHECK(refusal(json{{"prompt", "Hi"}, {"temperature", 2.5}}, false, s) == std::pair<int, std::string>{400, "temperature"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"top_p", 0}}, false, s) == std::pair<int, std::string>{400, "top_p"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"top_k", -2}}, false, s) == std::pair<int, std::string>{400, "top_k"});
  CHECK(refusal(json{{"prompt", "Hi"}, {"seed", "x"}}, false, s) == std::pair<int, std::string>{400, "seed"});
}

TEST_CASE("serve api: chat messages in the checkpoint's format, turns in order, refusals") {
  const mk::tok::Tokenizer t = byte_tokenizer();
  const GenRequest one = mk::tools::parse_chat(json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, t, limits(256));
  CHECK(one.prompt == mk::tok::make_chat(t, "Hi", std::nullopt).ids);
  CHECK(one.max_tokens == 256 - one.prompt.size() + 1);  // chat: up to the context's end
  const GenRequest sys = mk::tools::parse_chat(
      json{{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}}}},
      t, limits(256));
  CHECK(sys.prompt == mk::tok::make_chat(t, "Hi", std::string("Be brief.")).ids);
  // Three turns: the first exchange, the reply's text, then the next turn as mkrun -i renders it.
  const GenRequest three = mk::tools::parse_chat(json{{"messages",
                                                       {{{"role", "user"}, {"content", "Hi"}},
                                                        {{"role", "assistant"}, {"content", "ok"}},
                                                        {{"role", "user"}, {"content", "Again"}}}}},
                                                 t, limits(256));
  std::vector<int32_t> want = mk::tok::make_chat(t, "Hi", std::nullopt).ids;
  want.push_back('o'), want.push_back('k');
  const std::vector<int32_t> next = mk::tok::make_chat_turn(t, "Again").ids;
  want.insert(want.end(), next.begin(), next.end());
  CHECK(three.prompt == want);

  CHECK(refusal(json{{"messages", "Hi"}}, true) == std::pair<int, std::string>{400, "messages"});
  CHECK(refusal(json{{"messages", json::array()}}, true) == std::pair<int, std::string>{400, "messages"});
  CHECK(refusal(json{{"messages", {{{"content", "Hi"}}}}}, true) == std::pair<int, std::string>{400, "messages[0]"});
  CHECK(refusal(json{{"messages", {{{"role", "user"}}}}}, true) == std::pair<int, std::string>{400, "messages[0].content"});
  CHECK(refusal(json{{"messages", {{{"role", "user"}, {"content", 5}}}}}, true) == std::pair<int, std::string>{400, "messages[0].content"});
  CHECK(refusal(json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, true).first == 400);
  CHECK(refusal(json{{"messages", {{{"role", "assistant"}, {"content", "Hi"}}}}}, true) == std::pair<int, std::string>{400, "messages[0].role"});
  CHECK(refusal(json{{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}}, true) ==
        std::pair<int, std::string>{400, "messages[1].role"});
  CHECK(refusal(json{{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}}}}, true) ==
        std::pair<int, std::string>{400, "messages"});
  ServeLimits none = limits();
  none.chat.reset();
  CHECK(refusal(json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, true, none).first == 400);
}

TEST_CASE("serve api: stop strings cut the text before them, across pieces, holding back only what may begin one") {
  StopScanner a({"STOP", "\n\n"});
  std::string out;
  for (const char* piece : {"Hello ", "wor", "ld S", "T", "O", "x"}) out += a.push(piece);
  CHECK(out == "Hello world STOx");  // "STO" held back until "x" showed it is no stop string
  CHECK(!a.stopped());
  out += a.push(" and ST");
  CHECK(out == "Hello world STOx and ");  // "ST" held back
  out += a.push("OP here");
  CHECK(a.stopped());
  CHECK(out == "Hello world STOx and ");
  CHECK(a.push("more").empty());
  CHECK(a.finish().empty());

  StopScanner b({"\n\n"});
  CHECK(b.push("one\n") == "one");
  CHECK(b.finish() == "\n");  // generation ended: the held-back text goes out

  StopScanner c({"é!"});
  std::string got = c.push("ok");
  got += c.push("\xC3");  // half of é
  got += c.push("\xA9");
  CHECK(got == "ok");
  got += c.push("!");
  CHECK(c.stopped());
  CHECK(got == "ok");

  StopScanner none({});
  CHECK(none.push("abc") == "abc");
  CHECK(none.finish().empty());
}

}  // namespace
