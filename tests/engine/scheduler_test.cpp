// scheduler_test.cpp: the scheduling policy (scheduler.h) step by step, with the runner simulated:
// decode-first, chunked prefill within the token budget, FIFO admission by free blocks and
// slots, recompute preemption of the newest request (itself included), block accounting, and the
// forks that let the n choices of one request share its prompt.
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

namespace dsv4::engine_detail {
namespace {

struct Fixture {
  explicit Fixture(SchedulerConfig c) : sched(c) {}
  Request* add(int64_t id, int64_t n_prompt, Request* fork_parent = nullptr) {
    auto r = std::make_unique<Request>();
    r->seq_id = id;
    r->fork_parent = fork_parent;
    r->tokens.assign(size_t(n_prompt), 7);
    r->n_prompt = n_prompt;
    reqs.push_back(std::move(r));
    sched.add(reqs.back().get());
    return reqs.back().get();
  }
  // Runs a plan as the engine would: tokens are computed, samples append a token.
  StepPlan step() {
    StepPlan p = sched.schedule();
    for (const ScheduledSeq& s : p.seqs) {
      s.req->n_computed += s.n_tokens;
      if (s.sample) s.req->tokens.push_back(9);
    }
    return p;
  }
  const ScheduledSeq* find(const StepPlan& p, const Request* r) {
    for (const ScheduledSeq& s : p.seqs)
      if (s.req == r) return &s;
    return nullptr;
  }
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
};

TEST(Scheduler, ChunksPrefillsAndPutsDecodesFirst) {
  Fixture f({/*max_num_seqs=*/4, /*max_num_batched_tokens=*/10, /*num_kv_blocks=*/100});
  Request* a = f.add(1, 25);
  StepPlan p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 10);
  EXPECT_FALSE(p.seqs[0].sample);
  Request* b = f.add(2, 3);
  p = f.step();  // a takes the whole budget: b waits
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.n_tokens, 10);
  EXPECT_EQ(b->state, RequestState::kWaiting);
  p = f.step();  // a's last 5 tokens sample; b is admitted with the rest of the budget
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(f.find(p, a)->n_tokens, 5);
  EXPECT_TRUE(f.find(p, a)->sample);
  EXPECT_EQ(f.find(p, b)->n_tokens, 3);
  EXPECT_TRUE(f.find(p, b)->sample);
  Request* c = f.add(3, 30);
  p = f.step();  // both decode (first, one token each), then c's first chunk fills the budget
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.n_decode, 2);
  EXPECT_TRUE(p.seqs[0].decode && p.seqs[1].decode);
  EXPECT_EQ(f.find(p, c)->n_tokens, 8);
  EXPECT_EQ(p.n_tokens, 10);
}

TEST(Scheduler, AdmitsByFreeBlocksAndSlotsInOrder) {
  Fixture f({/*max_num_seqs=*/2, /*max_num_batched_tokens=*/1000, /*num_kv_blocks=*/3});
  Request* a = f.add(1, 300);  // 2 blocks
  Request* b = f.add(2, 300);  // 2 blocks: does not fit next to a
  Request* c = f.add(3, 10);   // would fit, but never overtakes b
  StepPlan p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(f.sched.blocks().n_free(), 1);
  EXPECT_EQ(b->state, RequestState::kWaiting);
  EXPECT_EQ(c->state, RequestState::kWaiting);
  f.sched.remove(a);
  EXPECT_EQ(f.sched.blocks().n_free(), 3);
  p = f.step();
  ASSERT_EQ(p.seqs.size(), 2u);  // b, then c
  EXPECT_EQ(p.seqs[0].req, b);
  EXPECT_EQ(p.seqs[1].req, c);
  Request* d = f.add(4, 1);
  p = f.step();  // two running = max_num_seqs: d waits for a slot
  EXPECT_EQ(d->state, RequestState::kWaiting);
  EXPECT_EQ(f.sched.slots().n_free(), 0);
  f.sched.remove(b);
  f.sched.remove(c);
  p = f.step();
  EXPECT_EQ(d->state, RequestState::kRunning);
  f.sched.remove(d);
  EXPECT_EQ(f.sched.blocks().n_free(), 3);
  EXPECT_EQ(f.sched.slots().n_free(), 2);
}

TEST(Scheduler, PreemptsTheNewestWhenADecodeNeedsABlock) {
  Fixture f({4, 1000, /*num_kv_blocks=*/2});
  Request* a = f.add(1, 256);
  Request* b = f.add(2, 200);
  StepPlan p = f.step();  // both prefill and sample: a now has 257 tokens, position 256 needs block 2
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(f.sched.blocks().n_free(), 0);
  p = f.step();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].first, b);
  EXPECT_EQ(b->state, RequestState::kWaiting);
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_EQ(b->n_preemptions, 1);
  EXPECT_EQ(b->slot, -1);
  ASSERT_EQ(p.seqs.size(), 1u);  // a decodes in b's block; nothing is admitted in this step
  EXPECT_EQ(p.seqs[0].req, a);
  EXPECT_EQ(a->blocks.n_blocks(), 2);
  EXPECT_EQ(f.sched.waiting().front(), b);
  f.sched.remove(a);
  p = f.step();  // b is recomputed: prompt and its generated token, then samples again
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 201);
  EXPECT_TRUE(p.seqs[0].sample);
}

