// scheduler.cpp: see scheduler.h for the policy.
#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4::engine_detail {

Scheduler::Scheduler(const SchedulerConfig& cfg)
    : cfg_(cfg), blocks_("kv-blocks", cfg.num_kv_blocks), slots_("seq-slots", cfg.max_num_seqs) {}

void Scheduler::add(Request* r) {
  r->state = RequestState::kWaiting;
  waiting_.push_back(r);
}

void Scheduler::release_kv(Request* r) {
  r->blocks.release(blocks_);
  if (r->slot >= 0) slots_.free(r->slot);
  r->slot = -1;
}

void Scheduler::remove(Request* r) {
  if (r->state == RequestState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->state == RequestState::kWaiting) {
    const auto it = std::find(waiting_.begin(), waiting_.end(), r);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  release_kv(r);
  r->state = RequestState::kFinished;
}

void Scheduler::preempt(Request* r, StepPlan* plan) {
  DSV4_CHECK(r->state == RequestState::kRunning, "preempting request {} that is not running", r->seq_id);
  // Undo its part of this step's plan, if it already has one.
  for (auto it = plan->seqs.begin(); it != plan->seqs.end(); ++it) {
    if (it->req == r) {
      plan->n_tokens -= it->n_tokens;
      if (it->decode) --plan->n_decode;
      plan->seqs.erase(it);
      break;
    }
  }
  running_.erase(std::find(running_.begin(), running_.end(), r));
  plan->preempted.emplace_back(r, r->slot);
  release_kv(r);
  r->n_computed = 0;
  r->state = RequestState::kWaiting;
  ++r->n_preemptions;
  waiting_.push_front(r);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = cfg_.max_num_batched_tokens;
  // Phases 1 and 2 over a snapshot: preemption edits running_.
  for (const bool decode_phase : {true, false}) {
    const std::vector<Request*> order = running_;
    for (Request* r : order) {
      if (budget == 0) break;
      if (r->state != RequestState::kRunning) continue;  // preempted earlier in this step
      const int64_t pending = r->n_pending();
      DSV4_CHECK(pending >= 1, "running request {} has nothing to feed", r->seq_id);
      if ((pending == 1) != decode_phase) continue;
      const int64_t n = std::min(pending, budget);
      bool self_preempted = false;
      while (!r->blocks.grow(blocks_, r->n_computed + n)) {
        Request* victim = running_.back();
        preempt(victim, &plan);
        if (victim == r) {
          self_preempted = true;
          break;
        }
      }
      if (self_preempted) continue;
      plan.seqs.push_back(ScheduledSeq{r, n, r->n_computed + n == int64_t(r->tokens.size()), decode_phase});
      plan.n_tokens += n;
      if (decode_phase) ++plan.n_decode;
      budget -= n;
    }
  }
  if (!plan.preempted.empty()) return plan;

  while (!waiting_.empty() && budget > 0 && int32_t(running_.size()) < cfg_.max_num_seqs) {
    Request* r = waiting_.front();
    const int64_t total = int64_t(r->tokens.size());
    if (!blocks_.can_allocate(kv::blocks_for_tokens(total)) || !slots_.can_allocate(1)) break;
    std::vector<int32_t> slot;
    slots_.allocate(1, &slot);
    r->slot = slot[0];
    DSV4_CHECK(r->blocks.grow(blocks_, total), "block allocation failed after can_allocate");
    waiting_.pop_front();
    r->state = RequestState::kRunning;
    r->n_computed = 0;
    running_.push_back(r);
    const int64_t n = std::min(total, budget);
    plan.seqs.push_back(ScheduledSeq{r, n, n == total, false});
    plan.n_tokens += n;
    budget -= n;
  }
  return plan;
}

}  // namespace dsv4::engine_detail
