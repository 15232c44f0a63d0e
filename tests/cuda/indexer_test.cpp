// indexer_test.cpp: the Lightning Indexer on the GPU (indexer/indexer.h) against the CPU
// reference, at the Flash shapes (64 heads x 128 dims, ratio 4, top-k 512, keys of 68 B).
//
//  - indexer_topk must be bit-exact with cpu::indexer_scores + cpu::topk_indices: the same
//    indices in the same order (highest score first, ties to the lowest index), -1 past n_vis,
//    all -1 on padding rows. Keys are random e2m1 codes with power-of-two block scales, packed
//    with kv::pack_indexer_key into a paged pool; q is on the fp4 grid; weights are bf16 values of
//    both signs. n_vis in {0, 1, 5, 511, 512, 513, 4096, 65536} and more, over three sequences;
//    one sequence's keys come from 40 distinct vectors (ties everywhere, also at the top-k
//    boundary), another has runs of duplicates. The workspace shapes give 128, 64, 34, 14 and 1
//    splits per row (so the merge sees many lists, a few, and one); decode launches (<= 64 rows)
//    spread short rows over splits of one tile, wide ones keep 1024 keys per split. The cases
//    cover the merge with all candidates in shared memory, with radix passes over the lists first
//    (more than 4096 candidates), ties down to the index digits, and splits cut more than once.
//    Wide launches run the multi-row split kernel (4 rows per block): blocks whose rows mix
//    sequences, padding and random positions, and consecutive prefill rows; both split kernels
//    are also forced on the same rows. TopkPrefillTiming times them on a 256K prefill chunk.
//  - indexer_weights: bit-exact; indexer_prepare (both in one launch) bit-exact with the two.
//  - indexer_prepare_q: the reference's RoPE (fp32 cos/sin from glibc), bf16, Hadamard and fp4sim.
//    The Hadamard and fp4 steps are reproduced operation by operation; cos/sin are evaluated in
//    double on the GPU, which can differ from glibc's cosf/sinf in the last ulp, so a rare value
//    may land one fp4 step away. The test prints how many values differ and allows 0.1%.
//  - CudaIndexerPlan.*: the host/device integer logic of topk_plan.h on the CPU (these run without
//    a GPU): the e2m1 byte-permute decode against kv::unpack_indexer_key, key order against the
//    reference comparator, split coverage, the radix select's digit choice (driven to the end
//    against std::nth_element).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/compressor.h"
#include "cpu/quant.h"
#include "cpu/rope.h"
#include "cuda/indexer/indexer.h"
#include "cuda/indexer/topk_plan.h"
#include "cuda/ops/ops.h"
#include "harness.h"
#include "kvcache/kv_record.h"

