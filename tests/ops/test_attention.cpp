// attention: GQA decode attention for one token over a bf16 KV cache, split along the context.
// Checked against a double-precision reference written here: per-head RMSNorm of q and k, RoPE
// (HF rotate_half, optional llama3 frequency scaling), the cache append of the last split, the
// unnormalised softmax partials (acc, m, l) of each split, and plain softmax attention once the
// partials are combined.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/step_context.hpp"
#include "device/ops/attention_layout.hpp"
#include "device/ops/cpu_ops.hpp"
#include "tests/op_fixture.hpp"

using namespace mk::test::op;
using mk::device::bf16_to_f32;
using mk::device::f32_to_bf16;
using mk::schedule::AttentionPayload;
using mk::schedule::AttnReducePayload;
using mk::schedule::kNone;
using mk::schedule::RopeScaling;
using mk::schedule::StepContext;

namespace {

struct AttnSetup {
  uint32_t kv_heads = 2, rep = 4, head_dim = 16, splits = 1;
  uint32_t pos = 0, max_context = 40;
  bool qk_norm = false;
  bool llama3 = false;
  uint32_t unit_begin = 0, unit_end = kNone;  // kNone: every unit
};

std::string describe(const AttnSetup& s) {
  return "kv_heads " + std::to_string(s.kv_heads) + " rep " + std::to_string(s.rep) + " head_dim " +
         std::to_string(s.head_dim) + " splits " + std::to_string(s.splits) + " pos " + std::to_string(s.pos) +
         (s.qk_norm ? " qk_norm" : "") + (s.llama3 ? " llama3" : " rope-none") + " units [" +
         std::to_string(s.unit_begin) + ", " + std::to_string(s.unit_end) + ")";
}

// RoPE inverse frequencies in double, written from the HF Llama-3 rope_init definition.
std::vector<double> inv_freq(const AttentionPayload& p) {
  std::vector<double> f(p.head_dim / 2);
  for (uint32_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(double(p.rope_theta), double(2 * i) / p.head_dim);
  if (p.rope_scaling != static_cast<uint32_t>(RopeScaling::llama3)) return f;
  const double orig = p.rope_original_max_position, low_wavelen = orig / p.rope_low_freq_factor,
               high_wavelen = orig / p.rope_high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      x /= p.rope_factor;
      continue;
    }
    const double smooth = (orig / wavelen - p.rope_low_freq_factor) / (p.rope_high_freq_factor - p.rope_low_freq_factor);
    x = (1 - smooth) * x / p.rope_factor + smooth * x;
  }
  return f;
}

void rope(std::vector<double>& v, const std::vector<double>& freq, uint32_t pos) {
  const size_t half = v.size() / 2;
  for (size_t i = 0; i < half; ++i) {
    const double a = v[i], b = v[i + half], angle = double(pos) * freq[i];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

void rmsnorm(std::vector<double>& v, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double x : v) ss += x * x;
  const double inv = 1 / std::sqrt(ss / v.size() + eps);
  for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] * inv * w[i];
}

struct AttnCase {
  AttnSetup s;
  Memory mem;
  AttentionPayload p{};
  uint32_t heads = 0, hd = 0;
  std::vector<float> qkv, q_norm_w, k_norm_w;
  std::vector<uint16_t> k_cache0, v_cache0;  // the caches before the run

