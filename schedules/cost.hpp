// The cost model: how long each instruction runs on the device, and the step time that follows
// from the per-SM queues and their waits. Each op's terms are in its schedules/ops/<op>.cpp;
// the constants were fitted to the H200 traces and benchmarks of 2026-11-30 to 2026-12-04, last
// to the seven rows measured at f1621b0 (docs/notes.md, "The cost model"), and mkbench prints the
// prediction beside what it measures.
#pragma once
#include <cstdint>

#include "schedules/ops.hpp"
#include "schedules/schedule.hpp"
#include "schedules/target.hpp"

namespace mk::schedule {

struct CostModel {
  double stream_bytes_per_us = kStreamBytesPerUs / kDefaultSmCount;  // one SM's share of the weight stream
  double input_bytes_per_us = 34e3;  // an activation vector read from L2 by one SM (8 KB in 1.1 us, 32 KB in 1.8)
  // Per instruction beyond its bytes: its input's round trip, epilogue and signal, less what the
  // ring streamed ahead during its wait (which the bytes term charges again); fitted, not a phase
  // of the trace (where a matvec's input phase, its wait included, is ~2.3 us and its signal ~0.65).
  double task_us = 0.9;
  double latency_us = 0.35;  // from the last signal to the waiting SM running (the trace's hops: 0.32-0.37 us)
};

// Per op, in schedules/ops/<op>.cpp: the bytes an instruction streams from memory (weights, the
// KV cache; not the activations, which L2 holds) at a step of `context` positions, and its time
// at a step (its position and its kv split policy: a short step's attention is one split per kv
// head, doing attn_reduce's work).
#define MK_OP(name, code, payload)                           \
  double bytes_streamed(const payload&, uint32_t context); \
  double cost_us(const payload&, const CostModel&, const StepContext&);
#include "schedules/op_table.def"
#undef MK_OP

// The step a cost is asked for: decoding at position context - 1 under a kv split policy (the
// schedule's).
StepContext cost_step(const KvSplitPolicy&, uint32_t context);

double instruction_bytes(const Instruction&, uint32_t context);
double instruction_us(const Instruction&, const CostModel&, const StepContext&);

// The step's time by the cost model: every SM runs its queue in order, each instruction
// starting when its SM is free and the last signal it waits for has landed (plus latency_us),
// with the short signal lists at a short step. NaN when the queues cannot finish (a schedule the
// verifier would refuse).
double predict_step_us(const Schedule&, uint32_t context, const CostModel& = {});

}  // namespace mk::schedule
