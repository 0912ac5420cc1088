// mkrun's check of a checkpoint folder's config.json against the values its schedule was
// planned with: RMSNorm eps, RoPE theta and scaling, vocabulary size, tied embeddings, and (for
// Mistral) the sliding window against the context. A schedule carries these in its payloads
// and tensors; a mismatch would give wrong logits without a word, so it is refused, naming both.
#pragma once
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "dsl/hf_config.hpp"
#include "schedules/ops/attention.hpp"
#include "schedules/ops/matvec.hpp"
#include "schedules/schedule.hpp"

namespace mk::tools {

struct PlannedConfig {
  std::optional<float> eps;  // of the first matvec with a norm
  std::optional<schedule::AttentionPayload> attention;
  uint64_t vocab = 0;
  bool tied = true;  // no weight reads lm_head.weight
};

inline PlannedConfig planned_config(const schedule::Schedule& s) {
  PlannedConfig p;
  for (const schedule::Instruction& inst : s.instructions) {
    if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::matvec) && !p.eps) {
      const auto& m = schedule::payload_as<schedule::MatvecPayload>(inst);
      if (m.norm != schedule::kNone) p.eps = m.eps;
    } else if (inst.opcode == static_cast<uint16_t>(schedule::Opcode::attention) && !p.attention) {
      p.attention = schedule::payload_as<schedule::AttentionPayload>(inst);
    }
  }
  p.vocab = s.tensors[s.logits_tensor].elements();
  for (const schedule::Tensor& t : s.tensors)
    if (t.role == schedule::Role::weight && t.key == "lm_head.weight") p.tied = false;
  return p;
}

// Throws std::runtime_error on the first mismatch; a folder without config.json, or fields it
// does not give (mkweights writes none), pass.
inline void check_planned_config(const schedule::Schedule& s, const std::filesystem::path& folder, uint32_t max_context) {
  const std::filesystem::path file = folder / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return;
  const dsl::HfPlannedValues v = dsl::read_hf_planned_values(file);
  const PlannedConfig p = planned_config(s);
  auto refuse = [&](const std::string& field, const std::string& theirs, const std::string& ours) {
    throw std::runtime_error(file.string() + ": " + field + " is " + theirs + " but the schedule was planned with " + ours +
                             "; plan it from this folder (mkplan " + folder.string() + " -o sched.bin) or use the checkpoint it was planned for");
  };
  // Payloads hold float: compare at that precision.
  auto differ = [](double config, float planned) { return static_cast<float>(config) != planned; };
  if (v.eps && p.eps && differ(*v.eps, *p.eps)) refuse("rms_norm_eps", dsl::show_number(*v.eps), "eps " + dsl::show_number(*p.eps));
  if (v.vocab && static_cast<uint64_t>(*v.vocab) != p.vocab)
    refuse("vocab_size", std::to_string(*v.vocab), "a vocabulary of " + std::to_string(p.vocab));
  if (v.tie_embeddings && *v.tie_embeddings != p.tied)
    refuse("tie_word_embeddings", *v.tie_embeddings ? "true" : "false",
           p.tied ? "tied embeddings (the embedding table as lm_head)" : "a separate lm_head.weight");
  if (p.attention) {
    const schedule::AttentionPayload& a = *p.attention;
    const bool llama3 = a.rope_scaling == static_cast<uint32_t>(schedule::RopeScaling::llama3);
    if (v.rope_theta && differ(*v.rope_theta, a.rope_theta))
      refuse("rope theta", dsl::show_number(*v.rope_theta), "rope theta " + dsl::show_number(a.rope_theta));
    if (v.rope_scaling && (*v.rope_scaling == "llama3") != llama3)
      refuse("the rope type", "'" + *v.rope_scaling + "'", std::string("rope scaling ") + (llama3 ? "llama3" : "none"));
    if (llama3) {
      if (v.rope_factor && differ(*v.rope_factor, a.rope_factor))
        refuse("rope factor", dsl::show_number(*v.rope_factor), "factor " + dsl::show_number(a.rope_factor));
      if (v.rope_low_freq_factor && differ(*v.rope_low_freq_factor, a.rope_low_freq_factor))
        refuse("rope low_freq_factor", dsl::show_number(*v.rope_low_freq_factor), "low_freq_factor " + dsl::show_number(a.rope_low_freq_factor));
      if (v.rope_high_freq_factor && differ(*v.rope_high_freq_factor, a.rope_high_freq_factor))
        refuse("rope high_freq_factor", dsl::show_number(*v.rope_high_freq_factor), "high_freq_factor " + dsl::show_number(a.rope_high_freq_factor));
      if (v.rope_original_max_position && differ(*v.rope_original_max_position, a.rope_original_max_position))
        refuse("rope original_max_position_embeddings", dsl::show_number(*v.rope_original_max_position),
               "original_max_position " + dsl::show_number(a.rope_original_max_position));
    }
  }
  if (v.sliding_window && max_context > *v.sliding_window)
    throw std::runtime_error(file.string() + ": sliding_window is " + std::to_string(*v.sliding_window) + " and this run needs a context of " +
                             std::to_string(max_context) + "; sliding-window attention is not implemented, so a context past the window is refused (use fewer prompt tokens or --tokens)");
}

}  // namespace mk::tools