  AttnCase(const AttnSetup& setup, std::mt19937& rng) : s(setup) {
    heads = s.kv_heads * s.rep;
    hd = s.head_dim;
    qkv = randn(size_t{heads + 2 * s.kv_heads} * hd, rng);
    p.qkv = mem.add_f32(qkv);
    p.q_norm = p.k_norm = kNone;
    if (s.qk_norm) {
      const std::vector<uint16_t> qn = to_bf16(randn(hd, rng, 1.0, 0.3)), kn = to_bf16(randn(hd, rng, 1.0, 0.3));
      q_norm_w = from_bf16(qn);
      k_norm_w = from_bf16(kn);
      p.q_norm = mem.add_bf16(qn);
      p.k_norm = mem.add_bf16(kn);
    }
    // Cached positions [0, pos) hold random bf16 values; the rest is poison.
    const size_t cache_n = size_t{s.kv_heads} * s.max_context * hd;
    k_cache0.assign(cache_n, kBf16NaN);
    v_cache0.assign(cache_n, kBf16NaN);
    std::normal_distribution<double> nd(0, 1);
    for (uint32_t g = 0; g < s.kv_heads; ++g)
      for (uint32_t t = 0; t < s.pos; ++t)
        for (uint32_t i = 0; i < hd; ++i) {
          k_cache0[cache_index(g, t, i)] = f32_to_bf16(float(nd(rng)));
          v_cache0[cache_index(g, t, i)] = f32_to_bf16(float(nd(rng)));
        }
    p.k_cache = mem.add_bf16(k_cache0);
    p.v_cache = mem.add_bf16(v_cache0);
    p.out = mem.add_f32_poisoned(size_t{s.kv_heads} * s.splits * s.rep * (hd + 2));
    p.heads = heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = hd;
    p.kv_splits = s.splits;
    p.unit_begin = s.unit_begin;
    p.unit_end = s.unit_end == kNone ? s.kv_heads * s.splits : s.unit_end;
    p.norm_eps = 1e-6f;
    p.scale = float(1 / std::sqrt(double(hd)));
    if (s.llama3) {
      p.rope_theta = 500000;
      p.rope_scaling = static_cast<uint32_t>(RopeScaling::llama3);
      p.rope_factor = 32;
      p.rope_low_freq_factor = 1;
      p.rope_high_freq_factor = 4;
      p.rope_original_max_position = 8192;
    } else {
      p.rope_theta = 10000;
      p.rope_scaling = static_cast<uint32_t>(RopeScaling::none);
      // Nonsense scaling parameters: with scaling none they must be ignored.
      p.rope_factor = 7;
      p.rope_low_freq_factor = 3;
      p.rope_high_freq_factor = 5;
      p.rope_original_max_position = 16;
    }
  }

  // Element i of position t of kv head g, in the layout the device defines (kv_index).
  size_t cache_index(uint32_t g, uint32_t t, uint32_t i) const {
    return size_t{g} * s.max_context * hd + mk::device::kv_index(t, i, hd);
  }
  // Position t of kv head g, in order.
  std::vector<float> cached(std::span<const uint16_t> cache, uint32_t g, uint32_t t) const {
    std::vector<float> row(hd);
    for (uint32_t i = 0; i < hd; ++i) row[i] = mk::device::bf16_to_f32(cache[cache_index(g, t, i)]);
    return row;
  }
  size_t out_index(uint32_t g, uint32_t split, uint32_t r) const {
    return ((size_t{g} * s.splits + split) * s.rep + r) * (hd + 2);
  }

  void run(mk::schedule::KvSplitPolicy policy = {0, 0}) {
    mk::device::cpu_run(p, mk::test::step_context(s.pos, 3, s.max_context, 1, policy), mem.table());
  }

  // The split's cached positions [begin, end).
  std::pair<uint32_t, uint32_t> split_range(uint32_t split) const {
    const uint32_t chunk = (s.pos + s.splits - 1) / s.splits;
    return {std::min(s.pos, split * chunk), std::min(s.pos, (split + 1) * chunk)};
  }

  std::vector<double> q_ref(uint32_t h) const {
    std::vector<double> q(qkv.begin() + size_t{h} * hd, qkv.begin() + size_t{h + 1} * hd);
    if (s.qk_norm) rmsnorm(q, q_norm_w, p.norm_eps);
    rope(q, inv_freq(p), s.pos);
    return q;
  }
  std::vector<double> k_ref(uint32_t g) const {
    std::vector<double> k(qkv.begin() + size_t{heads + g} * hd, qkv.begin() + size_t{heads + g + 1} * hd);
    if (s.qk_norm) rmsnorm(k, k_norm_w, p.norm_eps);
    rope(k, inv_freq(p), s.pos);
    return k;
  }
  std::vector<float> v_raw(uint32_t g) const {
    return {qkv.begin() + size_t{heads + s.kv_heads + g} * hd, qkv.begin() + size_t{heads + s.kv_heads + g + 1} * hd};
  }
  bool covers(uint32_t g, uint32_t split) const {
    const uint32_t unit = g * s.splits + split;
    return unit >= p.unit_begin && unit < p.unit_end;
  }
};

struct Partial {
  std::vector<double> acc;
  double m = -INFINITY, l = 0;
};

