// memory_estimate.cpp: see memory_estimate.h.
#include "gpu/memory_estimate.h"

#include <algorithm>

#include "kvcache/kv_layout.h"

namespace dsv4::gpu {

namespace {

// A linear as upload_weights stores it: GPTQ INT4 repacked (same bytes: codes + fp16 scales),
// anything else as bf16.
int64_t linear_bytes(const LinearWeight& l) {
  if (!l.valid()) return 0;
  if (l.format == WeightFormat::kGptqInt4)  // a group size of 0 is refused at upload: count the codes
    return l.n * l.k / 2 + (l.group_size > 0 ? l.n * (l.k / l.group_size) * 2 : 0);
  return l.n * l.k * 2;
}

int64_t vec_bytes(const Vec& v) { return int64_t(v.size()) * 4; }

int64_t hc_bytes(const HcParams& p) { return vec_bytes(p.fn) + vec_bytes(p.base) + vec_bytes(p.scale); }

int64_t compressor_bytes(const CompressorWeights& c) {
  return linear_bytes(c.wkv) + linear_bytes(c.wgate) + vec_bytes(c.ape) + vec_bytes(c.norm);
}

int64_t expert_bytes(const ExpertWeights& e) { return linear_bytes(e.w1) + linear_bytes(e.w3) + linear_bytes(e.w2); }

// A dense linear in the fp8 form (device_weights.h): a byte a weight and one per 128 columns.
int64_t fp8_linear_bytes(const LinearWeight& l) { return l.valid() ? l.n * l.k + l.n * (l.k / 128) : 0; }

int64_t layer_bytes(const LayerWeights& l, bool wo_a_fp8) {
  const AttentionWeights& a = l.attn;
  int64_t b = vec_bytes(l.attn_norm) + vec_bytes(l.ffn_norm) + hc_bytes(l.hc_attn) + hc_bytes(l.hc_ffn);
  b += linear_bytes(a.wq_a) + vec_bytes(a.q_norm) + linear_bytes(a.wq_b) + linear_bytes(a.wkv) + vec_bytes(a.kv_norm) +
       (wo_a_fp8 ? fp8_linear_bytes(a.wo_a) : linear_bytes(a.wo_a)) + linear_bytes(a.wo_b) + vec_bytes(a.sink);
  if (a.has_compressor) b += compressor_bytes(a.compressor);
  if (a.has_indexer)
    b += linear_bytes(a.indexer.wq_b) + linear_bytes(a.indexer.weights_proj) + compressor_bytes(a.indexer.compressor);
  const MoeWeights& m = l.moe;
  b += linear_bytes(m.gate) + vec_bytes(m.bias) + int64_t(m.tid2eid.size()) * 4;
  for (const ExpertWeights& e : m.experts) b += expert_bytes(e);
  if (m.has_shared) b += expert_bytes(m.shared);
  return b;
}

// The fit of the activations and workspaces (GpuModel::device_bytes() minus the exact weights and
// KV above) on three synthetic Flash loads of 20 layers on the H200 at 6d2eab8 (bench/results;
// T = max_tokens_per_step, S = max_seqs, P = max_positions):
//   T 4096, S 32, P 4608   (forward_h200_6d2eab8_4k.json)               73320640244 B, rest 1533184000
//   T 8192, S 1,  P 66048  (forward_h200_6d2eab8_64k.json)              74281213028 B, rest 2829611344
//   T 8192, S 1,  P 262656 (forward_h200_6d2eab8_262k_chunk8192.json)   74577713252 B, rest 2829614416
// and an older T 4096, S 1 load (f3e5f94, before the compressor branch's 32 MiB cuBLAS workspace:
// 72856181156 B + 32 MiB -> rest 1533181328). The rest does not grow with S or P (the KV above
// covers them to within a few KB) but with T: 316.5 KB per step row (the activations of a prefill
// chunk), on top of ~226 MiB (cuBLAS workspaces, the decode buffers).
constexpr double kPerTokenBytes = (2829611344.0 - 1533184000.0) / 4096.0;
constexpr double kBaseBytes = 1533184000.0 - 4096.0 * kPerTokenBytes;

}  // namespace

DeviceBytesShape ladder_shape(int max_batch, int n_batches, int64_t max_ctx, int chunk, int decode_steps,
                              int traced_steps) {
  const int64_t decode_positions = int64_t(decode_steps + 3) * 2 * n_batches + int64_t(traced_steps) * n_batches;
  const int64_t ctx_blocks = (max_ctx + decode_positions + 255) / 256 + 1;
  DeviceBytesShape s;
  s.max_seqs = max_batch;
  s.max_tokens_per_step = std::max(chunk, max_batch);
  s.max_positions = ctx_blocks * 256;
  s.n_kv_blocks = ctx_blocks * max_batch;
  return s;
}

int64_t device_reserve_bytes(int64_t total_bytes) { return std::max<int64_t>(int64_t(1) << 30, total_bytes / 20); }

int64_t device_weight_bytes(const ModelConfig& cfg, const ModelWeights& w, bool wo_a_fp8) {
  const int64_t vd = int64_t(cfg.vocab_size) * cfg.hidden;
  int64_t b = vd * 2 + linear_bytes(w.head) + vec_bytes(w.norm) + hc_bytes(w.hc_head);  // embedding bf16
  const size_t n = std::min(w.layers.size(), size_t(cfg.n_layers));
  for (size_t i = 0; i < n; ++i) b += layer_bytes(w.layers[i], wo_a_fp8);
  return b;
}

DeviceBytesEstimate estimate_device_bytes(const ModelConfig& cfg, const ModelWeights& w, const DeviceBytesShape& s) {
  DeviceBytesEstimate e;
  e.weights = device_weight_bytes(cfg, w, s.wo_a_fp8);
  const kv::KvLayout kv = kv::make_kv_layout(cfg, kv::KvDtype::kFp8);
  e.kv = kv.block_bytes * s.n_kv_blocks + kv.slot_bytes() * s.max_seqs + kv.entry_bytes * s.max_tokens_per_step;
  e.activations = int64_t(kBaseBytes + kPerTokenBytes * s.max_tokens_per_step);
  // fp8 wo_a: its bf16 copy for steps past the decode kernels' 32 rows (GpuModel's workspace).
  if (s.wo_a_fp8 && s.max_tokens_per_step > 32 && !w.layers.empty())
    e.activations += w.layers[0].attn.wo_a.n * w.layers[0].attn.wo_a.k * 2;
  return e;
}

int layers_that_fit(const ModelConfig& cfg, const ModelWeights& w, const DeviceBytesShape& s, int64_t budget) {
  ModelConfig prefix = cfg;
  for (int n = std::min(cfg.n_layers, int(w.layers.size())); n >= 1; --n) {
    prefix.n_layers = n;
    prefix.layers.resize(size_t(n));
    if (estimate_device_bytes(prefix, w, s).total() <= budget) return n;
  }
  return 0;
}

}  // namespace dsv4::gpu
