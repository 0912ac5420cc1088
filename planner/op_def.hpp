// What the planner knows of one op: the YAML fields it takes, how it checks shapes and infers
// its output, how many units of work it has, and how it lowers a range of units to a task.
// Each op defines one OpDef in planner/ops/<op>.cpp; op_def() dispatches over the op table.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "planner/program.hpp"
#include "schedules/format.hpp"
#include "schedules/ops.hpp"

namespace mk::planner {

enum class FieldKind { input, input_list, output, number, text };

struct FieldSpec {
  const char* name;
  FieldKind kind;
  bool required;
  bool float8 = false;  // an input that may name f8e4m3 weights (the planner refuses them elsewhere)
};

// A 1-D element range of a tensor (for a kv cache: of one position).
struct Region {
  uint32_t tensor = schedule::kNone;
  uint64_t begin = 0, end = 0;
};

struct TaskSpec {
  Region write;
  std::vector<Region> reads;  // activation regions only (weights have no producer)
  schedule::Instruction inst{};  // opcode and payload filled; waits and signals by the planner
};

// Context given to an op's infer step: field lookups that report errors at the YAML node.
class OpCheck {
 public:
  OpCheck(Program& program, OpInfo& op) : program_(program), op_(op) {}
  const TensorInfo& tensor(const char* field) const;        // required input
  const TensorInfo* optional_tensor(const char* field) const;
  std::vector<const TensorInfo*> tensor_list(const char* field) const;
  uint32_t id(const TensorInfo& t) const;
  double number(const char* field, double fallback) const;
  std::string text(const char* field, const std::string& fallback) const;
  double config(const std::string& key, double fallback) const;
  std::string config_text(const std::string& key, const std::string& fallback) const;
  // A value the payload stores as a float32 that must be positive: the op's `field` when it has
  // one (nullptr: none), else the model's config `key`, else `fallback`. It must be a normal
  // float32 (1.2e-38 to 3.4e38): a double such as 1e-51 is positive but rounds to zero.
  float positive_float(const char* field, const std::string& key, double fallback) const;
  [[noreturn]] void fail(const char* field, const std::string& message) const;  // at the field, else the op
  // Declares (or checks against the declaration) the op's output. Dimensions are 64-bit and
  // checked against the limits here. A new tensor is added to the program only after infer
  // returns, so references from tensor() stay valid through the whole infer step.
  void set_output(const std::vector<uint64_t>& shape, schedule::DType dtype = schedule::DType::f32);
  // The output tensor set_output declared, for analyze() to add (empty name: none pending).
  TensorInfo take_pending_output() { return std::move(pending_); }
  OpInfo& op() const { return op_; }
  const Program& program() const { return program_; }

 private:
  Program& program_;
  OpInfo& op_;
  TensorInfo pending_;
};

struct OpDef {
  const char* name;
  std::span<const FieldSpec> fields;
  // Checks shapes and fields, calls set_output, and returns the number of units (64-bit: analyze
  // checks it against limits::kMaxUnits).
  uint64_t (*infer)(OpCheck&);
  // Lowers units [begin, end) of the op to one task.
  TaskSpec (*lower)(const Program&, const OpInfo&, uint32_t unit_begin, uint32_t unit_end);
  // Optional: the op's short path (schedules/format.hpp: short steps). For one of its tasks, the
  // unit of the op producing its first input whose task can do this task's work at short steps
  // (kNone: none can). take_over() then marks the two instructions' payloads (false: the taker
  // cannot), and the planner moves the task's signals into the taker's short signal list.
  uint32_t (*short_taker_unit)(const schedule::Instruction& task) = nullptr;
  bool (*take_over)(schedule::Instruction& taker, schedule::Instruction& task) = nullptr;
  // Optional: an op whose tasks combine their results by ticket (schedules/format.hpp,
  // last_ticket). Split in more than one task, it gets a workspace of workspace(split) i32
  // elements (the tensor '<its output>.parts') and a counter of its own, which lower() finds in
  // OpInfo::workspace and OpInfo::ticket.
  uint64_t (*workspace)(uint32_t split) = nullptr;
  // Optional: at most how many tasks the op becomes when the model leaves its split out (else
  // one per SM, at most its units).
  uint64_t (*max_auto_split)(uint64_t units) = nullptr;
};

const OpDef& op_def(schedule::Opcode);

// The shared fields and shape check of the ops that turn the logits into the step's token
// (argmax, sample): `in` an f32 activation, `out` one i32.
extern const FieldSpec kTokenOpFields[2];
uint64_t infer_token_op(OpCheck&);
schedule::Opcode opcode_by_name(std::string_view name);  // noop when unknown

// Each op's definition (planner/ops/<op>.cpp), and the same found by its payload type (op_def()
// dispatches through schedule::visit_opcode).
#define MK_OP(name, code, payload)  \
  const OpDef& op_def_##name();     \
  inline const OpDef& op_def_for(schedule::OpTag<schedule::payload>) { return op_def_##name(); }
#include "schedules/op_table.def"
#undef MK_OP

template <class P>
void set_payload(schedule::Instruction& inst, schedule::Opcode op, const P& p) {
  static_assert(sizeof(P) <= schedule::kPayloadBytes);
  inst.opcode = static_cast<uint16_t>(op);
  std::memcpy(inst.payload, &p, sizeof p);
}

}  // namespace mk::planner
