// kv_view.h: where one layer's KV state lives on the device (ARCHITECTURE.md §4, MODEL_SPEC.md §9)
// and how a (sequence, position) or (sequence, entry) is addressed. Records are the byte formats
// of src/kvcache/kv_record.h (device codecs in kv_codec.cuh):
//   main record   584 B for Flash: [448 e4m3 nope][64 bf16 rope][7 ue8m0 scales + 1 pad]
//   indexer key   68 B for Flash:  [64 B of e2m1 pairs, low nibble = even dim][4 ue8m0 scales]
// Storage of one layer:
//   window      u8 [n_slots][W][entry_bytes]      ring of the last W positions, slot = pos % W
//   chunk       u8 [n_tokens][entry_bytes]        this step's KV records, row = flat token row
//                                                 (one buffer shared by all layers; written by
//                                                 kv_finish, read by attention, saved to the ring)
//   entries     u8 [n_blocks][256 / ratio][entry_bytes]   compressed entries (CSA, HCA)
//   index_keys  u8 [n_blocks][256 / ratio][index_key_bytes] indexer keys (CSA)
// Entry e of a sequence lives in block block_table[seq][e * ratio / 256] at index
// e % (256 / ratio). Position q < seq_pos0 is read from the window ring; q >= seq_pos0 from the
// chunk at row seq_tok0 + (q - seq_pos0).
#pragma once

#include <cstdint>

#include "cuda/common/step_batch.h"

namespace dsv4::cuda {

struct LayerKvView {
  uint8_t* window = nullptr;       // u8 [n_slots][window_size][entry_bytes]
  int window_size = 128;           // W
  uint8_t* chunk = nullptr;        // u8 [n_tokens][entry_bytes]
  uint8_t* entries = nullptr;      // u8 [n_blocks][256 / ratio][entry_bytes]; null for SWA layers
  uint8_t* index_keys = nullptr;   // u8 [n_blocks][256 / ratio][index_key_bytes]; CSA only
  int ratio = 0;                   // tokens per compressed entry: 0 (SWA), 4 (CSA), 128 (HCA)
  int nope = 448, rope = 64;       // main record dims (head_dim = nope + rope)
  int entry_bytes = 584;
  int index_dim = 128;
  int index_key_bytes = 68;
};

// Byte offset of entry e of the sequence whose block-table row is `bt`, in a pool of records of
// `record_bytes` with 256 / ratio records per block.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t paged_record_offset(const int32_t* bt, int64_t e, int ratio, int record_bytes) {
  const int per_block = kKvBlockTokens / ratio;
  return (int64_t(bt[e / per_block]) * per_block + e % per_block) * record_bytes;
}

// Byte offset of entry e0 when entries e0 .. e0 + n - 1 lie in one block (so they are
// contiguous records from there), else -1. For kernels that walk tiles of n entries: one block
// lookup (32-bit division: entry indices stay far below 2^31) per tile instead of a 64-bit
// division per record (the per-row indexer kernel was 19% faster without those).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t paged_run_offset(const int32_t* bt, int64_t e0, int n, int ratio, int record_bytes) {
  const int per_block = kKvBlockTokens / ratio;
  const int32_t e = int32_t(e0), in_block = e % per_block;
  if (in_block + n > per_block) return -1;
  return (int64_t(bt[e / per_block]) * per_block + in_block) * record_bytes;
}

}  // namespace dsv4::cuda
