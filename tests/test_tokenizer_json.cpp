// The tokenizer's JSON reader (tokenizer/json_reader.hpp) and hash tables
// (tokenizer/token_maps.hpp): what the reader accepts and refuses agrees with nlohmann plus the
// checks of common/checked_json.hpp (on hand-written cases and on thousands of mutated
// documents, whose values must also read the same), its messages name the place, and the tables
// find what was put in them across the inline/out-of-line key boundary and through growth.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checked_json.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/token_maps.hpp"

namespace {

namespace tj = mk::tok::json;
using nlohmann::json;

// The message of the ParseError the reader throws for `text`, or "" when it accepts it.
std::string parse_error(const std::string& text, int depth = 64) {
  try {
    tj::Document d(text, depth);
    return "";
  } catch (const tj::ParseError& e) {
    return e.what();
  }
}

json to_nlohmann(const tj::Value& v) {
  switch (v.type()) {
    case tj::Type::null: return nullptr;
    case tj::Type::boolean: return v.as_bool();
    case tj::Type::string: return std::string(v.as_string());
    case tj::Type::number: {
      if (const auto u = v.as_uint()) return *u;
      const std::string t(v.number_text());
      if (t.find_first_of(".eE") == std::string::npos) {
        try {
          return std::stoll(t);
        } catch (const std::out_of_range&) {
        }
      }
      return v.as_double();
    }
    case tj::Type::array: {
      json a = json::array();
      for (const tj::Value& x : v.elements()) a.push_back(to_nlohmann(x));
      return a;
    }
    case tj::Type::object: {
      json o = json::object();
      for (const tj::Member& m : v.members()) o[std::string(m.key)] = to_nlohmann(m.value);
      return o;
    }
  }
  return nullptr;
}

}  // namespace

TEST_CASE("tokenizer json: values, escapes and numbers read as written") {
  const std::string text = "\xEF\xBB\xBF" R"( {"s": "a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\u0000z", "n": [0, -0, 12, 1.5e3, -2E-2, 18446744073709551615, 18446744073709551616],
      "t": true, "f": false, "z": null, "e": {}, "ea": [], "nest": [[1, [2]], {"k": [3]}], "raw": "日本 é"} )";
  const tj::Document d(text, 64);
  const tj::Value r = d.root();
  REQUIRE(r.is_object());
  CHECK(r.size() == 9);
  CHECK(r.at("s").as_string() == std::string("a\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80") + std::string(1, '\0') + "z");
  const tj::Value n = r.at("n");
  CHECK(n.size() == 7);
  CHECK(n[0].as_uint() == 0u);
  CHECK(!n[1].as_uint());  // -0: a sign
  CHECK(n[2].as_uint() == 12u);
  CHECK(!n[3].as_uint());
  CHECK(n[3].as_double() == 1500.0);
  CHECK(n[4].as_double() == doctest::Approx(-0.02));
  CHECK(n[5].as_uint() == 18446744073709551615ull);
  CHECK(!n[6].as_uint());  // does not fit
  CHECK(n[6].number_text() == "18446744073709551616");
  CHECK(r.at("t").as_bool());
  CHECK(!r.at("f").as_bool());
  CHECK(r.at("z").is_null());
  CHECK(r.at("e").size() == 0);
  CHECK(r.at("ea").size() == 0);
  CHECK(r.at("nest")[1].at("k")[0].as_uint() == 3u);
  CHECK(r.at("raw").as_string() == "日本 é");
  CHECK(r.string_or("missing", "dflt") == "dflt");
  CHECK(r.string_or("z", "dflt") == "dflt");  // null reads as absent
  CHECK(r.bool_or("t", false));
  // The reader's values equal nlohmann's reading of the same text.
  CHECK(to_nlohmann(r) == mk::io::parse_checked_json(text, 64));
}

