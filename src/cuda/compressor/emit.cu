// emit.cu: the compressor's entry emission (MODEL_SPEC.md §6.5), one block per token row (and
// compressor, in the pair launch of a CSA layer's two compressors), one thread per channel; rows
// that do not complete a window (or belong to no sequence) return at once. A completing row
// gathers its window's rows: positions before the sequence's first row of the step from the ring
// state, the step's own rows from a / z (+ ape). Everything follows the CPU twin
// (cpu::compressor_push, compressor_finish_entry) operation by operation, in the same order and
// without FMA contraction, so the result matches it up to the last-ulp differences of
// expf (CUDA's, 2 ulp, against glibc's) and of cos/sin (ref_numerics.cuh), which bf16 rounding
// nearly always absorbs. In decode steps (CompressorLaunch::save_too) the block then saves its
// row into the ring (ring.cuh), so no save launch follows. Extra blocks of the single-compressor
// launch may take the attention query heads' norm + RoPE (HCA layers: one launch fewer in the
// chain; ops/q_head.h). Launched as a programmatic dependent (pdl.cuh): the channel's norm weight
// and inverse frequency, constant, are read before the wait.
#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/kv_codec.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/compressor/compressor_internal.h"
#include "cuda/compressor/ring.cuh"
#include "cuda/indexer/ref_numerics.cuh"
#include "cuda/ops/q_head.cuh"

