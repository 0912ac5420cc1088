// mkbench: times the CUDA interpreter on a schedule with device-generated random weights.
// Prints the median decode step time against the floor (weight + KV bytes at 4.58 TB/s), as
// mkrun decodes: launches of kDecodeChunk steps, each step fed the previous one's token on the
// device. Then one step per launch, and that with every counter wait removed (what the counters
// cost; results are garbage). The tagged hand-offs' readers still poll their inputs there: a
// tensor's tagging does not depend on --handoff, which only keeps or drops its counters.
// --batch B decodes B sequences together (each at the context, in a KV cache of its own: the
// floor counts every sequence's cache); --prefill P times a P-token prompt in steps of the
// schedule's max_tokens rows (or --tokens-per-step), as mkrun prefills.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>

#include "schedules/cost.hpp"
#include "device/cuda/interpreter.hpp"
#include "device/runtime.hpp"
#include "schedules/schedule.hpp"

namespace {

using namespace mk;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint32_t g_stages = 0;  // --stages: the weight ring's depth, 0 for the executor's choice
std::string g_handoff = "tags";  // --handoff
schedule::KvSplitPolicy g_kv_splits{schedule::kNone, schedule::kNone};  // --kv-split-positions, --short-positions
uint32_t g_trace_steps = 1;  // --trace-steps: the traced step is the last of a launch of this many
uint32_t g_batch = 1;        // --batch: sequences decoded together

// The executor with random weights and caches, for `slots` sequences of `max_context` positions.
std::unique_ptr<device::CudaExecutor> executor(const schedule::Schedule& s, uint32_t max_context, uint32_t slots) {
  device::ExecutorOptions eo;
  eo.max_context = max_context;
  eo.slots = slots;
  eo.ring_stages = g_stages;
  eo.tagged_handoff = g_handoff == "tags";
  eo.kv_splits = g_kv_splits;
  auto exec = std::make_unique<device::CudaExecutor>(s, eo);
  exec->fill_random_weights(1);
  for (uint32_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::kv_cache) exec->fill_random(t, t + 1, 1.0f);
  return exec;
}

// One more launch of `run`'s first step, traced: the per-op summary, PREFIX.json and .svg.
void trace_run(device::CudaExecutor& exec, const schedule::Schedule& s, device::StepRun run, const std::string& prefix,
               uint32_t context) {
  run.steps = 1;
  exec.enable_trace(true);
  exec.timed_run(run);
  const auto events = exec.read_trace();
  exec.enable_trace(false);
  device::TraceOptions topt;
  topt.context = context;
  std::cout << device::trace_summary(s, events, topt);
  device::write_chrome_trace(s, events, prefix + ".json");
  device::write_trace_svg(s, events, prefix + ".svg");
}

// Per step of `reps` launches of kDecodeChunk steps, g_batch sequences each at position
// context - 1 on, in us.
std::vector<double> run_batch(const schedule::Schedule& s, uint32_t context, uint32_t reps, const std::string& trace) {
  auto exec = executor(s, context + device::kDecodeChunk, g_batch);
  device::StepRun run{{}, device::kDecodeChunk, 1, false};
  for (uint32_t i = 0; i < g_batch; ++i) {
    const int32_t token = static_cast<int32_t>(17 + i);
    exec->set_tokens(i, context - 1, &token, 1);
    run.segments.push_back({i, context - 1, 1, i, context});
  }
  std::vector<double> us;
  for (uint32_t i = 0; i < reps + 3; ++i) {
    const double t = exec->timed_run(run) * 1e3 / device::kDecodeChunk;
    if (i >= 3) us.push_back(t);
  }
  if (!trace.empty()) trace_run(*exec, s, run, trace, context);
  return us;
}

// A prompt of `prompt` tokens prefilled `rows` a step from position 0: us of `reps` runs.
std::vector<double> run_prefill(const schedule::Schedule& s, uint32_t prompt, uint32_t rows, uint32_t reps,
                                const std::string& trace) {
  auto exec = executor(s, prompt + 1, 1);
  std::vector<int32_t> ids(prompt);
  for (uint32_t i = 0; i < prompt; ++i) ids[i] = static_cast<int32_t>(i * 7 % 1000);
  exec->set_tokens(0, 0, ids.data(), prompt);
  std::vector<double> us;
  for (uint32_t i = 0; i < reps + 2; ++i) {
    double ms = 0;
    if (prompt / rows) ms += exec->timed_run({{{0, 0, rows, 0, prompt}}, prompt / rows, rows, false});
    if (prompt % rows) ms += exec->timed_run({{{0, prompt / rows * rows, prompt % rows, 0, prompt}}, 1, rows, false});
    if (i >= 2) us.push_back(ms * 1e3);
  }
  // The traced step: the prompt's last full chunk (its longest context).
  if (!trace.empty() && prompt >= rows)
    trace_run(*exec, s, {{{0, (prompt / rows - 1) * rows, rows, 0, prompt}}, 1, rows, false}, trace, prompt);
  return us;
}

// Step times in us: with `steps` 1, of `reps` single launches at position context - 1; else
// per step of `reps` launches of `steps` steps from context - 1 on, each fed the one before's token.
std::vector<double> run(const schedule::Schedule& s, uint32_t context, uint32_t reps, uint32_t steps,
                        const std::string& trace = "") {
  device::ExecutorOptions eo;
  eo.max_context = context + steps;
  eo.ring_stages = g_stages;
  eo.tagged_handoff = g_handoff == "tags";
  eo.kv_splits = g_kv_splits;
  device::CudaExecutor exec(s, eo);
  exec.fill_random_weights(1);
  for (uint32_t t = 0; t < s.tensors.size(); ++t)
    if (s.tensors[t].role == schedule::Role::kv_cache) exec.fill_random(t, t + 1, 1.0f);
  std::vector<double> us;
  for (uint32_t i = 0; i < reps + 3; ++i) {
    const double t = exec.timed_steps(17, context - 1, steps) * 1e3 / steps;
    if (i >= 3) us.push_back(t);  // the first launches pay for module load and cold caches
  }
  if (!trace.empty()) {  // one more launch, its last step traced
    exec.enable_trace(true);
    exec.timed_steps(17, context - 1, g_trace_steps);
    const auto events = exec.read_trace();
    device::TraceOptions topt;
    topt.context = context - 1 + (g_trace_steps - 1);  // the traced step's position: the launch's last
    std::cout << device::trace_summary(s, events, topt);
    device::write_chrome_trace(s, events, trace + ".json");
    device::write_trace_svg(s, events, trace + ".svg");
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mkbench: time the CUDA interpreter on a schedule (random weights generated on the GPU)"};
  std::string path;
  uint32_t context = 512, reps = 30;
  std::string trace;
  app.add_option("schedule", path, "schedule file (mkplan)")->required();
  app.add_option("--context", context, "decode at this context length (the KV cache is filled with random values)")
      ->capture_default_str();
  app.add_option("--reps", reps, "timed steps")->capture_default_str();
  app.add_option("--trace", trace, "also trace one step: writes PREFIX.json (Chrome/Perfetto) and PREFIX.svg, prints a per-op summary");
  app.add_option("--trace-steps", g_trace_steps,
                 "the traced step is the last of a launch of this many, from position context - 1 (1: a launch of its own; "
                 "16: as the headline's launches run)")
      ->check(CLI::Range(1u, device::kDecodeChunk))
      ->capture_default_str();
  app.add_option("--stages", g_stages, "use at most this many weight ring stages (0: as many as shared memory holds)")
      ->capture_default_str();
  app.add_option("--handoff", g_handoff,
                 "how tagged f32 activations go between SMs: tags (their readers poll the values for the step's bit, no "
                 "counters) or counters (as the schedule lists them)")
      ->check(CLI::IsMember({"tags", "counters"}))
      ->capture_default_str();
  app.add_option("--kv-split-positions", g_kv_splits.positions,
                 "one KV split per this many positions, up to half the splits, then all of them (0: every split at every "
                 "step; default: the schedule's, from the model's config kv_split_positions)");
  app.add_option("--short-positions", g_kv_splits.short_positions,
                 "short steps (one split, doing attn_reduce's work) up to this position (0: none; default: the "
                 "schedule's, from the model's config short_positions)");
  uint32_t prefill = 0, per_step = 0;
  app.add_option("--batch", g_batch, "decode this many sequences together, each at --context (at most the schedule's max_tokens)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--prefill", prefill, "time a prompt of this many tokens instead, prefilled --tokens-per-step rows a step");
  app.add_option("--tokens-per-step", per_step, "rows a prefill step (default: the schedule's max_tokens)");
  CLI11_PARSE(app, argc, argv);
  try {
    const schedule::Schedule s = schedule::read_file(path);
    double weight_bytes = 0, kv_bytes = 0;
    for (const schedule::Tensor& t : s.tensors) {
      if (t.role == schedule::Role::weight) weight_bytes += double(t.elements()) * schedule::dtype_bytes(t.dtype);
      // attention reads every cached position of k and v once, of every sequence
      if (t.role == schedule::Role::kv_cache) kv_bytes += t.elements() * 2.0 * context * g_batch;
    }
    if (g_batch > s.max_tokens)
      throw std::invalid_argument("--batch " + std::to_string(g_batch) + " is more than the schedule's max_tokens (" +
                                  std::to_string(s.max_tokens) + "); plan with mkplan --max-tokens " + std::to_string(g_batch));
    if (prefill) {
      const uint32_t rows = per_step ? per_step : s.max_tokens;
      if (rows > s.max_tokens) throw std::invalid_argument("--tokens-per-step is more than the schedule's max_tokens");
      const double us = median(run_prefill(s, prefill, rows, std::max(3u, reps / 6), trace));
      std::cout.precision(4);
      std::cout << path << ": prefill of a " << prefill << "-token prompt, " << rows << " rows a step: " << us / 1e3
                << " ms (median), " << prefill / us * 1e6 << " tokens/s; weights " << weight_bytes / 1e9 << " GB read "
                << (prefill + rows - 1) / rows << " times\n";
      return 0;
    }
    if (g_batch > 1) {
      const double floor_us = (weight_bytes + kv_bytes) / schedule::kStreamBytesPerUs;
      const double step = median(run_batch(s, context, reps, trace));
      std::cout.precision(4);
      std::cout << path << " at context " << context << ", " << g_batch << " sequences a step: weights " << weight_bytes / 1e9
                << " GB + KV " << kv_bytes / 1e9 << " GB, floor " << floor_us << " us\n"
                << "  step (median of " << reps << ", " << device::kDecodeChunk << " steps a launch): " << step << " us = "
                << floor_us / step * 100 << " % of the floor; " << 1e6 / step << " tokens/s per sequence, "
                << g_batch * 1e6 / step << " in all\n";
      return 0;
    }
    const double floor_us = (weight_bytes + kv_bytes) / schedule::kStreamBytesPerUs;
    schedule::Schedule as_run = s;  // the prediction under the policy the runs use (--kv-split-positions, ...)
    as_run.kv_splits = schedule::kv_split_policy(s, g_kv_splits);
    const double predicted = schedule::predict_step_us(as_run, context);
    const double full = median(run(s, context, reps, device::kDecodeChunk, trace));
    const double single = median(run(s, context, reps, 1));
    schedule::Schedule free = s;
    for (schedule::Instruction& inst : free.instructions) inst.wait_count = inst.short_wait_count = 0;
    const double no_waits = median(run(free, context, reps, 1));
    std::cout.precision(4);
    std::cout << path << " at context " << context << ": weights " << weight_bytes / 1e9 << " GB + KV " << kv_bytes / 1e9
              << " GB, floor " << floor_us << " us\n"
              << "  step (median of " << reps << ", " << device::kDecodeChunk
              << " steps a launch, tokens fed on the device): " << full << " us = " << floor_us / full * 100
              << " % of the floor, " << (weight_bytes + kv_bytes) / full / 1e6 << " TB/s\n"
              << "  one step a launch (median of " << reps << "): " << single << " us\n"
              << "  same without counter waits (tagged inputs still polled; one step a launch): " << no_waits
              << " us = " << floor_us / no_waits * 100 << " % of the floor\n"
              << "  the cost model (schedules/cost.hpp) predicts " << predicted << " us: measured / predicted = "
              << full / predicted << "\n";
  } catch (const std::exception& e) {
    std::cerr << "mkbench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
