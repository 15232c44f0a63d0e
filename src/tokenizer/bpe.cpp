// bpe.cpp: loading the BPE vocabulary and merges, and the merge loop. Short pieces (almost all
// of them) use a scan over cached pair ranks; long ones (runs of spaces, minified data) use a
// heap so the cost stays O(n log n). Both pick the same merge at every step.
#include "tokenizer/bpe.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

constexpr uint32_t kNoRank = ~uint32_t{0};

}  // namespace

void MergeTable::build(const std::vector<std::array<uint32_t, 4>>& merges) {
  size_t capacity = 16;
  int bits = 4;
  while (capacity < merges.size() * 2) {
    capacity *= 2;
    ++bits;
  }
  entries_.assign(capacity, Entry{});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  for (const auto& m : merges) {
    const uint64_t key = (uint64_t{m[0]} << 32) | m[1];
    size_t slot = hash(key);
    while (entries_[slot].key != kEmpty && entries_[slot].key != key) slot = (slot + 1) & mask_;
    // A repeated pair keeps its last rank, as HF's HashMap collect does.
    entries_[slot] = Entry{key, m[2], m[3]};
  }
}

Result<BpeModel> BpeModel::from_json(const nlohmann::json& model) {
  if (const std::string type = section_type(model); type != "BPE") {
    const std::string found = !type.empty() ? type : model.contains("type") ? model["type"].dump() : "?";
    return unimplemented("tokenizer model type '{}' is not supported (only BPE)", found);
  }
  auto is_set = [&](const char* key) {
    const auto it = model.find(key);
    return it != model.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
  };
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                          "byte_fallback", "fuse_unk", "ignore_merges"}) {
    if (is_set(key)) {
      return unimplemented("BPE option \"{}\" = {} is not supported", key, model[key].dump());
    }
  }
  const auto vocab_it = model.find("vocab");
  const auto merges_it = model.find("merges");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return invalid_argument("BPE model: expected a \"vocab\" object");
  }
  if (merges_it == model.end() || !merges_it->is_array()) {
    return invalid_argument("BPE model: expected a \"merges\" array");
  }

  BpeModel bpe;
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  // Per-id tables are sized by the largest id: real vocabularies have at most a few hundred
  // thousand ids, and a stray huge id must be an error rather than gigabytes of empty slots.
  constexpr int64_t kMaxId = int64_t(1) << 24;
  TokenId max_id = -1;
  for (const auto& [text, id_json] : vocab_it->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= kMaxId) {
      return invalid_argument("BPE vocab: token '{}' has invalid id {}", text, id_json.dump());
    }
    max_id = std::max(max_id, id_json.get<TokenId>());
  }
  bpe.id_to_text_.resize(max_id + 1);
  bpe.id_to_bytes_.resize(max_id + 1);
  bpe.has_token_.assign(max_id + 1, false);
  bpe.text_to_id_.reserve(vocab_it->size());
  std::string bytes;
  for (const auto& [text, id_json] : vocab_it->items()) {
    const TokenId id = id_json.get<TokenId>();
    if (bpe.has_token_[id]) return invalid_argument("BPE vocab: id {} is used twice", id);
    bpe.has_token_[id] = true;
    bpe.id_to_text_[id] = text;
    // A token outside the ByteLevel alphabet can never come out of encoding; it decodes to its
    // own UTF-8 bytes, as HF's ByteLevel decoder does.
    bpe.id_to_bytes_[id] = alphabet.decode(text, &bytes) ? bytes : text;
    bpe.text_to_id_.emplace(text, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string single;
    utf8_append(alphabet.byte_to_char[b], &single);
    const auto it = bpe.text_to_id_.find(single);
    if (it == bpe.text_to_id_.end()) {
      return unimplemented("BPE vocab lacks the single-byte token for byte 0x{:02X} ('{}'); "
                           "byte fallback is not supported", b, single);
    }
    bpe.byte_ids_[b] = static_cast<uint32_t>(it->second);
  }

  std::vector<std::array<uint32_t, 4>> merges;
  merges.reserve(merges_it->size());
  std::string left, right;
  for (size_t rank = 0; rank < merges_it->size(); ++rank) {
    const auto& m = (*merges_it)[rank];
    // Two spellings exist: "a b" (older files) and ["a", "b"].
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return invalid_argument("BPE merge {}: expected \"left right\", found '{}'", rank, s);
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return invalid_argument("BPE merge {}: expected a string or a pair of strings, found {}", rank,
                              m.dump());
    }
    const auto a = bpe.text_to_id_.find(left);
    const auto b = bpe.text_to_id_.find(right);
    const auto c = bpe.text_to_id_.find(left + right);
    if (a == bpe.text_to_id_.end() || b == bpe.text_to_id_.end() || c == bpe.text_to_id_.end()) {
      return invalid_argument("BPE merge {} ('{}' + '{}') uses a token missing from the vocab", rank,
                              left, right);
    }
    merges.push_back({static_cast<uint32_t>(a->second), static_cast<uint32_t>(b->second),
                      static_cast<uint32_t>(rank), static_cast<uint32_t>(c->second)});
  }
  bpe.merges_.build(merges);
  bpe.n_merges_ = merges.size();
  return bpe;
}

