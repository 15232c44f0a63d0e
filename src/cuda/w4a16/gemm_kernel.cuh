// gemm_kernel.cuh: the W4A16 GEMM kernel template (device body). Included only by the
// gemm_cfg_*.cu files, each of which instantiates one configuration; launchers live in gemm.cu.
//
// One block computes a BM x BN output tile over a contiguous range of K (split-K: grid.y splits
// the K/128 groups evenly). Data flow per 128-k group:
//   cp.async (4 stages): A rows -> XOR-swizzled smem; packed weights and scales -> smem as stored
//   warp: ldmatrix A fragments; one 16-byte smem load gives the B fragments of 64 columns x 16 k;
//         lop3 + fma.bf16x2 turn codes into exact bf16 (q - 8); mma.m16n8k16 bf16 -> fp32
//   scale: per group and column, in fp32. The decode configuration (16 rows) keeps a per-group
//         accumulator and adds scale * group_sum; the others (no registers for a second set)
//         keep the running sum in units of the current group's scale: when the group changes,
//         acc *= s_prev / s_new, and acc *= s_last at the end. Dequantization itself is exact.
// Epilogue: warps that split K add their tiles through smem; split-K blocks write fp32 partials
// and the last block to arrive (counter per tile) adds them in split order (deterministic) and
// runs the mode's epilogue (GemmMode).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/arrival.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/moe_epilogue.cuh"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda::w4a16_detail {

// ---- configuration traits ------------------------------------------------------------------------

template <int FM, int WM, int WN, int WK, int BK, int STAGES>
struct GemmTraits {
  static constexpr int kThreads = 32 * WM * WN * WK;
  static constexpr int kBM = 16 * FM * WM;
  static constexpr int kBN = 64 * WN;
  static constexpr int kKS = BK / 16;                 // k16 slices per stage
  static constexpr int kSPW = kKS / WK;               // slices per warp per stage
  // See the file comment; a second accumulator set costs 32 FM registers, too many for FM >= 2.
  static constexpr bool kRescale = (BK == 64 || FM >= 2);
  static constexpr int kARowBytes = BK * 2;
  static constexpr int kABytes = kBM * kARowBytes;
  static constexpr int kBBytes = WN * kKS * 512;
  static constexpr int kSBytes = WN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes;
  static constexpr int kPipeBytes = kStageBytes * STAGES;
  static constexpr int kRedBytes = (WK - 1) * WM * WN * 32 * FM * 32 * 4;
  static constexpr int kSmemBytes = kPipeBytes > kRedBytes ? kPipeBytes : kRedBytes;
  static constexpr bool kSplitKFits = kBM * kBN * 4 <= kSmemBytes;  // fp32 tile for the reduction
  static constexpr int kChunksPerRow = BK / 8;        // 16-byte chunks of one A row per stage
  static constexpr int kAPerThread = kBM * kChunksPerRow / kThreads;
  static constexpr int kBPerThread = WN * kKS * 32 / kThreads;
  static constexpr int kSChunks = WN * 8;
  static_assert(BK == 64 || BK == 128, "a stage is half a group or one group");
  static_assert(kKS % WK == 0, "K-split warps share a stage's slices evenly");
  static_assert(kAPerThread >= 1 && kBM * kChunksPerRow % kThreads == 0, "A chunks per thread");
  static_assert(kBPerThread >= 1 && WN * kKS * 32 % kThreads == 0, "B chunks per thread");
  static_assert(kSChunks <= kThreads, "scale chunks");
  static_assert(kThreads % kChunksPerRow == 0, "a thread keeps its A chunk column");
  static_assert(kBM <= kThreads, "one thread per row in the MoE combine");
};

// ---- the kernel ----------------------------------------------------------------------------------

