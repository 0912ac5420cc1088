// Speculative decoding without a draft model (prompt lookup): the tokens that followed the last
// earlier occurrence of the sequence's final n-gram are drafted, and one step of K + 1 rows
// checks K drafts at once. The model's own tokens decide: a step keeps the longest prefix of the
// drafts its greedy (or seeded sampled) tokens agree with, plus the token it makes after that
// prefix, so that the output is what decoding one token a step gives.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device/runtime.hpp"

namespace mk::device {

struct SpeculateOptions {
  uint32_t draft = 4;      // tokens drafted a step, at most (K): a check step runs K + 1 rows
  uint32_t max_ngram = 3;  // the longest n-gram looked up; shorter ones down to min_ngram after it
  uint32_t min_ngram = 2;  // a 1-gram drafts on most text and is mostly wrong
  // Drafts up to k tokens after the context (prompt and tokens so far); empty: ngram_draft.
  std::function<std::vector<int32_t>(std::span<const int32_t> context, uint32_t k)> drafter;
  // Draft as many tokens a step as DraftPolicy expects to make the most tokens a second (none
  // where a plain step does better); else always as many as fit.
  bool cost_aware = true;
};

// How many tokens to draft a step, from what the steps so far cost (wall time, a table by rows)
// and kept: the k that makes the most tokens a second, a check step of k + 1 rows making
// 1 + a + ... + a^k tokens where a is the chance that a draft is kept once those before it were;
// 0 where a one-row step makes more. The first step is a plain one (its time is the yardstick),
// a step size not yet timed is taken to cost what the nearest timed one does (the larger one
// first), and before any check step is timed it drafts all that fits. After kProbe steps in a
// row without drafting it drafts anyway (a probe), its best k of 1 or more, to see whether the text has
// become easier to guess; a probe that keeps nothing doubles that wait, up to kMaxProbe steps (one
// probe step in 256 costs plain decoding ~1 %), one after which drafting pays puts it back.
// Not cost-aware: always all that fits.
class DraftPolicy {
 public:
  static constexpr uint32_t kProbe = 16, kMaxProbe = 256;
  DraftPolicy(uint32_t max_draft, bool cost_aware) : cost_aware_(cost_aware), time_(max_draft + 2, 0.0) {}
  uint32_t draft_size(uint32_t room);
  // A step of `rows` rows took `seconds`; it checked `drafted` drafts and kept `kept` of them.
  void observe(uint32_t rows, double seconds, uint32_t drafted, uint32_t kept);
  double acceptance() const { return (kept_ + 1) / (kept_ + missed_ + 2); }
  double step_seconds(uint32_t rows) const;  // 0: no step timed yet
 private:
  std::pair<uint32_t, uint32_t> best(uint32_t room) const;  // the best k (0: none) and the best k >= 1
  bool cost_aware_;
  std::vector<double> time_;  // by rows: a moving average of the wall time, 0 until timed
  double kept_ = 0, missed_ = 0;  // drafts kept and checks that rejected one, fading (x0.9 a check)
  uint32_t idle_ = 0;             // steps in a row the policy did not draft
  uint32_t probe_every_ = kProbe;
  bool probing_ = false;          // the step drafted is a probe
};

// "ngram" or "ngram:K" (mkrun --speculate); throws naming what was expected.
SpeculateOptions parse_speculate(const std::string& spec);

// `k` tokens that followed the latest earlier occurrence of the context's last n tokens, for n
// from max_ngram down to min_ngram (the first n that occurs wins), read on into the draft where
// the context ends (a repeating stretch goes on repeating); empty where none occurs.
std::vector<int32_t> ngram_draft(std::span<const int32_t> context, const SpeculateOptions& opt, uint32_t k);

// What speculation did over a generate_speculative call (after the prompt).
struct SpeculationStats {
  uint32_t steps = 0;     // decode steps run: check steps and steps with no draft
  uint32_t checks = 0;    // steps that checked drafts
  uint32_t drafted = 0;   // tokens drafted in all
  uint32_t accepted = 0;  // drafted tokens the model agreed with
  double acceptance() const { return drafted ? double(accepted) / drafted : 0.0; }
};

// generate() for one sequence (slot 0), decoding with drafts checked by steps of up to
// min(opt.draft, max_tokens - 1) + 1 rows. The tokens, steps and logits are those generate()
// gives for the same options (the same bits on the emulator, where a row of a step of several
// computes as a step of one). Positions a check step wrote for drafts it rejected are written again
// before any step reads them (Backend::forget_positions marks them on the backends that can).
// Refuses a schedule planned for one token a step.
GenerateResult generate_speculative(Backend&, const schedule::Schedule&, const GenerateOptions&, const SpeculateOptions&,
                                    uint32_t max_context, SpeculationStats* stats = nullptr);

}  // namespace mk::device