namespace dsv4::cuda::test {
namespace {

using namespace indexer_detail;

constexpr int kHeads = 64, kDim = 128, kRope = 64, kRatio = 4, kTopk = 512;
constexpr int kPerBlock = kKvBlockTokens / kRatio;

RopeConfig compress_rope() { return RopeConfig{160000.0, true, 16.0, 65536, 32.0, 1.0}; }

// A random vector on the fp4 grid: blocks of 32 with scale 2^e, e in [e_lo, e_hi].
void random_fp4_vector(std::mt19937_64& rng, int e_lo, int e_hi, float* v) {
  for (int b = 0; b < kDim / 32; ++b) {
    const int e = e_lo + int(rng() % uint64_t(e_hi - e_lo + 1));
    for (int i = 0; i < 32; ++i) v[b * 32 + i] = std::ldexp(e2m1_to_f32(uint8_t(rng() & 15)), e);
  }
}

// ---- keys: three sequences in one paged pool ----

struct KeyPool {
  std::vector<std::vector<float>> keys;        // per sequence [n][128], the exact values
  std::vector<std::vector<int32_t>> blocks;    // per sequence block ids
  int max_blocks = 0;
  DeviceBuffer pool;
};

KeyPool make_keys(uint64_t seed) {
  KeyPool kp;
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = {65536, 5000, 600};
  kp.keys.resize(lengths.size());
  // seq 0: all distinct
  kp.keys[0].resize(size_t(lengths[0]) * kDim);
  for (int64_t s = 0; s < lengths[0]; ++s) random_fp4_vector(rng, -4, -2, &kp.keys[0][size_t(s) * kDim]);
  // seq 1: 40 distinct vectors, repeated at random
  std::vector<float> distinct(40 * kDim);
  for (int i = 0; i < 40; ++i) random_fp4_vector(rng, -4, -2, &distinct[size_t(i) * kDim]);
  kp.keys[1].resize(size_t(lengths[1]) * kDim);
  for (int64_t s = 0; s < lengths[1]; ++s) {
    const int i = int(rng() % 40);
    std::copy_n(&distinct[size_t(i) * kDim], kDim, &kp.keys[1][size_t(s) * kDim]);
  }
  // seq 2: distinct, with runs of copies of entry 7
  kp.keys[2].resize(size_t(lengths[2]) * kDim);
  for (int64_t s = 0; s < lengths[2]; ++s) random_fp4_vector(rng, -4, -2, &kp.keys[2][size_t(s) * kDim]);
  for (int64_t s : {100, 101, 102, 103, 119, 120, 500, 501, 502, 599})
    std::copy_n(&kp.keys[2][7 * kDim], kDim, &kp.keys[2][size_t(s) * kDim]);

  int n_blocks = 0;
  for (int64_t n : lengths) {
    kp.max_blocks = std::max(kp.max_blocks, int((n + kPerBlock - 1) / kPerBlock));
    n_blocks += int((n + kPerBlock - 1) / kPerBlock);
  }
  n_blocks += 5;  // unused blocks
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<uint8_t> bytes(size_t(n_blocks) * kPerBlock * kKeyBytes, 0xFF);
  size_t next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int nb = int((lengths[s] + kPerBlock - 1) / kPerBlock);
    kp.blocks.emplace_back(ids.begin() + next, ids.begin() + next + nb);
    kp.blocks.back().resize(size_t(kp.max_blocks), -1);
    next += size_t(nb);
    for (int64_t e = 0; e < lengths[s]; ++e) {
      uint8_t* rec = &bytes[(size_t(kp.blocks[s][size_t(e / kPerBlock)]) * kPerBlock + size_t(e % kPerBlock)) * kKeyBytes];
      const Status st = kv::pack_indexer_key(&kp.keys[s][size_t(e) * kDim], kDim, rec);
      DSV4_CHECK(st.is_ok(), "{}", st.to_string());
    }
  }
  kp.pool = upload_vector(bytes);
  return kp;
}

// Built once and never freed (a static DeviceBuffer would be freed after the CUDA runtime).
KeyPool& keys() {
  static KeyPool* kp = new KeyPool(make_keys(2024));
  return *kp;
}

struct Row {
  int seq;      // -1: padding row
  int64_t pos;  // n_vis = (pos + 1) / 4
};

// Expected selection of one row: cpu::indexer_scores over the visible keys, cpu::topk_indices.
// (Serial: the caller runs rows in parallel.)
std::vector<int32_t> reference_row(const KeyPool& kp, const Row& r, const float* q, const float* w) {
  std::vector<int32_t> out(kTopk, -1);
  if (r.seq < 0) return out;
  const int64_t n_vis = (r.pos + 1) / kRatio;
  std::vector<float> scores(static_cast<size_t>(n_vis));
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  cpu::indexer_scores(q, w, kHeads, kDim, kp.keys[size_t(r.seq)].data(), n_vis, rnd, scores.data());
  const std::vector<int32_t> sel = cpu::topk_indices(scores.data(), n_vis, kTopk);
  std::copy(sel.begin(), sel.end(), out.begin());
  return out;
}

// Runs indexer_topk on `rows` with a workspace of (max_tokens, max_positions) and compares.
void run_topk(const std::vector<Row>& rows, int ws_max_tokens, int64_t ws_max_positions, int expect_splits,
              uint64_t seed, IndexerSplitKernel kernel = IndexerSplitKernel::kAuto, int merge_blocks = 0) {
  KeyPool& kp = keys();
  const int T = int(rows.size());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(T) * kHeads * kDim), w(size_t(T) * kHeads);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < kHeads; ++h) random_fp4_vector(rng, -2, 0, &q[(size_t(t) * kHeads + h) * kDim]);
  for (float& v : w) v = round_bf16(0.011048543f * nd(rng));

  // One sequence entry per key sequence (the indexer reads only token_seq, token_pos and the
  // block table); rows reference them in any order.
  std::vector<int32_t> token_seq, token_pos, block_table;
  for (const Row& r : rows) {
    token_seq.push_back(r.seq);
    token_pos.push_back(int32_t(r.seq < 0 ? 0 : r.pos));
  }
  for (const auto& bl : kp.blocks) block_table.insert(block_table.end(), bl.begin(), bl.end());
  const std::vector<int32_t> zeros(size_t(T), 0), slots = {0, 1, 2}, n_seq_zero(3, 0);
  DeviceBuffer d_ts = upload_vector(token_seq), d_tp = upload_vector(token_pos), d_bt = upload_vector(block_table);
  DeviceBuffer d_ids = upload_vector(zeros), d_slot = upload_vector(slots), d_zero3 = upload_vector(n_seq_zero);
  DeviceBuffer d_q = upload_vector(to_bf16(q)), d_w = upload_vector(w);
  DeviceBuffer d_sel = device_alloc(size_t(T) * kTopk * 4);
  poison(d_sel);
  StepBatchView b;
  b.n_tokens = T;
  b.n_seqs = 3;
  b.token_ids = d_ids.as<int32_t>();
  b.token_seq = d_ts.as<int32_t>();
  b.token_pos = d_tp.as<int32_t>();
  b.seq_slot = d_slot.as<int32_t>();
  b.seq_pos0 = d_zero3.as<int32_t>();
  b.seq_tok0 = d_zero3.as<int32_t>();
  b.seq_ntok = d_zero3.as<int32_t>();
  b.block_table = d_bt.as<int32_t>();
  b.max_blocks = kp.max_blocks;
  LayerKvView kv;
  kv.index_keys = kp.pool.as<uint8_t>();
  kv.ratio = kRatio;
  auto ws = IndexerWorkspace::create(ws_max_tokens, ws_max_positions, kRatio, kTopk);
  ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
  const int64_t ws_slots = int64_t(ws->max_tokens()) * ws->n_splits();
  const bool rows_kernel =
      kernel == IndexerSplitKernel::kRows || (kernel == IndexerSplitKernel::kAuto && rows_kernel_for(T));
  const int splits = topk_launch_splits(T, ws_slots, rows_kernel);
  EXPECT_EQ(splits, expect_splits) << "the case does not exercise the split count it was written for";
  DSV4_ASSERT_OK(indexer_topk(b, d_q.as<__nv_bfloat16>(), d_w.as<float>(), kHeads, kv, kTopk, *ws, d_sel.as<int32_t>(), nullptr,
                              0, kernel, merge_blocks));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> sel = download<int32_t>(d_sel.get(), size_t(T) * kTopk);

  std::vector<std::vector<int32_t>> wants(static_cast<size_t>(T));
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < T; ++t)
    wants[size_t(t)] = reference_row(kp, rows[size_t(t)], &q[size_t(t) * kHeads * kDim], &w[size_t(t) * kHeads]);
  int bad_rows = 0;
  for (int t = 0; t < T; ++t) {
    const std::vector<int32_t>& want = wants[size_t(t)];
    int first = -1;
    for (int i = 0; i < kTopk && first < 0; ++i)
      if (sel[size_t(t) * kTopk + i] != want[size_t(i)]) first = i;
    if (first >= 0 && bad_rows++ < 5)
      ADD_FAILURE() << "row " << t << " (seq " << rows[size_t(t)].seq << ", pos " << rows[size_t(t)].pos << "): rank "
                    << first << " gpu " << sel[size_t(t) * kTopk + first] << " cpu " << want[size_t(first)];
  }
  const int mb = merge_blocks > 0 ? merge_blocks : merge_blocks_for(T);
  int ranked = 0;
  for (const Row& r : rows) ranked += r.seq >= 0 && rank_merge((r.pos + 1) / kRatio, mb);
  std::printf("[topk] %d rows, %d splits per row, %s kernel, %d merge blocks per row (%d rows ranked): %d rows differ\n",
              T, splits, rows_kernel ? "multi-row" : "per-row", mb, ranked, bad_rows);
  EXPECT_EQ(bad_rows, 0);
}

