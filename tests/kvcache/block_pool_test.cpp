// block_pool_test.cpp: the KV block pool and block tables (all-or-nothing allocation,
// deterministic ids, growth by 256-token blocks, blocks shared between tables) and the KV byte
// layout of the Flash shape.
#include <gtest/gtest.h>

#include "kvcache/block_pool.h"
#include "kvcache/kv_layout.h"

namespace dsv4::kv {
namespace {

TEST(BlockPool, AllocatesLowestIdsAllOrNothing) {
  BlockPool pool("t", 5);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(3, &ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_FALSE(pool.allocate(3, &ids));  // only 2 left: nothing is taken
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(pool.n_free(), 2);
  pool.free(std::vector<int32_t>{2, 0});
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.allocate(4, &again));
  EXPECT_EQ(again, (std::vector<int32_t>{0, 2, 3, 4}));  // lowest first, whatever the order of frees
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_EQ(pool.n_used(), 5);
}

TEST(BlockPool, DoubleFreeIsABug) {
  BlockPool pool("t", 2);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(1, &ids));
  pool.free(ids[0]);
  EXPECT_DEATH(pool.free(ids[0]), "double free");
  EXPECT_DEATH(pool.free(7), "outside");
}

TEST(BlockTable, GrowsBy256TokenBlocks) {
  EXPECT_EQ(blocks_for_tokens(0), 0);
  EXPECT_EQ(blocks_for_tokens(1), 1);
  EXPECT_EQ(blocks_for_tokens(256), 1);
  EXPECT_EQ(blocks_for_tokens(257), 2);
  BlockPool pool("t", 4);
  BlockTable t;
  ASSERT_TRUE(t.grow(pool, 300));
  EXPECT_EQ(t.n_blocks(), 2);
  EXPECT_EQ(t.capacity_tokens(), 512);
  ASSERT_TRUE(t.grow(pool, 512));  // still fits
  EXPECT_EQ(t.n_blocks(), 2);
  EXPECT_EQ(t.missing_for(1025), 3);
  EXPECT_FALSE(t.grow(pool, 1025));  // needs 5 blocks, the pool has 4: unchanged
  EXPECT_EQ(t.n_blocks(), 2);
  EXPECT_EQ(pool.n_free(), 2);
  t.release(pool);
  EXPECT_EQ(t.n_blocks(), 0);
  EXPECT_EQ(pool.n_free(), 4);
}

// Shared blocks: a table that shares another's full blocks holds them too; they return to the
// pool only when the last holder frees them, and a block nobody holds cannot be shared.
TEST(BlockTable, SharedPrefixBlocksReturnWithTheirLastHolder) {
  BlockPool pool("t", 6);
  BlockTable a, b;
  ASSERT_TRUE(a.grow(pool, 600));  // 3 blocks: 0, 1, 2
  b.share_prefix(a, 2, pool);      // 0 and 1
  EXPECT_EQ(b.blocks(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pool.holders(0), 2);
  EXPECT_EQ(pool.holders(2), 1);
  ASSERT_TRUE(b.grow(pool, 700));  // one more of its own: 3
  EXPECT_EQ(b.blocks(), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(pool.n_free(), 2);
  a.release(pool);                 // 2 returns, 0 and 1 stay with b
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_EQ(pool.holders(0), 1);
  EXPECT_DEATH(pool.share(2), "not allocated");
  b.release(pool);
  EXPECT_EQ(pool.n_free(), 6);
  EXPECT_DEATH(pool.free(0), "double free");
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(6, &ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(KvLayout, FlashShapeMatchesTheArchitectureNumbers) {
  ModelConfig c;
  c.head_dim = 512;
  c.rope_dim = 64;
  c.index_head_dim = 128;
  c.sliding_window = 128;
  // Flash: 2 sliding-only layers, then CSA (4) and HCA (128) alternating: 21 CSA, 20 HCA.
  for (int i = 0; i < 43; ++i) {
    LayerSpec l;
    if (i < 2) l = {AttnType::kSliding, 0, MoeType::kHash};
    else if (i % 2 == 0) l = {AttnType::kCsa, 4, MoeType::kScore};
    else l = {AttnType::kHca, 128, MoeType::kScore};
    c.layers.push_back(l);
  }
  const KvLayout fp8 = make_kv_layout(c, KvDtype::kFp8);
  EXPECT_EQ(fp8.entry_bytes, 584);       // 448 fp8 + 64 bf16 rope + 8 scale bytes
  EXPECT_EQ(fp8.indexer_key_bytes, 68);  // 64 e2m1 + 4 ue8m0
  EXPECT_EQ(fp8.n_csa, 21);
  EXPECT_EQ(fp8.n_hca, 20);
  EXPECT_EQ(fp8.n_swa, 2);
  EXPECT_EQ(fp8.block_bytes, 21 * 64 * (584 + 68) + 20 * 2 * 584);
  EXPECT_NEAR(fp8.bytes_per_token(), 3.5e3, 0.1e3);  // "about 3.5 KB per token"
  EXPECT_EQ(fp8.slot_window_bytes, 43 * 128 * 584);
  const KvLayout bf16 = make_kv_layout(c, KvDtype::kBf16);
  EXPECT_EQ(bf16.entry_bytes, 1024);
  EXPECT_GT(bf16.block_bytes, fp8.block_bytes);
  EXPECT_TRUE(parse_kv_dtype("fp8").is_ok());
  EXPECT_FALSE(parse_kv_dtype("int4").is_ok());
}

}  // namespace
}  // namespace dsv4::kv
