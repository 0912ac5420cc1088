#include <cmath>

#include "planner/op_def.hpp"
#include "schedules/limits.hpp"
#include "schedules/ops/attention.hpp"

namespace mk::planner {
namespace {

constexpr FieldSpec kFields[] = {
    {"qkv", FieldKind::input, true},     {"q_norm", FieldKind::input, false}, {"k_norm", FieldKind::input, false},
    {"k_cache", FieldKind::input, true}, {"v_cache", FieldKind::input, true}, {"out", FieldKind::output, true},
    {"kv_splits", FieldKind::number, false}, {"eps", FieldKind::number, false},
};

struct Dims {
  uint32_t heads, kv_heads, head_dim, splits;
};

// Where the model's config leaves a value out: checked by infer(), stored by lower().
constexpr double kEps = 1e-6, kRopeTheta = 10000, kRopeFactor = 1, kRopeLowFreq = 1, kRopeHighFreq = 4,
                 kRopeOriginalMax = 8192;

Dims dims_of(const Program& p, const OpInfo& op) {
  const TensorInfo& k = p.tensors[p.find(op.decl->field("k_cache")->items.front())];
  const TensorInfo& qkv = p.tensors[p.find(op.decl->field("qkv")->items.front())];
  const dsl::Value* s = op.decl->field("kv_splits");
  Dims d{0, k.shape[0], k.shape[1], s ? static_cast<uint32_t>(*s->number) : auto_kv_splits(p.sm_count, k.shape[0])};
  d.heads = static_cast<uint32_t>(qkv.elements() / d.head_dim - 2ull * d.kv_heads);
  return d;
}

uint64_t infer(OpCheck& c) {
  const TensorInfo& k = c.tensor("k_cache");
  const TensorInfo& v = c.tensor("v_cache");
  for (const TensorInfo* cache : {&k, &v})
    if (cache->role != schedule::Role::kv_cache || cache->shape.size() != 2)
      c.fail(cache == &k ? "k_cache" : "v_cache", "'" + cache->name + "' must be a kv cache of shape [kv_heads, head_dim]");
  if (k.shape != v.shape) c.fail("v_cache", "shape mismatch: k and v caches differ");
  if (&k == &v) c.fail("v_cache", "k_cache and v_cache must be different caches");
  const uint32_t kv_heads = k.shape[0], hd = k.shape[1];
  if (hd % 8 || hd > schedule::kMaxScheduleHeadDim) c.fail("k_cache", "head_dim must be a multiple of 8, at most 256");
  const TensorInfo& qkv = c.tensor("qkv");
  if (qkv.role != schedule::Role::activation || qkv.dtype != schedule::DType::f32)
    c.fail("qkv", "'" + qkv.name + "' must be an f32 activation");
  const uint64_t n = qkv.elements();
  if (n % hd || n / hd <= 2ull * kv_heads || (n / hd - 2ull * kv_heads) % kv_heads)
    c.fail("qkv", "shape mismatch: '" + qkv.name + "' has " + std::to_string(n) +
                      " elements; expected (heads + 2*kv_heads) * head_dim with heads a multiple of kv_heads = " +
                      std::to_string(kv_heads) + ", head_dim = " + std::to_string(hd));
  for (const char* f : {"q_norm", "k_norm"})
    if (const TensorInfo* w = c.optional_tensor(f); w && (w->role != schedule::Role::weight || w->elements() != hd))
      c.fail(f, std::string("shape mismatch: ") + f + " must be a weight of head_dim = " + std::to_string(hd) + " elements");
  const double splits = c.number("kv_splits", auto_kv_splits(c.program().sm_count, kv_heads));
  if (splits < 1 || splits > 64 || splits != std::floor(splits)) c.fail("kv_splits", "kv_splits must be 1 to 64");
  c.positive_float("eps", "eps", kEps);
  c.positive_float(nullptr, "rope.theta", kRopeTheta);
  const std::string scaling = c.config_text("rope.scaling", "none");
  if (scaling != "none" && scaling != "llama3")
    c.fail(nullptr, "config rope.scaling is '" + scaling + "'; expected none or llama3");
  if (scaling == "llama3") {
    c.positive_float(nullptr, "rope.factor", kRopeFactor);
    c.positive_float(nullptr, "rope.original_max_position", kRopeOriginalMax);
    if (!(c.positive_float(nullptr, "rope.low_freq_factor", kRopeLowFreq) <
          c.positive_float(nullptr, "rope.high_freq_factor", kRopeHighFreq)))
      c.fail(nullptr, "config rope.low_freq_factor must be less than rope.high_freq_factor (llama3 scaling divides by their difference)");
  }
  const uint64_t heads = n / hd - 2ull * kv_heads;
  const uint64_t group = heads / kv_heads;
  if (heads > limits::kMaxDimension) c.fail("qkv", "more than " + std::to_string(limits::kMaxDimension) + " heads");
  c.set_output({kv_heads, static_cast<uint64_t>(splits), group, hd + 2ull});
  return uint64_t{kv_heads} * static_cast<uint64_t>(splits);
}

TaskSpec lower(const Program& p, const OpInfo& op, uint32_t begin, uint32_t end) {
  const Dims d = dims_of(p, op);
  const uint64_t rep = d.heads / d.kv_heads;
  auto id = [&](const char* field) {
    const dsl::Value* v = op.decl->field(field);
    return v ? p.find(v->items.front()) : schedule::kNone;
  };
  const dsl::ModelGraph& m = *p.model;
  schedule::AttentionPayload pl{};
  pl.qkv = id("qkv");
  pl.q_norm = id("q_norm");
  pl.k_norm = id("k_norm");
  pl.k_cache = id("k_cache");
  pl.v_cache = id("v_cache");
  pl.out = op.out;
  pl.reduce_out = schedule::kNone;  // set where an attn_reduce task is taken over (planner/ops/attn_reduce.cpp)
  pl.heads = d.heads;
  pl.kv_heads = d.kv_heads;
  pl.head_dim = d.head_dim;
  pl.kv_splits = d.splits;
  pl.unit_begin = begin;
  pl.unit_end = end;
  const dsl::Value* eps = op.decl->field("eps");
  pl.norm_eps = static_cast<float>(eps ? *eps->number : m.number("eps", kEps));
  pl.scale = static_cast<float>(1.0 / std::sqrt(double(d.head_dim)));
  pl.rope_theta = static_cast<float>(m.number("rope.theta", kRopeTheta));
  pl.rope_scaling = static_cast<uint32_t>(m.text("rope.scaling", "none") == "llama3" ? schedule::RopeScaling::llama3
                                                                                       : schedule::RopeScaling::none);
  pl.rope_factor = static_cast<float>(m.number("rope.factor", kRopeFactor));
  pl.rope_low_freq_factor = static_cast<float>(m.number("rope.low_freq_factor", kRopeLowFreq));
  pl.rope_high_freq_factor = static_cast<float>(m.number("rope.high_freq_factor", kRopeHighFreq));
  pl.rope_original_max_position = static_cast<float>(m.number("rope.original_max_position", kRopeOriginalMax));

  TaskSpec t;
  const uint64_t part = uint64_t{rep} * (d.head_dim + 2);
  t.write = {op.out, begin * part, end * part};
  // The q, k and v slices of the kv heads this task's units cover.
  const uint32_t g0 = begin / d.splits, g1 = (end - 1) / d.splits + 1;
  const uint64_t hd = d.head_dim, q_end = uint64_t{d.heads} * hd, k_end = q_end + uint64_t{d.kv_heads} * hd;
  t.reads.push_back({pl.qkv, g0 * rep * hd, g1 * rep * hd});
  t.reads.push_back({pl.qkv, q_end + g0 * hd, q_end + g1 * hd});
  t.reads.push_back({pl.qkv, k_end + g0 * hd, k_end + g1 * hd});
  set_payload(t.inst, schedule::Opcode::attention, pl);
  return t;
}

}  // namespace

const OpDef& op_def_attention() {
  static const OpDef def{"attention", kFields, infer, lower};
  return def;
}

}  // namespace mk::planner