// Mean time of one call over 20 back-to-back calls (CUDA events on the default stream), in us;
// a failed call fails the test and reads as 0.
double mean_call_us(const std::function<Status()>& launch) {
  constexpr int kIters = 20;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < kIters; ++i) {
    const Status st = launch();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
  }
  cudaEventRecord(e1);
  EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 1000.0 * ms / kIters;
}

// Position of a row with n_vis visible keys (any of the 4 positions that give it).
int64_t pos_for(int64_t n_vis, int variant) { return 4 * n_vis - 1 + variant % 4; }

TEST(CudaIndexer, TopkDecodeManySplits) {
  DSV4_SKIP_WITHOUT_GPU();
  std::vector<Row> rows;
  int v = 0;
  for (int64_t n : {1, 5, 511, 512, 513, 4096, 65536}) rows.push_back({0, pos_for(n, v++)});
  rows.push_back({0, 2});  // nothing visible yet
  rows.push_back({-1, 0}); // padding
  for (int64_t n : {513, 5000, 1000, 512}) rows.push_back({1, pos_for(n, v++)});
  for (int64_t n : {600, 130, 21}) rows.push_back({2, pos_for(n, v++)});
  rows.push_back({0, 4 * 20000 + 1});
  // A workspace for 64 rows at 256K: 64 x 64 slots, so these 17 rows get kMaxSplits splits each.
  // 15 merge blocks a row by default: the rows up to 1920 keys are ranked; with one, none is.
  run_topk(rows, 64, 262144, kMaxSplits, 1);
  run_topk(rows, 64, 262144, kMaxSplits, 1, IndexerSplitKernel::kAuto, 1);
}

// The merge's rank path (topk_plan.h rank_merge) at its edges: rows of 1 .. 2049 keys at batch 1
// to 4 (16 merge blocks: up to 2048 keys ranked, the 2049-key row merged by one block, its splits
// sorted), the same rows with 3 merge blocks (up to 384: blocks of uneven shares, the last one
// short or empty) and with 1 (no rank path), ties (seq 1) and padding among them.
TEST(CudaIndexer, TopkRankMerge) {
  DSV4_SKIP_WITHOUT_GPU();
  int v = 0;
  std::vector<Row> all;
  for (int64_t n : {1, 2, 127, 128, 129, 383, 384, 385, 511, 512, 513, 1024, 1025, 1029, 2047, 2048, 2049})
    all.push_back({0, pos_for(n, v++)});
  for (int64_t n : {1029, 2048, 385, 700}) all.push_back({1, pos_for(n, v++)});  // ties everywhere
  for (int64_t n : {384, 599}) all.push_back({2, pos_for(n, v++)});
  // Steps of 4 rows (3 real, one padding row at any place) over a workspace for 4 rows at 256K:
  // 64 splits per row.
  std::mt19937_64 rng(21);
  for (size_t i = 0; i < all.size(); i += 3) {
    std::vector<Row> rows(all.begin() + int64_t(i), all.begin() + int64_t(std::min(all.size(), i + 3)));
    while (rows.size() < 4) rows.insert(rows.begin() + int64_t((i / 3) % (rows.size() + 1)), Row{-1, 0});
    const uint64_t seed = rng();
    for (int mb : {0, 3, 1}) run_topk(rows, 4, 262144, 64, seed, IndexerSplitKernel::kAuto, mb);
  }
}

TEST(CudaIndexer, TopkDecodeBatch32) {
  DSV4_SKIP_WITHOUT_GPU();
  std::vector<Row> rows;
  int v = 0;
  // Around the merge's shared-memory capacity (4096 candidates) and the one-tile splits.
  for (int64_t n : {64, 65, 1024, 1025, 4095, 4096, 4097, 8191, 12345, 32768, 65536}) rows.push_back({0, pos_for(n, v++)});
  for (int64_t n : {1024, 4097, 4999, 5000, 2049, 700}) rows.push_back({1, pos_for(n, v++)});  // ties everywhere
  for (int64_t n : {600, 599, 513, 121, 103}) rows.push_back({2, pos_for(n, v++)});
  while (rows.size() < 31) rows.push_back({0, pos_for(int64_t(1000 + 997 * rows.size()), v++)});
  rows.push_back({-1, 0});
  // A workspace for 32 rows at 256K: 64 splits (65536 keys / kMinSplitKeys) per row.
  run_topk(rows, 32, 262144, 65536 / kMinSplitKeys, 4);
}

TEST(CudaIndexer, TopkPrefillFewSplits) {
  DSV4_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  std::vector<Row> rows;
  for (int i = 0; i < 150; ++i) rows.push_back({1, int64_t(rng() % (4 * 5000))});
  for (int i = 0; i < 148; ++i) rows.push_back({2, int64_t(rng() % (4 * 600))});
  rows.push_back({-1, 0});
  rows.push_back({1, 4 * 5000 - 1});
  // 300 rows over a workspace sized for them: ceil(kWideRows x kMaxSplits / 300) = 28 splits per
  // row allowed; the multi-row kernel (75 blocks of 4 rows) takes ceil(kRowsTargetBlocks / 75) =
  // 14 of them. The rows of a block mix sequences at rows 148..151 (seq 1, 2) and 296..299 (seq 2,
  // padding, seq 1), and positions are random within a block. The per-row kernel, forced, must
  // select the same.
  run_topk(rows, 300, 262144, 14, 2);
  run_topk(rows, 300, 262144, 28, 2, IndexerSplitKernel::kPerRow);
}

