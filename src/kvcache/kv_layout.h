// kv_layout.h: the byte layout of DeepSeek-V4's KV cache for one checkpoint (ARCHITECTURE.md §4,
// MODEL_SPEC.md §9), shared by the memory planner, the manifest and (later) the CUDA kernels.
// A 256-token block holds, per CSA layer, 64 compressed entries and 64 indexer keys; per HCA
// layer 256 / ratio entries; sliding-only layers store nothing per block. Every sequence also
// owns a slot: the 128-token raw window ring of every layer and the compressor partial state.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace dsv4::kv {

enum class KvDtype { kFp8, kBf16 };

Result<KvDtype> parse_kv_dtype(const std::string& s);  // "fp8" | "bf16"
const char* kv_dtype_name(KvDtype d);                 // "fp8_ds_mla" | "bf16"

struct KvLayout {
  KvDtype dtype = KvDtype::kFp8;
  int64_t entry_bytes = 0;          // one window or compressed entry (584 for Flash in fp8)
  int64_t indexer_key_bytes = 0;    // one indexer key (68 in fp4 + ue8m0)
  int64_t block_bytes = 0;          // one 256-token block over all layers
  int64_t slot_window_bytes = 0;    // one sequence's window rings over all layers
  int64_t slot_compressor_bytes = 0;// one sequence's fp32 compressor partial state
  int32_t n_csa = 0, n_hca = 0, n_swa = 0;

  int64_t slot_bytes() const { return slot_window_bytes + slot_compressor_bytes; }
  double bytes_per_token() const { return double(block_bytes) / 256.0; }
  std::string summary() const;
};

KvLayout make_kv_layout(const ModelConfig& cfg, KvDtype dtype);

}  // namespace dsv4::kv
