// block_pool.cpp: BlockPool and BlockTable (see block_pool.h).
#include "kvcache/block_pool.h"

#include <algorithm>
#include <functional>

#include "base/check.h"

namespace dsv4::kv {

BlockPool::BlockPool(std::string name, int32_t n_total)
    : name_(std::move(name)), n_total_(n_total), used_(size_t(n_total), 0) {
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
    used_[size_t(id)] = 1;
    out->push_back(id);
  }
  return true;
}

void BlockPool::free(std::span<const int32_t> ids) {
  for (const int32_t id : ids) {
    DSV4_CHECK(id >= 0 && id < n_total_, "pool {}: freeing id {} outside [0, {})", name_, id, n_total_);
    DSV4_CHECK(used_[size_t(id)], "pool {}: double free of id {}", name_, id);
    used_[size_t(id)] = 0;
    free_.push_back(id);
  }
  // Keep the lowest id on top, so allocation order does not depend on the order of frees.
  if (ids.size() > 0) std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
}

bool BlockTable::grow(BlockPool& pool, int64_t n_tokens) {
  const int32_t missing = missing_for(n_tokens);
  if (missing == 0) return true;
  return pool.allocate(missing, &blocks_);
}

void BlockTable::release(BlockPool& pool) {
  pool.free(blocks_);
  blocks_.clear();
}

}  // namespace dsv4::kv