// A prefill chunk as the model runs it: consecutive positions of one sequence (so the rows of a
// block see slightly different key counts), then chunks of the two other sequences, a padding
// row between them; 122 rows take the multi-row kernel with 34 splits of at least 1024 keys.
TEST(CudaIndexer, TopkPrefillConsecutiveRows) {
  DSV4_SKIP_WITHOUT_GPU();
  std::vector<Row> rows;
  for (int i = 0; i < 70; ++i) rows.push_back({0, 4 * 40000 - 3 + i});
  for (int i = 0; i < 30; ++i) rows.push_back({2, 4 * 590 + i});
  rows.push_back({-1, 0});
  for (int i = 0; i < 21; ++i) rows.push_back({1, 4 * 4990 + i});
  run_topk(rows, 128, 262144, 34, 9);
  // One split per row: each block keeps its rows' buffers through all 40000 keys (many cuts).
  run_topk(rows, 128, 4 * 1024, 1, 10, IndexerSplitKernel::kRows);
}

TEST(CudaIndexer, TopkOneSplit) {
  DSV4_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(6);
  std::vector<Row> rows;
  for (int i = 0; i < 20; ++i) rows.push_back({2, int64_t(rng() % (4 * 600))});
  for (int i = 0; i < 19; ++i) rows.push_back({1, int64_t(rng() % 4000)});
  rows.push_back({-1, 0});
  // Rows longer than the workspace was sized for: one split cuts its buffer many times (also
  // among ties, seq 1).
  rows.push_back({0, pos_for(3000, 1)});
  rows.push_back({0, pos_for(20000, 2)});
  rows.push_back({1, pos_for(5000, 3)});
  // A short-context workspace (1000 entries): one split per row, the merge takes its list.
  run_topk(rows, 64, 4000, 1, 3);
  // The multi-row kernel, forced on this decode-sized launch: blocks of random rows of several
  // sequences, one group per row at worst.
  run_topk(rows, 64, 4000, 1, 3, IndexerSplitKernel::kRows);
}

// The device side of a launch over rows of sequence 0 (65536 distinct keys) at `token_pos`:
// the step batch and layer views point into the buffers held here.
struct Seq0Launch {
  DeviceBuffer ts, tp, bt, q, w;
  StepBatchView b;
  LayerKvView kv;
};

Seq0Launch seq0_launch(const std::vector<int32_t>& token_pos, const std::vector<float>& q, const std::vector<float>& w) {
  KeyPool& kp = keys();
  Seq0Launch l;
  l.ts = upload_vector(std::vector<int32_t>(token_pos.size(), 0));
  l.tp = upload_vector(token_pos);
  l.bt = upload_vector(kp.blocks[0]);
  l.q = upload_vector(to_bf16(q));
  l.w = upload_vector(w);
  l.b.n_tokens = int(token_pos.size());
  l.b.n_seqs = 1;
  l.b.token_seq = l.ts.as<int32_t>();
  l.b.token_pos = l.tp.as<int32_t>();
  l.b.block_table = l.bt.as<int32_t>();
  l.b.max_blocks = kp.max_blocks;
  l.kv.index_keys = kp.pool.as<uint8_t>();
  l.kv.ratio = kRatio;
  return l;
}

TEST(CudaIndexer, TopkTiming) {
  DSV4_SKIP_WITHOUT_GPU();
  struct Case {
    int T;
    int64_t n_vis;
  };
  for (const Case& c : {Case{1, 65536}, Case{8, 65536}, Case{32, 65536}, Case{1, 1024}, Case{32, 1024}, Case{1, 1029},
                        Case{4, 1029}, Case{1, 2048}}) {
    const int T = c.T;
    std::mt19937_64 rng(7);
    std::vector<float> q(size_t(T) * kHeads * kDim), w(size_t(T) * kHeads, 0.01f);
    for (int t = 0; t < T * kHeads; ++t) random_fp4_vector(rng, -2, 0, &q[size_t(t) * kDim]);
    const Seq0Launch l = seq0_launch(std::vector<int32_t>(size_t(T), int32_t(4 * c.n_vis - 1)), q, w);
    DeviceBuffer d_sel = device_alloc(size_t(T) * kTopk * 4);
    auto ws = IndexerWorkspace::create(256, 262144, kRatio, kTopk);
    ASSERT_TRUE(ws.is_ok());
    // The default merge, then (where it ranks) the one-block merge for comparison.
    const bool ranked = rank_merge(c.n_vis, merge_blocks_for(T));
    double us = 0;
    for (int mb : {0, 1}) {
      if (mb == 1 && !ranked) break;
      auto launch = [&] {
        return indexer_topk(l.b, l.q.as<__nv_bfloat16>(), l.w.as<float>(), kHeads, l.kv, kTopk, *ws,
                            d_sel.as<int32_t>(), nullptr, 0, IndexerSplitKernel::kAuto, mb);
      };
      DSV4_ASSERT_OK(launch());
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      const double t_us = mean_call_us(launch);
      if (mb == 0) us = t_us;
      std::printf("[topk timing] %d row(s) x %lld keys, %s merge: %.1f us per call (%.1f us per row)\n", T,
                  (long long)c.n_vis, mb == 1 ? "one-block" : ranked ? "rank" : "one-block", t_us, t_us / T);
    }
    if (T == 1 && c.n_vis == 65536) {
      EXPECT_LT(us, 1000.0) << "decode at 262K context must score 65536 keys well under a millisecond";
    }
  }
}

