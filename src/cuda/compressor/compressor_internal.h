// compressor_internal.h: the validated arguments of one compressor_forward call, shared by its
// two launches (emit.cu, then save.cu). compressor.cu validates; the launchers assume valid input.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/compressor/compressor.h"
#include "cuda/ops/q_head.h"

namespace dsv4::cuda::compressor_detail {

inline constexpr int kMaxDim = 1024;  // Dc: one thread per channel in the emit kernel

struct CompressorLaunch {
  StepBatchView b;
  const float* a = nullptr;         // f32 [n_tokens, ld]: compressor.wkv output
  const float* z = nullptr;         // f32 [n_tokens, ld]: compressor.wgate output, without ape
  int64_t ld = 0;
  const float* ape = nullptr;       // f32 [ratio][coff * dim]
  const float* norm_w = nullptr;    // f32 [dim]
  const float* inv_freq = nullptr;  // f32 [rope_dim / 2]
  float* state = nullptr;           // f32 [n_slots][2][coff * ratio][coff * dim]
  uint8_t* pool = nullptr;          // u8 paged records of record_bytes
  int ratio = 4, coff = 2, dim = 512, rope_dim = 64, record_bytes = 584;
  float norm_eps = 1e-6f;
  float hadamard_scale = 0.0f;      // fp32(1 / sqrt(fp32(dim))), as cpu::hadamard_bf16
  CompressedRecord record = CompressedRecord::kFp8Entry;
  bool save_too = false;            // the emit kernel also saves (b.one_row_per_seq: no save launch)
  // The attention query heads' norm + RoPE in the emit launch's extra blocks (y >= 1; q_groups of
  // them per row, blockDim / 32 heads each); q_heads.q null: none (compressor.h).
  QueryNormRope q_heads;
  int q_groups = 0;
};

// Emits the entry of every row that completes a window (reads the ring; with save_too, then saves
// the row as launch_compressor_save would); grid (n_tokens, 1 + q_groups), blocks of dim threads.
// pdl: launch as a programmatic dependent of the previous kernel (SM90, common/pdl.cuh).
Status launch_compressor_emit(const CompressorLaunch& g, cudaStream_t stream, bool pdl);
// Both emits in one launch: grid (n_tokens, 2), blocks of max(g0.dim, g1.dim) threads.
Status launch_compressor_emit_pair(const CompressorLaunch& g0, const CompressorLaunch& g1, cudaStream_t stream,
                                   bool pdl);
// Writes each sequence's last min(ntok, coff * ratio) rows into its ring (after the emit).
Status launch_compressor_save(const CompressorLaunch& g, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::compressor_detail
