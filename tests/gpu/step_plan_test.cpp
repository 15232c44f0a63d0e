// step_plan_test.cpp: the host half of a GpuModel step without a GPU: every validation error
// (and that a valid step passes), the flat arrays of a mixed prefill/decode step, the padding of
// a decode step to a captured graph size, and the model-support check.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "gpu/model_support.h"
#include "gpu/step_plan.h"
#include "model/make_model.h"

namespace dsv4::gpu {
namespace {

constexpr StepLimits kLimits{/*max_seqs=*/4, /*max_tokens=*/64, /*vocab=*/100, /*n_kv_blocks=*/8,
                             /*max_positions=*/1024};

// Sequences of a step; the spans are rebuilt after every add (the vectors may have moved).
struct Seqs {
  std::vector<std::vector<int32_t>> tokens, tables;
  std::vector<int32_t> slots;
  std::vector<int64_t> pos0s;
  std::vector<char> want;
  std::vector<GpuStepSeq> seqs;

  void add(int32_t slot, int64_t pos0, int n, std::vector<int32_t> table, bool logits) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 7 + int32_t(tokens.size()));
    tokens.push_back(std::move(t));
    tables.push_back(std::move(table));
    slots.push_back(slot);
    pos0s.push_back(pos0);
    want.push_back(logits);
    seqs.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      seqs[i] = GpuStepSeq{slots[i], tables[i], pos0s[i], tokens[i], bool(want[i])};
  }
};

Status check(const Seqs& s, std::vector<int64_t> next = std::vector<int64_t>(4, 0)) {
  return validate_step(s.seqs, kLimits, next);
}

TEST(StepPlan, ValidStepPasses) {
  Seqs s;
  s.add(0, 0, 10, {3}, true);
  s.add(2, 300, 1, {0, 1}, true);
  EXPECT_TRUE(check(s, {0, 0, 300, 0}).is_ok());
  EXPECT_TRUE(validate_step({}, kLimits, std::vector<int64_t>(4, 0)).is_ok());
}

TEST(StepPlan, EveryErrorIsReported) {
  auto expect_error = [](const Seqs& s, const char* what, std::vector<int64_t> next = std::vector<int64_t>(4, 0)) {
    const Status st = check(s, next);
    EXPECT_FALSE(st.is_ok()) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.to_string();
  };
  { Seqs s; s.add(4, 0, 1, {0}, true); expect_error(s, "slot 4 outside"); }
  { Seqs s; s.add(-1, 0, 1, {0}, true); expect_error(s, "slot -1 outside"); }
  { Seqs s; s.add(1, 0, 1, {0}, true); s.add(1, 0, 1, {1}, true); expect_error(s, "used twice"); }
  { Seqs s; s.add(1, 0, 0, {0}, true); expect_error(s, "no tokens"); }
  {
    Seqs s;
    s.add(1, 0, 2, {0}, true);
    s.tokens[0][1] = 100;
    expect_error(s, "outside the vocabulary");
  }
  { Seqs s; s.add(1, 5, 1, {0}, true); expect_error(s, "does not continue", {0, 4, 0, 0}); }
  { Seqs s; s.add(1, 1020, 8, {0, 1, 2, 3}, true); expect_error(s, "exceed the model's 1024", {0, 1020, 0, 0}); }
  { Seqs s; s.add(1, 250, 10, {0}, true); expect_error(s, "need 2", {0, 250, 0, 0}); }
  { Seqs s; s.add(1, 0, 1, {8}, true); expect_error(s, "outside [0, 8)"); }
  { Seqs s; s.add(1, 0, 40, {0}, true); s.add(2, 0, 30, {1}, true); expect_error(s, "more than max_tokens_per_step"); }
  {
    Seqs s;
    for (int i = 0; i < 4; ++i) s.add(i, 0, 1, {i}, true);
    EXPECT_TRUE(check(s).is_ok());
    s.add(0, 0, 1, {0}, true);
    expect_error(s, "more than the 4 state slots");
  }
}

