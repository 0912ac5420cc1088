#include "device/cuda/queues.hpp"

#include <span>
#include <stdexcept>
#include <string>

#include "device/cuda/interpreter.hpp"
#include "schedules/limits.hpp"

namespace mk::device {

static_assert(limits::kMaxCounters <= kUnwaited, "a counter's index leaves the mark's bit free (schedules/limits.hpp)");

std::vector<uint8_t> tensor_layouts(const schedule::Schedule& s, const ActivationLists& acts) {
  const size_t n = s.tensors.size();
  std::vector<uint8_t> never(n, 0), always(n, 0), written(n, 0), layout(n, kPlain);
  std::vector<uint32_t> never_op(n), always_op(n);
  for (size_t i = 0; i < s.instructions.size(); ++i)
    for (const Activation& a : acts.at(i)) {
      if (a.tensor >= n) continue;
      if (a.tagging == Tagging::never) never[a.tensor] = 1, never_op[a.tensor] = s.instructions[i].op;
      if (a.tagging == Tagging::always) always[a.tensor] = 1, always_op[a.tensor] = s.instructions[i].op;
      if (a.writes) written[a.tensor] = 1;
    }
  for (size_t t = 0; t < n; ++t) {
    const schedule::Tensor& tensor = s.tensors[t];
    const bool tag = !never[t] && tensor.role == schedule::Role::activation && tensor.dtype == schedule::DType::f32;
    if (always[t] && !tag)
      throw CudaError("the CUDA backend cannot run this schedule: op '" + s.ops[always_op[t]].name + "' reads '" +
                      tensor.name + "' tagged (an f32 activation), which " +
                      (never[t] ? "op '" + s.ops[never_op[t]].name + "' cannot" : std::string("is not")));
    if (tag) layout[t] = written[t] ? kStepTagged : kHostTagged;
  }
  return layout;
}

// A dropped counter's signallers all write tagged tensors and nothing else, so its waiters read
// (if anything of theirs) tagged values, whose poll is the wait; dropping a wait only removes an
// edge from the schedule's proven-acyclic wait graph.
Queues device_queues(const schedule::Schedule& s, const ActivationLists& acts, const std::vector<uint8_t>& tagged) {
  std::vector<uint8_t> drop(s.counter_count, 0), kept(s.counter_count, 0);
  for (size_t i = 0; i < s.instructions.size(); ++i) {
    bool writes = false, all_tagged = true;
    for (const Activation& a : acts.at(i)) {
      if (!a.writes || a.tensor >= tagged.size()) continue;
      writes = true;
      all_tagged = all_tagged && tagged[a.tensor];
    }
    // The full lists decide. A short list adds the counters of the tasks its instruction does at
    // short steps (planner/plan.cpp, derive_short_signals), whose output it then writes in that
    // tensor's layout: the attention's reduce_out, tagged where attn_reduce's output is.
    for (const uint32_t c : s.signals_of(s.instructions[i], false)) (writes && all_tagged ? drop : kept)[c] = 1;
  }
  for (uint32_t c = 0; c < s.counter_count; ++c) drop[c] = drop[c] && !kept[c];
  Queues q{s.instructions, {}, {}};
  for (schedule::Instruction& inst : q.instructions) {
    const schedule::Instruction old = inst;
    inst.wait_begin = static_cast<uint32_t>(q.waits.size());
    uint16_t count = 0, brief = 0;
    const std::span<const schedule::Wait> waits = s.waits_of(old);
    for (size_t k = 0; k < waits.size(); ++k) {
      if (drop[waits[k].counter]) continue;
      q.waits.push_back(waits[k]);
      ++count;
      brief += k < old.short_wait_count;
    }
    inst.wait_count = count;
    inst.short_wait_count = brief;
    auto copy_signals = [&](bool short_list, uint32_t& begin, uint16_t& n) {
      begin = static_cast<uint32_t>(q.signals.size());
      n = 0;
      for (const uint32_t c : s.signals_of(old, short_list))
        if (!drop[c]) q.signals.push_back(c), ++n;
    };
    copy_signals(false, inst.signal_begin, inst.signal_count);
    copy_signals(true, inst.short_signal_begin, inst.short_signal_count);
  }
  // A counter that no wait list of a kind (full or short) names carries no data at such a step:
  // a later step's wait counts its signals, but that step's data come with that step's own
  // releases (and the step barrier's). Its signals there are marked kUnwaited: a relaxed add
  // keeps the count without the release's wait for the SM's copies in flight (at a short step,
  // the attention's for the attn_reduce tasks it bypasses).
  for (const bool brief : {false, true}) {
    std::vector<uint8_t> waited(s.counter_count, 0);
    for (const schedule::Instruction& inst : q.instructions) {
      const schedule::ListRange w = schedule::wait_range(inst, brief);
      for (uint32_t k = 0; k < w.count; ++k) waited[q.waits[w.begin + k].counter] = 1;
    }
    for (const schedule::Instruction& inst : q.instructions) {
      const schedule::ListRange r = schedule::signal_range(inst, brief);
      for (uint32_t k = 0; k < r.count; ++k)
        if (!waited[q.signals[r.begin + k]]) q.signals[r.begin + k] |= kUnwaited;
    }
  }
  return q;
}

uint16_t tagged_fields(const std::vector<Activation>& acts, const std::vector<uint8_t>& layouts) {
  uint32_t bits = 0;
  for (size_t k = 0; k < acts.size(); ++k)
    if (acts[k].tensor < layouts.size() && layouts[acts[k].tensor]) bits |= 1u << k;
  return static_cast<uint16_t>(bits);
}

}  // namespace mk::device