TEST_CASE("tokenizer json: malformed text is one message with the line and column") {
  CHECK(parse_error("{\"a\": 1,}") == "not valid JSON: line 1, column 9: unexpected '}' where a key (a string) should be");
  CHECK(parse_error("{\n  \"a\": [1 2]\n}") == "not valid JSON: line 2, column 11: unexpected '2' where ',' or ']' should be");
  CHECK(parse_error("") == "not valid JSON: line 1, column 1: unexpected end of text where a value should be");
  CHECK(parse_error("{} x") == "not valid JSON: line 1, column 4: unexpected 'x' after the top-level value");
  CHECK(parse_error(std::string("{}\0x", 4)) == "not valid JSON: line 1, column 3: unexpected byte 0x00 after the top-level value");
  CHECK(parse_error("[01]") == "not valid JSON: line 1, column 3: unexpected '1' where ',' or ']' should be");
  CHECK(parse_error("[1.]").find("no digit after its '.'") != std::string::npos);
  CHECK(parse_error("[1e]").find("no digit in its exponent") != std::string::npos);
  CHECK(parse_error("[-]").find("a number without digits") != std::string::npos);
  CHECK(parse_error("[tru]").find("unexpected 't' where a value should be") != std::string::npos);
  CHECK(parse_error("\"abc").find("without its closing quote") != std::string::npos);
  CHECK(parse_error("\"a\tb\"").find("raw control character (U+0009)") != std::string::npos);
  CHECK(parse_error("\"\xC3\x28\"").find("ill-formed UTF-8") != std::string::npos);
  CHECK(parse_error("\"\xED\xA0\x80\"").find("ill-formed UTF-8") != std::string::npos);  // a surrogate in UTF-8
  CHECK(parse_error("\"\\x\"").find("unknown escape '\\x'") != std::string::npos);
  CHECK(parse_error("\"\\u12\"").find("a \\u escape cut short") != std::string::npos);
  CHECK(parse_error("\"\\u12zz\"").find("four hex digits") != std::string::npos);
  CHECK(parse_error("\"\\ud83d\"").find("high surrogate without the low one") != std::string::npos);
  CHECK(parse_error("\"\\ud83d\\u0041\"").find("high surrogate without the low one") != std::string::npos);
  CHECK(parse_error("\"\\ude00\"").find("low surrogate") != std::string::npos);
  // Nesting: 64 levels are read, 65 refused before any deeper recursion.
  CHECK(parse_error(std::string(64, '[') + std::string(64, ']')) == "");
  CHECK(parse_error(std::string(65, '[') + std::string(65, ']')) == "JSON nested deeper than 64 levels");
  CHECK(parse_error(std::string(1000000, '[')) == "JSON nested deeper than 64 levels");
  // A key twice: in a small object and in a large one (the hashed check).
  CHECK(parse_error(R"({"a": 1, "b": {"a": 2}, "a": 3})") == "JSON key 'a' given twice in one object");
  std::string big = "{";
  for (int i = 0; i < 1000; ++i) big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  CHECK(parse_error(big + "\"k1\": 0}") == "JSON key 'k1' given twice in one object");
  CHECK(parse_error(big + "\"k1000\": 0}") == "");
  CHECK(parse_error(R"({"\u0061": 1, "a": 2})") == "JSON key 'a' given twice in one object");  // the same key, escaped
}

TEST_CASE("tokenizer json: typed access names the value's place") {
  const std::string text = R"({"model": {"merges": ["a b", 5], "vocab": {"x": "1"}}, "list": [[true]]})";
  const tj::Document d(text, 64);
  const tj::Value r = d.root();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const tj::StructureError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message([&] { r.at("model").at("merges")[1].as_string(); }) == "model.merges[1]: expected a string, not 5");
  CHECK(message([&] { r.at("model").at("vocab").at("x").as_bool(); }) == "model.vocab.x: expected true or false, not '1'");
  CHECK(message([&] { r.at("list")[0][0].as_string(); }) == "list[0][0]: expected a string, not true");
  CHECK(message([&] { r.at("nope"); }) == "no 'nope' at the top level");
  CHECK(message([&] { r.at("model").at("nope"); }) == "model: no 'nope'");
  CHECK(message([&] { r.at("list").at("x"); }) == "list: expected an object, not an array");
  CHECK(message([&] { r.at("list")[3]; }) == "list: has no element 3");
  CHECK(message([&] { r.as_string(); }) == "the top level: expected a string, not an object");
}