TEST(Scheduler, TheNeedyNewestPreemptsItself) {
  Fixture f({4, 1000, 2});
  Request* a = f.add(1, 200);
  Request* b = f.add(2, 256);
  f.step();
  StepPlan p = f.step();  // a decodes at 200 (fits); b needs a second block and is the newest
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].first, b);
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].req, a);
  EXPECT_EQ(f.sched.blocks().n_free(), 1);
}

// Three choices of one 300-token prompt: the first feeds 299 tokens (chunked), the next plan forks
// the other two (a slot, the full first block shared and a second block of their own each, listed
// in plan.forks), and all three feed the last prompt token together and sample.
TEST(Scheduler, ChoicesForkFromTheFirstBeforeTheLastPromptToken) {
  Fixture f({/*max_num_seqs=*/4, /*max_num_batched_tokens=*/200, /*num_kv_blocks=*/10});
  Request* a = f.add(1, 300);
  Request* b = f.add(2, 300, a);
  Request* c = f.add(3, 300, a);
  EXPECT_EQ(f.sched.waiting().size(), 1u);  // the choices wait on a, not in the queue
  EXPECT_EQ(f.sched.n_waiting(), 3);
  StepPlan p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 200);
  p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 99);  // stops before the last prompt token
  EXPECT_FALSE(p.seqs[0].sample);
  EXPECT_TRUE(p.forks.empty());
  p = f.step();
  ASSERT_EQ(p.forks.size(), 2u);
  EXPECT_EQ(p.forks[0], std::make_pair(a, b));
  EXPECT_EQ(p.forks[1], std::make_pair(a, c));
  ASSERT_EQ(p.seqs.size(), 3u);
  for (Request* r : {a, b, c}) {
    const ScheduledSeq* s = f.find(p, r);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->n_tokens, 1);
    EXPECT_TRUE(s->sample);
    EXPECT_TRUE(s->decode);
    EXPECT_EQ(r->state, RequestState::kRunning);
    EXPECT_EQ(r->blocks.n_blocks(), 2);
  }
  EXPECT_EQ(b->n_forked, 299);
  EXPECT_EQ(c->n_forked, 299);
  EXPECT_EQ(a->n_forked, 0);
  EXPECT_TRUE(a->fork_children.empty());
  EXPECT_EQ(b->fork_parent, nullptr);
  EXPECT_EQ(f.sched.n_waiting(), 0);
  EXPECT_EQ(f.sched.slots().n_free(), 1);
  // The prompt's full first block is shared; each choice owns the partly filled second one.
  EXPECT_EQ(b->blocks.blocks()[0], a->blocks.blocks()[0]);
  EXPECT_EQ(c->blocks.blocks()[0], a->blocks.blocks()[0]);
  EXPECT_EQ(f.sched.blocks().holders(a->blocks.blocks()[0]), 3);
  EXPECT_NE(b->blocks.blocks()[1], a->blocks.blocks()[1]);
  EXPECT_NE(b->blocks.blocks()[1], c->blocks.blocks()[1]);
  EXPECT_EQ(f.sched.blocks().n_free(), 6);
  f.sched.remove(a);  // the shared block stays with b and c
  f.sched.remove(b);
  EXPECT_EQ(f.sched.blocks().n_free(), 8);
  f.sched.remove(c);
  EXPECT_EQ(f.sched.blocks().n_free(), 10);
}

