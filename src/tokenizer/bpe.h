// bpe.h: the byte-level BPE model of a tokenizer.json ("model": {"type": "BPE"}): vocabulary,
// merge ranks, and the merge loop that turns one pre-token piece (raw bytes) into ids. Merges
// are applied lowest rank first, leftmost first on ties, exactly like HF's Word::merge_all.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace dsv4::tok {

using TokenId = int32_t;

// Open-addressing map from a pair of token ids to (merge rank, merged id). Built once at load,
// then read-only; lookups are the hot loop of encoding.
class MergeTable {
 public:
  void build(const std::vector<std::array<uint32_t, 4>>& merges);  // {a, b, rank, merged}
  // Returns false when (a, b) is not a merge.
  bool find(uint32_t a, uint32_t b, uint32_t* rank, uint32_t* merged) const {
    const uint64_t key = (uint64_t{a} << 32) | b;
    size_t slot = hash(key);
    while (true) {
      const Entry& e = entries_[slot];
      if (e.key == key) {
        *rank = e.rank;
        *merged = e.merged;
        return true;
      }
      if (e.key == kEmpty) return false;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    uint32_t merged = 0;
  };
  // Fibonacci hashing: the top bits of key * 2^64/phi index a power-of-two table.
  size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> entries_;
  size_t mask_ = 0;
  int shift_ = 63;
};

// Reusable buffers for the merge loop, so encoding allocates nothing per piece.
struct BpeScratch {
  std::vector<uint32_t> ids, ranks, merged;
  std::vector<int32_t> prev, next;
  struct HeapEntry {
    uint32_t rank;
    int32_t pos;
    uint32_t left, right, merged;  // the pair when pushed: a popped entry is stale if it changed
  };
  std::vector<HeapEntry> heap;
};

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json. Rejects dropout, unk/byte fallback,
  // subword prefixes/suffixes and vocabularies without all 256 single-byte tokens.
  static Result<BpeModel> from_json(const nlohmann::json& model);

  // Appends the ids of one piece (raw bytes, non-empty).
  void encode_piece(std::string_view bytes, BpeScratch& scratch, std::vector<TokenId>* out) const;

  // Pieces longer than this use a heap instead of the quadratic scan (same result).
  static constexpr size_t kMaxScanLength = 48;
  // Exposed for tests: runs the merge loop with the scan (use_heap false) or the heap.
  void merge_piece(std::string_view bytes, bool use_heap, BpeScratch& scratch,
                   std::vector<TokenId>* out) const;

  // One past the largest vocabulary id.
  int n_ids() const { return static_cast<int>(id_to_bytes_.size()); }
  bool has_id(TokenId id) const { return id >= 0 && id < n_ids() && has_token_[id]; }
  // Raw bytes of a vocabulary token, and its byte-level spelling as written in tokenizer.json.
  const std::string& token_bytes(TokenId id) const { return id_to_bytes_[id]; }
  const std::string& token_text(TokenId id) const { return id_to_text_[id]; }
  std::optional<TokenId> find_text(std::string_view text) const;
  size_t n_merges() const { return n_merges_; }

 private:
  void merge_scan(size_t n, BpeScratch& s) const;
  void merge_heap(size_t n, BpeScratch& s) const;

  MergeTable merges_;
  size_t n_merges_ = 0;
  std::array<uint32_t, 256> byte_ids_{};
  std::vector<std::string> id_to_text_;
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> has_token_;
  std::unordered_map<std::string, TokenId> text_to_id_;
};

}  // namespace dsv4::tok
