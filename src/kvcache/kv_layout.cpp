// kv_layout.cpp: byte counts of the KV cache (see kv_layout.h).
#include "kvcache/kv_layout.h"

#include <fmt/format.h>

#include "kvcache/block_pool.h"

namespace dsv4::kv {

Result<KvDtype> parse_kv_dtype(const std::string& s) {
  if (s == "fp8" || s == "fp8_ds_mla" || s == "auto") return KvDtype::kFp8;
  if (s == "bf16") return KvDtype::kBf16;
  return invalid_argument("--kv-dtype must be fp8 or bf16, found '{}'", s);
}

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kFp8: return "fp8_ds_mla";
    case KvDtype::kBf16: return "bf16";
  }
  return "?";
}

KvLayout make_kv_layout(const ModelConfig& cfg, KvDtype dtype) {
  KvLayout l;
  l.dtype = dtype;
  const int64_t nope = cfg.nope_dim(), rope = cfg.rope_dim;
  if (dtype == KvDtype::kFp8) {
    // fp8 e4m3 no-rope dims + bf16 rope dims + one ue8m0 scale per 64 no-rope dims, padded to 8
    // scale bytes (448 + 128 + 8 = 584 for Flash).
    const int64_t scales = (nope + 63) / 64;
    l.entry_bytes = nope + 2 * rope + ((scales + 7) / 8) * 8;
    l.indexer_key_bytes = cfg.index_head_dim / 2 + (cfg.index_head_dim + 31) / 32;  // e2m1 + ue8m0
  } else {
    l.entry_bytes = 2 * (nope + rope);
    l.indexer_key_bytes = 2 * int64_t(cfg.index_head_dim);
  }
  for (const LayerSpec& s : cfg.layers) {
    const int64_t window = int64_t(cfg.sliding_window) * l.entry_bytes;
    l.slot_window_bytes += window;
    const int64_t D = cfg.head_dim;
    switch (s.attn) {
      case AttnType::kSliding:
        ++l.n_swa;
        break;
      case AttnType::kCsa: {
        ++l.n_csa;
        const int64_t per_block = kBlockTokens / s.compress_ratio;
        l.block_bytes += per_block * (l.entry_bytes + l.indexer_key_bytes);
        // Overlapping windows (coff 2): current and previous window of (a, z) rows, for the
        // main compressor and the indexer's.
        l.slot_compressor_bytes += 4 * int64_t(s.compress_ratio) * 2 * (D + cfg.index_head_dim) * 4;
        break;
      }
      case AttnType::kHca: {
        ++l.n_hca;
        const int64_t per_block = (kBlockTokens + s.compress_ratio - 1) / s.compress_ratio;
        l.block_bytes += per_block * l.entry_bytes;
        l.slot_compressor_bytes += 2 * int64_t(s.compress_ratio) * D * 4;
        break;
      }
    }
  }
  return l;
}

std::string KvLayout::summary() const {
  return fmt::format(
      "{}: {} B/entry, {} B/indexer key; {} B per 256-token block ({:.0f} B/token; {} CSA, {} HCA, {} SWA-only "
      "layers); per sequence slot {} B window rings + {} B compressor state",
      kv_dtype_name(dtype), entry_bytes, indexer_key_bytes, block_bytes, bytes_per_token(), n_csa, n_hca, n_swa,
      slot_window_bytes, slot_compressor_bytes);
}

}  // namespace dsv4::kv