// A prefill chunk at 256K context: T consecutive rows of one sequence over ~65536 keys each,
// scored by both split kernels (the same selection, compared in full) and timed; the printed
// rate counts the MMA work of the scores (2 x 64 heads x 128 dims per row and key).
TEST(CudaIndexer, TopkPrefillTiming) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int T = 2048;
  std::mt19937_64 rng(11);
  std::vector<float> q(size_t(T) * kHeads * kDim), w(size_t(T) * kHeads);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int t = 0; t < T * kHeads; ++t) random_fp4_vector(rng, -2, 0, &q[size_t(t) * kDim]);
  for (float& v : w) v = round_bf16(0.011048543f * nd(rng));
  std::vector<int32_t> token_pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) token_pos[size_t(t)] = int32_t(4 * 65536 - T + t);  // the last chunk of a 256K prompt
  const Seq0Launch l = seq0_launch(token_pos, q, w);
  DeviceBuffer d_sel_a = device_alloc(size_t(T) * kTopk * 4), d_sel_b = device_alloc(size_t(T) * kTopk * 4);
  poison(d_sel_a);
  poison(d_sel_b);
  auto ws = IndexerWorkspace::create(T, 262144, kRatio, kTopk);
  ASSERT_TRUE(ws.is_ok());
  double keys_scored = 0;
  for (int t = 0; t < T; ++t) keys_scored += double((token_pos[size_t(t)] + 1) / kRatio);
  const double flop = 2.0 * kHeads * kDim * keys_scored;
  double us[2] = {0, 0};
  const IndexerSplitKernel kinds[2] = {IndexerSplitKernel::kPerRow, IndexerSplitKernel::kRows};
  for (int k = 0; k < 2; ++k) {
    DeviceBuffer& sel = k == 0 ? d_sel_a : d_sel_b;
    auto launch = [&] {
      return indexer_topk(l.b, l.q.as<__nv_bfloat16>(), l.w.as<float>(), kHeads, l.kv, kTopk, *ws, sel.as<int32_t>(),
                          nullptr, 0, kinds[k]);
    };
    DSV4_ASSERT_OK(launch());
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    us[k] = mean_call_us(launch);
    std::printf("[topk prefill] %d rows x ~65536 keys, %s kernel: %.0f us per call (%.2f us per row, %.0f TFLOP/s of scores)\n",
                T, k == 0 ? "per-row" : "multi-row", us[k], us[k] / T, flop / us[k] * 1e-6);
  }
  std::printf("[topk prefill] multi-row / per-row time: %.3f\n", us[1] / us[0]);
  const std::vector<int32_t> a = download<int32_t>(d_sel_a.get(), size_t(T) * kTopk);
  const std::vector<int32_t> bsel = download<int32_t>(d_sel_b.get(), size_t(T) * kTopk);
  int differ = 0;
  for (int t = 0; t < T; ++t)
    differ += !std::equal(a.begin() + size_t(t) * kTopk, a.begin() + size_t(t + 1) * kTopk, bsel.begin() + size_t(t) * kTopk);
  EXPECT_EQ(differ, 0) << "rows whose selection differs between the two kernels";
  EXPECT_LT(us[1], us[0]) << "the multi-row kernel exists to be faster on prefill chunks";
}

// How the batch-1 time at 65536 keys depends on the split count per row (64 = the default, 32,
// 16, 8, 1). Printed for the next tuning round; asserts that every split count selects the same
// set.
TEST(CudaIndexer, TopkSplitSweep) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int64_t kVis = 65536;
  std::mt19937_64 rng(11);
  std::vector<float> q(size_t(kHeads) * kDim), w(size_t(kHeads), 0.01f);
  for (int h = 0; h < kHeads; ++h) random_fp4_vector(rng, -2, 0, &q[size_t(h) * kDim]);
  const Seq0Launch l = seq0_launch(std::vector<int32_t>(1, int32_t(4 * kVis - 1)), q, w);
  DeviceBuffer d_sel = device_alloc(size_t(kTopk) * 4);
  std::vector<int32_t> first;
  auto ws = IndexerWorkspace::create(64, 4 * kVis, kRatio, kTopk);
  ASSERT_TRUE(ws.is_ok());
  for (int splits : {128, 64, 32, 16, 8, 1}) {
    auto launch = [&] {
      return indexer_topk(l.b, l.q.as<__nv_bfloat16>(), l.w.as<float>(), kHeads, l.kv, kTopk, *ws, d_sel.as<int32_t>(),
                          nullptr, splits);
    };
    DSV4_ASSERT_OK(launch());
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<int32_t> sel = download<int32_t>(d_sel.get(), size_t(kTopk));
    std::sort(sel.begin(), sel.end());
    if (first.empty()) first = sel;
    EXPECT_EQ(sel, first) << splits << " splits per row select a different set";
    std::printf("[topk split sweep] 1 row x %lld keys, %d splits: %.1f us per call\n", (long long)kVis, splits,
                mean_call_us(launch));
  }
}