TEST_CASE("tokenizer json: accepts and refuses what nlohmann with the checks does, on mutated documents") {
  const std::vector<std::string> seeds = {
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u00e9": 3}, "merges": ["a b", ["a", "b"]]},
          "added_tokens": [{"id": 4, "content": "<s>", "special": true}], "normalizer": null, "x": [1.5, -2, 3e2, "日本", "\ud83d\ude00"]})",
      R"([[[[{"k": [true, false, null, {"": ""}]}]]], 0, -0.0e-0, "\"\\\/\b\f\n\r\t"])",
      "{\"a\" : [ 1 , 2 ] ,\n\t\"b\" :{ } }",
  };
  // No zero byte: nlohmann takes one outside a string for the end of the text and ignores what
  // follows (the reader refuses it: the case above).
  const std::string alphabet = "{}[]\":,\\ \t\n0123456789.-+eEtrufalsn\x80\xC3\xA9\xF0uabcdD";
  std::mt19937 rng(4242);
  size_t accepted = 0, refused = 0;
  for (int rep = 0; rep < 6000; ++rep) {
    std::string text = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text.erase(at, 1); break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 3: text.insert(at, text.substr(rng() % text.size(), 1 + rng() % 8)); break;
      }
    }
    CAPTURE(text);
    bool reference_ok = true;
    json reference;
    try {
      reference = mk::io::parse_checked_json(text, 8);
    } catch (const mk::io::JsonError&) {
      reference_ok = false;
    }
    std::optional<tj::Document> d;
    bool ok = true;
    try {
      d.emplace(text, 8);
    } catch (const tj::ParseError&) {
      ok = false;
    }
    if (ok != reference_ok) {
      std::string hex;
      for (unsigned char c : text) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
      FAIL("the reader " << (ok ? "accepts" : "refuses (" + parse_error(text, 8) + ")") << " what nlohmann "
                         << (reference_ok ? "accepts" : "refuses") << ": " << hex);
    }
    if (ok) {
      CHECK(to_nlohmann(d->root()) == reference);
      ++accepted;
    } else {
      ++refused;
    }
  }
  MESSAGE(accepted << " mutated documents read as nlohmann reads them, " << refused << " refused by both");
  CHECK(accepted > 300);
  CHECK(refused > 300);
}

TEST_CASE("tokenizer tables: the vocabulary finds keys of every length, through growth; merges keep the first of a pair") {
  mk::tok::TokenIdMap m;  // no reserve: it grows from empty
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) {
    std::string k(static_cast<size_t>(i % 21), 'x');  // lengths 0..20: inline (<= 8) and not
    for (size_t c = 0; c < k.size(); ++c) k[c] = static_cast<char>('a' + (i * 7 + c * 13) % 26);
    k += std::to_string(i);
    keys.push_back(k);
    CHECK(m.insert(k, i));
  }
  CHECK(m.size() == keys.size());
  CHECK(!m.insert(keys[7], 99));  // present: unchanged
  for (int i = 0; i < 5000; ++i) {
    CHECK(m.find(keys[i]) == i);
    const uint32_t s = m.find_slot(keys[i], mk::tok::TokenIdMap::hash(keys[i]));
    REQUIRE(s != mk::tok::TokenIdMap::kNone);
    CHECK(m.key_at(s) == keys[i]);
    CHECK(m.id_at(s) == i);
  }
  CHECK(m.find("not there") == -1);
  CHECK(m.find(std::string_view("a1\0", 3)) == -1);  // a zero byte is part of the key
  CHECK(m.find("") == -1);
  m.assign(keys[3], 7);
  CHECK(m.find(keys[3]) == 7);
  CHECK(m.insert("", 5000));
  CHECK(m.find("") == 5000);

  mk::tok::MergeMap mm;
  CHECK(!mm.find(1, 2));
  for (int32_t a = 0; a < 3000; ++a) CHECK(mm.insert(a, (a * 31) % 1000, a + 100000));
  CHECK(!mm.insert(5, (5 * 31) % 1000, 7));  // a pair again: the first stays
  CHECK(mm.size() == 3000);
  uint32_t last = 0;
  for (int32_t a = 0; a < 3000; ++a) {
    const auto f = mm.find(a, (a * 31) % 1000);
    REQUIRE(f);
    CHECK(f->id == a + 100000);
    if (a > 0) CHECK(f->rank > last);  // ranks in insertion order
    last = f->rank;
  }
  CHECK(!mm.find(0, 1));
  CHECK(mm.insert(mk::tok::MergeMap::kMaxId, mk::tok::MergeMap::kMaxId, 1));  // the largest ids
  CHECK(mm.find(mk::tok::MergeMap::kMaxId, mk::tok::MergeMap::kMaxId)->id == 1);
}