template <int FM, int WM, int WN, int WK, int BK, int STAGES>
__global__ void __launch_bounds__(32 * WM * WN * WK)
    w4a16_gemm_kernel(const GemmKernelArgs p) {
  using T = GemmTraits<FM, WM, WN, WK, BK, STAGES>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;
  __shared__ int s_row_token[T::kBM];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % WK, wn = (warp / WK) % WN, wm = warp / (WK * WN);
  const int nb = blockIdx.x, split = blockIdx.y, z = blockIdx.z;
  const int n_tiles64 = p.n >> 6, kg = p.k >> 7;

  // PDL: a dense GEMM's weights do not depend on the previous kernel, so their first stages are
  // requested before waiting for it; the MoE GEMMs wait first (the gate/up GEMM needs the
  // router's tiles; its dependents launch only after that wait, so the down GEMM may read the
  // tile list early, see decode_kernel.cuh).
  if (p.mode != GemmMode::kDense) pdl_wait();

  // Which rows this block owns: dense row blocks; MoE: the shared expert's static tiles first
  // (GemmKernelArgs), then the router's tiles. NOTE: the router's outputs are read with plain
  // loads after the wait; ld.global.cg for them moved this kernel from 158 to 128 registers and
  // 2 blocks per SM, which made the M = 64 shapes slower on the H200 (wq_b: 26 -> 39 us).
  int expert = 0, row_begin = 0, rows = 0;
  if (p.mode == GemmMode::kDense) {
    row_begin = z * T::kBM;
    rows = min(T::kBM, p.m - row_begin);
  } else if (z < p.n_shared_tiles) {
    expert = p.shared_expert;
    row_begin = p.shared_row0 + z * T::kBM;
    rows = min(T::kBM, p.m - z * T::kBM);
  } else {
    const int tz = z - p.n_shared_tiles;
    if (tz >= __ldcg(p.n_tiles)) return;  // fixed grid for a batch size; fewer tiles this step
    const int4 t = __ldcg(p.tiles + tz);
    expert = t.x;
    row_begin = t.y;
    rows = t.z;
  }
  const uint4* wbase;
  const __half* sbase;
  if (expert == p.shared_expert) {
    wbase = p.w_shared;
    sbase = p.s_shared;
  } else {
    wbase = p.w + expert * p.w_expert_stride;
    sbase = p.s + expert * p.s_expert_stride;
  }
  const int g_begin = int(int64_t(split) * kg / p.splits);
  const int g_end = int(int64_t(split + 1) * kg / p.splits);
  const int k_begin = g_begin * 128;
  const int n_stages = (g_end - g_begin) * (128 / BK);

  // Per-thread copy assignments, fixed for the whole K loop.
  const int a_chunk = tid % T::kChunksPerRow;
  const __nv_bfloat16* a_src[T::kAPerThread];
  uint32_t a_dst[T::kAPerThread];
#pragma unroll
  for (int j = 0; j < T::kAPerThread; ++j) {
    const int r = tid / T::kChunksPerRow + j * (T::kThreads / T::kChunksPerRow);
    a_dst[j] = r * T::kARowBytes + ((a_chunk ^ (r & 7)) << 4);
    a_src[j] = nullptr;
    if (r < rows) {
      int64_t arow = row_begin + r;
      if (p.mode == GemmMode::kMoeUp) arow = p.sorted_token[row_begin + r];
      a_src[j] = p.a + arow * p.lda + a_chunk * 8;
    }
  }
  const uint4* b_src[T::kBPerThread];
  uint32_t b_dst[T::kBPerThread];
  bool b_ok[T::kBPerThread];
#pragma unroll
  for (int j = 0; j < T::kBPerThread; ++j) {
    const int id = tid + j * T::kThreads;
    const int wi = id / (T::kKS * 32), rem = id % (T::kKS * 32);
    const int nt = nb * WN + wi;
    b_ok[j] = nt < n_tiles64;
    b_src[j] = b_ok[j] ? wbase + (int64_t(nt) * (p.k >> 4) + (k_begin >> 4)) * 32 + rem : wbase;
    b_dst[j] = T::kABytes + wi * T::kKS * 512 + rem * 16;
  }
  const __half* s_src = sbase;
  uint32_t s_dst = 0;
  bool s_ok = false;
  if (tid < T::kSChunks) {
    const int wi = tid / 8, c = tid % 8;
    const int nt = nb * WN + wi;
    s_ok = nt < n_tiles64;
    if (s_ok) s_src = sbase + int64_t(nt) * kg * 64 + c * 8;
    s_dst = T::kABytes + T::kBBytes + wi * 128 + c * 16;
  }

  const uint32_t smem_base = smem_u32(smem);
  // Rows past the tile's valid rows never receive data: zero them once in every stage slot
  // (decode tiles have 1-2 valid rows out of 16) instead of zero-filling them every stage.
#pragma unroll
  for (int j = 0; j < T::kAPerThread; ++j)
    if (a_src[j] == nullptr)
#pragma unroll
      for (int st = 0; st < STAGES; ++st)
        *reinterpret_cast<uint4*>(smem + st * T::kStageBytes + a_dst[j]) = make_uint4(0, 0, 0, 0);
  auto load_stage_a = [&](int st) {
    const uint32_t base = smem_base + (st % STAGES) * T::kStageBytes;
    const int kk = k_begin + st * BK;
#pragma unroll
    for (int j = 0; j < T::kAPerThread; ++j)
      if (a_src[j] != nullptr) cp_async16(base + a_dst[j], a_src[j] + kk, true);
  };
  auto load_stage_b = [&](int st) {
    const uint32_t base = smem_base + (st % STAGES) * T::kStageBytes;
    const int kk = k_begin + st * BK;
#pragma unroll
    for (int j = 0; j < T::kBPerThread; ++j) cp_async16(base + b_dst[j], b_src[j] + st * (T::kKS * 32), b_ok[j]);
    if (tid < T::kSChunks) cp_async16(base + s_dst, s_src + (s_ok ? (kk >> 7) * 64 : 0), s_ok);
  };

  float acc[FM][8][4];
#pragma unroll
  for (int f = 0; f < FM; ++f)
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[f][s][i] = 0.0f;
  float s_cur[16];  // kRescale: scales of the group the accumulator is expressed in
#pragma unroll
  for (int i = 0; i < 16; ++i) s_cur[i] = 1.0f;

  const int q = lane & 3;
  // Prologue: weights of the first stages, then (after the dependency) activations. Commit
  // groups complete in order, so stage st's weights are in (or before) stage st's group.
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st)
    if (st < n_stages) load_stage_b(st);
  if (p.mode == GemmMode::kDense) pdl_wait();
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_stages) load_stage_a(st);
    cp_async_commit();
  }

  for (int st = 0; st < n_stages; ++st) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage st landed for all threads; slot of stage st-1 is free
    if (st + STAGES - 1 < n_stages) {
      load_stage_b(st + STAGES - 1);
      load_stage_a(st + STAGES - 1);
    }
    cp_async_commit();

    const unsigned char* stage = smem + (st % STAGES) * T::kStageBytes;
    const uint32_t a_smem = smem_base + (st % STAGES) * T::kStageBytes;
    const uint4* b_smem = reinterpret_cast<const uint4*>(stage + T::kABytes) + wn * T::kKS * 32;
    const __half* sc_smem = reinterpret_cast<const __half*>(stage + T::kABytes + T::kBBytes) + wn * 64;

    if constexpr (T::kRescale) {
      if ((st * BK) % 128 == 0) {  // this stage starts a group
        float s_new[16];
        load_scales(sc_smem, q, s_new);
        if (st > 0) {
          float ratio[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) ratio[i] = __fdiv_rn(s_cur[i], s_new[i]);
#pragma unroll
          for (int f = 0; f < FM; ++f)
#pragma unroll
            for (int s = 0; s < 8; ++s)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[f][s][i] *= ratio[2 * s + (i & 1)];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) s_cur[i] = s_new[i];
      }
    }

    float gacc[FM][8][4];  // !kRescale: this group's unscaled sums
    if constexpr (!T::kRescale) {
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) gacc[f][s][i] = 0.0f;
    }