TEST(CudaIndexer, WeightsBitExact) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int T = 7, ld = kHeads + 5;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> proj(size_t(T) * ld);
  for (float& v : proj) v = nd(rng);
  const float scale = float(1.0 / std::sqrt(double(kDim)) / std::sqrt(double(kHeads)));
  DeviceBuffer d_proj = upload_vector(proj), d_w = device_alloc(size_t(T) * kHeads * 4);
  poison(d_w);
  DSV4_ASSERT_OK(indexer_weights(d_proj.as<float>(), ld, T, kHeads, scale, d_w.as<float>(), nullptr));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> w = download<float>(d_w.get(), size_t(T) * kHeads);
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  int bad = 0;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < kHeads; ++h) {
      const float want = rnd(rnd(proj[size_t(t) * ld + h]) * scale);
      if (std::memcmp(&want, &w[size_t(t) * kHeads + h], 4) != 0 && bad++ < 3)
        ADD_FAILURE() << "w[" << t << "," << h << "] = " << w[size_t(t) * kHeads + h] << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

TEST(CudaIndexer, PrepareFusedMatchesSeparate) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int ld = kHeads + 3;
  const std::vector<int32_t> positions = {0, 7, 4097, 65535, 262143};
  const int T = int(positions.size());
  const std::vector<float> q0 = random_bf16_values(int64_t(T) * kHeads * kDim, 12, 2.0f);
  std::mt19937_64 rng(13);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> proj(size_t(T) * ld);
  for (float& v : proj) v = nd(rng);
  const float scale = float(1.0 / std::sqrt(double(kDim)) / std::sqrt(double(kHeads)));
  const cpu::Rope rope(compress_rope(), kRope);
  DeviceBuffer d_pos = upload_vector(positions), d_inv = upload_vector(rope.inv_freq()), d_proj = upload_vector(proj);
  DeviceBuffer d_q1 = upload_vector(to_bf16(q0)), d_q2 = upload_vector(to_bf16(q0));
  DeviceBuffer d_w1 = device_alloc(size_t(T) * kHeads * 4), d_w2 = device_alloc(size_t(T) * kHeads * 4);
  poison(d_w1);
  poison(d_w2);
  DSV4_ASSERT_OK(indexer_prepare_q(d_q1.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                                   nullptr));
  DSV4_ASSERT_OK(indexer_weights(d_proj.as<float>(), ld, T, kHeads, scale, d_w1.as<float>(), nullptr));
  DSV4_ASSERT_OK(indexer_prepare(d_q2.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                                 d_proj.as<float>(), ld, scale, d_w2.as<float>(), nullptr));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(download<uint16_t>(d_q1.get(), q0.size()) == download<uint16_t>(d_q2.get(), q0.size()));
  const std::vector<float> w1 = download<float>(d_w1.get(), size_t(T) * kHeads), w2 = download<float>(d_w2.get(), size_t(T) * kHeads);
  EXPECT_EQ(std::memcmp(w1.data(), w2.data(), w1.size() * 4), 0);
  EXPECT_FALSE(indexer_prepare(d_q2.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                               nullptr, ld, scale, d_w2.as<float>(), nullptr)
                   .is_ok());

  // With the attention query heads (Flash: 64 heads of 512, rope 64) in the same launch: the
  // indexer's outputs as before, and the heads bit-identical to q_norm_rope's.
  constexpr int kQHeads = 64, kQDim = 512, kQRope = 64;
  const std::vector<float> aq = random_bf16_values(int64_t(T) * kQHeads * kQDim, 14, 3.0f);
  const cpu::Rope arope(compress_rope(), kQRope);
  DeviceBuffer d_ainv = upload_vector(arope.inv_freq());
  DeviceBuffer d_aq1 = upload_vector(to_bf16(aq)), d_aq2 = upload_vector(to_bf16(aq));
  DeviceBuffer d_q3 = upload_vector(to_bf16(q0)), d_w3 = device_alloc(size_t(T) * kHeads * 4);
  poison(d_w3);
  DSV4_ASSERT_OK(q_norm_rope(d_aq1.as<__nv_bfloat16>(), T, kQHeads, kQDim, kQRope, d_pos.as<int32_t>(),
                             d_ainv.as<float>(), 1e-6f, nullptr));
  QueryNormRope qn;
  qn.q = d_aq2.as<__nv_bfloat16>();
  qn.n_heads = kQHeads;
  qn.head_dim = kQDim;
  qn.rope_dim = kQRope;
  qn.inv_freq = d_ainv.as<float>();
  qn.eps = 1e-6f;
  DSV4_ASSERT_OK(indexer_prepare(d_q3.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                                 d_proj.as<float>(), ld, scale, d_w3.as<float>(), nullptr, &qn));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> aq1 = download<uint16_t>(d_aq1.get(), aq.size());
  EXPECT_TRUE(aq1 == download<uint16_t>(d_aq2.get(), aq.size())) << "query heads differ from q_norm_rope's";
  EXPECT_FALSE(aq1 == to_bf16(aq)) << "q_norm_rope changed nothing";
  EXPECT_TRUE(download<uint16_t>(d_q1.get(), q0.size()) == download<uint16_t>(d_q3.get(), q0.size()));
  const std::vector<float> w3 = download<float>(d_w3.get(), size_t(T) * kHeads);
  EXPECT_EQ(std::memcmp(w1.data(), w3.data(), w1.size() * 4), 0);
  QueryNormRope bad = qn;
  bad.head_dim = 1032;  // past the 1024 dims a warp holds
  EXPECT_FALSE(indexer_prepare(d_q3.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                               d_proj.as<float>(), ld, scale, d_w3.as<float>(), nullptr, &bad)
                   .is_ok());
}

TEST(CudaIndexer, PrepareQ) {
  DSV4_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> positions = {0, 1, 5, 1000, 4097, 65535, 100003, 262143};
  const int T = int(positions.size());
  const std::vector<float> q0 = random_bf16_values(int64_t(T) * kHeads * kDim, 9, 2.0f);
  const cpu::Rope rope(compress_rope(), kRope);
  // Reference, as cpu::attention_forward does it for the indexer query.
  std::vector<float> want = q0;
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < kHeads; ++h) {
      float* qh = &want[(size_t(t) * kHeads + h) * kDim];
      rope.rotate(qh + kDim - kRope, long(positions[size_t(t)]));
      rnd.apply(qh + kDim - kRope, kRope);
      cpu::hadamard_bf16(qh, kDim);
      cpu::fp4sim(qh, kDim, 32);
    }
  DeviceBuffer d_q = upload_vector(to_bf16(q0)), d_pos = upload_vector(positions), d_inv = upload_vector(rope.inv_freq());
  DSV4_ASSERT_OK(indexer_prepare_q(d_q.as<__nv_bfloat16>(), T, kHeads, kDim, kRope, d_pos.as<int32_t>(), d_inv.as<float>(),
                                   nullptr));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = from_bf16(download<uint16_t>(d_q.get(), want.size()));
  int64_t differ = 0, far = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;  // +0 and -0 are the same value here
    ++differ;
    // One fp4 step of the block: at most half the larger magnitude, or the block's smallest step.
    const size_t b0 = i / 32 * 32;
    float amax = 0.0f;
    for (size_t j = b0; j < b0 + 32; ++j) amax = std::max(amax, std::fabs(want[j]));
    const double tol = 0.5 * std::max(std::fabs(double(got[i])), std::fabs(double(want[i]))) + amax / 12.0;
    if (!(std::fabs(double(got[i]) - want[i]) <= tol) && far++ < 3)
      ADD_FAILURE() << "q[" << i << "] = " << got[i] << ", want " << want[i];
  }
  std::printf("[prepare_q] %zu values: %lld differ from the reference (cos/sin last-ulp cases)\n", want.size(),
              (long long)differ);
  EXPECT_EQ(far, 0);
  EXPECT_LE(double(differ), 1e-3 * double(want.size()));
}

