// The binary schedule format: the contract between the planner and the device.
// Plain structs with fixed layout, usable from host and device code; no pointers, tensors are
// referenced by id and the runtime binds ids to addresses.
//
// File layout (little-endian), every section starting on a 16-byte boundary:
//   FileHeader | TensorRecord[tensor_count] | OpRecord[op_count] | u32 sm_offsets[sm_count+1]
//   | Instruction[instruction_count] | Wait[wait_count] | u32 signals[signal_count] | strings
// The checksum is FNV-1a 64 over the whole file, its own field taken as zero.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define MK_HD __host__ __device__
#else
#define MK_HD
#endif

namespace mk::schedule {

inline constexpr char kMagic[8] = {'M', 'K', 'S', 'C', 'H', 'E', 'D', '\0'};
// 2: matvec biases; 3: short steps; 4: argmax split, tickets; 5: short-step waits; 6: max_tokens;
// 7: float8 weights (DType::f8e4m3, MatvecPayload::weight_format)
inline constexpr uint32_t kFormatVersion = 7;
// The oldest version read: a version 4 file reads as version 5 with every instruction's short
// waits equal to its waits (version 4's reserved word there, zero, becomes short_wait_count);
// a version 4 or 5 file plans one token a step (max_tokens 1: its reserved word, zero, read as 1).
inline constexpr uint32_t kOldestReadVersion = 4;
inline constexpr uint32_t kNone = 0xffffffffu;  // "no tensor" in a payload field
inline constexpr uint32_t kMaxRank = 4;
inline constexpr uint32_t kPayloadBytes = 96;

// f8e4m3: float8 weights (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, NaN
// only S.1111.111: device/fp8.hpp), each with f32 scales in the tensor record right after its own
// (a weight of role weight, dtype f32; its shape tells how it covers the weight: [1] the whole
// tensor, [rows] a row each, [ceil(rows / 128), ceil(cols / 128)] a 128 x 128 block each). The
// weight's value is float(e4m3) * scale.
enum class DType : uint8_t { bf16 = 0, f32 = 1, i32 = 2, f8e4m3 = 3 };
// A tensor record stores the shape of ONE token for activations and io tensors: they hold
// max_tokens rows of it (the step's tokens, row-major; row r at r * elements()). kv_cache
// tensors store the shape of ONE position of ONE sequence: the context length and the number
// of sequences (slots) are chosen at run time, laid out [slot][shape[0]][position][shape[1]].
enum class Role : uint8_t { weight = 0, activation = 1, kv_cache = 2, io = 3 };

enum class Opcode : uint16_t {
  noop = 0,
#define MK_OP(name, code, payload) name = code,
#include "schedules/op_table.def"
#undef MK_OP
};

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t file_bytes;
  uint64_t checksum;
  uint32_t sm_count;
  uint32_t tensor_count;
  uint32_t op_count;
  uint32_t task_count;
  uint32_t counter_count;
  uint32_t instruction_count;
  uint32_t wait_count;
  uint32_t signal_count;
  uint32_t string_bytes;
  uint32_t logits_tensor;  // f32 [vocab] per row, what --dump-logits writes
  uint32_t token_tensor;   // i32 [1] per row, the greedy token each row produces
  uint32_t kv_split_positions;  // KvSplitPolicy (StepContext::kv_splits), unless the runtime is told otherwise
  uint32_t short_positions;
  uint32_t max_tokens;  // rows a step may have (version 6; 1 before)
  uint32_t reserved[2];
};
static_assert(sizeof(FileHeader) == 96);

struct TensorRecord {
  uint32_t name_offset, name_length;  // into the string section
  uint32_t key_offset, key_length;    // safetensors key (weights only)
  uint8_t role, dtype, rank, reserved;
  uint32_t shape[kMaxRank];
};
static_assert(sizeof(TensorRecord) == 36);

struct OpRecord {
  uint32_t name_offset, name_length;
  uint16_t opcode;
  int16_t layer;  // -1 outside the repeat block
  uint32_t task_begin, task_count;
};
static_assert(sizeof(OpRecord) == 20);

// A wait is met when counter >= target * generation (counters are monotonic across decode
// steps; generation counts steps since the counters were last zeroed, starting at 1).
struct Wait {
  uint32_t counter;
  uint32_t target;
};

// At a short step (short_step below) an instruction signals its short list instead of its
// signal list, and waits for its first short_wait_count waits only: there a task of attention
// does its attn_reduce task's work and signals for it, and that attn_reduce task (bypassed: it
// does nothing) neither waits nor signals. The lists are the same range where they agree.
struct Instruction {
  uint16_t opcode;
  uint16_t wait_count;
  uint32_t wait_begin;    // into the wait section
  uint32_t signal_begin;  // into the signal section (counter ids, each incremented by one)
  uint16_t signal_count;
  uint16_t short_signal_count;
  uint32_t op;    // index into the op table
  uint32_t task;  // global task id
  uint32_t short_signal_begin;  // into the signal section
  uint16_t short_wait_count;    // at most wait_count
  uint16_t reserved;            // zero in a file; the CUDA executor's copy holds its tagged bits (device/cuda/handoff.cuh)
  alignas(4) unsigned char payload[kPayloadBytes];
};
static_assert(sizeof(Instruction) == 128);

// Where an instruction's waits or signals are at a step, short or not (into the schedule's wait
// or signal section): the rule the verifier, the emulator and the cost model follow through
// Schedule::waits_of and signals_of, and the CUDA interpreter's loop with it.
struct ListRange {
  uint32_t begin, count;
};
MK_HD inline ListRange wait_range(const Instruction& i, bool short_step) {
  return {i.wait_begin, short_step ? i.short_wait_count : i.wait_count};  // the short waits: the first ones
}
MK_HD inline ListRange signal_range(const Instruction& i, bool short_step) {
  return short_step ? ListRange{i.short_signal_begin, i.short_signal_count} : ListRange{i.signal_begin, i.signal_count};
}

