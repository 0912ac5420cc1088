#include "schedules/schedule.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <sstream>

#include "common/input_file.hpp"
#include "common/output_file.hpp"
#include "schedules/limits.hpp"
#include "schedules/payload_checks.hpp"

namespace mk::schedule {
namespace {

constexpr size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

struct Layout {
  size_t tensors, ops, sm_offsets, instructions, waits, signals, strings, end;
};

Layout layout_of(const FileHeader& h) {
  Layout l{};
  l.tensors = align16(sizeof(FileHeader));
  l.ops = align16(l.tensors + size_t{h.tensor_count} * sizeof(TensorRecord));
  l.sm_offsets = align16(l.ops + size_t{h.op_count} * sizeof(OpRecord));
  l.instructions = align16(l.sm_offsets + (size_t{h.sm_count} + 1) * sizeof(uint32_t));
  l.waits = align16(l.instructions + size_t{h.instruction_count} * sizeof(Instruction));
  l.signals = align16(l.waits + size_t{h.wait_count} * sizeof(Wait));
  l.strings = align16(l.signals + size_t{h.signal_count} * sizeof(uint32_t));
  l.end = l.strings + h.string_bytes;
  return l;
}

template <class... Args>
[[noreturn]] void fail(const std::string& source, Args&&... args) {
  std::ostringstream s;
  s << source << ": ";
  (s << ... << args);
  throw ScheduleError(s.str());
}

}  // namespace

uint64_t Tensor::elements() const {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

uint32_t Schedule::tensor_id(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<uint32_t>(i);
  return kNone;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::f8e4m3: return "f8e4m3";
  }
  return "?";
}
const char* role_name(Role r) {
  switch (r) {
    case Role::weight: return "weight";
    case Role::activation: return "activation";
    case Role::kv_cache: return "kv_cache";
    case Role::io: return "io";
  }
  return "?";
}
bool f8_scale_shape(const Tensor& w, const std::vector<uint32_t>& shape) {
  const std::vector<uint32_t> block = {(w.shape[0] + 127) / 128, (w.shape[1] + 127) / 128};
  return shape == std::vector<uint32_t>{1} || shape == std::vector<uint32_t>{w.shape[0]} || shape == block;
}
uint64_t dtype_bytes(DType d) { return d == DType::f8e4m3 ? 1 : d == DType::bf16 ? 2 : 4; }

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<uint8_t> serialize(const Schedule& s) {
  std::string strings;
  auto add_string = [&](const std::string& str, uint32_t& off, uint32_t& len) {
    off = static_cast<uint32_t>(strings.size());
    len = static_cast<uint32_t>(str.size());
    strings += str;
  };
  std::vector<TensorRecord> tensors(s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const Tensor& t = s.tensors[i];
    TensorRecord& r = tensors[i];
    if (t.shape.size() > kMaxRank) throw ScheduleError("tensor " + t.name + ": rank above 4");
    add_string(t.name, r.name_offset, r.name_length);
    add_string(t.key, r.key_offset, r.key_length);
    r.role = static_cast<uint8_t>(t.role);
    r.dtype = static_cast<uint8_t>(t.dtype);
    r.rank = static_cast<uint8_t>(t.shape.size());
    std::copy(t.shape.begin(), t.shape.end(), r.shape);
  }
  std::vector<OpRecord> ops(s.ops.size());
  for (size_t i = 0; i < s.ops.size(); ++i) {
    add_string(s.ops[i].name, ops[i].name_offset, ops[i].name_length);
    ops[i].opcode = static_cast<uint16_t>(s.ops[i].opcode);
    ops[i].layer = s.ops[i].layer;
    ops[i].task_begin = s.ops[i].task_begin;
    ops[i].task_count = s.ops[i].task_count;
  }

  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.header_bytes = sizeof(FileHeader);
  h.sm_count = s.sm_count;
  h.tensor_count = static_cast<uint32_t>(s.tensors.size());
  h.op_count = static_cast<uint32_t>(s.ops.size());
  h.task_count = s.task_count;
  h.counter_count = s.counter_count;
  h.instruction_count = static_cast<uint32_t>(s.instructions.size());
  h.wait_count = static_cast<uint32_t>(s.waits.size());
  h.signal_count = static_cast<uint32_t>(s.signals.size());
  h.string_bytes = static_cast<uint32_t>(strings.size());
  h.logits_tensor = s.logits_tensor;
  h.token_tensor = s.token_tensor;
  h.kv_split_positions = s.kv_splits.positions;
  h.short_positions = s.kv_splits.short_positions;
  h.max_tokens = s.max_tokens;
  if (s.sm_offsets.size() != size_t{s.sm_count} + 1) throw ScheduleError("sm_offsets must have sm_count + 1 entries");

  const Layout l = layout_of(h);
  h.file_bytes = l.end;
  std::vector<uint8_t> out(l.end, 0);
  auto put = [&](size_t at, const void* p, size_t n) {
    if (n) std::memcpy(out.data() + at, p, n);
  };
  put(l.tensors, tensors.data(), tensors.size() * sizeof(TensorRecord));
  put(l.ops, ops.data(), ops.size() * sizeof(OpRecord));
  put(l.sm_offsets, s.sm_offsets.data(), s.sm_offsets.size() * sizeof(uint32_t));
  put(l.instructions, s.instructions.data(), s.instructions.size() * sizeof(Instruction));
  put(l.waits, s.waits.data(), s.waits.size() * sizeof(Wait));
  put(l.signals, s.signals.data(), s.signals.size() * sizeof(uint32_t));
  put(l.strings, strings.data(), strings.size());
  h.checksum = 0;
  put(0, &h, sizeof h);
  h.checksum = fnv1a64(out);
  put(0, &h, sizeof h);
  return out;
}

Schedule deserialize(std::span<const uint8_t> bytes, const std::string& source) {
  if (!bytes.empty() && std::memcmp(bytes.data(), kMagic, std::min(bytes.size(), sizeof kMagic)) != 0)
    fail(source, "offset 0: not a schedule file (bad magic)");
  if (bytes.size() < sizeof(FileHeader))
    fail(source, "truncated: ", bytes.size(), " bytes, a schedule header alone is ", sizeof(FileHeader));
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.version > kFormatVersion)
    fail(source, "offset 8: format version ", h.version, " is newer than this build reads (", kFormatVersion,
         "); rebuild the tools or re-plan with this mkplan");
  if (h.version == 0) fail(source, "offset 8: unsupported format version 0");
  if (h.version < kOldestReadVersion)
    fail(source, "offset 8: format version ", h.version, " is older than this build reads (", kOldestReadVersion, " to ",
         kFormatVersion, "); plan the model again with this mkplan");
  if (h.header_bytes != sizeof(FileHeader)) fail(source, "offset 12: header size ", h.header_bytes, " unexpected");
  if (h.file_bytes != bytes.size())
    fail(source, "offset 16: header says ", h.file_bytes, " bytes but the file has ", bytes.size(),
         h.file_bytes > bytes.size() ? " (truncated)" : " (trailing bytes)");
  // Bound the counts before computing the layout so that sizes cannot overflow, and by the
  // planner's own limits: counts that no section backs (tasks, counters) size the reader's and
  // the runtime's tables.
  constexpr uint64_t kLimit = 1u << 28;
  const std::pair<const char*, std::pair<uint64_t, uint64_t>> counts[] = {
      {"sm_count", {h.sm_count, limits::kMaxSms}},
      {"tensor_count", {h.tensor_count, limits::kMaxTensors}},
      {"op_count", {h.op_count, limits::kMaxOps}},
      {"task_count", {h.task_count, limits::kMaxTasks}},
      {"instruction_count", {h.instruction_count, limits::kMaxTasks}},
      {"counter_count", {h.counter_count, limits::kMaxCounters}},
      {"wait_count", {h.wait_count, kLimit}},
      {"signal_count", {h.signal_count, kLimit}},
      {"string_bytes", {h.string_bytes, kLimit}}};
  for (const auto& [name, count] : counts)
    if (count.first > count.second)
      fail(source, "header ", name, " ", count.first, " is implausibly large (the limit is ", count.second, ")");
  const Layout l = layout_of(h);
  if (l.end != bytes.size()) fail(source, "section sizes add up to ", l.end, " bytes, the file has ", bytes.size());
  std::vector<uint8_t> zeroed(bytes.begin(), bytes.end());
  std::memset(zeroed.data() + offsetof(FileHeader, checksum), 0, sizeof h.checksum);
  if (fnv1a64(zeroed) != h.checksum) fail(source, "checksum mismatch (the file is corrupt)");
  if (h.sm_count == 0) fail(source, "offset 32: sm_count is 0");