TEST(StepPlan, FlatArraysOfAMixedStep) {
  const StepMetaLayout l = StepMetaLayout::make(64, 4, 4);
  std::vector<int32_t> meta(size_t(l.total_elems), -7);
  Seqs s;
  s.add(3, 0, 5, {6}, false);         // prompt chunk, no logits
  s.add(1, 511, 1, {2, 4, 5}, true);  // decode at position 511 (block 1), three blocks given
  s.add(0, 100, 3, {1}, true);        // continuation chunk
  const StepShape sh = fill_step(s.seqs, l, 0, false, meta.data());
  EXPECT_EQ(sh.n_tokens, 9);
  EXPECT_EQ(sh.n_seqs, 3);
  EXPECT_EQ(sh.n_logits, 2);
  EXPECT_EQ(sh.n_head_rows, 2);
  EXPECT_EQ(sh.used_blocks, 2);
  EXPECT_EQ(sh.max_seq_rows, 5);  // not a decode step: the compressor needs its save launch
  const std::vector<int32_t> seq = {0, 0, 0, 0, 0, 1, 2, 2, 2};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 511, 100, 101, 102};
  for (int t = 0; t < 9; ++t) {
    EXPECT_EQ(meta[size_t(l.token_seq + t)], seq[size_t(t)]) << t;
    EXPECT_EQ(meta[size_t(l.token_pos + t)], pos[size_t(t)]) << t;
  }
  EXPECT_EQ(meta[size_t(l.token_ids + 5)], s.tokens[1][0]);
  EXPECT_EQ(meta[size_t(l.seq_slot + 2)], 0);
  EXPECT_EQ(meta[size_t(l.seq_tok0 + 2)], 6);
  EXPECT_EQ(meta[size_t(l.seq_ntok + 2)], 3);
  EXPECT_EQ(meta[size_t(l.seq_pos0 + 1)], 511);
  EXPECT_EQ(meta[size_t(l.logit_rows + 0)], 5);  // sequence 1's only row
  EXPECT_EQ(meta[size_t(l.logit_rows + 1)], 8);  // sequence 2's last row
  EXPECT_EQ(meta[size_t(l.block_table + 1 * 4 + 0)], 2);
  EXPECT_EQ(meta[size_t(l.block_table + 1 * 4 + 1)], 4);
  EXPECT_EQ(meta[size_t(l.block_table + 1 * 4 + 2)], -7);  // beyond what positions 0..511 need
  EXPECT_FALSE(is_pure_decode(s.seqs));

  const StepShape all = fill_step(s.seqs, l, 0, true, meta.data());
  EXPECT_EQ(all.n_logits, 9);
  EXPECT_EQ(all.n_head_rows, 9);
}

TEST(StepPlan, DecodeStepPaddedToGraphSize) {
  const StepMetaLayout l = StepMetaLayout::make(64, 4, 4);
  std::vector<int32_t> meta(size_t(l.total_elems), -7);
  Seqs s;
  s.add(2, 40, 1, {3}, true);
  s.add(0, 7, 1, {1}, false);
  ASSERT_TRUE(is_pure_decode(s.seqs));
  const StepShape sh = fill_step(s.seqs, l, 4, false, meta.data());
  EXPECT_EQ(sh.n_tokens, 4);
  EXPECT_EQ(sh.n_seqs, 4);
  EXPECT_EQ(sh.n_real_tokens, 2);
  EXPECT_EQ(sh.n_logits, 1);
  EXPECT_EQ(sh.n_head_rows, 4);
  EXPECT_EQ(sh.max_seq_rows, 1);  // padding sequences have no rows
  EXPECT_EQ(meta[size_t(l.logit_rows)], 0);
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(meta[size_t(l.token_seq + i)], -1);
    EXPECT_EQ(meta[size_t(l.seq_slot + i)], -1);
    EXPECT_EQ(meta[size_t(l.seq_ntok + i)], 0);
    EXPECT_EQ(meta[size_t(l.seq_tok0 + i)], i);
    EXPECT_EQ(meta[size_t(l.token_ids + i)], 0);
    EXPECT_EQ(meta[size_t(l.block_table + i * 4)], 0);
  }
  EXPECT_EQ(meta[size_t(l.logit_rows + 1)], 0);  // padding head rows read a valid row

  // An all-padding step (graph capture): every sequence is padding.
  const StepShape cap = fill_step({}, l, 3, false, meta.data());
  EXPECT_EQ(cap.n_tokens, 3);
  EXPECT_EQ(cap.n_real_seqs, 0);
  EXPECT_EQ(meta[size_t(l.seq_slot)], -1);
}

TEST(StepPlan, LayoutIsAlignedAndDisjoint) {
  const StepMetaLayout l = StepMetaLayout::make(2049, 65, 4096);
  const int64_t offs[] = {l.token_ids, l.token_seq, l.token_pos, l.seq_slot, l.seq_pos0, l.seq_tok0,
                          l.seq_ntok, l.logit_rows, l.block_table};
  for (int64_t o : offs) EXPECT_EQ(o % 4, 0);
  EXPECT_GE(l.token_seq - l.token_ids, 2049);
  EXPECT_GE(l.seq_pos0 - l.seq_slot, 65);
  EXPECT_GE(l.block_table, l.logit_rows + 2049);
  EXPECT_EQ(l.fixed_elems, l.block_table);
  EXPECT_GE(l.total_elems, l.block_table + 65 * 4096);
}

TEST(ModelSupport, FlashShapedPassesOthersAreRefused) {
  MakeModelOptions o;
  o.preset = "flash-shaped";
  o.layers = 3;
  o.vocab = 4096;
  o.layer_types = {"swa", "csa", "hca"};
  Result<ModelConfig> flash = make_model_config(o);
  ASSERT_TRUE(flash.is_ok()) << flash.status().to_string();
  EXPECT_TRUE(check_gpu_supported(flash.value()).is_ok());

  ModelConfig c = flash.value();
  c.n_routed_experts = 128;
  const Status st = check_gpu_supported(c);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("n_routed_experts must be 256, found 128"), std::string::npos) << st.to_string();

  c = flash.value();
  c.layers[2].compress_ratio = 64;
  EXPECT_NE(check_gpu_supported(c).message().find("layer 2"), std::string::npos);

  o.preset = "tiny";
  Result<ModelConfig> tiny = make_model_config(o);
  ASSERT_TRUE(tiny.is_ok());
  EXPECT_FALSE(check_gpu_supported(tiny.value()).is_ok());
}

}  // namespace
}  // namespace dsv4::gpu