// How a step splits the attention along the context: one KV split per `positions` cached
// positions, up to half the attention's kv_splits, then all of them from one and a half times
// kv_splits * positions on (active_kv_splits, schedules/ops/attention.hpp; 0: every split at
// every step); and steps at positions up to `short_positions` are short (0: none): one split per
// kv head, whose task also does attn_reduce's work and signals for it (Instruction's short
// signal lists).
struct KvSplitPolicy {
  uint32_t positions;
  uint32_t short_positions;
};

// A step runs `rows` tokens (1 to the schedule's max_tokens): row r of every activation. They
// come in segments, each a run of consecutive positions of one sequence (its KV-cache slot and
// token history): a prompt chunk is one segment of many rows, a batch of decoding sequences one
// segment a sequence. A row attends to its sequence's positions up to its own: the cache before
// the segment's start, and the segment's rows up to its own (appended to the cache at this step).
struct StepSegment {
  uint32_t slot;       // the sequence's KV-cache slot and token history
  uint32_t start;      // position of its first row
  uint32_t rows;       // rows at positions start, start + 1, ..., start + rows - 1
  uint32_t row_begin;  // its first row in the step: the segments' rows, in order
  uint32_t fed_from;   // a row at position q writes its token to the history at q + 1 when q + 1 >= fed_from
};

// A sequence's own sampling parameters, which a sample op takes in place of its payload's
// (schedules/ops/sample.hpp: slot_sampling) where `set`; one a slot, in the executing side's memory.
struct SlotSampling {
  float temperature;
  uint32_t top_k;
  float top_p;
  uint32_t seed_lo, seed_hi;
  uint32_t set;  // 0: the sample op's own parameters
};

// What changes from one step to the next; passed to every op body. Token ids live in a history
// in the executing side's memory ([slot][max_context + 1]): row r of segment g decodes
// history[g.slot][q] (q its position) and its greedy (or sampled) token may go to
// history[g.slot][q + 1], so that a step can read what the previous step produced without a
// round trip to the host.
struct StepContext {
  uint32_t pos;          // the step's last position: the largest of its rows' (short steps, costs)
  uint32_t max_context;  // KV-cache capacity in positions, per slot
  uint32_t generation;   // counter generation of this step, >= 1
  uint32_t rows;         // tokens in this step, >= 1
  KvSplitPolicy kv_splits;
  uint32_t segment_count;
  uint32_t shift;               // added to every segment's start (a launch's later steps share its table)
  // The logits tensor where the step needs its rows only for the rows that feed their sequence's
  // next token (next_token_of): a prompt's rows before its last need none, and their LM head and
  // argmax are skipped. kNone: every row's (the logits kept). At a step of several rows.
  uint32_t fed_logits;
  const StepSegment* segments;  // [segment_count]
  int32_t* history;             // [slots][max_context + 1]
  uint32_t* counters;  // [counter_count] the executing side's counters: an op whose tasks combine
                       // by ticket (last_ticket) counts on its own counter there
  const SlotSampling* sampling;  // [slots] each sequence's sampling, or nullptr: every sample op's own
};

// The segment holding row r (segments are in row order).
MK_HD inline const StepSegment& row_segment(const StepContext& c, uint32_t r) {
  uint32_t lo = 0, hi = c.segment_count;  // segments[lo].row_begin <= r < segments[hi].row_begin
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (c.segments[mid].row_begin <= r) lo = mid;
    else hi = mid;
  }
  return c.segments[lo];
}
MK_HD inline uint32_t segment_start(const StepContext& c, const StepSegment& g) { return g.start + c.shift; }
MK_HD inline uint32_t row_position(const StepContext& c, const StepSegment& g, uint32_t r) {
  return g.start + c.shift + (r - g.row_begin);
}
MK_HD inline int32_t* history_at(const StepContext& c, uint32_t slot, uint32_t pos) {
  return c.history + uint64_t{slot} * (uint64_t{c.max_context} + 1) + pos;
}
// Where row r's token goes, or null (a prompt row before the prompt's last one).
MK_HD inline int32_t* next_token_of(const StepContext& c, const StepSegment& g, uint32_t r) {
  const uint32_t q = row_position(c, g, r);
  return q + 1 >= g.fed_from ? history_at(c, g.slot, q + 1) : nullptr;
}
// Whether row r's values of `tensor` are needed: every row's, but the logits (StepContext::fed_logits)
// only where the row feeds its sequence's next token.
MK_HD inline bool row_needed(const StepContext& c, uint32_t tensor, uint32_t r) {
  return tensor != c.fed_logits || next_token_of(c, row_segment(c, r), r) != nullptr;
}

// An op whose tasks combine their results: each task, once its part is written, adds one to the
// op's ticket counter (no task waits on it or lists it among its signals); the task that brings
// it to `tasks` per step so far, the last of this step, combines. Counters are zeroed together
// and every step adds exactly `tasks`, so the comparison holds in 32-bit arithmetic even when
// tasks * generation wraps.
MK_HD inline bool last_ticket(uint32_t before, uint32_t tasks, uint32_t generation) {
  return before + 1 == tasks * generation;
}

// A step whose every attention has one active KV split: the one that also does attn_reduce's work
// (every row at or before short_positions).
MK_HD inline bool short_step(const StepContext& c) { return c.kv_splits.short_positions != 0 && c.pos <= c.kv_splits.short_positions; }

template <class P>
MK_HD inline const P& payload_as(const Instruction& inst) {
  return *reinterpret_cast<const P*>(inst.payload);
}

}  // namespace mk::schedule