// A choice that finds no slot joins the queue's front and computes its prompt itself; a fork the
// runner could not make (unfork) does the same and frees what it was given.
TEST(Scheduler, ChoicesWithoutRoomOrAFailedForkComputeThePromptThemselves) {
  Fixture f({/*max_num_seqs=*/2, 1000, 10});
  Request* a = f.add(1, 10);
  Request* b = f.add(2, 10, a);
  Request* c = f.add(3, 10, a);
  Request* d = f.add(4, 5);
  StepPlan p = f.step();  // a feeds 9 tokens, d is admitted beside it (two slots)
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(f.find(p, a)->n_tokens, 9);
  p = f.step();           // no slot for b or c: both queue, in choice order, ahead of nothing
  EXPECT_TRUE(p.forks.empty());
  EXPECT_EQ(b->state, RequestState::kWaiting);
  ASSERT_EQ(f.sched.waiting().size(), 2u);
  EXPECT_EQ(f.sched.waiting()[0], b);
  EXPECT_EQ(f.sched.waiting()[1], c);
  EXPECT_EQ(f.sched.n_waiting(), 2);
  f.sched.remove(d);
  p = f.step();           // b is admitted with its whole prompt
  const ScheduledSeq* sb = f.find(p, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->n_tokens, 10);
  EXPECT_TRUE(sb->sample);
  EXPECT_EQ(b->n_forked, 0);

  Fixture g({4, 1000, 10});
  Request* x = g.add(1, 10);
  Request* y = g.add(2, 10, x);
  g.step();
  p = g.sched.schedule();
  ASSERT_EQ(p.forks.size(), 1u);
  g.sched.unfork(y, &p);
  EXPECT_TRUE(p.forks.empty());
  EXPECT_EQ(g.find(p, y), nullptr);
  EXPECT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.n_tokens, 1);
  EXPECT_EQ(y->state, RequestState::kWaiting);
  EXPECT_EQ(y->n_computed, 0);
  EXPECT_EQ(y->n_forked, 0);
  EXPECT_EQ(y->slot, -1);
  EXPECT_EQ(g.sched.waiting().front(), y);
  EXPECT_EQ(g.sched.slots().n_free(), 3);
  EXPECT_EQ(g.sched.blocks().n_free(), 9);
}

// The first choice ends before the fork (abort): the next choice takes its place at the front of
// the queue and the others wait on it; a waiting choice can be removed on its own.
TEST(Scheduler, TheNextChoiceReplacesAFirstChoiceThatEnds) {
  Fixture f({4, 1000, 10});
  Request* a = f.add(1, 10);
  Request* b = f.add(2, 10, a);
  Request* c = f.add(3, 10, a);
  Request* d = f.add(4, 10, a);
  f.step();
  f.sched.remove(c);
  EXPECT_EQ(f.sched.n_waiting(), 2);
  ASSERT_EQ(a->fork_children.size(), 2u);
  f.sched.remove(a);
  EXPECT_EQ(f.sched.waiting().front(), b);
  EXPECT_EQ(b->fork_parent, nullptr);
  ASSERT_EQ(b->fork_children.size(), 1u);
  EXPECT_EQ(b->fork_children[0], d);
  EXPECT_EQ(d->fork_parent, b);
  EXPECT_EQ(f.sched.n_waiting(), 2);
  StepPlan p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].req, b);
  EXPECT_EQ(p.seqs[0].n_tokens, 9);
  p = f.step();
  ASSERT_EQ(p.forks.size(), 1u);
  EXPECT_EQ(p.forks[0], std::make_pair(b, d));
  EXPECT_EQ(f.sched.blocks().n_free(), 8);
}

// A choice forked in a plan in which an older request's decode then needs its block is preempted
// (the newest) and leaves the fork list; the runner never copies it.
TEST(Scheduler, AForkPreemptedInItsOwnPlanIsNotCopied) {
  Fixture f({4, 1000, 3});
  Request* z = f.add(1, 256);  // one full block; its first decode needs a second
  Request* a = f.add(2, 10);
  Request* b = f.add(3, 10, a);
  StepPlan p = f.step();  // z samples after its prompt, a feeds 9 tokens: one block left
  ASSERT_EQ(p.seqs.size(), 2u);
  p = f.step();  // b forks into the last block, then z's decode takes it back
  EXPECT_TRUE(p.forks.empty());
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].first, b);
  EXPECT_NE(f.find(p, z), nullptr);
  EXPECT_NE(f.find(p, a), nullptr);
  EXPECT_EQ(f.find(p, b), nullptr);
  EXPECT_EQ(b->state, RequestState::kWaiting);
  EXPECT_EQ(b->n_forked, 0);
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_EQ(b->blocks.n_blocks(), 0);
  EXPECT_EQ(f.sched.waiting().front(), b);
  EXPECT_EQ(z->blocks.n_blocks(), 2);
  EXPECT_EQ(f.sched.blocks().n_free(), 0);
}

// A fork needs room for the prompt's last token as well: at 256 computed tokens that is a second
// block, which the pool does not have, so the choice queues instead of forking and preempting
// itself at once.
TEST(Scheduler, AForkNeedsRoomForItsLastPromptToken) {
  Fixture f({4, 1000, 2});
  Request* a = f.add(1, 257);  // admitted with the blocks of its whole prompt: both
  Request* b = f.add(2, 257, a);
  StepPlan p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 256);
  p = f.step();
  EXPECT_TRUE(p.forks.empty());
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].req, a);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(b->state, RequestState::kWaiting);
  EXPECT_EQ(b->n_preemptions, 0);
  EXPECT_EQ(f.sched.waiting().front(), b);
  EXPECT_EQ(f.sched.blocks().holders(a->blocks.blocks()[0]), 1);
}

}  // namespace
}  // namespace dsv4::engine_detail
