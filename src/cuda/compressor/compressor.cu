// compressor.cu: compressor_forward, the validating launcher of the KV compressors (CSA main and
// indexer compressors, HCA), and compressor_forward_pair (a CSA layer's two compressors, their
// emits in one launch). Two launches on the caller's stream, emit (emit.cu) then save
// (save.cu), or for a decode step (one row per sequence) the emit alone, which then saves its row
// itself; one block per token row, so the grid depends only on n_tokens (graph-safe);
// nothing is allocated and nothing waits on the host. Both launch as programmatic dependents
// (common/pdl.cuh) on SM90.
#include <cmath>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/compressor/compressor.h"
#include "cuda/compressor/compressor_internal.h"

namespace dsv4::cuda {

using namespace compressor_detail;

namespace {

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// Bytes of the record the emit writes (kvcache/kv_record.h: entry_bytes, indexer_key_bytes).
int expected_record_bytes(const CompressorParamsView& p) {
  switch (p.record) {
    case CompressedRecord::kFp8Entry: {
      const int nope = p.dim - p.rope_dim;
      return (nope + 2 * p.rope_dim + nope / 64 + 7) / 8 * 8;
    }
    case CompressedRecord::kFp4IndexKey: return p.dim / 2 + p.dim / 32;
  }
  return -1;
}

// The validated launch of one compressor (Status on bad arguments).
Result<CompressorLaunch> make_launch(const StepBatchView& b, const float* a, const float* z, int64_t ld,
                                     const CompressorParamsView& p, float* state, uint8_t* pool, int record_bytes) {
  if (p.ratio < 1 || kKvBlockTokens % p.ratio != 0)
    return invalid_argument("compressor_forward: ratio {} must divide {}", p.ratio, kKvBlockTokens);
  if (p.dim < 32 || p.dim > kMaxDim || p.dim % 32 != 0)
    return invalid_argument("compressor_forward: dim {} must be a multiple of 32 up to {}", p.dim, kMaxDim);
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim)
    return invalid_argument("compressor_forward: rope_dim {} must be even and at most dim {}", p.rope_dim, p.dim);
  switch (p.record) {
    case CompressedRecord::kFp8Entry:
      if ((p.dim - p.rope_dim) % 64 != 0 || p.rope_dim % 32 != 0)
        return invalid_argument("compressor_forward: fp8 entries need nope {} % 64 == 0 and rope {} % 32 == 0",
                                p.dim - p.rope_dim, p.rope_dim);
      break;
    case CompressedRecord::kFp4IndexKey:
      if ((p.dim & (p.dim - 1)) != 0)
        return invalid_argument("compressor_forward: fp4 keys need a power-of-two dim (Hadamard), got {}", p.dim);
      break;
  }
  if (record_bytes != expected_record_bytes(p))
    return invalid_argument("compressor_forward: record_bytes {} != {} for dim {} rope {}", record_bytes,
                            expected_record_bytes(p), p.dim, p.rope_dim);
  if (ld < p.width()) return invalid_argument("compressor_forward: ld {} < width {}", ld, p.width());
  if (!(p.norm_eps >= 0.0f)) return invalid_argument("compressor_forward: norm_eps {}", p.norm_eps);
  if (b.n_tokens < 0 || b.n_seqs < 0) return invalid_argument("compressor_forward: n_tokens {} n_seqs {}", b.n_tokens, b.n_seqs);
  if (b.n_tokens > 0 && (b.token_seq == nullptr || b.token_pos == nullptr || b.seq_slot == nullptr || b.seq_pos0 == nullptr ||
      b.seq_tok0 == nullptr || b.seq_ntok == nullptr || b.block_table == nullptr || b.max_blocks < 1))
    return invalid_argument("compressor_forward: incomplete step batch");
  if (a == nullptr || z == nullptr || state == nullptr || pool == nullptr || p.ape == nullptr || p.norm_w == nullptr ||
      (p.rope_dim > 0 && p.inv_freq == nullptr))
    return invalid_argument("compressor_forward: null a, z, state, pool, ape, norm_w or inv_freq");
  if (!aligned(pool, 2)) return invalid_argument("compressor_forward: pool must be 2-byte aligned");

  CompressorLaunch g;
  g.b = b;
  g.a = a;
  g.z = z;
  g.ld = ld;
  g.ape = p.ape;
  g.norm_w = p.norm_w;
  g.inv_freq = p.inv_freq;
  g.state = state;
  g.pool = pool;
  g.ratio = p.ratio;
  g.coff = p.coff();
  g.dim = p.dim;
  g.rope_dim = p.rope_dim;
  g.record_bytes = record_bytes;
  g.norm_eps = p.norm_eps;
  g.hadamard_scale = 1.0f / std::sqrt(float(p.dim));
  g.record = p.record;
  g.save_too = b.one_row_per_seq;
  return g;
}

}  // namespace

Status compressor_forward(const StepBatchView& b, const float* a, const float* z, int64_t ld,
                          const CompressorParamsView& p, float* state, uint8_t* pool, int record_bytes,
                          cudaStream_t stream, const QueryNormRope* q_heads) {
  DSV4_ASSIGN_OR_RETURN(CompressorLaunch g, make_launch(b, a, z, ld, p, state, pool, record_bytes));
  if (q_heads != nullptr) {
    DSV4_RETURN_IF_ERROR(check_query_norm_rope(*q_heads, "compressor_forward"));
    const int heads_per_block = p.dim / 32;  // one warp per head, blocks of dim threads
    g.q_heads = *q_heads;
    g.q_groups = (q_heads->n_heads + heads_per_block - 1) / heads_per_block;
  }
  if (b.n_tokens == 0) return Status::ok();
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  DSV4_RETURN_IF_ERROR(launch_compressor_emit(g, stream, pdl));
  return g.save_too ? Status::ok() : launch_compressor_save(g, stream, pdl);
}

Status compressor_forward_pair(const StepBatchView& b, const CompressorCall& first, const CompressorCall& second,
                               cudaStream_t stream) {
  const Result<CompressorLaunch> g0 =
      make_launch(b, first.a, first.z, first.ld, first.p, first.state, first.pool, first.record_bytes);
  if (!g0.is_ok()) return g0.status().with_context("first compressor");
  const Result<CompressorLaunch> g1 =
      make_launch(b, second.a, second.z, second.ld, second.p, second.state, second.pool, second.record_bytes);
  if (!g1.is_ok()) return g1.status().with_context("second compressor");
  if (b.n_tokens == 0) return Status::ok();
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  DSV4_RETURN_IF_ERROR(launch_compressor_emit_pair(g0.value(), g1.value(), stream, pdl));
  if (b.one_row_per_seq) return Status::ok();
  DSV4_RETURN_IF_ERROR(launch_compressor_save(g0.value(), stream, pdl));
  return launch_compressor_save(g1.value(), stream, pdl);
}

}  // namespace dsv4::cuda