#pragma unroll
    for (int j = 0; j < T::kSPW; ++j) {
      const int ks = wk + j * WK;
      uint32_t a[FM][4];
#pragma unroll
      for (int f = 0; f < FM; ++f) {
        const int row = (wm * FM + f) * 16 + (lane & 15);
        const int chunk = ks * 2 + (lane >> 4);
        ldmatrix_x4(a[f], a_smem + row * T::kARowBytes + ((chunk ^ (row & 7)) << 4));
      }
      const uint4 qv = b_smem[ks * 32 + lane];
      const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        uint32_t b[4];
        dequant_word(qw[w], b);
#pragma unroll
        for (int f = 0; f < FM; ++f) {
          if constexpr (T::kRescale) {
            mma_bf16(acc[f][2 * w], a[f], b[0], b[1]);
            mma_bf16(acc[f][2 * w + 1], a[f], b[2], b[3]);
          } else {
            mma_bf16(gacc[f][2 * w], a[f], b[0], b[1]);
            mma_bf16(gacc[f][2 * w + 1], a[f], b[2], b[3]);
          }
        }
      }
    }

    if constexpr (!T::kRescale) {  // BK == 128: the stage is the whole group
      float sc[16];
      load_scales(sc_smem, q, sc);
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[f][s][i] = fmaf(sc[2 * s + (i & 1)], gacc[f][s][i], acc[f][s][i]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline smem is free from here on

  if constexpr (T::kRescale) {
#pragma unroll
    for (int f = 0; f < FM; ++f)
#pragma unroll
      for (int s = 0; s < 8; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[f][s][i] *= s_cur[2 * s + (i & 1)];
  }

  // Warps that split K: add into the wk == 0 warp of the same (wm, wn), in wk order.
  if constexpr (WK > 1) {
    float* red = reinterpret_cast<float*>(smem);
    constexpr int kRegs = FM * 32;
    if (wk > 0) {
      float* dst = red + (((wk - 1) * WM * WN + wm * WN + wn) * kRegs) * 32;
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) dst[((f * 8 + s) * 4 + i) * 32 + lane] = acc[f][s][i];
    }
    __syncthreads();
    if (wk == 0) {
#pragma unroll 1
      for (int w2 = 1; w2 < WK; ++w2) {
        const float* src = red + (((w2 - 1) * WM * WN + wm * WN + wn) * kRegs) * 32;
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int s = 0; s < 8; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[f][s][i] += src[((f * 8 + s) * 4 + i) * 32 + lane];
      }
    }
  }

  const int nt = nb * WN + wn;
  const bool active = (wk == 0) && nt < n_tiles64;  // warps that hold a finished slice of the tile
  const int g = lane >> 2;

  // Split-K: publish the partial tile; the last block of the tile adds all partials in order.
  if (p.splits > 1) {
    const int tile_id = z * gridDim.x + nb;
    float* part = p.partials + int64_t(tile_id) * p.splits * (T::kBM * T::kBN);
    if (active) {
      float* mine = part + int64_t(split) * (T::kBM * T::kBN);
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = (wm * FM + f) * 16 + g + 8 * h;
          if (row < rows) {
#pragma unroll
            for (int s = 0; s < 8; ++s)
              *reinterpret_cast<float2*>(mine + row * T::kBN + wn * 64 + s * 8 + 2 * q) =
                  make_float2(acc[f][s][2 * h], acc[f][s][2 * h + 1]);
          }
        }
    }
    if (!arrive_last(&p.counters[tile_id], p.splits, &s_last)) return;
    if constexpr (T::kSplitKFits) {
      // All threads add the partials (loads of 4 splits in flight at a time, always summed in
      // split order), into an fp32 tile in smem; the fragment owners pick their values up.
      float* tile = reinterpret_cast<float*>(smem);
      constexpr int kC4 = T::kBN / 4;
      for (int idx = tid; idx < rows * kC4; idx += T::kThreads) {
        const int r = idx / kC4, c4 = idx % kC4;
        const float4* src = reinterpret_cast<const float4*>(part + r * T::kBN) + c4;
        constexpr int64_t kStride = T::kBM * T::kBN / 4;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        int sp = 0;
        for (; sp + 4 <= p.splits; sp += 4) {
          float4 v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) v[u] = __ldcg(src + (sp + u) * kStride);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            sum.x += v[u].x;
            sum.y += v[u].y;
            sum.z += v[u].z;
            sum.w += v[u].w;
          }
        }
        for (; sp < p.splits; ++sp) {
          const float4 v = __ldcg(src + sp * kStride);
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        reinterpret_cast<float4*>(tile + r * T::kBN)[c4] = sum;
      }
      __syncthreads();
      if (active) {
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = (wm * FM + f) * 16 + g + 8 * h;
            if (row < rows) {
#pragma unroll
              for (int s = 0; s < 8; ++s) {
                const float2 v = *reinterpret_cast<const float2*>(tile + row * T::kBN + wn * 64 + s * 8 + 2 * q);
                acc[f][s][2 * h] = v.x;
                acc[f][s][2 * h + 1] = v.y;
              }
            }
          }
      }
    } else {
      __trap();  // the launcher never splits K for configurations whose tile does not fit in smem
    }
  }

  // Epilogue of the finished tile.
  if (active) {
    switch (p.mode) {
      case GemmMode::kDense:
      case GemmMode::kMoeDown:
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = (wm * FM + f) * 16 + g + 8 * h;
            if (row < rows) {
              __nv_bfloat16* out = p.c + int64_t(row_begin + row) * p.ldc + nt * 64 + 2 * q;
#pragma unroll
              for (int s = 0; s < 8; ++s)
                *reinterpret_cast<uint32_t*>(out + s * 8) = pack_bf16x2(acc[f][s][2 * h], acc[f][s][2 * h + 1]);
            }
          }
        break;
      case GemmMode::kMoeUp: {
        // Packed columns of block nt: [gate 0..15 | up 0..15 | gate 16..31 | up 16..31] of the
        // 32 intermediate columns 32 nt .. 32 nt + 31; sub-tile s in {0,1,4,5} is gate, s + 2 up.
        const float lim = p.swiglu_limit;
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = (wm * FM + f) * 16 + g + 8 * h;
            if (row < rows) {
              const float wr = p.sorted_weight[row_begin + row];
              __nv_bfloat16* out = p.c + int64_t(row_begin + row) * p.ldc + nt * 32 + 2 * q;
#pragma unroll
              for (int sg = 0; sg < 8; ++sg) {
                if ((sg & 2) != 0) continue;  // sg in {0, 1, 4, 5}
                float r2[2];
#pragma unroll
                for (int e = 0; e < 2; ++e)
                  r2[e] = swiglu_act(round_bf16(acc[f][sg][2 * h + e]), round_bf16(acc[f][sg + 2][2 * h + e]), lim, wr);
                *reinterpret_cast<uint32_t*>(out + (sg & 1) * 8 + (sg >> 2) * 16) = pack_bf16x2(r2[0], r2[1]);
              }
            }
          }
        break;
      }
    }
  }

  // MoE combine: when a token's last pair row of this column block is written, sum its rows.
  if (p.mode == GemmMode::kMoeDown) moe_combine<T::kBN, T::kThreads>(p, row_begin, rows, s_row_token);
}

