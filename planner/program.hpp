// The checked model: every tensor resolved to an id with role, dtype and shape, every op
// resolved against its definition and put in dataflow order. Built by analyze(); all model
// errors (unknown field, undefined tensor, shape mismatch, bad split, cycle) are dsl::Error
// located at the offending YAML node.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dsl/model.hpp"
#include "schedules/schedule.hpp"
#include "schedules/target.hpp"

namespace mk::planner {

struct TensorInfo {
  std::string name;
  std::string key;
  schedule::Role role = schedule::Role::activation;
  schedule::DType dtype = schedule::DType::f32;
  std::vector<uint32_t> shape;
  int layer = -1;
  dsl::Location loc;
  std::string scale_layout;  // f8e4m3 weights: tensor, row or block128 (their scales are the next tensor)
  uint64_t elements() const;
};

struct OpInfo {
  const dsl::OpDecl* decl = nullptr;
  schedule::Opcode opcode = schedule::Opcode::noop;
  std::string name;
  int layer = -1;
  std::vector<uint32_t> inputs;  // activation tensors read (dataflow edges)
  uint32_t out = schedule::kNone;
  uint32_t split = 1, chunks = 1;
  uint32_t units = 1;  // indivisible work items; split is at most this (and at most limits::kMaxUnits)
  // An op combining its tasks by ticket (OpDef::workspace), split in several: its workspace
  // tensor and its ticket counter, numbered after every op's chunk counters.
  uint32_t workspace = schedule::kNone, ticket = schedule::kNone;
};

struct Program {
  const dsl::ModelGraph* model = nullptr;
  std::vector<TensorInfo> tensors;
  std::map<std::string, uint32_t, std::less<>> tensor_ids;
  std::vector<OpInfo> ops;  // a topological order of the dataflow
  uint32_t logits = schedule::kNone, token = schedule::kNone;
  uint32_t sm_count = schedule::kDefaultSmCount;  // what split, chunks and kv_splits are chosen for when the model leaves them out

  uint32_t find(std::string_view name) const;  // kNone when absent
};

// `sm_count` chooses split, chunks and kv_splits where the model leaves them out.
Program analyze(const dsl::ModelGraph&, uint32_t sm_count = schedule::kDefaultSmCount);

// kv_splits when the attention op leaves it out: enough (kv head, split) units to give every
// SM one, at most 64.
uint32_t auto_kv_splits(uint32_t sm_count, uint32_t kv_heads);

// The schedule's KvSplitPolicy (schedules/format.hpp) from the config's kv_split_positions and
// short_positions, each a whole number of positions (0 to limits::kMaxContext), refused at its
// line otherwise. The defaults, measured on the H200 (docs/notes.md entries 49, 51 and 69):
// - past the short steps, splits of 64 positions (one or two ring tiles) against 32:
//   Llama-3.1-8B -51 and -53 us at 512 positions, Llama-3.2-1B -13 and -6 at 512, +14 at 256,
//   Qwen3-4B -9 at 1024 (96 or 128 positions lost on Llama-3.2-1B); how many of them a step
//   uses past half the splits is active_kv_splits' rule (schedules/ops/attention.hpp, entry 80);
// - short steps (one split per kv head, doing attn_reduce's work) while one kv head's cache, k
//   and v, is at most kShortStepBytes: 256 positions at head_dim 128, 512 at 64. Against 128
//   positions: -28 to -70 us at 192 to 320 positions on Llama-3.2-1B, Llama-3.1-8B and Qwen3-4B;
//   a split past what the weight ring holds (192 KB at 384 positions, head_dim 128) lost +25.
inline constexpr uint32_t kDefaultKvSplitPositions = 64, kShortStepBytes = 128 * 1024;
// `head_dim`: the attention's (the largest, if several; 0 if none), for the short steps' default.
schedule::KvSplitPolicy kv_split_policy(const dsl::ModelGraph&, uint32_t head_dim);
// The tokens a step may run (the schedule's max_tokens: prompt chunks, sequences decoded
// together) from the config's max_tokens, 1 when absent; refused at its line outside 1 to
// limits::kMaxStepTokens. Every op takes any number of rows up to it; the plan is the same.
uint32_t max_tokens(const dsl::ModelGraph&);
// The largest head_dim of the program's attention ops (their k cache's rows), 0 if none.
uint32_t attention_head_dim(const Program&);

}  // namespace mk::planner