  auto get = [&](size_t at, void* p, size_t n) {
    if (n) std::memcpy(p, bytes.data() + at, n);
  };
  const char* strings = reinterpret_cast<const char*>(bytes.data() + l.strings);
  auto string_at = [&](uint32_t off, uint32_t len, const char* what, size_t record_at) {
    if (uint64_t{off} + len > h.string_bytes)
      fail(source, "offset ", record_at, ": ", what, " string lies outside the string section");
    return std::string(strings + off, len);
  };

  Schedule s;
  s.sm_count = h.sm_count;
  s.task_count = h.task_count;
  s.counter_count = h.counter_count;
  s.logits_tensor = h.logits_tensor;
  s.token_tensor = h.token_tensor;
  s.kv_splits = {h.kv_split_positions, h.short_positions};
  s.max_tokens = h.version < 6 && h.max_tokens == 0 ? 1 : h.max_tokens;
  s.tensors.resize(h.tensor_count);
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    const size_t at = l.tensors + size_t{i} * sizeof(TensorRecord);
    TensorRecord r;
    get(at, &r, sizeof r);
    Tensor& t = s.tensors[i];
    t.name = string_at(r.name_offset, r.name_length, "tensor name", at);
    t.key = string_at(r.key_offset, r.key_length, "tensor key", at);
    if (r.role > static_cast<uint8_t>(Role::io)) fail(source, "offset ", at, ": tensor ", t.name, " has bad role ", +r.role);
    if (r.dtype > static_cast<uint8_t>(DType::f8e4m3)) fail(source, "offset ", at, ": tensor ", t.name, " has bad dtype ", +r.dtype);
    if (r.rank == 0 || r.rank > kMaxRank) fail(source, "offset ", at, ": tensor ", t.name, " has bad rank ", +r.rank);
    t.role = static_cast<Role>(r.role);
    t.dtype = static_cast<DType>(r.dtype);
    t.shape.assign(r.shape, r.shape + r.rank);
    for (uint32_t d : t.shape)
      if (d == 0) fail(source, "offset ", at, ": tensor ", t.name, " has a zero dimension");
    if (t.elements() > (uint64_t{1} << 40)) fail(source, "offset ", at, ": tensor ", t.name, " is implausibly large");
  }
  s.ops.resize(h.op_count);
  for (uint32_t i = 0; i < h.op_count; ++i) {
    const size_t at = l.ops + size_t{i} * sizeof(OpRecord);
    OpRecord r;
    get(at, &r, sizeof r);
    s.ops[i] = Op{string_at(r.name_offset, r.name_length, "op name", at), static_cast<Opcode>(r.opcode), r.layer,
                  r.task_begin, r.task_count};
  }
  s.sm_offsets.resize(size_t{h.sm_count} + 1);
  get(l.sm_offsets, s.sm_offsets.data(), s.sm_offsets.size() * sizeof(uint32_t));
  s.instructions.resize(h.instruction_count);
  get(l.instructions, s.instructions.data(), s.instructions.size() * sizeof(Instruction));
  if (h.version == 4)
    for (Instruction& inst : s.instructions) inst.short_wait_count = inst.wait_count;
  s.waits.resize(h.wait_count);
  get(l.waits, s.waits.data(), s.waits.size() * sizeof(Wait));
  s.signals.resize(h.signal_count);
  get(l.signals, s.signals.data(), s.signals.size() * sizeof(uint32_t));
  try {
    validate(s);
  } catch (const ScheduleError& e) {
    fail(source, e.what());
  }
  return s;
}

