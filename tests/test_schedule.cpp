// The schedule file: exact round trips of every example, and a reader that refuses every
// corrupt, truncated, newer or inconsistent file with a clear message.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "dsl/model.hpp"
#include "planner/plan.hpp"
#include "schedules/ops.hpp"
#include "schedules/schedule.hpp"

using mk::schedule::FileHeader;
using mk::schedule::Instruction;
using mk::schedule::Opcode;
using mk::schedule::Schedule;
using mk::schedule::ScheduleError;

namespace {

// One plan per example and SM count, kept for the whole run (a Plan points into its model).
const mk::planner::Plan& planned(const std::string& name, uint32_t sms = 132) {
  struct Entry {
    std::unique_ptr<mk::dsl::ModelGraph> model;
    std::unique_ptr<mk::planner::Plan> plan;
  };
  static std::map<std::pair<std::string, uint32_t>, Entry> cache;
  Entry& e = cache[{name, sms}];
  if (!e.plan) {
    e.model = std::make_unique<mk::dsl::ModelGraph>(mk::dsl::parse_file(std::string(MK_SOURCE_DIR "/examples/") + name + ".yaml"));
    mk::planner::PlanOptions o;
    o.sm_count = sms;
    e.plan = std::make_unique<mk::planner::Plan>(mk::planner::plan(*e.model, o));
  }
  return *e.plan;
}

const Schedule& tiny() { return planned("tiny-llama").schedule; }

void check_equal(const Schedule& a, const Schedule& b) {
  CHECK(a.sm_count == b.sm_count);
  CHECK(a.task_count == b.task_count);
  CHECK(a.counter_count == b.counter_count);
  CHECK(a.logits_tensor == b.logits_tensor);
  CHECK(a.token_tensor == b.token_tensor);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(i);
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].key == b.tensors[i].key);
    CHECK(a.tensors[i].role == b.tensors[i].role);
    CHECK(a.tensors[i].dtype == b.tensors[i].dtype);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
  }
  REQUIRE(a.ops.size() == b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    CAPTURE(i);
    CHECK(a.ops[i].name == b.ops[i].name);
    CHECK(a.ops[i].opcode == b.ops[i].opcode);
    CHECK(a.ops[i].layer == b.ops[i].layer);
    CHECK(a.ops[i].task_begin == b.ops[i].task_begin);
    CHECK(a.ops[i].task_count == b.ops[i].task_count);
  }
  CHECK(a.sm_offsets == b.sm_offsets);
  REQUIRE(a.instructions.size() == b.instructions.size());
  CHECK(std::memcmp(a.instructions.data(), b.instructions.data(), a.instructions.size() * sizeof(Instruction)) == 0);
  REQUIRE(a.waits.size() == b.waits.size());
  for (size_t i = 0; i < a.waits.size(); ++i) {
    if (a.waits[i].counter != b.waits[i].counter || a.waits[i].target != b.waits[i].target) {
      CAPTURE(i);
      FAIL_CHECK("waits differ");
      break;
    }
  }
  CHECK(a.signals == b.signals);
}