// Entry points of one configuration (used by gemm_cfg_*.cu).
#define DSV4_DEFINE_GEMM_CONFIG(name, FM, WM, WN, WK, BK, STAGES)                                   \
  Status query_gemm_##name(GemmConfigInfo* info) {                                                   \
    using T = GemmTraits<FM, WM, WN, WK, BK, STAGES>;                                                \
    auto* kernel = &w4a16_gemm_kernel<FM, WM, WN, WK, BK, STAGES>;                                   \
    DSV4_RETURN_IF_ERROR(cuda_status(                                                                \
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),    \
        "cudaFuncSetAttribute(" #name ")"));                                                         \
    int blocks = 0;                                                                                  \
    DSV4_RETURN_IF_ERROR(cuda_status(                                                                \
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, T::kThreads, T::kSmemBytes), \
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor(" #name ")"));                                \
    GemmConfigInfo ci;                                                                               \
    ci.block_m = T::kBM;                                                                             \
    ci.block_n = T::kBN;                                                                             \
    ci.threads = T::kThreads;                                                                        \
    ci.warps_k = WK;                                                                                 \
    ci.smem_bytes = T::kSmemBytes;                                                                   \
    ci.blocks_per_sm = blocks;                                                                       \
    ci.split_k = T::kSplitKFits;                                                                     \
    *info = ci;                                                                                      \
    return Status::ok();                                                                             \
  }                                                                                                  \
  Status launch_gemm_##name(const GemmKernelArgs& args, dim3 grid, size_t /*smem: fixed*/, cudaStream_t stream, \
                            bool pdl) {                                                              \
    using T = GemmTraits<FM, WM, WN, WK, BK, STAGES>;                                                \
    return launch_kernel(&w4a16_gemm_kernel<FM, WM, WN, WK, BK, STAGES>, grid, dim3(T::kThreads),    \
                         size_t(T::kSmemBytes), stream, pdl, args, "w4a16_gemm_kernel(" #name ")");  \
  }

}  // namespace dsv4::cuda::w4a16_detail
