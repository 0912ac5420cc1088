#include "device/engine.hpp"

#include <algorithm>
#include <chrono>

namespace mk::device {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

const char* end_reason_name(EndReason r) {
  switch (r) {
    case EndReason::stop: return "stop";
    case EndReason::length: return "length";
    case EndReason::cancelled: return "cancelled";
    case EndReason::error: return "error";
  }
  return "?";
}

struct Engine::Sequence {
  uint64_t id = 0;
  EngineRequest req;
  uint32_t slot = 0;
  uint32_t prefilled = 0;  // prompt positions run
  uint32_t generated = 0;  // tokens delivered
  bool ended = false;
  EngineResult result;
  Clock::time_point submitted;
  uint32_t length() const { return static_cast<uint32_t>(req.prompt.size()); }
};

Engine::Engine(Backend& b, const schedule::Schedule& s, uint32_t max_context, uint32_t queue_limit)
    : backend_(b),
      s_(s),
      max_context_(max_context),
      queue_limit_(queue_limit),
      slots_(std::min(b.slots(), s.max_tokens)),
      vocab_(s.tensors[s.logits_tensor].elements()),
      slot_used_(slots_, false) {}

Engine::~Engine() = default;

uint64_t Engine::submit(EngineRequest r) {
  if (r.prompt.empty()) throw std::invalid_argument("the prompt needs at least one token");
  for (int32_t id : r.prompt)
    if (id < 0 || static_cast<uint64_t>(id) >= vocab_)
      throw std::invalid_argument("prompt token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_) + ")");
  if (r.max_tokens == 0) throw std::invalid_argument("max_tokens must be at least 1");
  if (r.sampling) schedule::slot_sampling_of(*r.sampling);  // its values checked
  if (r.prompt.size() + uint64_t{r.max_tokens} - 1 > max_context_)
    throw std::invalid_argument("the prompt (" + std::to_string(r.prompt.size()) + " tokens) and max_tokens (" +
                                std::to_string(r.max_tokens) + ") do not fit the context of " + std::to_string(max_context_) +
                                " positions");
  auto q = std::make_unique<Sequence>();
  q->req = std::move(r);
  q->submitted = Clock::now();
  q->result.prompt_tokens = q->length();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) throw std::runtime_error("the engine is shutting down");
  if (waiting_.size() >= queue_limit_)
    throw EngineBusy(std::to_string(waiting_.size()) + " requests are already waiting for one of the " +
                     std::to_string(slots_) + " sequence slots");
  q->id = next_id_++;
  const uint64_t id = q->id;
  waiting_.push_back(std::move(q));
  wake_.notify_one();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  wake_.notify_one();
}

void Engine::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  wake_.notify_one();
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {slots_, running_count_, static_cast<uint32_t>(waiting_.size()), served_.load()};
}

void Engine::finish(Sequence& q, EndReason reason, const std::string& error) {
  if (q.ended) return;
  q.ended = true;
  q.result.reason = reason;
  q.result.error = error;
  q.result.tokens = q.generated;
  q.result.seconds = since(q.submitted);
  ++served_;
  if (q.req.on_end) q.req.on_end(q.result);
}

// Under the lock: the cancels applied (queued ones end here, running ones at once: they are
// between launches), then queued requests into free slots.
void Engine::admit(std::unique_lock<std::mutex>& lock) {
  std::vector<uint64_t> cancels;
  cancels.swap(cancels_);
  std::vector<std::unique_ptr<Sequence>> dropped;
  for (const uint64_t id : cancels) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
      if ((*it)->id == id) {
        dropped.push_back(std::move(*it));
        waiting_.erase(it);
        break;
      }
  }
  while (!waiting_.empty() && running_.size() < slots_) {
    std::unique_ptr<Sequence> q = std::move(waiting_.front());
    waiting_.pop_front();
    q->slot = static_cast<uint32_t>(std::find(slot_used_.begin(), slot_used_.end(), false) - slot_used_.begin());
    slot_used_[q->slot] = true;
    q->result.queue_seconds = since(q->submitted);
    running_.push_back(std::move(q));
  }
  running_count_ = static_cast<uint32_t>(running_.size());
  lock.unlock();  // callbacks run without the lock (they may submit or cancel)
  for (auto& q : dropped) finish(*q, EndReason::cancelled);
  for (auto& q : running_)
    if (std::find(cancels.begin(), cancels.end(), q->id) != cancels.end()) finish(*q, EndReason::cancelled);
  lock.lock();
}