// The reader's refusal message for `bytes` ("" when it accepts them).
std::string read_refusal(const std::vector<uint8_t>& bytes) {
  try {
    mk::schedule::deserialize(bytes, "sched.bin");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return {};
}

// The refusal of a schedule edited in memory: serialize() recomputes the checksum, so only the
// validator stands between the edit and the device.
std::string validator_refusal(const Schedule& s) { return read_refusal(mk::schedule::serialize(s)); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Recomputes the checksum of raw bytes after an edit (FNV-1a 64 with the field taken as zero).
void fix_checksum(std::vector<uint8_t>& bytes) {
  REQUIRE(bytes.size() >= sizeof(FileHeader));
  std::memset(bytes.data() + offsetof(FileHeader, checksum), 0, sizeof(uint64_t));
  const uint64_t sum = mk::schedule::fnv1a64(bytes);
  std::memcpy(bytes.data() + offsetof(FileHeader, checksum), &sum, sizeof sum);
}

template <class T>
void put(std::vector<uint8_t>& bytes, size_t offset, T value) {
  REQUIRE(offset + sizeof value <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// The index of the first instruction with `op` (and, if given, satisfying `pred`).
uint32_t first_of(const Schedule& s, Opcode op, const std::function<bool(const Instruction&)>& pred = nullptr) {
  for (uint32_t i = 0; i < s.instructions.size(); ++i)
    if (s.instructions[i].opcode == static_cast<uint16_t>(op) && (!pred || pred(s.instructions[i]))) return i;
  FAIL("no such instruction");
  return 0;
}

// "SM 3 instruction 0 (task 3): " for instruction index i.
std::string where(const Schedule& s, uint32_t i) {
  uint32_t sm = 0;
  while (s.sm_offsets[sm + 1] <= i) ++sm;
  return "SM " + std::to_string(sm) + " instruction " + std::to_string(i - s.sm_offsets[sm]) + " (task " +
         std::to_string(s.instructions[i].task) + "): ";
}

template <class P>
P payload(const Instruction& inst) {
  P p;
  std::memcpy(&p, inst.payload, sizeof p);
  return p;
}
template <class P>
void set_payload(Instruction& inst, const P& p) {
  std::memcpy(inst.payload, &p, sizeof p);
}

// `good` with edit(payload) applied to its first `op` instruction, whose index goes to `at`.
template <class P, class Edit>
Schedule with_first(const Schedule& good, Opcode op, uint32_t& at, Edit edit) {
  Schedule s = good;
  at = first_of(s, op);
  P p = payload<P>(s.instructions[at]);
  edit(p);
  set_payload(s.instructions[at], p);
  return s;
}

}  // namespace

TEST_CASE("schedule: every example round-trips exactly at 132 SMs") {
  for (const std::string name : {"tiny-llama", "tiny-qwen3", "llama-3.2-1b", "llama-3.1-8b", "qwen3-4b"}) {
    CAPTURE(name);
    const Schedule& s = planned(name).schedule;
    CHECK(s.sm_count == 132);
    const std::vector<uint8_t> bytes = mk::schedule::serialize(s);
    REQUIRE(bytes.size() >= sizeof(FileHeader));
    FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    CHECK(std::memcmp(h.magic, mk::schedule::kMagic, sizeof h.magic) == 0);
    CHECK(h.version == mk::schedule::kFormatVersion);
    CHECK(h.header_bytes == sizeof(FileHeader));
    CHECK(h.file_bytes == bytes.size());
    CHECK(h.sm_count == 132);
    CHECK(h.tensor_count == s.tensors.size());
    CHECK(h.op_count == s.ops.size());
    CHECK(h.task_count == s.task_count);
    CHECK(h.counter_count == s.counter_count);
    CHECK(h.instruction_count == s.instructions.size());
    CHECK(h.wait_count == s.waits.size());
    CHECK(h.signal_count == s.signals.size());
    CHECK(h.logits_tensor == s.logits_tensor);
    CHECK(h.token_tensor == s.token_tensor);

    const Schedule back = mk::schedule::deserialize(bytes, name);
    check_equal(s, back);
    CHECK(mk::schedule::serialize(back) == bytes);  // byte-identical when written again
    CHECK(back.tensor_id("logits") == s.logits_tensor);
    CHECK(back.tensors[back.token_tensor].name == "next_token");
  }
}

TEST_CASE("schedule: write_file and read_file") {
  const auto dir = std::filesystem::temp_directory_path() / ("mk_test_schedule_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string name : {"tiny-llama", "tiny-qwen3"}) {
    CAPTURE(name);
    const Schedule& s = planned(name, 8).schedule;
    const auto path = dir / (name + ".bin");
    mk::schedule::write_file(s, path);
    CHECK(std::filesystem::file_size(path) == mk::schedule::serialize(s).size());
    CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));
    check_equal(s, mk::schedule::read_file(path));
  }
  // A missing file, and an error message naming the file.
  try {
    mk::schedule::read_file(dir / "absent.bin");
    FAIL("read a missing file");
  } catch (const ScheduleError& e) {
    CHECK(contains(e.what(), "absent.bin"));
  }
  {
    std::vector<uint8_t> bytes = mk::schedule::serialize(tiny());
    bytes.resize(bytes.size() / 2);
    std::ofstream(dir / "half.bin", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    try {
      mk::schedule::read_file(dir / "half.bin");
      FAIL("read a truncated file");
    } catch (const ScheduleError& e) {
      CHECK(contains(e.what(), "half.bin"));
      CHECK(contains(e.what(), "truncated"));
    }
  }
  std::filesystem::remove_all(dir);
}

// ---- corruption of the bytes ----

TEST_CASE("schedule: every single-byte flip is refused") {
  const std::vector<uint8_t> good = mk::schedule::serialize(tiny());
  REQUIRE(read_refusal(good).empty());
  size_t accepted = 0, other = 0, checksum = 0;
  size_t first_accepted = SIZE_MAX;
  std::vector<uint8_t> bytes = good;
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] ^= 0x5a;
    try {
      mk::schedule::deserialize(bytes, "sched.bin");
      ++accepted;
      first_accepted = std::min(first_accepted, i);
    } catch (const ScheduleError& e) {
      checksum += contains(e.what(), "checksum mismatch");
    } catch (...) {
      ++other;
    }
    bytes[i] ^= 0x5a;
  }
  INFO("file of ", good.size(), " bytes; first accepted flip at offset ", first_accepted);
  CHECK(accepted == 0);
  CHECK(other == 0);
  // Past the header fields that are checked first, the checksum is what catches a flip.
  CHECK(checksum >= good.size() - sizeof(FileHeader));
  CHECK(bytes == good);
}