// Runs the op and checks everything it must and must not write; returns nothing, CHECKs inside.
void check_attention(AttnCase& c) {
  const AttnSetup& s = c.s;
  const uint32_t hd = c.hd;
  CAPTURE(describe(s));
  const std::vector<float> qkv_before = c.qkv;
  c.run();
  CHECK(c.mem.guards_intact());
  auto qkv_now = c.mem.f32(c.p.qkv);
  CHECK(std::equal(qkv_now.begin(), qkv_now.end(), qkv_before.begin()));

  // The cache: position pos of kv head g is written iff the task ran g's last split, k as the
  // bf16 of the normed, roped k (within one bf16 ulp of the double value), v as the bf16 of raw v.
  auto kc = c.mem.bf16(c.p.k_cache);
  auto vc = c.mem.bf16(c.p.v_cache);
  std::vector<std::vector<float>> k_cur(s.kv_heads), v_cur(s.kv_heads);
  for (uint32_t g = 0; g < s.kv_heads; ++g) {
    CAPTURE(g);
    const bool appends = c.covers(g, s.splits - 1);
    const std::vector<double> k = c.k_ref(g);
    const std::vector<float> v = c.v_raw(g);
    size_t k_off = 0, v_bad = 0, untouched_bad = 0;
    for (uint32_t t = 0; t < s.max_context; ++t)
      for (uint32_t i = 0; i < hd; ++i) {
        const size_t at = c.cache_index(g, t, i);
        if (t == s.pos && appends) {
          const double got = bf16_to_f32(kc[at]);
          if (!(std::fabs(got - k[i]) <= std::ldexp(std::fabs(k[i]), -7))) ++k_off;
          if (vc[at] != f32_to_bf16(v[i])) ++v_bad;
        } else if (kc[at] != c.k_cache0[at] || vc[at] != c.v_cache0[at]) {
          ++untouched_bad;
        }
      }
    CHECK(k_off == 0);
    CHECK(v_bad == 0);
    CHECK(untouched_bad == 0);
    if (appends) {
      k_cur[g] = c.cached(kc, g, s.pos);
      v_cur[g] = c.cached(vc, g, s.pos);
    } else {
      for (uint32_t i = 0; i < hd; ++i) {
        k_cur[g].push_back(mk::device::round_bf16(float(k[i])));
        v_cur[g].push_back(mk::device::round_bf16(v[i]));
      }
    }
  }

  // The partials of every covered unit, against the reference; uncovered units stay poison.
  auto out = c.mem.f32(c.p.out);
  std::vector<double> acc_ref, l_ref;
  std::vector<float> acc_got, l_got;
  size_t m_bad = 0, poison_bad = 0, empty_bad = 0, unwritten = 0;
  std::vector<std::vector<Partial>> partials(c.heads, std::vector<Partial>(s.splits));  // [head][split]
  for (uint32_t g = 0; g < s.kv_heads; ++g)
    for (uint32_t split = 0; split < s.splits; ++split) {
      const bool covered = c.covers(g, split);
      const auto [begin, end] = c.split_range(split);
      const bool last = split == s.splits - 1;
      for (uint32_t r = 0; r < s.rep; ++r) {
        const float* o = out.data() + c.out_index(g, split, r);
        if (!covered) {
          for (uint32_t i = 0; i < hd + 2; ++i) poison_bad += !std::isnan(o[i]);
          continue;
        }
        for (uint32_t i = 0; i < hd + 2; ++i) unwritten += std::isnan(o[i]);
        const std::vector<double> q = c.q_ref(g * s.rep + r);
        std::vector<double> scores;
        std::vector<std::vector<float>> keys_f, values_f;
        for (uint32_t t = begin; t < end; ++t) {
          keys_f.push_back(c.cached(c.k_cache0, g, t));
          values_f.push_back(c.cached(c.v_cache0, g, t));
        }
        if (last) {
          keys_f.push_back(k_cur[g]);
          values_f.push_back(v_cur[g]);
        }
        Partial part;
        part.acc.assign(hd, 0.0);
        for (const auto& key : keys_f) {
          double dot = 0;
          for (uint32_t i = 0; i < hd; ++i) dot += q[i] * key[i];
          scores.push_back(dot / std::sqrt(double(hd)));
          part.m = std::max(part.m, scores.back());
        }
        for (size_t j = 0; j < scores.size(); ++j) {
          const double w = std::exp(scores[j] - part.m);
          part.l += w;
          for (uint32_t i = 0; i < hd; ++i) part.acc[i] += w * values_f[j][i];
        }
        if (scores.empty()) {
          // An empty split: nothing attended, m = -inf, l = 0, acc = 0.
          empty_bad += !(o[hd] == -INFINITY && o[hd + 1] == 0);
          for (uint32_t i = 0; i < hd; ++i) empty_bad += o[i] != 0;
        } else {
          for (uint32_t i = 0; i < hd; ++i) {
            acc_ref.push_back(part.acc[i]);
            acc_got.push_back(o[i]);
          }
          l_ref.push_back(part.l);
          l_got.push_back(o[hd + 1]);
          m_bad += !(std::fabs(o[hd] - part.m) <= 1e-5 * (1 + std::fabs(part.m)));
        }
        partials[g * s.rep + r][split] = part;
      }
    }
  CHECK(unwritten == 0);
  CHECK(poison_bad == 0);
  CHECK(empty_bad == 0);
  CHECK(m_bad == 0);
  const double acc_err = rel_error(acc_got, acc_ref), l_err = rel_error(l_got, l_ref);
  CAPTURE(acc_err);
  CAPTURE(l_err);
  CHECK(acc_err < 1e-5);
  CHECK(l_err < 1e-5);
}

