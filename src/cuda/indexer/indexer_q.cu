// indexer_q.cu: the indexer's per-token inputs to scoring (MODEL_SPEC.md §6.6 steps 1-5): the
// query prep (RoPE, Hadamard, fp4 per 32, in place on the bf16 wq_b output) and the head
// weights. Both reproduce the CPU reference bit for bit (cpu::attention_forward's indexer part):
// the Hadamard runs the reference's butterfly stages in the same order, so every fp32 sum
// matches; only cos/sin may differ from glibc's in rare last-ulp cases (ref_numerics.cuh).
// Both launch as programmatic dependents (common/pdl.cuh) on SM90.
#include <algorithm>
#include <cmath>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/indexer/indexer.h"
#include "cuda/indexer/ref_numerics.cuh"
#include "cuda/indexer/topk_plan.h"
#include "cuda/ops/q_head.cuh"

namespace dsv4::cuda {

namespace {

using indexer_detail::kHeadDim;

constexpr int kPrepThreads = 256;  // 8 warps, one head each
constexpr int kPrepHeads = kPrepThreads / 32;  // heads per block

struct PrepArgs {
  __nv_bfloat16* qi;         // bf16 [T, n_heads, 128], in place
  const int32_t* token_pos;  // i32 [T]
  const float* inv_freq;     // f32 [rope_dim / 2]
  int n_heads, rope_dim;
  float hadamard_scale;      // fp32(1 / sqrt(fp32(128))), as cpu::hadamard_bf16
  // Head weights in the same launch (indexer_prepare); proj == nullptr: none.
  const float* proj;         // f32 [T, ld]
  int64_t ld;
  float w_scale;
  float* w;                  // f32 [T, n_heads]
  // Attention query heads in the same launch (ops/q_head.h): blocks y >= prep_groups take
  // kPrepHeads heads each; q_heads.q == nullptr: none.
  int prep_groups;           // ceil(n_heads / kPrepHeads)
  QueryNormRope q_heads;
};

// w[t, h] = bf16(bf16(proj[t, h]) * scale), in fp32 without contraction.
__device__ __forceinline__ float head_weight(float proj, float scale) {
  return ref::round_bf16(__fmul_rn(ref::round_bf16(proj), scale));
}

// Block (t, g): heads 8g .. 8g + 7 of token row t, one per warp. Flash's 64 heads make 8 blocks
// per token, so a batch-1 step does not walk its heads one after another in one block (a chain of
// 8 dependent loads: 13.9 us under ncu). Each block computes the row's rope angles itself. Lane l holds
// the four dims 4l .. 4l + 3, so the butterflies of span 1 and 2 are in-thread and spans 4 .. 64
// pair lane l with lane l ^ (span / 4). The lower element of a pair becomes a + b, the upper
// a - b, exactly as the reference's loop.
// Blocks (t, y >= prep_groups): the attention query heads 8 (y - prep_groups) .. + 7 of row t,
// one per warp, as q_norm_rope_kernel does them (ops/q_head.cuh).
__global__ void __launch_bounds__(kPrepThreads) indexer_prepare_q_kernel(const PrepArgs g) {
  const int t = blockIdx.x;
  if (int(blockIdx.y) >= g.prep_groups) {
    const float pos = float(g.token_pos[t]);  // the step's host copy (pdl.cuh)
    pdl_wait();                               // q comes from the wq_b GEMM
    ops_detail::q_heads_of_block(g.q_heads, t, pos, int(blockIdx.y) - g.prep_groups);
    return;
  }
  // The row's rope angles before the wait: the inverse frequencies are constant and token_pos is
  // the step's host copy (pdl.cuh); only shared memory is written.
  __shared__ float s_cos[kHeadDim / 2], s_sin[kHeadDim / 2];
  const int half_rope = g.rope_dim / 2;
  if (int(threadIdx.x) < half_rope)
    ref::rope_cos_sin(g.token_pos[t], g.inv_freq[threadIdx.x], &s_cos[threadIdx.x], &s_sin[threadIdx.x]);
  pdl_wait();  // qi, proj: earlier kernels
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y * kPrepHeads + warp;
  // This warp's head row, requested before the angles are computed (independent of them).
  __nv_bfloat16* q = g.qi + (int64_t(t) * g.n_heads + h) * kHeadDim + 4 * lane;
  uint2 raw = make_uint2(0, 0);
  if (h < g.n_heads) raw = *reinterpret_cast<const uint2*>(q);
  if (g.proj != nullptr && lane == 0 && h < g.n_heads)
    g.w[int64_t(t) * g.n_heads + h] = head_weight(g.proj[int64_t(t) * g.ld + h], g.w_scale);
  __syncthreads();
  if (h >= g.n_heads) return;  // whole warps, after the block's only barrier

  const int rope0 = kHeadDim - g.rope_dim;  // first rope dim (even)
  float x[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u), __uint_as_float(raw.y << 16),
                __uint_as_float(raw.y & 0xffff0000u)};
  // RoPE on the trailing dims, rounded to bf16 (the other dims are bf16 already).
#pragma unroll
  for (int r = 0; r < 4; r += 2) {
    const int d = 4 * lane + r;
    if (d >= rope0) {
      const int k = (d - rope0) / 2;
      const float2 o = ref::rope_rotate(x[r], x[r + 1], s_cos[k], s_sin[k]);
      x[r] = ref::round_bf16(o.x);
      x[r + 1] = ref::round_bf16(o.y);
    }
  }
  // Hadamard: spans 1, 2 in-thread, then 4 .. 64 across lanes.
#pragma unroll
  for (int span = 1; span <= 2; span <<= 1) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if ((r & span) == 0) {
        const float a = x[r], b = x[r + span];
        x[r] = __fadd_rn(a, b);
        x[r + span] = __fsub_rn(a, b);
      }
    }
  }
