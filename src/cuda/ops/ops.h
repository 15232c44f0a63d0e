// ops.h: the small kernels of the forward pass (MODEL_SPEC.md §3-§6), each the device twin of a
// CPU-reference function in the "bf16" numerics (src/cpu/numerics.h): bf16 at op boundaries,
// fp32 inside. Activations are bf16 row-major; the residual streams X are bf16 [T, hc, D]
// (the reference rounds them to bf16 at every HCPost). Launchers validate, never allocate and
// never synchronize (graph-safe).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/deferred_sum.h"
#include "cuda/common/step_batch.h"

namespace dsv4::cuda {

// X[t, i, :] = embed[ids[t], :] for every stream i < hc. embed: bf16 [vocab, D].
Status embed_streams(const __nv_bfloat16* embed, int vocab, int D, const int32_t* ids, int T, int hc,
                     __nv_bfloat16* X, cudaStream_t stream);

struct HcDims {
  int hc = 4;              // streams
  int D = 4096;            // hidden
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

// mHC parameters of one site (cpu::hc_pre / hc_head): fn f32 [n_mix, hc*D], base f32 [n_mix],
// scale f32 [3] (blocks, n_mix = (2 + hc) * hc) or [1] (head, n_mix = hc).
struct HcParamsView {
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
  int n_mix = 0;
};

// What the mix kernels leave in mix's comb part, and what hc_post_pre_norm expects in post_mix's:
// the Sinkhorn projection (kProjected), or its logits (kLogits). The Sinkhorn is a serial chain of
// 40 normalizations (~2.5 us) at the end of the finish kernel, which the next kernel waits for; with
// kLogits it moves into the prologue of the kernel that applies the comb (hc_post_pre_norm's first
// launch), which runs before that kernel's PDL wait, beside the previous kernel. That prologue
// reads post_mix before the wait, so the call that wrote post_mix must be at least two launches
// earlier in the stream (pdl.cuh: a kernel starts only after every kernel before its predecessor
// has completed); without PDL (SM86) launches are serial anyway. kLogits takes at most
// kHcLogitsMaxTokens tokens (the forward pass uses it for small decode batches); hc_post and
// hc_head_norm take projected combs, so hc_sinkhorn projects the last sublayer's.
enum class HcComb { kProjected, kLogits };
inline constexpr int kHcLogitsMaxTokens = 4;
// hc_post_pre_norm's y given as its producer's last sum's terms (deferred_sum.h): batches up to
// this many tokens (the partials kernel then walks at most 8 tokens per block).
inline constexpr int kHcDeferredYMaxTokens = 256;

// HCPre + RMSNorm (cpu::hc_pre then rmsnorm and bf16): x[t] = bf16(rmsnorm(bf16(sum_i pre_i X[t,i]),
// norm_w)); mix[t] = f32 [hc post weights, hc*hc Sinkhorn comb (row j, col k at j*hc + k)] for hc_post.
// X: bf16 [T, hc*D]; norm_w: f32 [D]; x: bf16 [T, D]; mix: f32 [T, hc + hc*hc].
Status hc_pre_norm(const __nv_bfloat16* X, int T, const HcParamsView& p, const float* norm_w, const HcDims& dims,
                   __nv_bfloat16* x, float* mix, cudaStream_t stream, HcComb comb = HcComb::kProjected);

// The Sinkhorn projection of the comb logits that hc_pre_norm / hc_post_pre_norm left with
// HcComb::kLogits, in place: afterwards mix equals their kProjected output bit for bit.
Status hc_sinkhorn(float* mix, int T, const HcDims& dims, cudaStream_t stream);

// HCPost (cpu::hc_post): X[t, k, :] = bf16(post_k y[t] + sum_j comb[j, k] X[t, j, :]) in place.
Status hc_post(__nv_bfloat16* X, const __nv_bfloat16* y, const float* mix, int T, const HcDims& dims,
               cudaStream_t stream);

// hc_post then hc_pre_norm of the updated streams (the attention sublayer's HCPost and the FFN
// sublayer's HCPre + RMSNorm, or the FFN's HCPost and the next layer's HCPre) in two launches
// instead of three, with the same results bit for bit: X is updated in place as by
// hc_post(X, y, post_mix), then x and mix are written as by hc_pre_norm(X, ...). post_mix may be
// the same buffer as mix (it is read before mix is written); y must not overlap x or X.
// y_split (splits > 1): y is a split-K GEMM's unsummed output (deferred_sum.h; wo_b through
// w4a16_gemm_deferred); y_pairs (pairs_per_token > 0): y is the MoE's pair rows (moe_forward
// with MoeArgs::deferred), whose token_pairs must come from a kernel at least two launches back
// (they are read before the PDL wait; the router is three back). Either is added here in its
// producer's order, the same bits, and y is then not read. Up to kHcDeferredYMaxTokens tokens.
Status hc_post_pre_norm(__nv_bfloat16* X, const __nv_bfloat16* y, const float* post_mix, int T,
                        const HcParamsView& p, const float* norm_w, const HcDims& dims, __nv_bfloat16* x, float* mix,
                        cudaStream_t stream, HcComb comb = HcComb::kProjected, const SplitSumView* y_split = nullptr,
                        const PairSumView* y_pairs = nullptr);

// HC head + final norm for selected rows (cpu::CpuModel::head_logits before the LM head):
// x[i] = bf16(rmsnorm(hc_head(X[rows[i]]), norm_w)); rows: i32 [n] (device), null = rows 0..n-1.
Status hc_head_norm(const __nv_bfloat16* X, const int32_t* rows, int n, const HcParamsView& p, const float* norm_w,
                    const HcDims& dims, __nv_bfloat16* x, cudaStream_t stream);

// In-place weighted RMSNorm of T rows of n values (row stride ld), then bf16 (the q_norm of qa).
Status rmsnorm_rows(__nv_bfloat16* x, int64_t ld, int T, int n, const float* w, float eps, cudaStream_t stream);

// Query heads (attention_forward's query path after wq_b): per head unweighted RMSNorm, bf16,
// RoPE on the last rope_dim dims at token_pos[t] with inv_freq f32 [rope_dim / 2], bf16; in place.
// q: bf16 [T, H, d] (row stride H * d).
Status q_norm_rope(__nv_bfloat16* q, int T, int H, int d, int rope_dim, const int32_t* token_pos,
                   const float* inv_freq, float eps, cudaStream_t stream);

// KV path: kv bf16 [T, d] (row stride ld, the wkv part of the fused wq_a|wkv output): weighted
// RMSNorm (kv_norm), bf16, RoPE at token_pos, bf16, fp8 block quantization of the nope dims, and
// the 584-byte record of each row into records u8 [T][entry_bytes] (kv_view.h).
Status kv_finish(const __nv_bfloat16* kv, int64_t ld, int T, const float* norm_w, float eps, const int32_t* token_pos,
                 const float* inv_freq, const LayerKvView& layout, uint8_t* records, cudaStream_t stream);

// rmsnorm_rows(qkv, ld, T, q_n, q_norm_w, q_eps) and kv_finish(qkv + kv_col, ld, T, kv_norm_w,
// kv_eps, token_pos, inv_freq, layout, records) in one launch (both read the fused wq_a|wkv
// output), with the same results bit for bit. The q columns [0, q_n) and the kv columns
// [kv_col, kv_col + nope + rope) must not overlap: kv_col >= q_n, a multiple of 8.
// ring_step (a decode step: one_row_per_seq, T rows, the same token_pos): also copies each real
// row's record into its window ring as window_save(*ring_step, layout) would, so that launch is
// not needed; safe before attention because attention reads a decode row's own record from the
// chunk and the ring only at earlier positions (other slots).
Status qkv_norm_finish(__nv_bfloat16* qkv, int64_t ld, int T, int q_n, const float* q_norm_w, float q_eps,
                       int64_t kv_col, const float* kv_norm_w, float kv_eps, const int32_t* token_pos,
                       const float* inv_freq, const LayerKvView& layout, uint8_t* records, cudaStream_t stream,
                       const StepBatchView* ring_step = nullptr);

// After attention: copies the chunk records of each sequence's last min(ntok, W) rows into its
// window ring (slot seq_slot, index pos % W). Skips padding.
Status window_save(const StepBatchView& b, const LayerKvView& kv, cudaStream_t stream);

// Host helper for tests: decodes one main record (bf16 values as fp32) — see kv::unpack_entry.

}  // namespace dsv4::cuda