std::optional<TokenId> BpeModel::find_text(std::string_view text) const {
  const auto it = text_to_id_.find(std::string(text));
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_piece(std::string_view bytes, BpeScratch& scratch, std::vector<TokenId>* out) const {
  if (bytes.size() == 1) {
    out->push_back(static_cast<TokenId>(byte_ids_[static_cast<unsigned char>(bytes[0])]));
    return;
  }
  merge_piece(bytes, bytes.size() > kMaxScanLength, scratch, out);
}

void BpeModel::merge_piece(std::string_view bytes, bool use_heap, BpeScratch& s,
                           std::vector<TokenId>* out) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  s.ids.resize(n);
  s.prev.resize(n);
  s.next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.ids[i] = byte_ids_[static_cast<unsigned char>(bytes[i])];
    s.prev[i] = static_cast<int32_t>(i) - 1;
    s.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  if (use_heap) {
    merge_heap(n, s);
  } else {
    merge_scan(n, s);
  }
  for (int32_t i = 0; i >= 0; i = s.next[i]) out->push_back(static_cast<TokenId>(s.ids[i]));
}

// Quadratic in the worst case but with one hash lookup per new pair: ranks[i] caches the rank
// of the pair (i, next[i]). Symbol 0 is never removed (merges keep the left index), so the list
// always starts at 0.
void BpeModel::merge_scan(size_t n, BpeScratch& s) const {
  s.ranks.resize(n);
  s.merged.resize(n);
  auto update = [&](int32_t i) {
    const int32_t j = s.next[i];
    if (j < 0 || !merges_.find(s.ids[i], s.ids[j], &s.ranks[i], &s.merged[i])) s.ranks[i] = kNoRank;
  };
  for (int32_t i = 0; i >= 0; i = s.next[i]) update(i);
  while (true) {
    uint32_t best_rank = kNoRank;
    int32_t best = -1;
    for (int32_t i = 0; i >= 0; i = s.next[i]) {
      if (s.ranks[i] < best_rank) {  // strict: the leftmost pair wins ties
        best_rank = s.ranks[i];
        best = i;
      }
    }
    if (best < 0) return;
    const int32_t j = s.next[best];
    s.ids[best] = s.merged[best];
    s.next[best] = s.next[j];
    if (s.next[j] >= 0) s.prev[s.next[j]] = best;
    update(best);
    if (s.prev[best] >= 0) update(s.prev[best]);
  }
}

// HF's algorithm: a min-heap of (rank, position) candidates; stale entries (a side already
// merged away, or the pair changed) are skipped when popped. HF re-looks the pair up and compares
// the merged id; comparing the pair itself is equivalent (a pair has one merge) and cheaper.
void BpeModel::merge_heap(size_t n, BpeScratch& s) const {
  using Entry = BpeScratch::HeapEntry;
  auto later = [](const Entry& x, const Entry& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  s.heap.clear();
  s.ranks.assign(n, 0);  // 1 = symbol removed (merged into its left neighbour)
  auto push = [&](int32_t i) {
    const int32_t j = s.next[i];
    uint32_t rank, merged;
    if (j >= 0 && merges_.find(s.ids[i], s.ids[j], &rank, &merged)) {
      s.heap.push_back(Entry{rank, i, s.ids[i], s.ids[j], merged});
      std::push_heap(s.heap.begin(), s.heap.end(), later);
    }
  };
  for (int32_t i = 0; i >= 0; i = s.next[i]) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const Entry top = s.heap.back();
    s.heap.pop_back();
    const int32_t i = top.pos;
    if (s.ranks[i] != 0 || s.next[i] < 0) continue;
    const int32_t j = s.next[i];
    if (s.ids[i] != top.left || s.ids[j] != top.right) continue;
    s.ids[i] = top.merged;
    s.ranks[j] = 1;
    s.next[i] = s.next[j];
    if (s.next[j] >= 0) s.prev[s.next[j]] = i;
    if (s.prev[i] >= 0) push(s.prev[i]);
    push(i);
  }
}

}  // namespace dsv4::tok
