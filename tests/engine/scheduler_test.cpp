// scheduler_test.cpp: the scheduling policy (scheduler.h) step by step, with the runner simulated:
// decode-first, chunked prefill within the token budget, FIFO admission by free blocks and
// slots, recompute preemption of the newest request (itself included), and block accounting.
#include <gtest/gtest.h>

#include <memory>

#include "engine/scheduler.h"

namespace dsv4::engine_detail {
namespace {

struct Fixture {
  explicit Fixture(SchedulerConfig c) : sched(c) {}
  Request* add(int64_t id, int64_t n_prompt) {
    auto r = std::make_unique<Request>();
    r->seq_id = id;
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

}  // namespace
}  // namespace dsv4::engine_detail
