// kv_state.h: the device KV state of every layer (cuda/common/kv_view.h, ARCHITECTURE.md §4): per
// layer a window ring per slot, and for CSA/HCA layers the paged pool of compressed fp8 entries
// (CSA also the fp4 indexer keys) and the fp32 compressor ring state per slot; one chunk buffer
// of this step's KV records shared by all layers. Block ids come from the caller's block tables;
// slots are the caller's too. Nothing here needs clearing between sequences (kv_view.h,
// compressor.h), so allocation is the whole setup.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "cuda/common/kv_view.h"
#include "gpu/device_arena.h"
#include "gpu/device_weights.h"
#include "model/config.h"

namespace dsv4::gpu {

struct KvStateSizes {
  int max_seqs = 0, max_tokens = 0, n_kv_blocks = 0;
  int64_t entry_bytes = 0, index_key_bytes = 0;
  int64_t block_bytes = 0;       // one 256-token block over all layers (entries + index keys)
  int64_t slot_bytes = 0;        // one slot over all layers (window rings + compressor state)
  int64_t chunk_bytes = 0;       // the shared chunk buffer
  int64_t total_bytes() const { return block_bytes * n_kv_blocks + slot_bytes * max_seqs + chunk_bytes; }
};

// Byte counts for `cfg` (Flash record sizes: 584-byte entries, 68-byte indexer keys).
KvStateSizes kv_state_sizes(const ModelConfig& cfg, const std::vector<LayerDeviceWeights>& layers, int max_seqs,
                            int max_tokens, int n_kv_blocks);

struct LayerKvState {
  cuda::LayerKvView view;            // window, chunk, entries, index_keys, ratio, record sizes
  float* comp_state = nullptr;       // f32 [max_seqs][comp_state_floats]; CSA/HCA
  float* idx_state = nullptr;        // f32 [max_seqs][idx_state_floats]; CSA
  int64_t comp_state_floats = 0;     // compressor_state_floats(comp) (0: none)
  int64_t idx_state_floats = 0;      // compressor_state_floats(idx_comp) (0: none)
};

struct KvState {
  KvStateSizes sizes;
  std::vector<LayerKvState> layers;
};

// Enqueues on `stream` the copy of one sequence's state after n_tokens tokens into another: slot
// src_slot's window rings and compressor states to dst_slot, and the compressed records of the
// blocks covering n_tokens (whole blocks, consecutive ids in one copy; a block id at the same
// index of both tables is shared and not copied) from src_blocks to dst_blocks. The caller has
// checked the slots, the tables' lengths and the block ids.
Status copy_sequence_state(const KvState& kv, int src_slot, int dst_slot, std::span<const int32_t> src_blocks,
                           std::span<const int32_t> dst_blocks, int64_t n_tokens, void* stream);

// Allocates everything `sizes` describes (cleared, so that no stale bits are ever NaN).
Result<KvState> create_kv_state(const ModelConfig& cfg, const std::vector<LayerDeviceWeights>& layers,
                                const KvStateSizes& sizes, DeviceArena& arena);

}  // namespace dsv4::gpu