// Plain softmax attention of q head h over positions [0, pos], in double, from the caches (the
// current position's k and v as the op stored them).
std::vector<double> plain_attention(AttnCase& c, uint32_t h) {
  const uint32_t hd = c.hd, g = h / c.s.rep;
  auto kc = c.mem.bf16(c.p.k_cache);
  auto vc = c.mem.bf16(c.p.v_cache);
  const std::vector<double> q = c.q_ref(h);
  std::vector<double> scores;
  for (uint32_t t = 0; t <= c.s.pos; ++t) {
    double dot = 0;
    for (uint32_t i = 0; i < hd; ++i) dot += q[i] * bf16_to_f32(kc[c.cache_index(g, t, i)]);
    scores.push_back(dot / std::sqrt(double(hd)));
  }
  const double mx = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  std::vector<double> out(hd, 0.0);
  for (uint32_t t = 0; t <= c.s.pos; ++t) {
    const double w = std::exp(scores[t] - mx);
    total += w;
    for (uint32_t i = 0; i < hd; ++i) out[i] += w * bf16_to_f32(vc[c.cache_index(g, t, i)]);
  }
  for (double& x : out) x /= total;
  return out;
}

// An attn_reduce over `in` (partials shaped as c's) for heads [0, head_end), into a fresh poisoned output.
AttnReducePayload reduce_payload(AttnCase& c, uint32_t in, uint32_t head_end) {
  AttnReducePayload rp{};
  rp.in = in;
  rp.out = c.mem.add_f32_poisoned(size_t{c.heads} * c.hd);
  rp.kv_heads = c.s.kv_heads;
  rp.kv_splits = c.s.splits;
  rp.rep = c.s.rep;
  rp.head_dim = c.hd;
  rp.head_begin = 0;
  rp.head_end = head_end;
  return rp;
}

// After a run over every unit: the partials combined (in double, and by the attn_reduce op)
// equal plain softmax attention.
void check_combined(AttnCase& c) {
  CAPTURE(describe(c.s));
  const uint32_t hd = c.hd, S = c.s.splits;
  auto out = c.mem.f32(c.p.out);
  std::vector<double> plain, combined;
  for (uint32_t h = 0; h < c.heads; ++h) {
    const std::vector<double> ref = plain_attention(c, h);
    plain.insert(plain.end(), ref.begin(), ref.end());
    const uint32_t g = h / c.s.rep, r = h % c.s.rep;
    double mx = -INFINITY;
    for (uint32_t s = 0; s < S; ++s) mx = std::max(mx, double(out[c.out_index(g, s, r) + hd]));
    double l = 0;
    std::vector<double> acc(hd, 0.0);
    for (uint32_t s = 0; s < S; ++s) {
      const float* o = out.data() + c.out_index(g, s, r);
      if (o[hd + 1] == 0) continue;  // an empty split
      const double w = std::exp(double(o[hd]) - mx);
      l += w * o[hd + 1];
      for (uint32_t i = 0; i < hd; ++i) acc[i] += w * o[i];
    }
    for (uint32_t i = 0; i < hd; ++i) combined.push_back(acc[i] / l);
  }
  std::vector<float> combined_f(combined.begin(), combined.end());
  CHECK(rel_error(combined_f, plain) < 1e-5);

  const AttnReducePayload rp = reduce_payload(c, c.p.out, c.heads);
  mk::device::cpu_run(rp, mk::test::step_context(c.s.pos, 3, c.s.max_context, 1), c.mem.table());
  auto reduced = c.mem.f32(rp.out);
  CHECK(check_writes(reduced, 0, reduced.size()).unwritten_inside == 0);
  CHECK(rel_error(reduced, plain) < 1e-5);
}

}  // namespace

