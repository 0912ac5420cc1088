// embed: out[c] = table[token][c] for c in [col_begin, col_end); a token outside the
// vocabulary gives NaN, never an out-of-bounds read.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <utility>

#include "tests/step_context.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::schedule::EmbedPayload;
using mk::schedule::StepContext;

namespace {

struct EmbedCase {
  Memory mem;
  EmbedPayload p{};
  std::vector<uint16_t> table;

  EmbedCase(uint32_t vocab, uint32_t hidden, uint32_t col_begin, uint32_t col_end, std::mt19937& rng) {
    table = to_bf16(randn(size_t{vocab} * hidden, rng));
    p.table = mem.add_bf16(table);
    p.out = mem.add_f32_poisoned(hidden);
    p.vocab = vocab;
    p.hidden = hidden;
    p.col_begin = col_begin;
    p.col_end = col_end;
  }

  void run(uint32_t token, uint32_t pos = 3) {
    const StepContext ctx = mk::test::step_context(pos, token, 16, 1);
    mk::device::cpu_run(p, ctx, mem.table());
  }
};

}  // namespace

TEST_CASE("op embed: the whole row of the token") {
  std::mt19937 rng(1101);
  EmbedCase c(37, 48, 0, 48, rng);
  for (uint32_t token : {0u, 17u, 36u}) {
    CAPTURE(token);
    for (float& x : c.mem.f32(c.p.out)) x = kNaN;
    c.run(token);
    auto out = c.mem.f32(c.p.out);
    const WriteCheck w = check_writes(out, 0, 48);
    CHECK(w.unwritten_inside == 0);
    for (uint32_t col = 0; col < 48; ++col)
      CHECK(out[col] == mk::device::bf16_to_f32(c.table[size_t{token} * 48 + col]));  // exact: a gather
    CHECK(c.mem.guards_intact());
  }
}

TEST_CASE("op embed: only the column sub-range is written") {
  std::mt19937 rng(1102);
  EmbedCase c(50, 64, 13, 41, rng);
  const uint32_t token = 29;
  c.run(token);
  auto out = c.mem.f32(c.p.out);
  const WriteCheck w = check_writes(out, 13, 41);
  CHECK(w.unwritten_inside == 0);
  CHECK(w.written_outside == 0);
  for (uint32_t col = 13; col < 41; ++col)
    CHECK(out[col] == mk::device::bf16_to_f32(c.table[size_t{token} * 64 + col]));
  CHECK(c.mem.guards_intact());
}

TEST_CASE("op embed: split columns over tasks cover the row once") {
  std::mt19937 rng(1103);
  EmbedCase c(20, 60, 0, 0, rng);
  const uint32_t token = 11;
  for (auto [b, e] : {std::pair{0u, 15u}, {15u, 31u}, {31u, 60u}}) {
    c.p.col_begin = b;
    c.p.col_end = e;
    c.run(token);
  }
  auto out = c.mem.f32(c.p.out);
  CHECK(check_writes(out, 0, 60).unwritten_inside == 0);
  for (uint32_t col = 0; col < 60; ++col) CHECK(out[col] == mk::device::bf16_to_f32(c.table[token * 60 + col]));
}

TEST_CASE("op embed: a token outside the vocabulary gives NaN, no crash") {
  std::mt19937 rng(1104);
  EmbedCase c(40, 32, 4, 28, rng);
  // The table buffer holds finite rows past the declared vocabulary, so that reading row
  // `vocab` (an off-by-one bound) shows up as a finite value instead of guard poison.
  const std::vector<uint16_t> longer = to_bf16(randn(size_t{44} * 32, rng));
  c.p.table = c.mem.add_bf16(longer);
  // Just past the end, and far past it (an unchecked read would leave the allocation).
  for (uint32_t token : {40u, 41u, 43u, 1u << 30, 0xffffffffu}) {
    CAPTURE(token);
    auto out = c.mem.f32(c.p.out);
    for (float& x : out) x = 1.5f;  // finite, so that NaN must come from the op
    c.run(token);
    for (uint32_t col = 0; col < 32; ++col) {
      CAPTURE(col);
      if (col >= 4 && col < 28)
        CHECK(std::isnan(out[col]));
      else
        CHECK(out[col] == 1.5f);
    }
    CHECK(c.mem.guards_intact());
  }
  // The last row of the vocabulary is still read.
  c.run(39);
  for (uint32_t col = 4; col < 28; ++col) CHECK(c.mem.f32(c.p.out)[col] == mk::device::bf16_to_f32(longer[39 * 32 + col]));
}