TEST_CASE("schedule: every truncation is refused") {
  const std::vector<uint8_t> good = mk::schedule::serialize(tiny());
  size_t tried = 0;
  for (size_t len = 0; len < good.size(); len += len < 200 ? 1 : 97) {
    CAPTURE(len);
    const std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    const std::string why = read_refusal(cut);
    CHECK_FALSE(why.empty());
    CHECK((contains(why, "truncated") || contains(why, "bytes")));
    CHECK(why.rfind("sched.bin: ", 0) == 0);
    ++tried;
  }
  CHECK(tried > 200);
  // One byte short: the header's size says so.
  const std::string why = read_refusal({good.begin(), good.end() - 1});
  CHECK(contains(why, "header says " + std::to_string(good.size()) + " bytes but the file has " + std::to_string(good.size() - 1) + " (truncated)"));
  // Trailing bytes.
  std::vector<uint8_t> longer = good;
  longer.push_back(0x17);
  CHECK(contains(read_refusal(longer), "(trailing bytes)"));
}

TEST_CASE("schedule: version, magic and header fields") {
  const std::vector<uint8_t> good = mk::schedule::serialize(tiny());
  SUBCASE("a newer version, with a correct checksum") {
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, version), mk::schedule::kFormatVersion + 1);
    fix_checksum(bytes);
    const std::string why = read_refusal(bytes);
    CHECK(contains(why, "newer"));
    CHECK(contains(why, "format version " + std::to_string(mk::schedule::kFormatVersion + 1)));
  }
  SUBCASE("an older version than is read (a file planned before the argmax's split, format 3)") {
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, version), mk::schedule::kOldestReadVersion - 1);
    fix_checksum(bytes);
    const std::string why = read_refusal(bytes);
    CHECK(contains(why, "offset 8: format version " + std::to_string(mk::schedule::kOldestReadVersion - 1) + " is older"));
    CHECK(contains(why, "plan the model again with this mkplan"));
  }
  SUBCASE("version 4 (no short-step waits: its reserved word zero) reads with every task's waits at short steps") {
    const Schedule s = tiny();
    REQUIRE(std::any_of(s.instructions.begin(), s.instructions.end(),
                        [](const Instruction& i) { return i.short_wait_count != i.wait_count; }));  // bypassed tasks
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, version), 4);
    FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    // The instruction section: after the header, tensor records, op records and sm_offsets, each
    // section starting at a multiple of 16 bytes.
    auto align16 = [](size_t n) { return (n + 15) / 16 * 16; };
    size_t first = align16(sizeof(FileHeader));
    first = align16(first + size_t{h.tensor_count} * sizeof(mk::schedule::TensorRecord));
    first = align16(first + size_t{h.op_count} * sizeof(mk::schedule::OpRecord));
    first = align16(first + (size_t{h.sm_count} + 1) * sizeof(uint32_t));
    REQUIRE(std::memcmp(bytes.data() + first, &s.instructions[0], sizeof(Instruction)) == 0);
    for (uint32_t i = 0; i < h.instruction_count; ++i)
      put<uint16_t>(bytes, first + size_t{i} * sizeof(Instruction) + offsetof(Instruction, short_wait_count), 0);
    fix_checksum(bytes);
    const Schedule old = mk::schedule::deserialize(bytes, "v4.bin");
    REQUIRE(old.instructions.size() == s.instructions.size());
    for (size_t i = 0; i < s.instructions.size(); ++i) {
      CHECK(old.instructions[i].short_wait_count == s.instructions[i].wait_count);
      CHECK(old.instructions[i].wait_count == s.instructions[i].wait_count);
    }
  }
  SUBCASE("version 0") {
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, version), 0);
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "unsupported format version 0"));
  }
  SUBCASE("bad magic") {
    std::vector<uint8_t> bytes = good;
    bytes[0] = 'X';
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "not a schedule file"));
    CHECK(contains(read_refusal(std::vector<uint8_t>(200, 0x41)), "not a schedule file"));
  }
  SUBCASE("a checksum that does not match") {
    std::vector<uint8_t> bytes = good;
    bytes[offsetof(FileHeader, checksum)] ^= 1;
    CHECK(contains(read_refusal(bytes), "checksum mismatch"));
  }
  SUBCASE("header size") {
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, header_bytes), 64);
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "header size 64"));
  }
  SUBCASE("an implausible count") {
    std::vector<uint8_t> bytes = good;
    put<uint32_t>(bytes, offsetof(FileHeader, instruction_count), 0x80000000u);
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "implausibly large"));
  }
  SUBCASE("counts that do not add up to the file size") {
    std::vector<uint8_t> bytes = good;
    FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    put<uint32_t>(bytes, offsetof(FileHeader, wait_count), h.wait_count + 64);
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "section sizes add up to"));
  }
  SUBCASE("sm_count 0") {
    std::vector<uint8_t> bytes = good;
    FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    // Keep the layout size: drop the SM count to 0 and move the bytes it frees to the strings.
    const size_t before = bytes.size();
    put<uint32_t>(bytes, offsetof(FileHeader, sm_count), 0);
    // 132 SMs -> 0: the sm_offsets section shrinks by 132 u32 (528 bytes, a multiple of 16).
    put<uint32_t>(bytes, offsetof(FileHeader, string_bytes), h.string_bytes + 132 * 4);
    fix_checksum(bytes);
    REQUIRE(bytes.size() == before);
    CHECK(contains(read_refusal(bytes), "sm_count is 0"));
  }
  SUBCASE("a name outside the string section") {
    std::vector<uint8_t> bytes = good;
    // The first tensor record follows the 96-byte header; its name length is the second u32.
    FileHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    put<uint32_t>(bytes, sizeof(FileHeader) + 4, h.string_bytes + 1);
    fix_checksum(bytes);
    CHECK(contains(read_refusal(bytes), "tensor name string lies outside the string section"));
  }
}

