// Prompt-lookup speculative decoding: n-gram drafts, checked K + 1 rows a step.
#include "device/speculate.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace mk::device {
namespace {

using Clock = std::chrono::steady_clock;

// After a check step that kept no draft, this many steps go without drafting, doubling with each
// such step in a row up to kMaxBackoff: on text that does not repeat itself, a check step of K + 1
// rows that keeps nothing costs more than a step of one.
constexpr uint32_t kMaxBackoff = 16;

}  // namespace

SpeculateOptions parse_speculate(const std::string& spec) {
  const std::string what = "--speculate takes ngram or ngram:K (K: tokens drafted a step, 1 to 64), not '" + spec + "'";
  SpeculateOptions o;
  if (spec == "ngram") return o;
  if (spec.rfind("ngram:", 0) != 0) throw std::invalid_argument(what);
  const std::string k = spec.substr(6);
  if (k.empty() || k.size() > 2 || !std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw std::invalid_argument(what);
  o.draft = static_cast<uint32_t>(std::stoul(k));
  if (o.draft < 1 || o.draft > 64) throw std::invalid_argument(what);
  return o;
}

std::vector<int32_t> ngram_draft(std::span<const int32_t> context, const SpeculateOptions& opt, uint32_t k) {
  const size_t len = context.size();
  if (k == 0) return {};
  for (size_t n = std::min<size_t>(opt.max_ngram, len > 0 ? len - 1 : 0); n >= std::max<uint32_t>(opt.min_ngram, 1); --n) {
    const auto tail = context.subspan(len - n);
    // The latest occurrence that ends before the context does, so that a token follows it.
    for (size_t at = len - n; at-- > 0;)
      if (std::equal(tail.begin(), tail.end(), context.begin() + at)) {
        // What followed, read on into the draft itself where it reaches the end: a repeating
        // stretch is drafted as going on repeating (a token repeated, k times, not once).
        std::vector<int32_t> d;
        for (size_t j = at + n; d.size() < k; ++j) d.push_back(j < len ? context[j] : d[j - len]);
        return d;
      }
  }
  return {};
}

GenerateResult generate_speculative(Backend& b, const schedule::Schedule& s, const GenerateOptions& opt,
                                    const SpeculateOptions& spec, uint32_t max_context, SpeculationStats* stats) {
  if (s.max_tokens < 2)
    throw std::invalid_argument("speculative decoding checks its drafts in steps of several tokens, but this schedule runs one "
                                "token a step; plan it with mkplan --max-tokens " +
                                std::to_string(spec.draft + 1));
  if (spec.draft == 0) throw std::invalid_argument("speculative decoding needs at least one drafted token a step");
  const uint32_t k_max = std::min(spec.draft, s.max_tokens - 1);
  const uint64_t vocab = s.tensors[s.logits_tensor].elements();
  const auto start = Clock::now();

  // The prompt and the first token, as generate() makes them; progress counts every position.
  GenerateOptions first = opt;
  first.tokens = std::min(opt.tokens, 1u);
  const uint32_t all = static_cast<uint32_t>(opt.prompt.size()) + (opt.tokens ? opt.tokens - 1 : 0);
  if (opt.on_step) first.on_step = [&](uint32_t done, uint32_t, int32_t t) { opt.on_step(done, all, t); };
  check_sequence(opt, 0, 1, vocab, max_context);  // the whole run's positions, before anything runs
  GenerateResult r = generate(b, s, first, max_context);
  SpeculationStats st;
  const auto first_token = Clock::now();

  std::vector<int32_t> context = opt.prompt;
  context.insert(context.end(), r.tokens.begin(), r.tokens.end());
  uint32_t pos = opt.start + static_cast<uint32_t>(opt.prompt.size());  // the last token's, not yet in the cache
  uint32_t skip = 0, backoff = 1;
  while (!r.stopped && r.tokens.size() < opt.tokens) {
    const uint32_t left = opt.tokens - static_cast<uint32_t>(r.tokens.size());
    const uint32_t room = std::min(k_max, left - 1);  // the check step's tokens all kept: `left`
    std::vector<int32_t> draft;
    if (skip)
      --skip;
    else if (room)
      draft = spec.drafter ? spec.drafter(context, room) : ngram_draft(context, spec, room);
    if (draft.size() > room) draft.resize(room);
    for (const int32_t t : draft)
      if (t < 0 || static_cast<uint64_t>(t) >= vocab)
        throw std::invalid_argument("a drafted token (" + std::to_string(t) + ") is outside the vocabulary");
    const uint32_t k = static_cast<uint32_t>(draft.size());
    if (k) b.set_history(0, pos + 1, draft);
    // Every row feeds: row i (position pos + i) writes its token to history[pos + i + 1].
    b.run_steps(StepRun{{schedule::StepSegment{0, pos, k + 1, 0, pos + 1}}, 1, 1, opt.keep_logits});
    const std::vector<int32_t> made = b.read_history(0, pos + 1, pos + k + 2);
    uint32_t agreed = 0;
    while (agreed < k && made[agreed] == draft[agreed]) ++agreed;
    ++st.steps;
    if (k) {
      ++st.checks, st.drafted += k, st.accepted += agreed;
      if (agreed == 0)
        skip = backoff, backoff = std::min(backoff * 2, kMaxBackoff);
      else
        backoff = 1;
    }
    // The tokens kept: the agreed drafts, then the model's own after them.
    uint32_t used = 0;
    std::vector<float> logits;
    if (opt.keep_logits) logits = b.logits_rows(0, agreed + 1);
    for (; used <= agreed && !r.stopped && r.tokens.size() < opt.tokens; ++used) {
      const int32_t t = made[used];
      if (opt.keep_logits) {
        std::vector<float> row(logits.begin() + used * vocab, logits.begin() + (used + 1) * vocab);
        check_finite_logits(row, r.steps, all, opt.start);
        r.logits.push_back(std::move(row));
      }
      r.tokens.push_back(t);
      context.push_back(t);
      ++r.steps;  // the position that produced t
      if (opt.on_step) opt.on_step(r.steps, all, t);
      if (opt.stop && opt.stop(t)) r.stopped = true;
    }
    if (!opt.keep_logits && (st.steps % kDecodeChunk == 0 || r.stopped || r.tokens.size() >= opt.tokens))
      check_finite_logits(b.logits_rows(used - 1, 1), r.steps - 1, all, opt.start);
    // Positions written from rejected drafts: the next step writes them again before reading.
    if (used < k + 1) b.forget_positions(0, pos + used, pos + k + 1);
    pos += used;
  }
  const auto end = Clock::now();
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.decode_seconds = opt.tokens > 1 ? std::chrono::duration<double>(end - first_token).count() : 0.0;
  if (stats) *stats = st;
  return r;
}

}  // namespace mk::device