TEST_CASE("op attention: GQA rep 4, head_dim 16, every unit, against the reference") {
  std::mt19937 rng(3301);
  for (uint32_t splits : {1u, 3u})
    for (uint32_t pos : {0u, 5u})
      for (bool qk_norm : {false, true})
        for (bool llama3 : {false, true}) {
          AttnSetup s;
          s.splits = splits;
          s.pos = pos;
          s.qk_norm = qk_norm;
          s.llama3 = llama3;
          AttnCase c(s, rng);
          check_attention(c);
          check_combined(c);
        }
}

TEST_CASE("op attention: uneven and empty splits, longer contexts") {
  std::mt19937 rng(3302);
  // pos 1 with 3 splits: splits 1 and 2 have no cached position; pos 37 with 3 splits: 13, 13, 11;
  // pos 2 with 4 splits: chunk 1, splits 2 and 3 see only the current position (3) or nothing (2).
  const std::pair<uint32_t, uint32_t> cases[] = {{1, 3}, {37, 3}, {2, 4}, {37, 1}, {38, 2}, {12, 5}};
  for (auto [pos, splits] : cases)
    for (bool llama3 : {false, true}) {
      AttnSetup s;
      s.splits = splits;
      s.pos = pos;
      s.qk_norm = llama3;  // both flavours, without doubling the run time
      s.llama3 = llama3;
      AttnCase c(s, rng);
      check_attention(c);
      check_combined(c);
    }
}

TEST_CASE("op attention: other GQA shapes") {
  std::mt19937 rng(3303);
  for (auto [kv_heads, rep, head_dim] : {std::tuple{1u, 1u, 8u}, {3u, 2u, 32u}, {4u, 8u, 64u}}) {
    AttnSetup s;
    s.kv_heads = kv_heads;
    s.rep = rep;
    s.head_dim = head_dim;
    s.splits = 2;
    s.pos = 9;
    s.qk_norm = true;
    AttnCase c(s, rng);
    check_attention(c);
    check_combined(c);
  }
}

TEST_CASE("op attention: a task writes only its units, and appends only for its last splits") {
  std::mt19937 rng(3304);
  // kv_heads 2, splits 3: units 0..5 = (g0,s0) (g0,s1) (g0,s2) (g1,s0) (g1,s1) (g1,s2).
  const std::pair<uint32_t, uint32_t> ranges[] = {{1, 4}, {0, 2}, {2, 3}, {3, 6}, {5, 6}, {4, 5}};
  for (auto [ub, ue] : ranges)
    for (uint32_t pos : {0u, 5u}) {
      AttnSetup s;
      s.splits = 3;
      s.pos = pos;
      s.qk_norm = true;
      s.llama3 = true;
      s.unit_begin = ub;
      s.unit_end = ue;
      AttnCase c(s, rng);
      check_attention(c);
    }
}

TEST_CASE("op attention: tasks over unit ranges compose to the whole op") {
  std::mt19937 rng(3305);
  AttnSetup s;
  s.splits = 3;
  s.pos = 7;
  s.llama3 = true;
  AttnCase c(s, rng);
  // Splits that read [0, pos) first, then the tasks that append (as any order may run them).
  for (auto [ub, ue] : {std::pair{0u, 2u}, {3u, 5u}, {2u, 3u}, {5u, 6u}}) {
    c.p.unit_begin = ub;
    c.p.unit_end = ue;
    c.run();
  }
  c.p.unit_begin = 0;
  c.p.unit_end = 6;
  check_combined(c);
}