// ---- the validator, behind a correct checksum ----

TEST_CASE("schedule validator: payload tensor ids and regions") {
  const Schedule& good = tiny();
  REQUIRE(validator_refusal(good).empty());

  SUBCASE("matvec out id out of range") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec);
    auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    p.out = 9999;
    set_payload(s.instructions[i], p);
    const std::string why = validator_refusal(s);
    CHECK(contains(why, where(s, i) + "matvec: out: tensor id 9999 out of range"));
  }
  SUBCASE("matvec row_end beyond the output") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec);
    auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    p.row_end = static_cast<uint32_t>(s.tensors[p.out].elements()) + 1;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "matvec: row range outside the output"));
  }
  SUBCASE("matvec empty row range") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec);
    auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    p.row_end = p.row_begin;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "row range outside the output"));
  }
  SUBCASE("matvec weight_count 4") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec);
    auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    p.weight_count = 4;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "weight_count must be 1 to 3"));
  }
  SUBCASE("matvec weight that is an activation") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec);
    auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    p.weight[0] = p.in;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "weight: tensor " + s.tensors[p.in].name + " has role activation"));
  }
  SUBCASE("attention unit range beyond the op") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::attention);
    auto p = payload<mk::schedule::AttentionPayload>(s.instructions[i]);
    p.unit_end = p.kv_heads * p.kv_splits + 1;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "attention: unit range outside the op"));
  }
  SUBCASE("attention k and v caches the same") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::attention);
    auto p = payload<mk::schedule::AttentionPayload>(s.instructions[i]);
    p.v_cache = p.k_cache;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "k_cache and v_cache must differ"));
  }
  SUBCASE("attention head count that does not fit qkv") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::attention);
    auto p = payload<mk::schedule::AttentionPayload>(s.instructions[i]);
    p.heads *= 2;  // a valid group size (8), but qkv no longer fits
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "qkv: tensor "));
  }
  // Float fields a file could carry that no planner writes: refused rather than turned into NaN.
  SUBCASE("float fields that are not positive and finite") {
    using mk::schedule::AttentionPayload, mk::schedule::MatvecPayload;
    // The first instruction of the payload's op, its payload edited by `edit`, must be refused.
    auto refused = [&]<class P>(Opcode op, void (*edit)(P&), const std::string& why) {
      Schedule s = good;
      const uint32_t i = first_of(s, op);
      auto p = payload<P>(s.instructions[i]);
      edit(p);
      set_payload(s.instructions[i], p);
      CHECK(contains(validator_refusal(s), where(s, i) + why));
    };
    refused(Opcode::matvec, +[](MatvecPayload& p) { p.eps = std::numeric_limits<float>::infinity(); },
            "matvec: eps must be positive and finite");
    refused(Opcode::attention, +[](AttentionPayload& p) { p.norm_eps = std::numeric_limits<float>::quiet_NaN(); },
            "attention: theta, scale and eps must be positive and finite");
    refused(
        Opcode::attention,
        +[](AttentionPayload& p) {
          REQUIRE(p.rope_scaling == static_cast<uint32_t>(mk::schedule::RopeScaling::llama3));
          p.rope_low_freq_factor = p.rope_high_freq_factor;  // llama3 scaling divides by their difference
        },
        "attention: llama3 rope scaling needs positive, finite factors");
  }
  SUBCASE("attn_reduce head range beyond the op") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::attn_reduce);
    auto p = payload<mk::schedule::AttnReducePayload>(s.instructions[i]);
    p.head_end = p.kv_heads * p.rep + 1;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "attn_reduce: head range outside the op"));
  }
  SUBCASE("argmax count larger than its input") {
    uint32_t i = 0;
    const Schedule s = with_first<mk::schedule::ArgmaxPayload>(good, Opcode::argmax, i, [](auto& p) { p.count += 1; });
    CHECK(contains(validator_refusal(s), "argmax: in: tensor logits has"));
  }
  SUBCASE("argmax range past its input, or empty") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::argmax);
    auto p = payload<mk::schedule::ArgmaxPayload>(s.instructions[i]);
    SUBCASE("past") { p.end = p.count + 1; }
    SUBCASE("empty") { p.end = p.begin; }
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "argmax: range [begin, end) is empty or past count"));
  }
  SUBCASE("argmax tasks that do not add up: an index twice, one missing, the ticket listed") {
    Schedule s = good;
    std::vector<uint32_t> at;  // the argmax's instructions
    for (uint32_t i = 0; i < s.instructions.size(); ++i)
      if (s.instructions[i].opcode == static_cast<uint16_t>(Opcode::argmax)) at.push_back(i);
    REQUIRE(at.size() == 4);  // tiny-llama's argmax is split in four
    auto p = payload<mk::schedule::ArgmaxPayload>(s.instructions[at[1]]);
    SUBCASE("an index twice") {
      p.task = payload<mk::schedule::ArgmaxPayload>(s.instructions[at[0]]).task;
      set_payload(s.instructions[at[1]], p);
      const std::string refusal = validator_refusal(s);
      CHECK(contains(refusal, ": task index " + std::to_string(p.task) + " twice"));
    }
    SUBCASE("one task taking no ticket") {
      p.tasks = 1;
      p.task = 0;
      p.parts = p.ticket = mk::schedule::kNone;
      set_payload(s.instructions[at[1]], p);
      CHECK(contains(validator_refusal(s), "3 tasks take it, but they say 4"));
    }
    SUBCASE("the ticket in a signal list") {
      s.signals[0] = p.ticket;
      CHECK(contains(validator_refusal(s), "ticket counter " + std::to_string(p.ticket) + " (op next_token) is also named by a wait or signal list"));
    }
    SUBCASE("the ticket waited on") {
      s.waits[0].counter = p.ticket;
      CHECK(contains(validator_refusal(s), "is also named by a wait or signal list"));
    }
  }
  SUBCASE("argmax ticket past the counters") {
    uint32_t i = 0;
    const Schedule s = with_first<mk::schedule::ArgmaxPayload>(good, Opcode::argmax, i, [&](auto& p) {
      REQUIRE(p.tasks > 1);  // tiny-llama's argmax is split in four
      p.ticket = good.counter_count;
    });
    CHECK(contains(validator_refusal(s), where(s, i) + "argmax: ticket names a counter past counter_count"));
  }
  SUBCASE("argmax parts too small for its tasks, or missing") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::argmax);
    auto p = payload<mk::schedule::ArgmaxPayload>(s.instructions[i]);
    SUBCASE("too small") { p.tasks += 1; }
    SUBCASE("missing") { p.parts = mk::schedule::kNone; }
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "argmax: parts:"));
  }
  SUBCASE("argmax with one task that has a ticket") {
    uint32_t i = 0;
    const Schedule s = with_first<mk::schedule::ArgmaxPayload>(good, Opcode::argmax, i, [](auto& p) { p.tasks = 1, p.task = 0; });
    CHECK(contains(validator_refusal(s), where(s, i) + "argmax: one task has no parts and no ticket"));
  }
  SUBCASE("embed whose table is an activation") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::embed);
    auto p = payload<mk::schedule::EmbedPayload>(s.instructions[i]);
    p.table = p.out;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), where(s, i) + "embed: table: tensor " + s.tensors[p.out].name + " has role activation"));
  }
  SUBCASE("embed column range beyond the table") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::embed);
    auto p = payload<mk::schedule::EmbedPayload>(s.instructions[i]);
    p.col_end = p.hidden + 1;
    set_payload(s.instructions[i], p);
    CHECK(contains(validator_refusal(s), "column range outside the table"));
  }
  SUBCASE("an unknown opcode in an instruction") {
    Schedule s = good;
    s.instructions[0].opcode = 77;
    CHECK(contains(validator_refusal(s), where(s, 0) + "unknown opcode 77"));
  }
}