namespace dsv4::cuda::compressor_detail {

namespace {

// A barrier over the compressor's channel threads (threads 0 .. dim - 1; dim % 32 == 0): in a pair
// launch the block is as wide as the wider compressor and the others have returned.
__device__ __forceinline__ void sync_channels(int dim) { asm volatile("bar.sync 1, %0;\n" ::"r"(dim) : "memory"); }

// The entry completed by token row t (position p = w * m + m - 1) of sequence seq, whose ring is
// at `slot`: channel j = threadIdx.x (norm_w its constant; rope_c, rope_s its rotation at the
// entry's position w * m, rope channels only). Reads the ring, never writes it.
__device__ __forceinline__ void emit_entry(const CompressorLaunch& g, int t, int seq, int slot, int64_t p,
                                           float norm_w, float rope_c, float rope_s) {
  __shared__ float s_x[kMaxDim];
  __shared__ float s_part[kMaxDim / 32];
  __shared__ float s_rms;

  const int j = threadIdx.x, lane = j & 31, warp = j >> 5;
  const int nope = g.dim - g.rope_dim;
  const int m = g.ratio;
  const int dim = g.dim, width = g.coff * dim, ring_rows = g.coff * m;
  const int64_t w = p / m;
  const int64_t pos0 = g.b.seq_pos0[seq], tok0 = g.b.seq_tok0[seq];
  const float* ring_a = g.state + int64_t(slot) * 2 * ring_rows * width;
  const float* ring_z = ring_a + int64_t(ring_rows) * width;
  // (a, z + ape) of position q, column col: from the step's rows or, before them, the ring.
  auto z_at = [&](int64_t q, int col) -> float {
    if (q >= pos0) return __fadd_rn(g.z[(tok0 + q - pos0) * g.ld + col], g.ape[(q % m) * width + col]);
    return ring_z[(q % ring_rows) * width + col];
  };
  auto a_at = [&](int64_t q, int col) -> float {
    if (q >= pos0) return g.a[(tok0 + q - pos0) * g.ld + col];
    return ring_a[(q % ring_rows) * width + col];
  };

  // ---- softmax pooling of channel j: the A-half of window w - 1 (with overlap; window 0 has
  // none, weight 0), then this window's rows (their B-half with overlap) ----
  const bool has_prev = g.coff == 2 && w > 0;
  const int64_t q_prev = (w - 1) * m, q_cur = w * m;
  const int col_cur = g.coff == 2 ? dim + j : j;
  float mx = -INFINITY;
  if (has_prev)
    for (int i = 0; i < m; ++i) mx = fmaxf(mx, z_at(q_prev + i, j));
  for (int i = 0; i < m; ++i) mx = fmaxf(mx, z_at(q_cur + i, col_cur));
  float den = 0.0f, num = 0.0f;
  if (has_prev) {
    for (int i = 0; i < m; ++i) {
      const float e = expf(__fsub_rn(z_at(q_prev + i, j), mx));
      den = __fadd_rn(den, e);
      num = __fadd_rn(num, __fmul_rn(e, a_at(q_prev + i, j)));
    }
  }
  for (int i = 0; i < m; ++i) {
    const float e = expf(__fsub_rn(z_at(q_cur + i, col_cur), mx));
    den = __fadd_rn(den, e);
    num = __fadd_rn(num, __fmul_rn(e, a_at(q_cur + i, col_cur)));
  }
  float x = ref::round_bf16(__fdiv_rn(num, den));

  // ---- RMSNorm: the sum of squares in the reference's order (cpu::dot: 8 strided partial sums,
  // then a fixed tree), 1 / sqrt(ss / n + eps), w * (x * r), bf16 ----
  s_x[j] = x;
  sync_channels(g.dim);
  if (j < 8) {
    float acc = 0.0f;
    for (int i = j; i < dim; i += 8) acc = __fadd_rn(acc, __fmul_rn(s_x[i], s_x[i]));
    s_part[j] = acc;
  }
  sync_channels(g.dim);
  if (j == 0) {
    const float* a = s_part;
    float ss = __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[4]), __fadd_rn(a[1], a[5])),
                         __fadd_rn(__fadd_rn(a[2], a[6]), __fadd_rn(a[3], a[7])));
    ss = __fadd_rn(ss, 0.0f);  // the reference's tail term
    s_rms = __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(dim)), g.norm_eps)));
  }
  sync_channels(g.dim);
  x = ref::round_bf16(__fmul_rn(norm_w, __fmul_rn(x, s_rms)));

  // ---- RoPE on the last rope_dim channels at position w * m, bf16 ----
  s_x[j] = x;
  sync_channels(g.dim);
  if (j >= nope) {
    const int k = (j - nope) / 2;
    const float2 r = ref::rope_rotate(s_x[nope + 2 * k], s_x[nope + 2 * k + 1], rope_c, rope_s);
    x = ref::round_bf16(((j - nope) & 1) ? r.y : r.x);
  }

  const int32_t* bt = g.b.block_table + int64_t(seq) * g.b.max_blocks;
  uint8_t* rec = g.pool + paged_record_offset(bt, w, m, g.record_bytes);
  switch (g.record) {
    case CompressedRecord::kFp8Entry: {
      // [nope e4m3][rope bf16][nope / 64 ue8m0][zero pad]: fp8sim per 64 of the nope channels
      // (nope % 64 == 0, so each warp lies in one block).
      const float wmax = ref::warp_max(j < nope ? fabsf(x) : 0.0f);
      if (lane == 0) s_part[warp] = wmax;
      sync_channels(g.dim);
      const int n_scales = nope / 64, used = nope + 2 * g.rope_dim + n_scales;
      if (j < nope) {
        const int blk = j / 64;
        const int e = fp8_block_exponent(fmaxf(s_part[2 * blk], s_part[2 * blk + 1]));
        rec[j] = encode_e4m3(x, e);
        if (j % 64 == 0) rec[nope + 2 * g.rope_dim + blk] = encode_ue8m0(e);
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(x);
        *reinterpret_cast<__nv_bfloat16*>(rec + nope + 2 * (j - nope)) = h;
      }
      if (j < g.record_bytes - used) rec[used + j] = 0;
      break;
    }
    case CompressedRecord::kFp4IndexKey: {
      // Hadamard over all dims (the reference's butterfly stages, in order), bf16, then fp4sim
      // per 32 (one warp): [dim / 2 bytes of e2m1 pairs, low nibble = even dim][dim / 32 ue8m0].
      sync_channels(g.dim);  // everyone has read s_x for the rope
      s_x[j] = x;
      sync_channels(g.dim);
      for (int span = 1; span < dim; span <<= 1) {
        if (j < dim / 2) {
          const int i0 = (j / span) * 2 * span + j % span;
          const float a = s_x[i0], b = s_x[i0 + span];
          s_x[i0] = __fadd_rn(a, b);
          s_x[i0 + span] = __fsub_rn(a, b);
        }
        sync_channels(g.dim);
      }
      const float v = ref::round_bf16(__fmul_rn(s_x[j], g.hadamard_scale));
      const int e = fp4_block_exponent(ref::warp_max(fabsf(v)));
      const uint32_t code = encode_e2m1(v, e);
      const uint32_t odd = __shfl_down_sync(0xffffffffu, code, 1);
      if ((j & 1) == 0) rec[j / 2] = uint8_t(code | (odd << 4));
      if (lane == 0) rec[dim / 2 + warp] = encode_ue8m0(e);
      break;
    }
  }
}