TEST(CudaIndexer, RejectsBadArguments) {
  DSV4_SKIP_WITHOUT_GPU();
  auto ws = IndexerWorkspace::create(4, 1024, kRatio, kTopk);
  ASSERT_TRUE(ws.is_ok());
  EXPECT_FALSE(IndexerWorkspace::create(4, 1024, kRatio, kMaxTopk + 1).is_ok());
  StepBatchView b;
  b.n_tokens = 5;  // more than the workspace holds
  LayerKvView kv;
  kv.ratio = kRatio;
  int32_t sel = 0;
  EXPECT_FALSE(indexer_topk(b, nullptr, nullptr, kHeads, kv, kTopk, *ws, &sel, nullptr).is_ok());
  b.n_tokens = 1;
  EXPECT_FALSE(indexer_topk(b, nullptr, nullptr, 40, kv, kTopk, *ws, &sel, nullptr).is_ok());  // heads % 16
  kv.index_key_bytes = 72;
  EXPECT_FALSE(indexer_topk(b, nullptr, nullptr, kHeads, kv, kTopk, *ws, &sel, nullptr).is_ok());
  const Status neg = indexer_topk(b, nullptr, nullptr, kHeads, kv, kTopk, *ws, &sel, nullptr, -1);
  EXPECT_NE(neg.message().find("max_splits -1 < 0"), std::string::npos) << neg.to_string();
  EXPECT_FALSE(indexer_prepare_q(nullptr, 1, kHeads, 64, kRope, nullptr, nullptr, nullptr).is_ok());
}

// ---- host logic of topk_plan.h (no GPU needed) ----

TEST(CudaIndexerPlan, DecodeMatchesUnpack) {
  std::mt19937_64 rng(10);
  uint8_t rec[kKeyBytes];
  float want[kDim];
  for (int trial = 0; trial < 2000; ++trial) {
    for (int i = 0; i < kDim / 2; ++i) rec[i] = uint8_t(rng());
    for (int b = 0; b < 4; ++b) rec[kDim / 2 + b] = uint8_t(trial < 1000 ? 1 + rng() % 254 : 100 + rng() % 50);
    if (trial == 0) rec[kDim / 2] = 0;  // 2^-127
    kv::unpack_indexer_key(rec, kDim, want);
    for (int wi = 0; wi < kDim / 8; ++wi) {
      uint32_t word;
      std::memcpy(&word, rec + 4 * wi, 4);
      uint32_t out[4];
      decode_e2m1x8(word, rec[kDim / 2 + wi / 4], out);
      for (int i = 0; i < 8; ++i) {
        const float got = bf16_to_f32(uint16_t(out[i / 2] >> (16 * (i % 2))));
        const float w = want[8 * wi + i];
        ASSERT_TRUE(got == w && std::signbit(got) == std::signbit(w))
            << "word " << wi << " element " << i << ": " << got << " want " << w << " (scale byte "
            << int(rec[kDim / 2 + wi / 4]) << ")";
      }
    }
  }
}

TEST(CudaIndexerPlan, KeyOrderMatchesReference) {
  std::mt19937_64 rng(11);
  std::vector<float> scores(3000);
  for (float& s : scores) s = round_bf16(float(int(rng() % 200) - 100) * 0.01f);  // many ties, both signs, zeros
  scores[5] = -0.0f;
  scores[6] = 0.0f;
  scores[7] = -INFINITY;
  const std::vector<int32_t> want = cpu::topk_indices(scores.data(), int64_t(scores.size()), 700);
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < scores.size(); ++i) keys.push_back(topk_key(scores[i], int32_t(i)));
  std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(topk_key_index(keys[i]), want[i]) << "rank " << i;
  EXPECT_GT(topk_key(-INFINITY, 0), 0u);  // 0 stays "no candidate"
}

TEST(CudaIndexerPlan, SplitsCoverEveryKey) {
  EXPECT_EQ(workspace_splits(1, 65536), 65536 / kMinSplitKeys);  // by keys
  EXPECT_EQ(workspace_splits(1, int64_t(1) << 20), kMaxSplits);
  EXPECT_EQ(workspace_splits(8192, 65536), 1);
  EXPECT_EQ(workspace_splits(64, 1000), 1);
  EXPECT_EQ(launch_splits(1, 4096), kMaxSplits);
  EXPECT_EQ(launch_splits(300, 300 * 14), 14);
  // Wide launches (the multi-row kernel): splits for about kRowsTargetBlocks blocks of 4 rows.
  EXPECT_EQ(rows_launch_splits(300, 300 * 28), 14);
  EXPECT_EQ(rows_launch_splits(122, 128 * 64), 34);
  EXPECT_EQ(rows_launch_splits(8192, 8192), 1);  // an 8192-token chunk: 2048 blocks already
  EXPECT_EQ(rows_launch_splits(2048, 2048 * 4), 2);
  EXPECT_FALSE(rows_kernel_for(kWideRows));
  EXPECT_TRUE(rows_kernel_for(kWideRows + 1));
  EXPECT_EQ(topk_launch_splits(kWideRows, 4096, false), launch_splits(kWideRows, 4096));
  EXPECT_EQ(topk_launch_splits(kWideRows + 1, 65 * 64, true), rows_launch_splits(kWideRows + 1, 65 * 64));
  EXPECT_EQ(split_min_keys(1), kTileKeys);
  EXPECT_EQ(split_min_keys(kWideRows), kTileKeys);
  EXPECT_EQ(split_min_keys(kWideRows + 1), kMinSplitKeys);
  for (int min_keys : {kTileKeys, kMinSplitKeys}) {
    for (int n_splits : {1, 2, 7, 14, 63, 64}) {
      for (int64_t n_vis : {0, 1, 63, 64, 65, 1023, 1024, 1025, 4096, 5000, 65535, 65536, 262144}) {
        const int64_t chunk = split_keys(n_vis, n_splits, min_keys);
        EXPECT_EQ(chunk % kTileKeys, 0);
        EXPECT_GE(chunk, min_keys);
        EXPECT_GE(chunk * n_splits, n_vis) << n_vis << " keys, " << n_splits << " splits";
      }
    }
  }
  EXPECT_EQ(split_keys(65536, 64), 1024);
  EXPECT_EQ(split_keys(65536, 64, kMinSplitKeys), 1024);
  EXPECT_EQ(split_keys(1024, 64), 64);  // decode at 4K context: 16 splits of one tile
  EXPECT_EQ(split_keys(1024, 64, kMinSplitKeys), 1024);
}