void validate(const Schedule& s) {
  auto bad = [](auto&&... args) {
    std::ostringstream o;
    (o << ... << args);
    throw ScheduleError(o.str());
  };
  if (s.sm_offsets.size() != size_t{s.sm_count} + 1) bad("sm_offsets has ", s.sm_offsets.size(), " entries");
  if (s.max_tokens < 1 || s.max_tokens > limits::kMaxStepTokens)
    bad("max_tokens ", s.max_tokens, " is outside 1 to ", limits::kMaxStepTokens);
  if (s.sm_offsets.front() != 0 || s.sm_offsets.back() != s.instructions.size())
    bad("sm_offsets do not cover the ", s.instructions.size(), " instructions");
  for (uint32_t sm = 0; sm < s.sm_count; ++sm)
    if (s.sm_offsets[sm] > s.sm_offsets[sm + 1]) bad("sm_offsets decrease at SM ", sm);
  for (const Op& op : s.ops)
    if (!opcode_name(op.opcode) || op.opcode == Opcode::noop) bad("op ", op.name, " has unknown opcode");
  for (const Wait& w : s.waits) {
    if (w.counter >= s.counter_count) bad("a wait names counter ", w.counter, " of ", s.counter_count);
    if (w.target == 0) bad("a wait on counter ", w.counter, " has target 0");
  }
  for (uint32_t c : s.signals)
    if (c >= s.counter_count) bad("a signal names counter ", c, " of ", s.counter_count);
  auto io_tensor = [&](uint32_t id, DType dt, const char* what) {
    if (id >= s.tensors.size() || s.tensors[id].role != Role::io || s.tensors[id].dtype != dt)
      bad("the header's ", what, " tensor ", id, " is not an io tensor of dtype ", dtype_name(dt));
  };
  io_tensor(s.logits_tensor, DType::f32, "logits");
  io_tensor(s.token_tensor, DType::i32, "token");
  for (size_t i = 0; i < s.tensors.size(); ++i) {  // each float8 weight and its scales (format.hpp, DType)
    const Tensor& w = s.tensors[i];
    if (w.dtype != DType::f8e4m3) continue;
    if (w.role != Role::weight || w.shape.size() != 2) bad("tensor ", w.name, " is f8e4m3 but not a 2-D weight");
    const Tensor* sc = i + 1 < s.tensors.size() ? &s.tensors[i + 1] : nullptr;
    if (!sc || sc->role != Role::weight || sc->dtype != DType::f32 || !f8_scale_shape(w, sc->shape))
      bad("f8e4m3 weight ", w.name, " is not followed by its scales (an f32 weight of shape [1], [", w.shape[0], "] or [",
          (w.shape[0] + 127) / 128, ", ", (w.shape[1] + 127) / 128, "])");
  }

  // Each ticket's uses (payload_checks.hpp, TicketUse), checked together after the loop.
  struct Ticket {
    TicketUse first;
    uint32_t op = 0, uses = 0;
    std::vector<bool> seen;  // task indices
  };
  std::map<uint32_t, Ticket> tickets;
  for (uint32_t sm = 0; sm < s.sm_count; ++sm) {
    for (uint32_t i = s.sm_offsets[sm]; i < s.sm_offsets[sm + 1]; ++i) {
      const Instruction& inst = s.instructions[i];
      auto where = [&] {
        std::ostringstream o;
        o << "SM " << sm << " instruction " << (i - s.sm_offsets[sm]) << " (task " << inst.task << "): ";
        return o.str();
      };
      if (uint64_t{inst.wait_begin} + inst.wait_count > s.waits.size()) bad(where(), "waits out of range");
      if (uint64_t{inst.signal_begin} + inst.signal_count > s.signals.size()) bad(where(), "signals out of range");
      if (uint64_t{inst.short_signal_begin} + inst.short_signal_count > s.signals.size())
        bad(where(), "short-step signals out of range");
      if (inst.short_wait_count > inst.wait_count)
        bad(where(), "short-step waits (", inst.short_wait_count, ") more than its waits (", inst.wait_count, ")");
      if (inst.op >= s.ops.size()) bad(where(), "op index ", inst.op, " out of range");
      if (inst.task >= s.task_count) bad(where(), "task id out of range");
      std::string err;
      TicketUse use;  // read only from a payload that passed its check
      const bool known = visit_payload(inst, [&](const auto& p) {
        err = check_payload(p, s);
        if (err.empty()) use = ticket_use(p);
      });
      if (!known && inst.opcode != static_cast<uint16_t>(Opcode::noop)) err = "unknown opcode " + std::to_string(inst.opcode);
      if (!err.empty()) {
        const char* name = opcode_name(static_cast<Opcode>(inst.opcode));
        bad(where(), name ? std::string(name) + ": " : std::string(), err);
      }
      if (use.counter == kNone) continue;
      // A task index below tasks, and tasks no more than the schedule has (check_payload checked
      // the counter and the workspace).
      if (use.tasks > s.task_count || use.task >= use.tasks)
        bad(where(), "ticket ", use.counter, ": task ", use.task, " of ", use.tasks, " (the schedule has ", s.task_count, " tasks)");
      Ticket& t = tickets[use.counter];
      if (t.uses++ == 0) {
        t.first = use;
        t.op = inst.op;
        t.seen.assign(use.tasks, false);
      } else if (use.tasks != t.first.tasks || use.workspace != t.first.workspace || inst.op != t.op) {
        bad(where(), "ticket ", use.counter, " is shared by tasks of different ops, task counts or workspaces");
      }
      if (t.seen[use.task]) bad(where(), "ticket ", use.counter, ": task index ", use.task, " twice");
      t.seen[use.task] = true;
    }
  }
  if (tickets.empty()) return;
  std::vector<bool> listed(s.counter_count, false);  // a ticket is no list's counter
  for (const Wait& w : s.waits) listed[w.counter] = true;
  for (uint32_t c : s.signals) listed[c] = true;
  for (const auto& [counter, t] : tickets) {
    if (listed[counter]) bad("ticket counter ", counter, " (op ", s.ops[t.op].name, ") is also named by a wait or signal list");
    if (t.uses != t.first.tasks)
      bad("ticket counter ", counter, " (op ", s.ops[t.op].name, "): ", t.uses, " tasks take it, but they say ", t.first.tasks);
  }
}

