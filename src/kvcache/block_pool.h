// block_pool.h: host bookkeeping of the KV cache (ARCHITECTURE.md §4). A BlockPool hands out ids
// of fixed-size pages: 256-token KV blocks, or per-sequence slots (the sliding-window ring and
// compressor state every running sequence needs). A BlockTable lists one sequence's blocks in
// position order. Pure host logic: nothing here touches device memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsv4::kv {

// One logical block holds 256 tokens across every layer type (a CSA page: 64 compressed entries
// and 64 indexer keys; an HCA page: 2 entries).
inline constexpr int32_t kBlockTokens = 256;

inline int32_t blocks_for_tokens(int64_t n_tokens) {
  return static_cast<int32_t>((n_tokens + kBlockTokens - 1) / kBlockTokens);
}

// A pool of `n_total` ids [0, n_total). allocate() is all-or-nothing; ids come back lowest first
// so runs stay deterministic. An id may have several holders (share(): the full blocks of a
// prompt that forked choices read alike); it returns to the pool when the last one frees it.
// Freeing an id nobody holds, and foreign ids, are bugs (DSV4_CHECK).
class BlockPool {
 public:
  BlockPool() = default;
  BlockPool(std::string name, int32_t n_total);

  int32_t n_total() const { return n_total_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_total_ - n_free(); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }
  // Appends n ids to *out, or returns false (and appends nothing) when fewer are free.
  bool allocate(int32_t n, std::vector<int32_t>* out);
  void free(std::span<const int32_t> ids);
  void free(int32_t id) { free(std::span<const int32_t>(&id, 1)); }
  // One more holder of an allocated id.
  void share(int32_t id);
  int32_t holders(int32_t id) const { return refs_[size_t(id)]; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int32_t n_total_ = 0;
  std::vector<int32_t> free_;  // a stack: the lowest id is on top
  std::vector<int32_t> refs_;  // [n_total] holders of each id (0: free), catches double frees
};

// The blocks of one sequence, in position order: block i holds positions [256 i, 256 (i + 1)).
class BlockTable {
 public:
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int64_t capacity_tokens() const { return int64_t(n_blocks()) * kBlockTokens; }
  // Blocks still needed to hold n_tokens.
  int32_t missing_for(int64_t n_tokens) const {
    const int32_t need = blocks_for_tokens(n_tokens);
    return need > n_blocks() ? need - n_blocks() : 0;
  }
  // Grows the table to hold n_tokens from `pool`; false (unchanged) when the pool is short.
  bool grow(BlockPool& pool, int64_t n_tokens);
  // Starts an empty table with src's first n blocks, shared (BlockPool::share): only blocks
  // whose every position is written and never rewritten may be shared.
  void share_prefix(const BlockTable& src, int32_t n, BlockPool& pool);
  // Returns every block to `pool`.
  void release(BlockPool& pool);

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace dsv4::kv