#pragma unroll
  for (int lspan = 1; lspan < 32; lspan <<= 1) {
    const bool upper = (lane & lspan) != 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float other = __shfl_xor_sync(0xffffffffu, x[r], lspan);
      x[r] = upper ? __fsub_rn(other, x[r]) : __fadd_rn(x[r], other);
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    x[r] = ref::round_bf16(__fmul_rn(x[r], g.hadamard_scale));
    amax = fmaxf(amax, fabsf(x[r]));
  }
  // fp4sim per 32 dims = 8 lanes.
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const int e = fp4_block_exponent(amax);
  __nv_bfloat162 lo = __floats2bfloat162_rn(ref::fp4_dequant(x[0], e), ref::fp4_dequant(x[1], e));
  __nv_bfloat162 hi = __floats2bfloat162_rn(ref::fp4_dequant(x[2], e), ref::fp4_dequant(x[3], e));
  uint2 out;
  out.x = *reinterpret_cast<uint32_t*>(&lo);
  out.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(q) = out;
}

struct WeightsArgs {
  const float* proj;  // f32 [T, ld]
  int64_t ld;
  int T, n_heads;
  float scale;
  float* w;           // f32 [T, n_heads]
};

__global__ void indexer_weights_kernel(const WeightsArgs a) {
  pdl_wait();  // proj comes from the previous kernel
  const int64_t n = int64_t(a.T) * a.n_heads;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / a.n_heads, h = i % a.n_heads;
    a.w[i] = head_weight(a.proj[t * a.ld + h], a.scale);
  }
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

namespace {

Status launch_prepare(__nv_bfloat16* qi, int T, int n_heads, int head_dim, int rope_dim, const int32_t* token_pos,
                      const float* inv_freq, const float* proj, int64_t ld, float w_scale, float* w, cudaStream_t stream,
                      const QueryNormRope* qn = nullptr) {
  if (T < 0 || n_heads < 1) return invalid_argument("indexer_prepare_q: T={} n_heads={}", T, n_heads);
  if (head_dim != kHeadDim) return invalid_argument("indexer_prepare_q: head_dim {} (the kernel is built for {})", head_dim, kHeadDim);
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return invalid_argument("indexer_prepare_q: rope_dim {} must be even and at most {}", rope_dim, head_dim);
  if (T == 0) return Status::ok();
  if (qi == nullptr || token_pos == nullptr || (rope_dim > 0 && inv_freq == nullptr))
    return invalid_argument("indexer_prepare_q: null qi, token_pos or inv_freq");
  if (!aligned(qi, 8)) return invalid_argument("indexer_prepare_q: qi must be 8-byte aligned");
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const int prep_groups = (n_heads + kPrepHeads - 1) / kPrepHeads;
  PrepArgs g{qi, token_pos, inv_freq, n_heads, rope_dim, 1.0f / std::sqrt(float(head_dim)), proj, ld, w_scale, w,
             prep_groups, QueryNormRope{}};
  int q_groups = 0;
  if (qn != nullptr) {
    DSV4_RETURN_IF_ERROR(check_query_norm_rope(*qn, "indexer_prepare"));
    g.q_heads = *qn;
    q_groups = (qn->n_heads + kPrepHeads - 1) / kPrepHeads;
  }
  const dim3 grid(unsigned(T), unsigned(prep_groups + q_groups));
  return launch_kernel(&indexer_prepare_q_kernel, grid, dim3(kPrepThreads), 0, stream, pdl, g,
                       "indexer_prepare_q_kernel");
}

}  // namespace

Status indexer_prepare_q(__nv_bfloat16* qi, int T, int n_heads, int head_dim, int rope_dim, const int32_t* token_pos,
                         const float* inv_freq, cudaStream_t stream) {
  return launch_prepare(qi, T, n_heads, head_dim, rope_dim, token_pos, inv_freq, nullptr, 0, 0.0f, nullptr, stream);
}

Status indexer_prepare(__nv_bfloat16* qi, int T, int n_heads, int head_dim, int rope_dim, const int32_t* token_pos,
                       const float* inv_freq, const float* proj, int64_t ld, float w_scale, float* w,
                       cudaStream_t stream, const QueryNormRope* q_heads) {
  if (ld < n_heads) return invalid_argument("indexer_prepare: ld {} < n_heads {}", ld, n_heads);
  if (T > 0 && (proj == nullptr || w == nullptr)) return invalid_argument("indexer_prepare: null proj or w");
  return launch_prepare(qi, T, n_heads, head_dim, rope_dim, token_pos, inv_freq, proj, ld, w_scale, w, stream, q_heads);
}

Status indexer_weights(const float* proj, int64_t ld, int T, int n_heads, float scale, float* w, cudaStream_t stream) {
  if (T < 0 || n_heads < 1 || ld < n_heads)
    return invalid_argument("indexer_weights: T={} n_heads={} ld={} (ld >= n_heads)", T, n_heads, ld);
  if (T == 0) return Status::ok();
  if (proj == nullptr || w == nullptr) return invalid_argument("indexer_weights: null proj or w");
  const int64_t n = int64_t(T) * n_heads;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 4096));
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  return launch_kernel(&indexer_weights_kernel, dim3(blocks), dim3(threads), 0, stream, pdl,
                       WeightsArgs{proj, ld, T, n_heads, scale, w}, "indexer_weights_kernel");
}

}  // namespace dsv4::cuda