void write_file(const Schedule& s, const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = serialize(s);
  io::write_file(path, std::as_bytes(std::span(bytes)));
}

Schedule read_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = io::read_input_file(path, limits::kMaxScheduleBytes);
  } catch (const io::InputError& e) {
    throw ScheduleError(path.string() + ": " + e.what() + (e.problem == io::InputProblem::too_large ? " for a schedule" : ""));
  }
  return deserialize(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), path.string());
}

std::string expect_tensor(const Schedule& s, uint32_t id, const char* field, DType dtype, uint64_t elements,
                          std::initializer_list<Role> roles) {
  if (id >= s.tensors.size()) return std::string(field) + ": tensor id " + std::to_string(id) + " out of range";
  const Tensor& t = s.tensors[id];
  if (std::find(roles.begin(), roles.end(), t.role) == roles.end())
    return std::string(field) + ": tensor " + t.name + " has role " + role_name(t.role);
  if (t.dtype != dtype)
    return std::string(field) + ": tensor " + t.name + " is " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype);
  if (elements && t.elements() != elements)
    return std::string(field) + ": tensor " + t.name + " has " + std::to_string(t.elements()) + " elements, expected " +
           std::to_string(elements);
  return {};
}

std::string expect_optional_tensor(const Schedule& s, uint32_t id, const char* field, DType dtype, uint64_t elements,
                                   std::initializer_list<Role> roles) {
  return id == kNone ? std::string{} : expect_tensor(s, id, field, dtype, elements, roles);
}

}  // namespace mk::schedule