TEST_CASE("schedule validator: waits, signals, queues and the tensor table") {
  const Schedule& good = tiny();

  SUBCASE("a wait on a counter id >= counter_count") {
    Schedule s = good;
    REQUIRE(!s.waits.empty());
    s.waits[0].counter = s.counter_count;
    CHECK(contains(validator_refusal(s), "a wait names counter " + std::to_string(s.counter_count) + " of " +
                                             std::to_string(s.counter_count)));
  }
  SUBCASE("a wait with target 0") {
    Schedule s = good;
    s.waits[0].target = 0;
    CHECK(contains(validator_refusal(s), "has target 0"));
  }
  SUBCASE("a signal on a counter id >= counter_count") {
    Schedule s = good;
    s.signals.back() = s.counter_count + 5;
    CHECK(contains(validator_refusal(s), "a signal names counter " + std::to_string(s.counter_count + 5)));
  }
  SUBCASE("an instruction whose wait range exceeds the wait array") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec, [](const Instruction& inst) { return inst.wait_count > 0; });
    s.instructions[i].wait_begin = static_cast<uint32_t>(s.waits.size()) - s.instructions[i].wait_count + 1;
    CHECK(contains(validator_refusal(s), where(s, i) + "waits out of range"));
  }
  SUBCASE("an instruction whose signal range exceeds the signal array") {
    Schedule s = good;
    s.instructions[0].signal_count = static_cast<uint16_t>(s.signals.size() + 1);
    CHECK(contains(validator_refusal(s), where(s, 0) + "signals out of range"));
  }
  SUBCASE("an instruction with more short-step waits than waits") {
    Schedule s = good;
    const uint32_t i = first_of(s, Opcode::matvec, [](const Instruction& inst) { return inst.wait_count > 0; });
    s.instructions[i].short_wait_count = static_cast<uint16_t>(s.instructions[i].wait_count + 1);
    CHECK(contains(validator_refusal(s), where(s, i) + "short-step waits (" + std::to_string(s.instructions[i].wait_count + 1) +
                                             ") more than its waits (" + std::to_string(s.instructions[i].wait_count) + ")"));
  }
  SUBCASE("an op index out of range") {
    Schedule s = good;
    s.instructions[1].op = static_cast<uint32_t>(s.ops.size());
    CHECK(contains(validator_refusal(s), where(s, 1) + "op index " + std::to_string(s.ops.size()) + " out of range"));
  }
  SUBCASE("a task id out of range") {
    Schedule s = good;
    s.instructions[2].task = s.task_count;
    CHECK(contains(validator_refusal(s), where(s, 2) + "task id out of range"));
  }
  SUBCASE("sm_offsets not covering all instructions") {
    Schedule s = good;
    s.sm_offsets.back() -= 1;
    CHECK(contains(validator_refusal(s), "sm_offsets do not cover the " + std::to_string(s.instructions.size()) + " instructions"));
  }
  SUBCASE("sm_offsets not starting at 0") {
    Schedule s = good;
    s.sm_offsets.front() = 1;
    CHECK(contains(validator_refusal(s), "sm_offsets do not cover"));
  }
  SUBCASE("decreasing sm_offsets") {
    Schedule s = good;
    s.sm_offsets[2] = s.sm_offsets[3] + 1;
    CHECK(contains(validator_refusal(s), "sm_offsets decrease at SM 2"));
  }
  SUBCASE("logits tensor that is not an io tensor") {
    Schedule s = good;
    s.logits_tensor = s.tensor_id("x0");  // an activation
    REQUIRE(s.logits_tensor != mk::schedule::kNone);
    CHECK(contains(validator_refusal(s), "the header's logits tensor " + std::to_string(s.logits_tensor) + " is not an io tensor"));
    s.logits_tensor = mk::schedule::kNone;
    CHECK(contains(validator_refusal(s), "the header's logits tensor"));
  }
  SUBCASE("an op with an unknown opcode") {
    Schedule s = good;
    s.ops[3].opcode = static_cast<Opcode>(200);
    CHECK(contains(validator_refusal(s), "op " + s.ops[3].name + " has unknown opcode"));
  }
  SUBCASE("a float8 weight not followed by its scales") {
    Schedule s = good;
    mk::schedule::Tensor* w = nullptr;
    for (mk::schedule::Tensor& t : s.tensors)
      if (!w && t.role == mk::schedule::Role::weight && t.shape.size() == 2) w = &t;
    REQUIRE(w);
    w->dtype = mk::schedule::DType::f8e4m3;
    CHECK(contains(validator_refusal(s), "f8e4m3 weight " + w->name + " is not followed by its scales"));
  }
  SUBCASE("a tensor with a bad role, dtype, rank or dimension") {
    Schedule s = good;
    s.tensors[1].role = static_cast<mk::schedule::Role>(9);
    CHECK(contains(validator_refusal(s), "tensor " + s.tensors[1].name + " has bad role 9"));
    s = good;
    s.tensors[1].dtype = static_cast<mk::schedule::DType>(4);
    CHECK(contains(validator_refusal(s), "has bad dtype 4"));
    s = good;
    s.tensors[1].shape.clear();
    CHECK(contains(validator_refusal(s), "has bad rank 0"));
    s = good;
    s.tensors[1].shape[0] = 0;
    CHECK(contains(validator_refusal(s), "has a zero dimension"));
  }
  SUBCASE("a weight shape that no longer matches its payloads") {
    Schedule s = good;
    // A matvec with a residual (o-proj or down): its weight is not the tied embedding table.
    const uint32_t i = first_of(s, Opcode::matvec, [](const Instruction& inst) {
      return payload<mk::schedule::MatvecPayload>(inst).residual != mk::schedule::kNone;
    });
    const auto p = payload<mk::schedule::MatvecPayload>(s.instructions[i]);
    s.tensors[p.weight[0]].shape[1] += 1;  // more columns than the input has
    CHECK(contains(validator_refusal(s), "is not [rows, cols]"));
  }
}
