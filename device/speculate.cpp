// Prompt-lookup speculative decoding: n-gram drafts, checked K + 1 rows a step.
#include "device/speculate.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <stdexcept>

namespace mk::device {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

double DraftPolicy::step_seconds(uint32_t rows) const {
  if (rows < time_.size() && time_[rows] > 0) return time_[rows];
  if (rows <= 1) return 0;
  for (uint32_t d = 1; d < time_.size(); ++d) {  // the nearest timed check step, the larger first
    if (rows + d < time_.size() && time_[rows + d] > 0) return time_[rows + d];
    if (rows > d + 1 && rows - d < time_.size() && time_[rows - d] > 0) return time_[rows - d];
  }
  return 0;
}

std::pair<uint32_t, uint32_t> DraftPolicy::best(uint32_t room) const {
  const double a = acceptance();
  uint32_t best = 0, best_probe = 1;
  double best_rate = 1 / time_[1], best_probe_rate = 0, expected = 1, power = 1;
  for (uint32_t k = 1; k <= room; ++k) {
    power *= a, expected += power;
    const double rate = expected / step_seconds(k + 1);
    if (rate > best_rate) best = k, best_rate = rate;
    if (rate > best_probe_rate) best_probe = k, best_probe_rate = rate;
  }
  return {best, best_probe};
}

uint32_t DraftPolicy::draft_size(uint32_t room) {
  room = std::min<uint32_t>(room, static_cast<uint32_t>(time_.size()) - 2);
  if (!cost_aware_ || room == 0) return room;
  if (time_[1] <= 0) return 0;  // a plain step first: the yardstick
  if (step_seconds(room + 1) <= 0) return room;  // no check step timed yet
  const auto [k, probe] = best(room);
  if (k) return idle_ = 0, k;
  if (++idle_ < probe_every_) return 0;
  idle_ = 0;
  probing_ = true;
  return probe;
}

void DraftPolicy::observe(uint32_t rows, double seconds, uint32_t drafted, uint32_t kept) {
  if (rows < time_.size()) time_[rows] = time_[rows] > 0 ? 0.8 * time_[rows] + 0.2 * seconds : seconds;
  if (drafted) kept_ = 0.9 * kept_ + kept, missed_ = 0.9 * missed_ + (kept < drafted ? 1 : 0);
  // A probe that made drafting pay again puts the wait back; else it doubles.
  if (probing_) probe_every_ = best(static_cast<uint32_t>(time_.size()) - 2).first ? kProbe : std::min(2 * probe_every_, kMaxProbe);
  probing_ = false;
}

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
  DraftPolicy policy(k_max, spec.cost_aware);
  while (!r.stopped && r.tokens.size() < opt.tokens) {
    const auto step_start = Clock::now();
    const uint32_t left = opt.tokens - static_cast<uint32_t>(r.tokens.size());
    // At most what fits the schedule and keeps the check step's tokens within `left`.
    const uint32_t room = policy.draft_size(std::min(k_max, left - 1));
    std::vector<int32_t> draft;
    if (room) draft = spec.drafter ? spec.drafter(context, room) : ngram_draft(context, spec, room);
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
    if (k) ++st.checks, st.drafted += k, st.accepted += agreed;
    policy.observe(k + 1, std::chrono::duration<double>(Clock::now() - step_start).count(), k, agreed);
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