// The tile address the split kernels compute once per 64-key tile (common/kv_view.h) against the
// per-record offset: the same bytes where a tile lies in one page, -1 where it spans pages.
TEST(CudaIndexerPlan, PagedRunOffsetMatchesRecordOffset) {
  const std::vector<int32_t> bt = {7, 2, 9, 0, 5, 11, 3};
  for (int ratio : {1, 2, 4, 8, 128}) {
    const int per_block = kKvBlockTokens / ratio;
    for (int64_t e0 = 0; e0 + kTileKeys <= int64_t(bt.size()) * per_block; e0 += 32) {
      const int64_t run = paged_run_offset(bt.data(), e0, kTileKeys, ratio, kKeyBytes);
      if (e0 % per_block + kTileKeys > per_block) {
        EXPECT_EQ(run, -1) << "ratio " << ratio << ", entry " << e0;
        continue;
      }
      for (int j = 0; j < kTileKeys; ++j)
        ASSERT_EQ(run + int64_t(j) * kKeyBytes, paged_record_offset(bt.data(), e0 + j, ratio, kKeyBytes))
            << "ratio " << ratio << ", entry " << e0 << " + " << j;
    }
  }
}

// The merge's rank path covers a row exactly when every merge block ranks at most
// kRankKeysPerBlock keys (the kernel's counts live in 256 ints), and the launch's blocks per row
// fall from 16 with the row count.
TEST(CudaIndexerPlan, RankMergeBounds) {
  EXPECT_EQ(merge_blocks_for(1), kMaxMergeBlocks);
  EXPECT_EQ(merge_blocks_for(16), kMaxMergeBlocks);
  EXPECT_EQ(merge_blocks_for(32), 8);
  EXPECT_EQ(merge_blocks_for(64), 4);
  EXPECT_EQ(merge_blocks_for(129), 1);
  EXPECT_EQ(merge_blocks_for(2048), 1);
  EXPECT_TRUE(rank_merge(1029, 16));  // the 4K benchmark's batch-1 rows
  EXPECT_TRUE(rank_merge(2048, 16));
  EXPECT_FALSE(rank_merge(2049, 16));
  EXPECT_TRUE(rank_merge(1024, 8));
  EXPECT_FALSE(rank_merge(1029, 8));
  EXPECT_TRUE(rank_merge(0, 2));
  EXPECT_FALSE(rank_merge(1, 1));  // one block: always the one-block merge
  for (int mb = 2; mb <= kMaxMergeBlocks; ++mb)
    for (int64_t n = 0; n <= 4096; ++n)
      if (rank_merge(n, mb)) {
        ASSERT_LE((n + mb - 1) / mb, kRankKeysPerBlock) << mb << " blocks, " << n << " keys";
      }
}

// The select the kernels run (candidates.cuh), on the CPU: passes of radix_digit over 8-bit
// digits, the device's per-lane form (groups of 8 bins scanned from the top, radix_digit on the
// group that holds the key), until every key of a bin is taken; the keys >= the prefix must be
// the top k.
TEST(CudaIndexerPlan, RadixSelectFindsTopK) {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 3000);
    std::vector<float> scores(static_cast<size_t>(n));
    const int distinct = trial % 3 == 0 ? 3 : trial % 3 == 1 ? 40 : 100000;  // heavy ties to none
    for (float& s : scores) s = round_bf16(float(int(rng() % uint64_t(distinct)) - distinct / 2) * 0.37f);
    std::vector<uint64_t> keys;
    for (int i = 0; i < n; ++i) keys.push_back(topk_key(scores[size_t(i)], i));
    const int k = 1 + int(rng() % uint64_t(n));
    uint64_t prefix = 0, mask = 0;
    int need = k, in_play = n;
    for (int shift = 56; shift >= 0 && need < in_play; shift -= 8) {
      int hist[256] = {};
      for (uint64_t key : keys)
        if ((key & mask) == prefix) ++hist[(key >> shift) & 0xff];
      // Device form: group sums, the group that holds the need-th key, radix_digit inside it.
      int excl = 0, group = 31;
      for (; group >= 0; --group) {
        int sum = 0;
        for (int i = 0; i < 8; ++i) sum += hist[8 * group + i];
        if (excl + sum >= need) break;
        excl += sum;
      }
      ASSERT_GE(group, 0);
      int above = 0, bucket = 0;
      const int d = 8 * group + radix_digit(hist + 8 * group, 8, need - excl, &above, &bucket);
      int above_all = 0, bucket_all = 0;
      ASSERT_EQ(radix_digit(hist, 256, need, &above_all, &bucket_all), d);
      ASSERT_EQ(above_all, excl + above);
      ASSERT_EQ(bucket_all, bucket);
      prefix |= uint64_t(d) << shift;
      mask |= uint64_t(0xff) << shift;
      need -= excl + above;
      in_play = bucket;
    }
    ASSERT_EQ(need, in_play) << "the select must end with a bin taken whole";
    std::vector<uint64_t> want = keys;
    std::nth_element(want.begin(), want.begin() + (k - 1), want.end(), std::greater<uint64_t>());
    const uint64_t kth = want[size_t(k - 1)];
    int taken = 0;
    for (uint64_t key : keys) {
      ASSERT_EQ(key >= prefix, key >= kth) << "trial " << trial;
      taken += key >= prefix;
    }
    ASSERT_EQ(taken, k);
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
