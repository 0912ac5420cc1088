// The generation loop: prompts prefilled in chunks of up to max_tokens rows a step, then every
// sequence decoding one token a step, the steps run in chunks on the backend's side.
#include <algorithm>
#include <chrono>
#include <deque>
#include <stdexcept>
#include <string>

#include "device/runtime.hpp"

namespace mk::device {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A piece of one prompt in a prefill step: prompt tokens [first, first + rows) of sequence `seq`.
struct Piece {
  uint32_t seq, first, rows;
};

// The state of one sequence through the loop.
struct Sequence {
  const SequenceOptions* opt = nullptr;
  uint32_t slot = 0, length = 0;  // length: the prompt's
  uint32_t planned = 0;   // tokens generated or queued to be
  bool done = false;      // stopped, or has its tokens: no step after this is read
  GenerateResult r;
  Clock::time_point first_token, end;
  uint32_t all() const { return length + (opt->tokens ? opt->tokens - 1 : 0); }  // positions in all
  uint32_t fed_from() const { return opt->start + length; }
};

}  // namespace

void check_sequence(const SequenceOptions& q, size_t index, size_t count, uint64_t vocab, uint32_t max_context) {
  const std::string who = count > 1 ? "sequence " + std::to_string(index + 1) + ": " : "";
  if (q.prompt.empty()) throw std::invalid_argument(who + "the prompt needs at least one token");
  for (int32_t id : q.prompt)
    if (id < 0 || static_cast<uint64_t>(id) >= vocab)
      throw std::invalid_argument(who + "prompt token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
  const uint64_t positions = q.prompt.size() + (q.tokens ? uint64_t{q.tokens} - 1 : 0);
  if (q.start + positions > max_context)
    throw std::invalid_argument(who + std::to_string(positions) + " positions" +
                                (q.start ? " after " + std::to_string(q.start) + " positions" : std::string()) +
                                " do not fit a context of " + std::to_string(max_context) + " positions; raise --max-context");
}

std::vector<GenerateResult> generate_batch(Backend& b, const schedule::Schedule& s, const std::vector<SequenceOptions>& seqs,
                                           const BatchOptions& opt, uint32_t max_context) {
  const uint64_t vocab = s.tensors[s.logits_tensor].elements();
  if (seqs.empty()) throw std::invalid_argument("no sequence to generate for");
  if (seqs.size() > b.slots())
    throw std::invalid_argument(std::to_string(seqs.size()) + " sequences need as many KV-cache slots; the backend holds " +
                                std::to_string(b.slots()));
  if (seqs.size() > s.max_tokens)
    throw std::invalid_argument(std::to_string(seqs.size()) + " sequences decode together in steps of " +
                                std::to_string(seqs.size()) + " tokens, more than the schedule's max_tokens (" +
                                std::to_string(s.max_tokens) + "); plan with mkplan --max-tokens " + std::to_string(seqs.size()));
  for (size_t i = 0; i < seqs.size(); ++i) check_sequence(seqs[i], i, seqs.size(), vocab, max_context);
  const uint32_t chunk = opt.prompt_chunk ? std::min(opt.prompt_chunk, s.max_tokens) : s.max_tokens;

  std::vector<Sequence> q;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence x;
    x.opt = &seqs[i];
    x.slot = static_cast<uint32_t>(i);
    x.length = static_cast<uint32_t>(seqs[i].prompt.size());
    x.r.prompt_steps = x.length;
    q.push_back(std::move(x));
  }
  const auto start = Clock::now();
  for (const Sequence& x : q) b.set_history(x.slot, x.opt->start, x.opt->prompt);

  // Prefill: the prompts packed into steps of up to `chunk` rows, in order.
  std::vector<std::vector<Piece>> steps(1);
  uint32_t room = chunk;
  for (uint32_t i = 0; i < q.size(); ++i)
    for (uint32_t first = 0; first < q[i].length;) {
      if (room == 0) steps.emplace_back(), room = chunk;
      const uint32_t n = std::min(room, q[i].length - first);
      steps.back().push_back({i, first, n});
      first += n, room -= n;
    }
  auto segment = [&](const Piece& p, uint32_t row) {
    const Sequence& x = q[p.seq];
    return schedule::StepSegment{x.slot, x.opt->start + p.first, p.rows, row, x.fed_from()};
  };
  // Each step's logits rows, where kept: row t of the step is position first + t of its piece.
  auto keep_step_logits = [&](const std::vector<Piece>& step) {
    uint32_t rows = 0;
    for (const Piece& p : step) rows += p.rows;
    const std::vector<float> all = b.logits_rows(0, rows);
    uint32_t row = 0;
    for (const Piece& p : step)
      for (uint32_t t = 0; t < p.rows; ++t, ++row) {
        std::vector<float> logits(all.begin() + row * vocab, all.begin() + (row + 1) * vocab);
        check_finite_logits(logits, p.first + t, q[p.seq].all(), q[p.seq].opt->start);
        q[p.seq].r.logits.push_back(std::move(logits));
      }
  };
  for (size_t k = 0; k < steps.size();) {
    // Full chunks of one prompt in a row run as one StepRun, each step `chunk` positions on.
    size_t n = 1;
    if (!opt.keep_logits && steps[k].size() == 1 && steps[k][0].rows == chunk)
      while (k + n < steps.size() && steps[k + n].size() == 1 && steps[k + n][0].seq == steps[k][0].seq &&
             steps[k + n][0].rows == chunk)
        ++n;
    StepRun run{{}, static_cast<uint32_t>(n), chunk, opt.keep_logits};
    uint32_t row = 0;
    for (const Piece& p : steps[k]) run.segments.push_back(segment(p, row)), row += p.rows;
    b.run_steps(run);
    if (opt.keep_logits) keep_step_logits(steps[k]);
    k += n;
  }
  // The last prefill step's last row: NaN or Inf weights show in every row, and a NaN a step
  // makes before a layer's k and v reaches every later step through the KV cache.
  if (!opt.keep_logits) {
    const std::vector<Piece>& last = steps.back();
    uint32_t rows = 0;
    for (const Piece& p : last) rows += p.rows;
    const Piece& p = last.back();
    check_finite_logits(b.logits_rows(rows - 1, 1), p.first + p.rows - 1, q[p.seq].all(), q[p.seq].opt->start);
  }
  // The first token of each sequence, from its prompt's last row.
  for (Sequence& x : q) {
    const uint32_t at = x.opt->start + x.length;
    const int32_t t = b.read_history(x.slot, at, at + 1)[0];
    x.first_token = x.end = Clock::now();
    x.r.steps = x.length;
    if (x.opt->tokens == 0) {
      x.done = true;
      if (x.opt->on_step) x.opt->on_step(x.length, x.all(), t);
      continue;
    }
    x.r.tokens.push_back(t);
    x.planned = 1;
    if (x.opt->on_step) x.opt->on_step(x.length, x.all(), t);
    if (x.opt->stop && x.opt->stop(t)) x.r.stopped = true, x.done = true;
    if (x.opt->tokens == 1) x.done = true;
  }

  // Decode: every sequence still going, one row each, kDecodeChunk steps a run (one where the
  // logits are kept), as many as the sequence with the fewest tokens left can take. Where the
  // backend queues its runs, the next run is queued before the host reads one, so that the GPU
  // does not wait while the host copies a chunk's tokens back and hands them on (that wait put
  // mkrun's decode 4 % over mkbench's step on Llama-3.2-1B; docs/notes.md 119). A stop seen in
  // a run takes its sequence out of the runs queued after the read; those queued before it run
  // on, and what they write past the stop is never read.
  struct Queued {
    StepRun run;
    std::vector<uint32_t> seqs;  // by row
  };
  std::deque<Queued> queued;
  const bool ahead = b.queues_runs() && !opt.keep_logits;
  auto queue_next = [&] {
    Queued next;
    uint32_t n = opt.keep_logits ? 1 : kDecodeChunk;
    for (uint32_t i = 0; i < q.size(); ++i)
      if (!q[i].done && q[i].planned < q[i].opt->tokens) n = std::min(n, q[i].opt->tokens - q[i].planned);
    for (uint32_t i = 0; i < q.size(); ++i) {
      Sequence& x = q[i];
      if (x.done || x.planned >= x.opt->tokens) continue;
      const uint32_t row = static_cast<uint32_t>(next.seqs.size());
      next.run.segments.push_back({x.slot, x.opt->start + x.length + x.planned - 1, 1, row, x.fed_from()});
      next.seqs.push_back(i);
      x.planned += n;
    }
    if (next.seqs.empty()) return false;
    next.run.steps = n;
    next.run.all_logits = opt.keep_logits;
    b.run_steps(next.run);
    queued.push_back(std::move(next));
    return true;
  };
  queue_next();
  while (!queued.empty()) {
    if (ahead && queued.size() == 1) queue_next();
    const Queued& run = queued.front();
    if (opt.keep_logits) {
      const std::vector<float> all = b.logits_rows(0, static_cast<uint32_t>(run.seqs.size()));
      for (size_t row = 0; row < run.seqs.size(); ++row) {
        Sequence& x = q[run.seqs[row]];
        if (x.done) continue;
        std::vector<float> logits(all.begin() + row * vocab, all.begin() + (row + 1) * vocab);
        check_finite_logits(logits, x.r.steps, x.all(), x.opt->start);
        x.r.logits.push_back(std::move(logits));
      }
    }
    for (size_t row = 0; row < run.seqs.size(); ++row) {
      Sequence& x = q[run.seqs[row]];
      if (x.done) continue;
      const uint32_t from = run.run.segments[row].start + 1;
      const std::vector<int32_t> fed = b.read_history(x.slot, from, from + run.run.steps);
      for (const int32_t t : fed) {
        x.r.tokens.push_back(t);
        ++x.r.steps;  // the position that produced t
        if (x.opt->on_step) x.opt->on_step(x.r.steps, x.all(), t);
        // Generation ends at a stop token, which is kept; steps queued after it are discarded.
        if (x.opt->stop && x.opt->stop(t)) {
          x.r.stopped = true;
          break;
        }
      }
      x.end = Clock::now();
      if (x.r.stopped || x.r.tokens.size() >= x.opt->tokens) x.done = true;
    }
    // Each run's last step checked where nothing is queued ahead; else the last one, below.
    const Sequence& first = q[run.seqs[0]];
    if (!ahead && !opt.keep_logits) check_finite_logits(b.logits_rows(0, 1), first.r.steps - 1, first.all(), first.opt->start);
    queued.pop_front();
    if (queued.empty()) queue_next();
  }
  if (ahead && q.size() == 1 && q[0].r.steps > q[0].length) {
    const Sequence& x = q[0];
    check_finite_logits(b.logits_rows(0, 1), x.r.steps - 1, x.all(), x.opt->start);
  }

  std::vector<GenerateResult> out;
  for (Sequence& x : q) {
    x.r.seconds = seconds_between(start, x.end);
    x.r.decode_seconds = seconds_between(x.first_token, x.end);
    if (x.opt->tokens == 0) x.r.tokens.clear();
    out.push_back(std::move(x.r));
  }
  return out;
}

GenerateResult generate(Backend& b, const schedule::Schedule& s, const GenerateOptions& opt, uint32_t max_context) {
  return generate_batch(b, s, {static_cast<const SequenceOptions&>(opt)}, BatchOptions{opt.keep_logits, opt.prompt_chunk},
                        max_context)[0];
}

}  // namespace mk::device
