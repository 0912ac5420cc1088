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
#include <vector>

#include "device/runtime.hpp"

namespace mk::device {

struct SpeculateOptions {
  uint32_t draft = 4;      // tokens drafted a step, at most (K): a check step runs K + 1 rows
  uint32_t max_ngram = 3;  // the longest n-gram looked up; shorter ones down to min_ngram after it
  uint32_t min_ngram = 2;  // a 1-gram drafts on most text and is mostly wrong
  // Drafts up to k tokens after the context (prompt and tokens so far); empty: ngram_draft.
  std::function<std::vector<int32_t>(std::span<const int32_t> context, uint32_t k)> drafter;
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