TEST_CASE("op attention and attn_reduce at a short step: one split writes the normalised output (and every partial), attn_reduce nothing") {
  std::mt19937 rng(3306);
  for (uint32_t pos : {0u, 9u}) {
    AttnSetup s;
    s.splits = 3;
    s.pos = pos;
    s.qk_norm = true;
    AttnCase c(s, rng);
    CAPTURE(describe(s));
    const mk::schedule::KvSplitPolicy policy{1, 16};  // short up to position 16
    c.p.reduce_out = c.mem.add_f32_poisoned(size_t{c.heads} * c.hd);
    c.run(policy);
    const auto reduced = c.mem.f32(c.p.reduce_out);
    CHECK(check_writes(reduced, 0, reduced.size()).unwritten_inside == 0);
    std::vector<double> plain;
    for (uint32_t h = 0; h < c.heads; ++h) {
      const std::vector<double> ref = plain_attention(c, h);
      plain.insert(plain.end(), ref.begin(), ref.end());
    }
    CHECK(rel_error(reduced, plain) < 1e-5);
    // The partials as at every step (the GPU polls them, device/cuda/handoff.cuh): split 0's, the
    // others zero; reduced by hand, split 0's is the normalised output.
    const auto partials = c.mem.f32(c.p.out);
    CHECK(check_writes(partials, 0, partials.size()).unwritten_inside == 0);
    std::vector<float> from_partials;
    for (uint32_t g = 0; g < s.kv_heads; ++g)
      for (uint32_t r = 0; r < s.rep; ++r) {
        const size_t at = c.out_index(g, 0, r);
        for (uint32_t e = 0; e < c.hd; ++e) from_partials.push_back(partials[at + e] / partials[at + c.hd + 1]);
        for (uint32_t split = 1; split < s.splits; ++split)
          CHECK(std::count(partials.begin() + c.out_index(g, split, r), partials.begin() + c.out_index(g, split, r) + c.hd + 2, 0.0f) ==
                c.hd + 2);
      }
    CHECK(rel_error(from_partials, plain) < 1e-5);
    for (uint32_t g = 0; g < s.kv_heads; ++g)  // the current position appended by split 0
      CHECK(std::isfinite(c.cached(c.mem.bf16(c.p.k_cache), g, pos)[0]));
    // A bypassed attn_reduce task does nothing at this step, even over finite partials (all 1:
    // reading them would write 1s).
    const uint32_t ones = c.mem.add_f32(std::vector<float>(size_t{s.kv_heads} * s.splits * s.rep * (c.hd + 2), 1.0f));
    AttnReducePayload rp = reduce_payload(c, ones, s.rep);  // the heads of kv head 0
    rp.bypassed = 1;
    const auto ctx = mk::test::step_context(pos, 3, s.max_context, 1, policy);
    mk::device::cpu_run(rp, ctx, c.mem.table());
    CHECK(check_writes(c.mem.f32(rp.out), 0, 0).written_outside == 0);
  }
}

TEST_CASE("active KV splits: one per `positions` up to half the splits, all from one and a half times their count") {
  using mk::schedule::KvSplitPolicy;
  auto active = [](uint32_t pos, uint32_t S, KvSplitPolicy policy) {
    return mk::schedule::active_kv_splits(mk::test::step_context(pos, 1, pos + 1, 1, policy), pos, S);
  };
  const KvSplitPolicy p64{64, 0};
  // S = 16: 1 to 8 splits by 64 positions, 8 up to position 23 * 64, then 16.
  for (const auto& [pos, want] : {std::pair{0u, 1u}, {1u, 1u}, {64u, 1u}, {65u, 2u}, {511u, 8u}, {512u, 8u}, {513u, 8u},
                                  {1023u, 8u}, {1472u, 8u}, {1473u, 16u}, {2047u, 16u}, {100000u, 16u}}) {
    CAPTURE(pos);
    CHECK(active(pos, 16, p64) == want);
  }
  // Small and odd split counts: S = 4 by 2 positions (1, 2, then 2 until 6 splits' worth, then 4);
  // S = 3 (half is 1: 1, then 3 from 5 positions); S = 1 always 1.
  for (const auto& [pos, want] : {std::pair{1u, 1u}, {3u, 2u}, {5u, 2u}, {10u, 2u}, {11u, 4u}}) CHECK(active(pos, 4, {2, 0}) == want);
  for (const auto& [pos, want] : {std::pair{2u, 1u}, {8u, 1u}, {9u, 3u}}) CHECK(active(pos, 3, {2, 0}) == want);
  CHECK(active(1000, 1, p64) == 1);
  // Positions 0 (every split at every step) and a short step (one).
  CHECK(active(5, 16, {0, 0}) == 16);
  CHECK(active(300, 16, {64, 300}) == 1);
  CHECK(active(301, 16, {64, 300}) == 5);
}

