// scheduler.cpp: see scheduler.h for the policy.
#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4::engine_detail {

Scheduler::Scheduler(const SchedulerConfig& cfg)
    : cfg_(cfg), blocks_("kv-blocks", cfg.num_kv_blocks), slots_("seq-slots", cfg.max_num_seqs) {}

void Scheduler::add(Request* r) {
  r->state = RequestState::kWaiting;
  if (r->fork_parent != nullptr) {
    DSV4_CHECK(r->fork_parent->n_prompt >= 2 && r->fork_parent->n_computed == 0,
               "request {} forks from request {}, which cannot be forked", r->seq_id, r->fork_parent->seq_id);
    r->fork_parent->fork_children.push_back(r);
    ++n_fork_waiting_;
    return;
  }
  waiting_.push_back(r);
}

int64_t Scheduler::feedable(const Request* r) {
  const int64_t pending = r->n_pending();
  return r->fork_children.empty() ? pending : std::min(pending, r->n_prompt - 1 - r->n_computed);
}

void Scheduler::release_kv(Request* r) {
  r->blocks.release(blocks_);
  if (r->slot >= 0) slots_.free(r->slot);
  r->slot = -1;
}

void Scheduler::remove(Request* r) {
  if (Request* parent = r->fork_parent; parent != nullptr) {  // a choice still waiting for its first
    auto& kids = parent->fork_children;
    kids.erase(std::find(kids.begin(), kids.end(), r));
    --n_fork_waiting_;
    r->fork_parent = nullptr;
  } else if (r->state == RequestState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->state == RequestState::kWaiting) {
    const auto it = std::find(waiting_.begin(), waiting_.end(), r);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  if (!r->fork_children.empty()) {
    // A first choice that ends before its prompt is computed (abort, error): the next choice
    // becomes the first, at the front of the queue (it arrived with r), the others wait on it.
    Request* next = r->fork_children.front();
    next->fork_parent = nullptr;
    next->fork_children.assign(r->fork_children.begin() + 1, r->fork_children.end());
    for (Request* c : next->fork_children) c->fork_parent = next;
    r->fork_children.clear();
    --n_fork_waiting_;
    waiting_.push_front(next);
  }
  release_kv(r);
  r->state = RequestState::kFinished;
}

void Scheduler::requeue(Request* r, StepPlan* plan) {
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
  release_kv(r);
  r->n_computed = 0;
  r->n_forked = 0;
  r->state = RequestState::kWaiting;
  waiting_.push_front(r);
}

void Scheduler::unfork(Request* r, StepPlan* plan) {
  DSV4_CHECK(r->state == RequestState::kRunning && r->n_forked > 0, "request {} was not forked", r->seq_id);
  std::erase_if(plan->forks, [r](const auto& f) { return f.second == r; });
  requeue(r, plan);
}

void Scheduler::make_forks(StepPlan* plan) {
  // By index over the requests running before this call: forked choices join running_ at its
  // back and wait on nobody (no copy of the list every step).
  for (size_t i = 0, n_before = running_.size(); i < n_before; ++i) {
    Request* parent = running_[i];
    if (parent->fork_children.empty() || parent->n_computed != parent->n_prompt - 1) continue;
    std::vector<Request*> queue_front;  // choices without room, in choice order
    for (Request* c : parent->fork_children) {
      c->fork_parent = nullptr;
      --n_fork_waiting_;
      // Blocks whose 256 positions are all computed are never written again: the choice shares
      // them; the partly filled last one is its own (the runner copies it). Room is checked for
      // the last prompt token too, so that a fork is not preempted by its own first token.
      const int64_t n = parent->n_computed;
      const int32_t n_shared = int32_t(n / kv::kBlockTokens);
      std::vector<int32_t> slot;
      if (int32_t(running_.size()) >= cfg_.max_num_seqs ||
          !blocks_.can_allocate(kv::blocks_for_tokens(n + 1) - n_shared) || !slots_.allocate(1, &slot)) {
        queue_front.push_back(c);
        continue;
      }
      c->slot = slot[0];
      c->blocks.share_prefix(parent->blocks, n_shared, blocks_);
      DSV4_CHECK(c->blocks.grow(blocks_, n), "block allocation failed after can_allocate");
      c->state = RequestState::kRunning;
      c->n_computed = n;
      c->n_forked = n;
      running_.push_back(c);
      plan->forks.emplace_back(parent, c);
    }
    parent->fork_children.clear();
    waiting_.insert(waiting_.begin(), queue_front.begin(), queue_front.end());
  }
}

void Scheduler::preempt(Request* r, StepPlan* plan) {
  DSV4_CHECK(r->state == RequestState::kRunning, "preempting request {} that is not running", r->seq_id);
  // A choice forked in this plan has no state in the runner yet: it leaves the fork list.
  std::erase_if(plan->forks, [r](const auto& f) { return f.second == r; });
  plan->preempted.emplace_back(r, r->slot);
  ++r->n_preemptions;
  requeue(r, plan);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  make_forks(&plan);
  int64_t budget = cfg_.max_num_batched_tokens;
  // Phases 1 and 2 over a snapshot: preemption edits running_.
  for (const bool decode_phase : {true, false}) {
    const std::vector<Request*> order = running_;
    for (Request* r : order) {
      if (budget == 0) break;
      if (r->state != RequestState::kRunning) continue;  // preempted earlier in this step
      const int64_t pending = r->n_pending();
      DSV4_CHECK(pending >= 1 && feedable(r) >= 1, "running request {} has nothing to feed", r->seq_id);
      if ((pending == 1) != decode_phase) continue;
      const int64_t n = std::min(feedable(r), budget);
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
    const int64_t n = std::min(feedable(r), budget);
    plan.seqs.push_back(ScheduledSeq{r, n, n == total, false});
    plan.n_tokens += n;
    budget -= n;
  }
  return plan;
}

}  // namespace dsv4::engine_detail