// Block t = token row t. With g.save_too (every sequence has at most one row: a decode step) the
// block also saves its row into the ring after the emit: the emit reads only earlier positions,
// whose ring rows differ from this row's, and no other block touches the slot. Threads past the
// compressor's channels (a pair launch's block sized for the wider one) only wait and leave.
__device__ __forceinline__ void emit_row(const CompressorLaunch& g) {
  const int j = threadIdx.x;
  if (j >= g.dim) {
    pdl_wait();
    return;
  }
  const int nope = g.dim - g.rope_dim;
  const float norm_w = g.norm_w[j];
  const float inv_freq = j >= nope ? g.inv_freq[(j - nope) / 2] : 0.0f;
  // The row's place (the step's arrays: host copies that no kernel writes, pdl.cuh) and the
  // entry's rotation (double-precision sincos, as the reference's) before the wait.
  const int t = blockIdx.x;
  const int seq = g.b.token_seq[t];
  const int slot = seq >= 0 ? g.b.seq_slot[seq] : -1;
  const int64_t p = g.b.token_pos[t];
  const bool emits = slot >= 0 && (p + 1) % g.ratio == 0;
  float rope_c = 1.0f, rope_s = 0.0f;
  if (emits && j >= nope) ref::rope_cos_sin(p / g.ratio * g.ratio, inv_freq, &rope_c, &rope_s);
  pdl_wait();  // a and z (the GEMM before), the ring and the pool

  if (slot < 0) return;  // a padding row or sequence
  if (emits) emit_entry(g, t, seq, slot, p, norm_w, rope_c, rope_s);
  if (g.save_too) save_ring_row(g, t, slot, g.dim);
}

// Blocks (t, 0) emit; blocks (t, y >= 1) take the attention query heads (y - 1) * blockDim / 32 ..
// of row t, as q_norm_rope_kernel does them (ops/q_head.cuh).
__global__ void __launch_bounds__(kMaxDim) compressor_emit_kernel(const CompressorLaunch g) {
  if (blockIdx.y > 0) {
    const int t = blockIdx.x;
    const float pos = float(g.b.token_pos[t]);  // the step's host copy (pdl.cuh)
    pdl_wait();                                 // q comes from the wq_b GEMM
    ops_detail::q_heads_of_block(g.q_heads, t, pos, int(blockIdx.y) - 1);
    return;
  }
  emit_row(g);
}

struct PairLaunch {
  CompressorLaunch g0, g1;
};

// blockIdx.y picks the compressor; each branch names its own member (no copy of either).
__global__ void __launch_bounds__(kMaxDim) compressor_emit_pair_kernel(const PairLaunch pl) {
  if (blockIdx.y == 0)
    emit_row(pl.g0);
  else
    emit_row(pl.g1);
}

}  // namespace

Status launch_compressor_emit(const CompressorLaunch& g, cudaStream_t stream, bool pdl) {
  return launch_kernel(&compressor_emit_kernel, dim3(unsigned(g.b.n_tokens), unsigned(1 + g.q_groups)), dim3(g.dim), 0,
                       stream, pdl, g,
                       "compressor_emit_kernel");
}

Status launch_compressor_emit_pair(const CompressorLaunch& g0, const CompressorLaunch& g1, cudaStream_t stream,
                                   bool pdl) {
  return launch_kernel(&compressor_emit_pair_kernel, dim3(unsigned(g0.b.n_tokens), 2),
                       dim3(unsigned(std::max(g0.dim, g1.dim))), 0, stream, pdl, PairLaunch{g0, g1},
                       "compressor_emit_pair_kernel");
}

}  // namespace dsv4::cuda::compressor_detail