void Engine::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    admit(lock);
    if (stopping_) break;
    // The ended sequences leave; their slots are free for the next admission.
    auto gone = std::remove_if(running_.begin(), running_.end(), [&](const std::unique_ptr<Sequence>& q) {
      if (q->ended) slot_used_[q->slot] = false;
      return q->ended;
    });
    if (gone != running_.end()) {
      running_.erase(gone, running_.end());
      continue;  // admit into the freed slots before the next launch
    }
    running_count_ = static_cast<uint32_t>(running_.size());
    if (running_.empty()) {
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !cancels_.empty(); });
      continue;
    }
    lock.unlock();
    launch();
    lock.lock();
  }
  // Shutting down: what waits and what runs ends here.
  std::deque<std::unique_ptr<Sequence>> waiting;
  waiting.swap(waiting_);
  lock.unlock();
  for (auto& q : waiting) finish(*q, EndReason::cancelled);
  for (auto& q : running_) finish(*q, EndReason::cancelled);
  lock.lock();
  running_.clear();
  running_count_ = 0;
}

// One launch: every running sequence's next row (decoding) or chunk of its prompt. While some
// prompt is being prefilled, one step of mixed rows (each decoding sequence's row, then prompt
// chunks in admission order, as many rows as the schedule's max_tokens allow); else decode steps
// of one row a sequence, kDecodeChunk of them or as many as the sequence with the fewest tokens
// left can take. A sequence that ends in a launch ends there; what its later steps wrote to its
// slot is never read, and the slot's next sequence starts again at position 0.
bool Engine::launch() {
  struct Row {
    Sequence* q;
    uint32_t first, rows;  // positions [first, first + rows)
  };
  std::vector<Row> plan;
  uint32_t budget = s_.max_tokens;
  bool prefill = false;
  for (const auto& q : running_)
    if (q->prefilled < q->length()) prefill = true;
  uint32_t steps = 1;
  if (!prefill) {
    steps = kDecodeChunk;
    for (const auto& q : running_) steps = std::min(steps, q->req.max_tokens - q->generated);
  }
  for (const auto& q : running_)  // decoding: the position after the last generated token's
    if (q->prefilled == q->length() && budget > 0) plan.push_back({q.get(), q->length() + q->generated - 1, 1}), --budget;
  for (const auto& q : running_)
    if (q->prefilled < q->length() && budget > 0) {
      const uint32_t n = std::min(budget, q->length() - q->prefilled);
      plan.push_back({q.get(), q->prefilled, n});
      budget -= n;
    }
  if (plan.empty()) return false;
  StepRun run;
  run.steps = steps;
  run.advance = 1;
  uint32_t row = 0;
  for (const Row& r : plan) {
    run.segments.push_back({r.q->slot, r.first, r.rows, row, r.q->length()});
    row += r.rows;
  }
  try {
    for (const Row& r : plan)
      if (r.first == 0) {  // a new sequence in its slot: its prompt, its sampling
        backend_.set_history(r.q->slot, 0, r.q->req.prompt);
        backend_.set_sampling(r.q->slot, r.q->req.sampling ? schedule::slot_sampling_of(*r.q->req.sampling) : schedule::SlotSampling{});
      }
    backend_.run_steps(run);
    // One row that fed a token at the last step: finite logits (as generate_batch checks: NaN or
    // Inf weights show in every row, and a NaN a step makes reaches every later step of its
    // sequence through the KV cache), a vocabulary's copy a launch rather than one a sequence.
    row = 0;
    const Row* fed = nullptr;  // the last row that fed a token
    uint32_t fed_row = 0;
    for (const Row& r : plan) {
      row += r.rows;
      if (r.first + r.rows + steps - 1 >= r.q->length()) fed = &r, fed_row = row - 1;
    }
    if (fed) {
      const uint32_t last = fed->first + fed->rows - 1 + (steps - 1);
      check_finite_logits(backend_.logits_rows(fed_row, 1), last, fed->q->length() + fed->q->req.max_tokens - 1);
    }
    for (const Row& r : plan) {
      Sequence& q = *r.q;
      if (q.ended) continue;
      std::vector<int32_t> tokens;
      if (q.prefilled < q.length()) {  // a prompt chunk: its last one gives the first token
        q.prefilled += r.rows;
        if (q.prefilled < q.length()) continue;
        tokens = backend_.read_history(q.slot, q.length(), q.length() + 1);
      } else {
        tokens = backend_.read_history(q.slot, r.first + 1, r.first + 1 + steps);
      }
      for (const int32_t t : tokens) {
        if (q.generated == 0) q.result.first_token_seconds = since(q.submitted);
        ++q.generated;
        if (q.req.is_stop && q.req.is_stop(t)) {
          finish(q, EndReason::stop);
          break;
        }
        if (q.req.on_token && !q.req.on_token(t)) {
          finish(q, EndReason::stop);
          break;
        }
        if (q.generated >= q.req.max_tokens) {
          finish(q, EndReason::length);
          break;
        }
      }
    }
  } catch (const std::exception& e) {
    for (const Row& r : plan) finish(*r.q, EndReason::error, e.what());
  }
  return true;
}

}  // namespace mk::device
