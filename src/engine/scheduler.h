// scheduler.h: decides which requests run in the next step and how many tokens each feeds.
// Pure host logic over the KV block and slot pools: it never touches device memory; its only
// output is a StepPlan.
//
// Policy (one step):
//  1. Decodes first: every running request with one token to feed, oldest first, so new prompts
//     never stall the ones already streaming (inter-token latency stays flat).
//  2. Then running prefills (a prompt being fed in chunks), oldest first, within what is left of
//     max_num_batched_tokens.
//  3. Then admissions from the wait queue, FIFO, while tokens, slots and blocks remain. A request
//     is admitted only when the pool can hold its whole prompt now; a prompt longer than the
//     budget is fed in chunks over several steps. The head of the queue is never overtaken, so
//     big requests cannot starve.
//  Preemption: a decode that crosses into a new 256-token block when none is free preempts the
//  most recently admitted running request (possibly itself): its blocks and slot are freed and it
//  goes back to the front of the queue with its generated tokens appended, to be recomputed
//  (vLLM's recompute policy). Its stream is untouched; the counter-based sampler draws the same
//  tokens again. Nothing is admitted in a step that preempted. Because max_model_len fits in the
//  pool, the oldest request can always proceed, so the engine never deadlocks.
//  Forks (the n choices of one request, Request::fork_parent): the waiting choices are not in the
//  queue; their first choice feeds its prompt up to the last-but-one token, and the next plan
//  first gives each waiting choice a slot and blocks and lists it in StepPlan::forks (the engine
//  has the runner copy the state before the step), so all choices feed the last prompt token
//  together. The prompt's full blocks are shared (BlockPool::share: no position of theirs is
//  written again); only the partly filled last block is the choice's own. A choice that finds no room then joins the front of the queue and computes its
//  prompt itself; if the first choice ends before that point (abort, error), the next choice
//  takes its place.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kvcache/block_pool.h"

namespace dsv4::engine_detail {

struct SchedulerConfig {
  int32_t max_num_seqs = 32;
  int32_t max_num_batched_tokens = 2048;
  int32_t num_kv_blocks = 0;
};

struct ScheduledSeq {
  Request* req = nullptr;
  int64_t n_tokens = 0;  // fed this step, from req->n_computed
  bool sample = false;   // the chunk reaches the end of req->tokens
  bool decode = false;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  std::vector<std::pair<Request*, int32_t>> preempted;  // (request, its former slot): the runner forgets them
  std::vector<std::pair<Request*, Request*>> forks;     // (first choice, choice): copy state before the step
  int64_t n_tokens = 0;
  int32_t n_decode = 0;
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& cfg);

  void add(Request* r);            // joins the back of the wait queue, or its fork_parent's choices
  StepPlan schedule();
  // Removes a request from wherever it is and frees its blocks and slot.
  void remove(Request* r);
  // A fork of this plan that the runner could not make: the choice leaves the plan, frees its
  // slot and blocks and joins the front of the queue to compute its prompt itself.
  void unfork(Request* r, StepPlan* plan);

  const std::deque<Request*>& waiting() const { return waiting_; }
  // Requests not running: the queue and the choices waiting for their first choice's prompt.
  int64_t n_waiting() const { return int64_t(waiting_.size()) + n_fork_waiting_; }
  const std::vector<Request*>& running() const { return running_; }
  const kv::BlockPool& blocks() const { return blocks_; }
  const kv::BlockPool& slots() const { return slots_; }

 private:
  void preempt(Request* r, StepPlan* plan);
  // Takes r out of this plan and the running list, frees its KV and puts it at the queue's front.
  void requeue(Request* r, StepPlan* plan);
  void release_kv(Request* r);
  void make_forks(StepPlan* plan);
  // The prompt tokens r may feed now: all it has pending, except that a first choice with
  // waiting choices stops before its prompt's last token.
  static int64_t feedable(const Request* r);

  SchedulerConfig cfg_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order, oldest first
  int64_t n_fork_waiting_ = 0;     // choices in some running or waiting request's fork_children
  kv::BlockPool blocks_;
  kv::BlockPool slots_;
};

}  // namespace dsv4::engine_detail
