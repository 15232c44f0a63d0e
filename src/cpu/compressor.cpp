// compressor.cpp: softmax pooling per channel over the window's slots (with the previous window's
// A-half when overlapping), entry post-processing, indexer scores and deterministic top-k.
#include "cpu/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "cpu/linalg.h"
#include "cpu/quant.h"

namespace dsv4::cpu {

void CompressorState::init(int ratio_, int coff_, int dim_) {
  ratio = ratio_;
  coff = coff_;
  dim = dim_;
  const size_t n = size_t(ratio) * size_t(coff) * size_t(dim);
  // An empty slot has a = 0 and z = -inf, so it gets softmax weight 0 (window 0's A-half).
  cur_a.assign(n, 0.0f);
  cur_z.assign(n, -std::numeric_limits<float>::infinity());
  prev_a.assign(n, 0.0f);
  prev_z.assign(n, -std::numeric_limits<float>::infinity());
  entries.clear();
  n_entries = 0;
}

void compressor_finish_entry(const CompressorParams& p, int64_t window_idx, int ratio, float* C, const Rounder& rnd) {
  const int dc = int(p.w->norm.size());
  rnd.apply(C, dc);
  rmsnorm(C, p.w->norm.data(), dc, p.norm_eps, C);
  rnd.apply(C, dc);
  p.rope->rotate(C + dc - p.rope_dim, long(window_idx) * ratio);
  rnd.apply(C, dc);
  switch (p.quant) {
    case EntryQuant::kNone: break;
    case EntryQuant::kFp8Nope: fp8sim(C, dc - p.rope_dim, 64); break;
    case EntryQuant::kHadamardFp4:
      hadamard_bf16(C, dc);
      fp4sim(C, dc, 32);
      break;
  }
}

bool compressor_push(const CompressorParams& p, CompressorState& s, int64_t pos, const float* a, const float* z,
                     const Rounder& rnd) {
  const int m = s.ratio, dc = s.dim, width = s.coff * s.dim;
  const int r = int(pos % m);
  const float* ape = p.w->ape.data() + size_t(r) * size_t(width);
  for (int j = 0; j < width; ++j) {
    s.cur_a[size_t(r * width + j)] = a[j];
    s.cur_z[size_t(r * width + j)] = z[j] + ape[j];
  }
  if (r != m - 1) return false;

  // Window complete: pool each channel over its slots. With overlap, channel j takes the A-half
  // (dims [0, Dc)) of the previous window's rows and the B-half (dims [Dc, 2Dc)) of this one's.
  std::vector<float> C(static_cast<size_t>(dc));
  std::vector<float> zs(size_t(2 * m)), as(size_t(2 * m));
  for (int j = 0; j < dc; ++j) {
    int n = 0;
    if (s.coff == 2) {
      for (int i = 0; i < m; ++i) {
        zs[size_t(n)] = s.prev_z[size_t(i * width + j)];
        as[size_t(n++)] = s.prev_a[size_t(i * width + j)];
      }
      for (int i = 0; i < m; ++i) {
        zs[size_t(n)] = s.cur_z[size_t(i * width + dc + j)];
        as[size_t(n++)] = s.cur_a[size_t(i * width + dc + j)];
      }
    } else {
      for (int i = 0; i < m; ++i) {
        zs[size_t(n)] = s.cur_z[size_t(i * width + j)];
        as[size_t(n++)] = s.cur_a[size_t(i * width + j)];
      }
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; ++i) mx = std::fmax(mx, zs[size_t(i)]);
    float den = 0.0f, num = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float e = std::exp(zs[size_t(i)] - mx);
      den += e;
      num += e * as[size_t(i)];
    }
    C[size_t(j)] = num / den;
  }
  const int64_t w_idx = pos / m;
  DSV4_CHECK(w_idx == s.n_entries, "compressor: window {} completed with {} entries emitted", w_idx, s.n_entries);
  compressor_finish_entry(p, w_idx, m, C.data(), rnd);
  s.entries.insert(s.entries.end(), C.begin(), C.end());
  ++s.n_entries;
  if (s.coff == 2) {
    s.prev_a = s.cur_a;
    s.prev_z = s.cur_z;
  }
  return true;
}

void indexer_scores(const float* q, const float* w, int n_heads, int head_dim, const float* keys, int64_t n_keys,
                    const Rounder& rnd, float* scores) {
  for (int64_t s = 0; s < n_keys; ++s) {
    const float* k = keys + s * head_dim;
    float total = 0.0f;
    for (int h = 0; h < n_heads; ++h) {
      const float d = rnd(dot(q + int64_t(h) * head_dim, k, head_dim));
      total += rnd(std::fmax(d, 0.0f) * w[h]);
    }
    scores[s] = rnd(total);
  }
}

std::vector<int32_t> topk_indices(const float* scores, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  auto better = [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace dsv4::cpu