TEST_CASE("op attention and attn_reduce with some splits active: the rest write zero rows, and attn_reduce reads only the active ones") {
  // 6 splits, one per 5 positions: 2 active at position 9, 3 at 12; the inactive partials are
  // written as zeros (every row at every step: the GPU polls them, device/cuda/handoff.cuh) and
  // attn_reduce still gives plain softmax attention (it reads only the active ones).
  std::mt19937 rng(3307);
  for (const auto& [pos, active] : {std::pair{9u, 2u}, std::pair{12u, 3u}}) {
    AttnSetup s;
    s.splits = 6;
    s.pos = pos;
    AttnCase c(s, rng);
    CAPTURE(describe(s));
    const mk::schedule::KvSplitPolicy policy{5, 0};
    c.run(policy);
    const auto out = c.mem.f32(c.p.out);
    for (uint32_t g = 0; g < s.kv_heads; ++g)
      for (uint32_t split = 0; split < s.splits; ++split)
        for (uint32_t r = 0; r < s.rep; ++r) {
          const size_t at = c.out_index(g, split, r);
          CHECK(check_writes(out, at, at + c.hd + 2).unwritten_inside == 0);
          if (split >= active) CHECK(std::count(out.begin() + at, out.begin() + at + c.hd + 2, 0.0f) == c.hd + 2);
          else CHECK(out[at + c.hd + 1] >= 1.0f);  // an active split's sum: its max's own term is 1
        }
    // The inactive rows poisoned again: zeros would weigh nothing even if attn_reduce read them.
    for (uint32_t g = 0; g < s.kv_heads; ++g)
      for (uint32_t split = active; split < s.splits; ++split)
        for (uint32_t r = 0; r < s.rep; ++r)
          std::fill(out.begin() + c.out_index(g, split, r), out.begin() + c.out_index(g, split, r) + c.hd + 2, std::nanf(""));
    const AttnReducePayload rp = reduce_payload(c, c.p.out, c.heads);
    mk::device::cpu_run(rp, mk::test::step_context(pos, 3, s.max_context, 1, policy), c.mem.table());
    std::vector<double> plain;
    for (uint32_t h = 0; h < c.heads; ++h) {
      const std::vector<double> ref = plain_attention(c, h);
      plain.insert(plain.end(), ref.begin(), ref.end());
    }
    CHECK(rel_error(c.mem.f32(rp.out), plain) < 1e-5);
  }
}

TEST_CASE("KV cache layout: each position's elements permuted within its row; 8 consecutive positions' chunk c in 8 bank groups") {
  // What the CUDA attention's ldmatrix loads rely on: a tile of the cache copied as it is to
  // shared memory (16-byte aligned rows), chunk c of 8 consecutive positions read at once.
  for (uint32_t hd : {8u, 16u, 32u, 48u, 64u, 80u, 96u, 128u, 256u}) {
    CAPTURE(hd);
    const uint32_t chunks = hd / 8;
    const bool conflict_free = chunks % 8 == 0 || chunks == 4 || chunks == 2;
    for (uint32_t pos : {0u, 1u, 7u, 8u, 13u, 1000u}) {
      std::vector<int> seen(hd, 0);
      for (uint32_t i = 0; i < hd; ++i) {
        const uint64_t at = mk::device::kv_index(pos, i, hd);
        REQUIRE(at >= uint64_t{pos} * hd);
        REQUIRE(at < uint64_t{pos + 1} * hd);
        ++seen[at - uint64_t{pos} * hd];
        CHECK(at % 8 == i % 8);  // chunks move whole
      }
      CHECK(std::count(seen.begin(), seen.end(), 1) == int(hd));
      if (!conflict_free) continue;
      for (uint32_t c = 0; c < chunks; ++c) {
        std::vector<int> groups(8, 0);  // the 16-byte bank group of each of the 8 rows, tile row 0 at pos
        for (uint32_t r = 0; r < 8; ++r) ++groups[(uint64_t{r} * chunks + mk::device::kv_index(pos + r, 8 * c, hd) % hd / 8) % 8];
        CHECK(std::count(groups.begin(), groups.end(), 1) == 8);
      }
    }
  }
}
