// block_pool.cpp: BlockPool and BlockTable (see block_pool.h).
#include "kvcache/block_pool.h"

#include <algorithm>
#include <functional>

#include "base/check.h"

namespace dsv4::kv {

BlockPool::BlockPool(std::string name, int32_t n_total)
    : name_(std::move(name)), n_total_(n_total), refs_(size_t(n_total), 0) {
  DSV4_CHECK(n_total >= 0, "pool {}: negative size {}", name_, n_total);
  free_.reserve(size_t(n_total));
  for (int32_t i = n_total - 1; i >= 0; --i) free_.push_back(i);
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>* out) {
  DSV4_CHECK(n >= 0, "pool {}: allocate({})", name_, n);
  if (n > n_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = free_.back();
    free_.pop_back();
    refs_[size_t(id)] = 1;
    out->push_back(id);
  }
  return true;
}

void BlockPool::free(std::span<const int32_t> ids) {
  bool returned = false;
  for (const int32_t id : ids) {
    DSV4_CHECK(id >= 0 && id < n_total_, "pool {}: freeing id {} outside [0, {})", name_, id, n_total_);
    DSV4_CHECK(refs_[size_t(id)] > 0, "pool {}: double free of id {}", name_, id);
    if (--refs_[size_t(id)] > 0) continue;  // still held by another table
    free_.push_back(id);
    returned = true;
  }
  // Keep the lowest id on top, so allocation order does not depend on the order of frees.
  if (returned) std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
}

void BlockPool::share(int32_t id) {
  DSV4_CHECK(id >= 0 && id < n_total_ && refs_[size_t(id)] > 0, "pool {}: sharing id {}, which is not allocated",
             name_, id);
  ++refs_[size_t(id)];
}

bool BlockTable::grow(BlockPool& pool, int64_t n_tokens) {
  const int32_t missing = missing_for(n_tokens);
  if (missing == 0) return true;
  return pool.allocate(missing, &blocks_);
}

void BlockTable::share_prefix(const BlockTable& src, int32_t n, BlockPool& pool) {
  DSV4_CHECK(blocks_.empty() && n >= 0 && n <= src.n_blocks(), "sharing {} of {} blocks into a table of {}", n,
             src.n_blocks(), n_blocks());
  for (int32_t i = 0; i < n; ++i) {
    pool.share(src.blocks_[size_t(i)]);
    blocks_.push_back(src.blocks_[size_t(i)]);
  }
}

void BlockTable::release(BlockPool& pool) {
  pool.free(blocks_);
  blocks_.clear();
}

}  // namespace dsv4::kv
