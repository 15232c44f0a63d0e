// compressor.h: the KV compressors of CSA and HCA layers on the GPU (MODEL_SPEC.md §6.5; the CPU
// twin is cpu::compressor_push + compressor_finish_entry). For every token row of the step the
// projections (a, z) enter the sequence's ring state; every row whose position completes a window
// (pos % m == m - 1) emits an entry: softmax pooling per channel over the window's rows (with
// overlap, the A-half of the previous window's rows and the B-half of this one's), bf16,
// RMSNorm, bf16, RoPE at position w * m, bf16, then the record: fp8 main record (584 B) or,
// for the indexer's compressor, Hadamard + fp4 key (68 B). Entries go to the paged pool.
// Chunked prefill equals one-shot prefill: rows before the step come from the ring, rows of the
// step from the projection buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/step_batch.h"
#include "cuda/ops/q_head.h"

namespace dsv4::cuda {

enum class CompressedRecord { kFp8Entry, kFp4IndexKey };

struct CompressorParamsView {
  int ratio = 4;            // m
  bool overlap = true;      // CSA (coff = 2) or HCA (coff = 1)
  int dim = 512;            // Dc: 512 main, 128 indexer
  int rope_dim = 64;
  float norm_eps = 1e-6f;
  const float* ape = nullptr;       // f32 [m][coff * Dc], added to z by slot pos % m
  const float* norm_w = nullptr;    // f32 [Dc]
  const float* inv_freq = nullptr;  // f32 [rope_dim / 2], the compress rope
  CompressedRecord record = CompressedRecord::kFp8Entry;
  int coff() const { return overlap ? 2 : 1; }
  int width() const { return coff() * dim; }
  int ring_rows() const { return coff() * ratio; }
};

// Ring state of one compressor for every slot: f32 [n_slots][2 (a, z + ape)][ring_rows][width],
// row = pos % ring_rows. Rows of windows before the sequence's first window are never read
// (window 0 pools its B-half only), so a reused slot needs no clearing.
inline int64_t compressor_state_floats(const CompressorParamsView& p) {
  return 2 * int64_t(p.ring_rows()) * p.width();
}

// a, z: f32 [n_tokens, ld] (unrounded projections: compressor.wkv and .wgate, z without ape);
// state: f32 [n_slots][compressor_state_floats]; pool: entries (main) or index_keys (indexer) of
// the layer, with `record_bytes` per record and the layer's ratio. Two launches, emit then save;
// one when b.one_row_per_seq. q_heads (optional): the attention query heads of the step's rows,
// normalized and rotated in extra blocks of the emit launch, exactly as q_norm_rope with
// b.token_pos would (HCA layers, whose emit runs between wq_b and attention: one launch fewer).
Status compressor_forward(const StepBatchView& b, const float* a, const float* z, int64_t ld,
                          const CompressorParamsView& p, float* state, uint8_t* pool, int record_bytes,
                          cudaStream_t stream, const QueryNormRope* q_heads = nullptr);

// One compressor's arguments of compressor_forward.
struct CompressorCall {
  const float* a = nullptr;
  const float* z = nullptr;
  int64_t ld = 0;
  CompressorParamsView p;
  float* state = nullptr;
  uint8_t* pool = nullptr;
  int record_bytes = 0;
};

// Both compressors of a CSA layer (the main one and the indexer's) over one step: their emits in
// one launch (a block per token row and compressor), then for chunks their saves. The same
// records and ring states as compressor_forward(first) then compressor_forward(second): the two
// read and write disjoint state and pools.
Status compressor_forward_pair(const StepBatchView& b, const CompressorCall& first, const CompressorCall& second,
                               cudaStream_t stream);

}  // namespace dsv4::cuda
