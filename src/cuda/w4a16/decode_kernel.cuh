// decode_kernel.cuh: the W4A16 decode GEMM kernel template (up to 32 rows per tile), included only
// by the decode_cfg_*.cu files, one instantiation each; launchers live in gemm.cu and moe/moe.cu.
//
// At decode sizes the GEMM is a weight stream: what limits it is how many bytes are in flight
// per SM and how few instructions each weight byte costs, not arithmetic. So:
//   - A block is 8 warps: WN along N (one 64-column tile each) x WK along K. Warp (wn, wk) owns
//     the 128-k groups wk, wk + WK, ... of the block's K range for its tile and streams them
//     through its own ring of `stages` slots of one group (4 KB of codes + 128 B of scales):
//     cp.async (9 per lane per group) on SM80/86; on SM90 two bulk copies from lane 0 that
//     complete on the slot's mbarrier (wq_b at M = 1: 7.77 -> 7.0 us, wo_b 10.2 -> 9.3 on the
//     H200, bench/results/w4a16_h200_bulk_ab.log). Warps never wait for each other inside the K
//     loop (only __syncwarp), so a warp whose data arrived computes while the others' requests
//     are in flight. (An L2 evict-first policy on these copies, a runtime switch from 58676de,
//     bought nothing in the step and cost wo_b ~0.5 us at M = 1: removed,
//     bench/results/wob_bisect_h100.)
//   - The weights of the first `stages` groups are requested before the PDL wait (they do not
//     depend on the previous kernel); the A block (tile rows x the block's K range, bf16) is
//     staged once in smem after it and shared by all warps.
//   - Dequantization is 7 instructions per 32-bit word: lop3 turns each code pair into the exact
//     bf16 pair 128 + q; the mma accumulates a . (128 + q) and one more mma per k16 slice against
//     a B of ones accumulates sum(a), so that per group and column
//       acc += scale * (group_sum - 136 * sum(a))   (136 = 128 + the GPTQ zero point 8)
//     in fp32. Products are exact, so this differs from summing a (q - 8) only by fp32 rounding
//     of sums about 30x larger than the result (~1e-6 relative; the output is bf16).
//   - Tiles of at most 8 rows (M <= 8, and the MoE's expert tiles, which hold a few rows each)
//     swap the operands: the dequantized weights are the mma's 16 x 16 A operand and the rows
//     the 8 columns of B, so a group takes 32 mmas instead of 72 and half the accumulators, and
//     the correction sums come from s_xsum (computed once per block) instead of a ones-mma.
//     MoE layer at M = 1: 45.2 -> 43.4 us, M = 16: 324 -> 306 us (bench/results/NOTES.md).
//   - The MoE GEMMs' instantiations (kF16, FM = 1) run those tiles in fp16: fp16 has room for a
//     code in mantissa bits 4-7 as well as 0-3, so a word takes 5 integer instructions instead
//     of 7 (dequant_word_f16: exact q - 8 after two fp16 ops on the lightly used FMA pipe; the
//     ALU pipe is what 16 warps on an SM contend for), and no correction sums. The fp16 ops
//     lengthen each warp's chain: a wave of one block (8 warps) per SM can lose (M = 4).
//     The A block is converted in smem once per block, each row scaled into fp16's top binade by
//     a power of two (row_scale_down in ptx.cuh: exact whatever the row's range; only values
//     2^29 below the row's largest lose bits). MoE layer at M = 1: 42.1 -> 40.5 us, M = 16:
//     303 -> 294 us; M = 4 loses 4%, its partial second wave being latency-bound (NOTES.md).
//     The dense GEMMs keep bf16: a short K range per block, where the conversion pass is on
//     the critical path, made them ~0.6 us slower at M = 1.
//   - The WK warps of a tile add their sums through smem in wk order; split-K over blocks
//     (grid.y) and the epilogues (GemmMode) are as in the tiled kernel: fp32 partials, the last
//     block to arrive adds them in split order (deterministic) and, on SM90 for a dense tile,
//     writes the sums as bf16 from its registers (split_sum_to_bf16; wo_b at M = 1 10.0 -> 9.6
//     us on the H100); where the measured table asks for it, an SM90 cluster of the splits adds
//     them through DSMEM instead. The kernel sits at
//     the 128-register bound of two blocks per SM, and the build fails on any spill
//     (src/cuda/CMakeLists.txt): a spread sum by all split blocks spilled and slowed every launch.
//     With GemmKernelArgs::defer_sum (w4a16_gemm_deferred) the blocks stop after their partials
//     and the consumer adds them (wo_b's: the HCPost that reads y; common/deferred_sum.h).
// Rows of the 16-row mma tile past the tile's rows read a copy of the last row (ldmatrix
// addresses clamped) and are never stored: A needs smem for the real rows only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/arch.h"
#include "cuda/common/arrival.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/moe_epilogue.cuh"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda::w4a16_detail {

template <int FM, int WN, int WK>
struct DecodeTraits {
  static constexpr int kWarps = WN * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBM = 16 * FM;
  static constexpr int kBN = 64 * WN;
  static constexpr int kRegs = FM * 32;  // accumulators per lane
  static constexpr int kRedBytes = (WK - 1) * WN * kRegs * 32 * 4;
  static constexpr int kTileBytes = kBM * kBN * 4;  // fp32 tile of the split-K sum
  static constexpr int kMinRingBytes = kWarps * 2 * kDecodeSlotBytes;
  static_assert(kRedBytes <= kMinRingBytes && kTileBytes <= kMinRingBytes, "epilogue buffers reuse the ring");
  static_assert(kBM <= kThreads, "one thread per row in the row table and the MoE combine");
  // FM = 1: two blocks per SM (this grid's and the next kernel's early PDL block) fit only with
  // at most 128 registers per thread.
  static constexpr int kMinBlocks = FM == 1 ? 2 : 1;
};

__device__ __forceinline__ void cp_async_wait_upto(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// The last split block's sum: adds the tile's fp32 partials [splits][kBM][kBN] in split order
// (the same bits wherever it runs) and hands each float4 of the tile's first `rows` rows to
// store(idx, sum), idx = row * kBN / 4 + column / 4. Bound by L2 latency: every load of a round
// (two float4 of the tile per thread, up to 8 splits each: 16 requests) goes out before the
// first add.
template <int kBM, int kBN, int kThreads, class Store>
__device__ __forceinline__ void add_split_partials(const float* part, int splits, int rows, Store store) {
  constexpr int kC4 = kBN / 4;
  constexpr int64_t kStride = kBM * kBN / 4;
  constexpr int kBatch = 8;
  const int total = rows * kC4;
  for (int idx0 = threadIdx.x; idx0 < total; idx0 += 2 * kThreads) {
    const float4* src[2];
    float4 sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int idx = min(idx0 + h * kThreads, total - 1);  // a clamped duplicate is never stored
      src[h] = reinterpret_cast<const float4*>(part + (idx / kC4) * kBN) + idx % kC4;
      sum[h] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int sp = 0; sp < splits; sp += kBatch) {
      float4 v[2][kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (sp + u < splits) v[h][u] = __ldcg(src[h] + (sp + u) * kStride);
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (sp + u < splits) {
            sum[h].x += v[h][u].x;
            sum[h].y += v[h][u].y;
            sum[h].z += v[h][u].z;
            sum[h].w += v[h][u].w;
          }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (idx0 + h * kThreads < total) store(idx0 + h * kThreads, sum[h]);
  }
}

// A dense tile's last split block on SM90: the sums go out as bf16 straight from the adding
// registers (no shared tile, barrier and reload into the accumulators; the same rounding of the
// same sums). c points at the tile's first row and column col0. Out of line: inlined, it made
// ptxas spill in the 128-register kernel (sm_90; on sm_86 the call spills too, so SM86 keeps the
// tile).
template <int kBM, int kBN, int kThreads>
__device__ __noinline__ void split_sum_to_bf16(const float* part, int splits, int rows, __nv_bfloat16* c,
                                               int64_t ldc, int col0, int n) {
  add_split_partials<kBM, kBN, kThreads>(part, splits, rows, [&](int idx, float4 sum) {
    constexpr int kC4 = kBN / 4;
    const int col = col0 + (idx % kC4) * 4;  // 64-column tiles past n were never computed
    if (col < n) {
      uint32_t* out = reinterpret_cast<uint32_t*>(c + int64_t(idx / kC4) * ldc + col);
      out[0] = pack_bf16x2(sum.x, sum.y);
      out[1] = pack_bf16x2(sum.z, sum.w);
    }
  });
}

template <int FM, int WN, int WK, bool kF16>
__global__ void __launch_bounds__(32 * WN * WK, DecodeTraits<FM, WN, WK>::kMinBlocks)
    w4a16_decode_kernel(const GemmKernelArgs p) {
  static_assert(!kF16 || FM == 1, "fp16 tiles are the swapped ones (at most 8 rows)");
  using T = DecodeTraits<FM, WN, WK>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;
  __shared__ int s_row_token[T::kBM];
  __shared__ int64_t s_arow[T::kBM];  // element offset of A row r in p.a
  // bf16 swapped-operand tiles (FM = 1, at most 8 rows): fp32 sum of A row r over group gl of
  // the block's K range at [r * kSwapMaxGroups + gl].
  __shared__ float s_xsum[FM == 1 && !kF16 ? 8 * kSwapMaxGroups : 1];
  // kF16: the largest bf16 exponent field of A row r (at most 8 rows: the fp16 tiles).
  __shared__ unsigned s_row_exp[kF16 ? 8 : 1];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(8) uint64_t s_bar[T::kWarps * kDecodeMaxStages];  // the warps' slot mbarriers
#endif

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % WK, wn = warp / WK;
  const int nb = blockIdx.x, split = blockIdx.y, z = blockIdx.z;
  trace_stamp(p.trace, 0);
  const int n_tiles64 = p.n >> 6, kg = p.k >> 7;

  // Which rows (and expert) this block owns. PDL: routed blocks of the gate/up GEMM first wait
  // for the router (their tile list); the down GEMM launches only after every block of this grid
  // waited (pdl_wait triggers the dependents) or exited, so it may read the tile list before its
  // own wait (the router has completed by then).
  int expert = 0, row_begin = 0, rows = 0;
  bool shared_tile = false;
  if (!kF16 && p.mode == GemmMode::kDense) {  // the fp16 twins run the MoE GEMMs only
    // Tiles of a_rows (<= BM) rows: BM, or fewer so that M 9..16 can run as two tiles of at most
    // 8 rows on the swapped-operand path (complete_launch's tile_rows).
    // The explicit bound by BM keeps what the compiler knew before a_rows existed: without it
    // wo_b at M = 1 took 0.3-0.4 us longer (H100, bench/results/wob_bisect_h100).
    row_begin = z * p.a_rows;
    rows = min(min(p.a_rows, T::kBM), p.m - row_begin);
  } else if (z < p.n_shared_tiles) {
    shared_tile = true;
    expert = p.shared_expert;
    row_begin = p.shared_row0 + z * p.shared_tile_rows;
    rows = min(p.shared_tile_rows, p.m - z * p.shared_tile_rows);
  } else {
    if (p.mode == GemmMode::kMoeUp) pdl_wait();
    const int t = z - p.n_shared_tiles;
    // Fixed grid for a batch size; fewer tiles this step. In the down GEMM these blocks exit
    // without waiting (waiting would park them on SMs the running gate/up GEMM needs): the grid
    // still completes only after its predecessor because the shared-expert tiles (always at
    // least one: m >= 1) do wait.
    if (t >= __ldcg(p.n_tiles)) {
      trace_stamp(p.trace, 3);
      return;
    }
    const int4 tile = __ldcg(p.tiles + t);
    expert = tile.x;
    row_begin = tile.y;
    rows = tile.z;
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
  const int n_groups = g_end - g_begin;
  const int nt = nb * WN + wn;
  const int n_items = (nt < n_tiles64 && wk < n_groups) ? (n_groups - wk + WK - 1) / WK : 0;
  const int stages = p.stages;

  const uint32_t smem_base = smem_u32(smem);
  const int ring_off = warp * stages * kDecodeSlotBytes;
  const int a_off = T::kWarps * stages * kDecodeSlotBytes;
  const int a_row_bytes = p.a_groups * 256;
  const uint4* w_tile = wbase + int64_t(min(nt, n_tiles64 - 1)) * (p.k >> 4) * 32;
  const __half* s_tile = sbase + int64_t(min(nt, n_tiles64 - 1)) * kg * 64;
  // Item i of this warp: group g_begin + wk + i WK: 8 k16 slices x 32 lanes x 16 bytes, then
  // the 64 scales of the group; both contiguous in global memory and in the slot.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // SM90: lane 0 moves a slot with two bulk copies that complete on the slot's mbarrier, instead
  // of 9 cp.async per lane whose completion the SM tracks request by request.
  constexpr bool kBulk = true;
  const uint32_t bar0 = smem_u32(s_bar) + warp * kDecodeMaxStages * 8;  // this warp's slot barriers
  if (lane == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(bar0 + i * 8, 1);
    fence_mbarrier_init();
  }
  __syncwarp();
  uint32_t phases = 0;  // bit s: parity of slot s's next phase
#else
  constexpr bool kBulk = false;
#endif
  auto issue = [&](int item, int slot) {
    const int g = g_begin + wk + item * WK;
    const uint32_t dst = smem_base + ring_off + slot * kDecodeSlotBytes;
    if constexpr (kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (lane == 0) {
        const uint32_t bar = bar0 + slot * 8;
        mbar_arrive_expect_tx(bar, kDecodeSlotBytes);
        bulk_g2s(dst, w_tile + int64_t(g) * 256, 4096, bar);
        bulk_g2s(dst + 4096, s_tile + g * 64, 128, bar);
      }
#endif
    } else {
      const uint4* src = w_tile + int64_t(g) * 256 + lane;
#pragma unroll
      for (int j = 0; j < 8; ++j) cp_async16(dst + lane * 16 + j * 512, src + j * 32, true);
      if (lane < 8) cp_async16(dst + 4096 + lane * 16, s_tile + g * 64 + lane * 8, true);
    }
  };
  // The slot of item i has landed (cp.async: the later items' groups may still be in flight).
  auto wait_slot = [&](int slot) {
    if constexpr (kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      mbar_wait(bar0 + slot * 8, (phases >> slot) & 1u);
      phases ^= 1u << slot;
#endif
    } else {
      cp_async_wait_upto(stages - 1);
      __syncwarp();
    }
  };
  // Prologue: one commit group per slot (empty past the warp's items), before the dependency.
  for (int i = 0; i < stages; ++i) {
    if (i < n_items) issue(i, i);
    if constexpr (!kBulk) cp_async_commit();
  }

  // A depends on the previous kernel (dense: x; down: act). The gate/up GEMM's routed blocks
  // waited above; its shared-expert blocks read only x, which is complete because the router
  // (the previous kernel) lets its dependents launch only after its own wait.
  if (p.mode != GemmMode::kMoeUp) pdl_wait();
  trace_stamp(p.trace, 1);
  if (kF16 && tid < 8) s_row_exp[tid] = 0;
  if (tid < rows) {
    int64_t arow = row_begin + tid;
    if (p.mode == GemmMode::kMoeUp)
      arow = shared_tile ? int64_t(row_begin - p.shared_row0 + tid) : int64_t(__ldcg(p.sorted_token + row_begin + tid));
    s_arow[tid] = arow * p.lda + int64_t(g_begin) * 128;
  }
  __syncthreads();
  {
    // rows x (n_groups 16) chunks of 16 bytes, 8 loads in flight per thread, XOR-swizzled
    // within 128 bytes so that ldmatrix rows hit distinct banks.
    const int cpr = n_groups * 16;
    const int total = rows * cpr;
    for (int base = tid; base < total; base += 8 * T::kThreads) {
      uint4 v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int idx = base + j * T::kThreads;
        if (idx < total) {
          const int r = idx / cpr, c = idx - r * cpr;
          v[j] = ld_cg_v4(p.a + s_arow[r] + c * 8);
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int idx = base + j * T::kThreads;
        if (idx < total) {
          const int r = idx / cpr, c = idx - r * cpr;
          *reinterpret_cast<uint4*>(smem + a_off + r * a_row_bytes + ((c ^ (r & 7)) << 4)) = v[j];
          if (kF16 && rows <= 8) atomicMax(&s_row_exp[r], bf16x8_max_exponent(v[j]));
        }
      }
    }
  }
  __syncthreads();

  const int q = lane & 3;

  float acc[FM][8][4];
#pragma unroll
  for (int f = 0; f < FM; ++f)
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[f][s][i] = 0.0f;

  // Tiles of at most 8 rows swap the mma operands (see the file header): block-uniform.
  bool swapped = false;
  if constexpr (kF16) {
    swapped = rows <= 8;
  } else if constexpr (FM == 1) {
    swapped = rows <= 8 && n_groups <= kSwapMaxGroups;
  }
  int slot = 0;
  if (swapped) {
    if constexpr (kF16) {
      // The A block becomes fp16 in place, each row scaled into fp16's top binade by a power of two
      // (row_scale_down; exact), its results scaled back after the K loop (row_scale_up).
      const int chunks_per_row = n_groups * 16;
      for (int r = 0; r < rows; ++r) {
        const float f = row_scale_down(s_row_exp[r]);
        for (int c = tid; c < chunks_per_row; c += T::kThreads) {
          uint4* chunk = reinterpret_cast<uint4*>(smem + a_off + r * a_row_bytes + ((c ^ (r & 7)) << 4));
          const uint4 v = *chunk;
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
          uint32_t h[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const __half2 hv =
                __floats2half2_rn(__uint_as_float(w[j] << 16) * f, __uint_as_float(w[j] & 0xffff0000u) * f);
            h[j] = *reinterpret_cast<const uint32_t*>(&hv);
          }
          *chunk = make_uint4(h[0], h[1], h[2], h[3]);  // this thread alone reads and writes chunk c
        }
      }
      __syncthreads();
    } else {
      // Row sums per group, 16 threads per (row, group): in-thread over 8 values, then a fixed
      // butterfly (deterministic). Whole warps iterate so that the shuffles see every lane.
      const int total = rows * n_groups;
      for (int base = 0; base < total; base += T::kThreads / 16) {
        const int pair = base + (tid >> 4);
        const int r = pair / n_groups, gl = pair - r * n_groups;
        float sum = 0.0f;
        if (pair < total) {
          const int c = gl * 16 + (tid & 15);
          const uint4 v = *reinterpret_cast<const uint4*>(smem + a_off + r * a_row_bytes + ((c ^ (r & 7)) << 4));
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) sum += __uint_as_float(w[j] << 16) + __uint_as_float(w[j] & 0xffff0000u);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (pair < total && (tid & 15) == 0) s_xsum[r * kSwapMaxGroups + gl] = sum;
      }
      __syncthreads();
    }

    // D^T = W^T-tile . A^T: the weight group is the 16 x 16 A operand (four per k16 slice: rows
    // 0-7 are 8-column sub-tile 2w, rows 8-15 sub-tile 2w + 1, the same registers the normal
    // path feeds as two B operands) and the tile's rows are the 8 columns of B. Half the mmas
    // of the normal path (32 per group, no ones-mma: the row sums come from s_xsum) and half
    // the accumulators. Lane (g, q) accumulates columns 16 w + g (+ 8) for rows 2q, 2q + 1.
    const int g = lane >> 2;
    const int xrow = min(lane & 7, rows - 1);  // ldmatrix: lanes 8j .. 8j + 7 address matrix j
    const uint32_t x_addr = smem_base + a_off + xrow * a_row_bytes;
    const int x_xor = xrow & 7, x_mat = lane >> 3;
    const int r0 = min(2 * q, rows - 1) * kSwapMaxGroups, r1 = min(2 * q + 1, rows - 1) * kSwapMaxGroups;
    float sacc[4][4];
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[w][e] = 0.0f;
    for (int i = 0; i < n_items; ++i) {
      wait_slot(slot);
      const unsigned char* sl = smem + ring_off + slot * kDecodeSlotBytes;
      const uint4* bq = reinterpret_cast<const uint4*>(sl);
      const int gl = wk + i * WK;
      float g4[4][4];
#pragma unroll
      for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) g4[w][e] = 0.0f;
      // Unrolled by 2, not 4: fully unrolled, ptxas hoists the loads of all 8 slices and the
      // sm_86 build spills (the sm_90 one does not, and is not faster: wo_b M = 1 9.7 vs 9.0 us).
#pragma unroll 2
      for (int kp = 0; kp < 4; ++kp) {  // two k16 slices per ldmatrix: B of slice 2 kp + kk in xb[2 kk], xb[2 kk + 1]
        uint32_t xb[4];
        ldmatrix_x4(xb, x_addr + (((gl * 16 + kp * 4 + x_mat) ^ x_xor) << 4));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint4 qv = bq[(kp * 2 + kk) * 32 + lane];
          const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            uint32_t b[4];
            if constexpr (kF16) {
              dequant_word_f16(qw[w], b);
              const uint32_t wa[4] = {b[0], b[2], b[1], b[3]};
              mma_f16(g4[w], wa, xb[2 * kk], xb[2 * kk + 1]);
            } else {
              dequant_word_offset(qw[w], b);
              const uint32_t wa[4] = {b[0], b[2], b[1], b[3]};
              mma_bf16(g4[w], wa, xb[2 * kk], xb[2 * kk + 1]);
            }
          }
        }
      }
      // Scales of columns 8 j + g: half (g & 1) of word j of the lane pair's 16 (load_scales' order).
      const uint4* sp = reinterpret_cast<const uint4*>(sl + 4096) + (g >> 1) * 2;
      const uint4 v0 = sp[0], v1 = sp[1];
      const uint32_t sw[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      const int sh = (g & 1) * 16;
      float rs[2] = {0.0f, 0.0f};  // bf16 tiles: the -136 sum(a) correction of the lane's rows
      if constexpr (!kF16) {
        rs[0] = -kCodeOffset * s_xsum[r0 + gl];
        rs[1] = -kCodeOffset * s_xsum[r1 + gl];
      }
#pragma unroll
      for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sc = __half2float(__ushort_as_half((unsigned short)(sw[2 * w + (e >> 1)] >> sh)));
          if constexpr (kF16) {
            sacc[w][e] = fmaf(sc, g4[w][e], sacc[w][e]);
          } else {
            sacc[w][e] = fmaf(sc, g4[w][e] + rs[e & 1], sacc[w][e]);
          }
        }
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (i + stages < n_items) issue(i + stages, slot);
      if constexpr (!kBulk) cp_async_commit();
      slot = slot + 1 == stages ? 0 : slot + 1;
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: each warp turns its sums around in its own ring space
    float* tr = reinterpret_cast<float*>(smem + ring_off);  // [8 rows][kSwapPitch] fp32
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = sacc[w][e];
        if constexpr (kF16) v *= row_scale_up(s_row_exp[min(2 * q + (e & 1), rows - 1)]);
        tr[(2 * q + (e & 1)) * kSwapPitch + 16 * w + g + 8 * (e >> 1)] = v;
      }
    __syncwarp();
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][s][e] = e < 2 ? tr[g * kSwapPitch + 8 * s + 2 * q + e] : 0.0f;
  } else {
    // Per-lane ldmatrix rows (clamped to the tile's rows) and the B-of-ones sum.
    uint32_t a_row_addr[FM];
    int a_xor[FM];
#pragma unroll
    for (int f = 0; f < FM; ++f) {
      const int row = min(f * 16 + (lane & 15), rows - 1);
      a_row_addr[f] = smem_base + a_off + row * a_row_bytes;
      a_xor[f] = row & 7;
    }
    const int hi = lane >> 4;
    for (int i = 0; i < n_items; ++i) {
      wait_slot(slot);
      const unsigned char* sl = smem + ring_off + slot * kDecodeSlotBytes;
      const uint4* bq = reinterpret_cast<const uint4*>(sl);
      const int gl = wk + i * WK;  // group within the block's range (A column block)

      float gacc[FM][8][4], rs[FM][4];
#pragma unroll
      for (int f = 0; f < FM; ++f) {
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) gacc[f][s][e] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) rs[f][e] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        uint32_t a[FM][4];
        const int chunk = gl * 16 + ks * 2 + hi;
#pragma unroll
        for (int f = 0; f < FM; ++f) ldmatrix_x4(a[f], a_row_addr[f] + ((chunk ^ a_xor[f]) << 4));
        const uint4 qv = bq[ks * 32 + lane];
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t b[4];
          dequant_word_offset(qw[w], b);
#pragma unroll
          for (int f = 0; f < FM; ++f) {
            mma_bf16(gacc[f][2 * w], a[f], b[0], b[1]);
            mma_bf16(gacc[f][2 * w + 1], a[f], b[2], b[3]);
          }
        }
#pragma unroll
        for (int f = 0; f < FM; ++f) mma_bf16(rs[f], a[f], kBf16x2Ones, kBf16x2Ones);
      }
      float sc[16];
      load_scales(reinterpret_cast<const __half*>(sl + 4096), q, sc);
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[f][s][e] = fmaf(sc[2 * s + (e & 1)], fmaf(-kCodeOffset, rs[f][e], gacc[f][s][e]), acc[f][s][e]);
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (i + stages < n_items) issue(i + stages, slot);
      if constexpr (!kBulk) cp_async_commit();
      slot = slot + 1 == stages ? 0 : slot + 1;
    }
    cp_async_wait<0>();
  }
  __syncthreads();  // ring and A are free from here on
  trace_stamp(p.trace, 2);

  // The WK warps of a tile: add into the wk == 0 warp, in wk order.
  if constexpr (WK > 1) {
    float* red = reinterpret_cast<float*>(smem);
    if (wk > 0) {
      float* dst = red + ((wk - 1) * WN + wn) * T::kRegs * 32;
#pragma unroll
      for (int f = 0; f < FM; ++f)
#pragma unroll
        for (int s = 0; s < 8; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) dst[((f * 8 + s) * 4 + e) * 32 + lane] = acc[f][s][e];
    }
    __syncthreads();
    if (wk == 0) {
#pragma unroll 1
      for (int w2 = 1; w2 < WK; ++w2) {
        const float* src = red + ((w2 - 1) * WN + wn) * T::kRegs * 32;
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int s = 0; s < 8; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[f][s][e] += src[((f * 8 + s) * 4 + e) * 32 + lane];
      }
    }
  }

  const bool active = (wk == 0) && nt < n_tiles64;  // warps that hold a finished slice of the tile
  const int g8 = lane >> 2;
  // This warp's slice of an fp32 tile [rows][kBN] (a split's partial sums): written from and
  // read back into the accumulators.
  auto store_acc = [&](float* dst) {
    if (!active) return;
#pragma unroll
    for (int f = 0; f < FM; ++f)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = f * 16 + g8 + 8 * h;
        if (row < rows) {
#pragma unroll
          for (int s = 0; s < 8; ++s)
            *reinterpret_cast<float2*>(dst + row * T::kBN + wn * 64 + s * 8 + 2 * q) =
                make_float2(acc[f][s][2 * h], acc[f][s][2 * h + 1]);
        }
      }
  };
  auto load_acc = [&](const float* src) {
    if (!active) return;
#pragma unroll
    for (int f = 0; f < FM; ++f)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = f * 16 + g8 + 8 * h;
        if (row < rows) {
#pragma unroll
          for (int s = 0; s < 8; ++s) {
            const float2 v = *reinterpret_cast<const float2*>(src + row * T::kBN + wn * 64 + s * 8 + 2 * q);
            acc[f][s][2 * h] = v.x;
            acc[f][s][2 * h + 1] = v.y;
          }
        }
      }
  };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Split-K on SM90: the tile's splits are one (1, splits, 1) cluster; each puts its partial tile
  // in its own shared memory and split 0 adds them, in split order as below (same bits), read
  // straight from the other blocks' shared memory. Two cluster barriers replace the global
  // path's fence, counter atomic and partial round trips.
  if (p.cluster_splits > 1) {
    float* tile = reinterpret_cast<float*>(smem);
    __syncthreads();  // the cross-warp sums above read the same shared memory
    store_acc(tile);
    cluster_sync();  // every split's tile is written (release / acquire)
    if (split == 0) {
      constexpr int kC4 = T::kBN / 4;
      const uint32_t tile_addr = smem_u32(tile);
      for (int idx = tid; idx < rows * kC4; idx += T::kThreads) {
        const uint32_t off = uint32_t(idx) * 16;  // row r, float4 c4: (r kC4 + c4) x 16 bytes
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int sp = 0; sp < p.cluster_splits; ++sp) {
          const float4 v = ld_dsmem_v4(map_dsmem(tile_addr + off, sp));
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        reinterpret_cast<float4*>(tile)[idx] = sum;  // this thread alone reads and writes idx
      }
    }
    cluster_sync();  // the other splits keep their shared memory until split 0 has read it
    if (split != 0) {
      trace_stamp(p.trace, 3);
      return;
    }
    load_acc(tile);
  } else
#endif
  // Split-K: publish the partial tile; the last block of the tile adds all partials in order.
  if (p.splits > 1) {
    const int tile_id = z * gridDim.x + nb;
    float* part = p.partials + int64_t(tile_id) * p.splits * (T::kBM * T::kBN);
    store_acc(part + int64_t(split) * (T::kBM * T::kBN));
    if (p.defer_sum) {  // the consumer adds the splits (common/deferred_sum.h)
      trace_stamp(p.trace, 3);
      return;
    }
    if (!arrive_last(&p.counters[tile_id], p.splits, &s_last)) {
      trace_stamp(p.trace, 3);
      return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // SM90 only (split_sum_to_bf16 says why).
    if (!kF16 && p.mode == GemmMode::kDense) {
      split_sum_to_bf16<T::kBM, T::kBN, T::kThreads>(part, p.splits, rows, p.c + int64_t(row_begin) * p.ldc,
                                                     p.ldc, nb * T::kBN, p.n);
      trace_stamp(p.trace, 3);
      return;
    }
#endif
    float* tile = reinterpret_cast<float*>(smem);
    add_split_partials<T::kBM, T::kBN, T::kThreads>(part, p.splits, rows, [&](int idx, float4 sum) {
      constexpr int kC4 = T::kBN / 4;
      reinterpret_cast<float4*>(tile + (idx / kC4) * T::kBN)[idx % kC4] = sum;
    });
    __syncthreads();
    load_acc(tile);
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
            const int row = f * 16 + g8 + 8 * h;
            if (row < rows) {
              __nv_bfloat16* out = p.c + int64_t(row_begin + row) * p.ldc + nt * 64 + 2 * q;
#pragma unroll
              for (int s = 0; s < 8; ++s)
                *reinterpret_cast<uint32_t*>(out + s * 8) = pack_bf16x2(acc[f][s][2 * h], acc[f][s][2 * h + 1]);
            }
          }
        break;
      case GemmMode::kMoeUp: {
        // Packed columns of tile nt: [gate 0..15 | up 0..15 | gate 16..31 | up 16..31] of the
        // 32 intermediate columns 32 nt .. 32 nt + 31; sub-tile s in {0,1,4,5} is gate, s + 2 up.
        const float lim = p.swiglu_limit;
#pragma unroll
        for (int f = 0; f < FM; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = f * 16 + g8 + 8 * h;
            if (row < rows) {
              const float wr = shared_tile ? 1.0f : __ldcg(p.sorted_weight + row_begin + row);
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
  if (p.mode == GemmMode::kMoeDown && !p.defer_combine) moe_combine<T::kBN, T::kThreads>(p, row_begin, rows, s_row_token);
  trace_stamp(p.trace, 3);
}

// Entry points of one decode configuration (used by decode_cfg_*.cu). The dynamic smem limit is
// raised to the device maximum once; each launch passes its own size.
#define DSV4_DEFINE_DECODE_CONFIG(name, FM, WN, WK, F16)                                             \
  Status query_gemm_##name(GemmConfigInfo* info) {                                                   \
    using T = DecodeTraits<FM, WN, WK>;                                                              \
    auto* kernel = &w4a16_decode_kernel<FM, WN, WK, F16>;                                            \
    DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());                             \
    cudaFuncAttributes attr{};                                                                       \
    DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes(" #name ")")); \
    const int max_dyn = int(dev->smem_optin_bytes) - int(attr.sharedSizeBytes);                      \
    DSV4_RETURN_IF_ERROR(cuda_status(                                                                \
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dyn),          \
        "cudaFuncSetAttribute(" #name ")"));                                                         \
    int blocks = 0;                                                                                  \
    DSV4_RETURN_IF_ERROR(cuda_status(                                                                \
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, T::kThreads, 0),              \
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor(" #name ")"));                                \
    GemmConfigInfo ci;                                                                               \
    ci.block_m = T::kBM;                                                                             \
    ci.block_n = T::kBN;                                                                             \
    ci.threads = T::kThreads;                                                                        \
    ci.warps_k = WK;                                                                                 \
    ci.smem_bytes = 0;                                                                               \
    ci.static_smem = int(attr.sharedSizeBytes);                                                      \
    ci.blocks_per_sm = blocks;                                                                       \
    ci.split_k = true;                                                                               \
    ci.decode = true;                                                                                \
    *info = ci;                                                                                      \
    return Status::ok();                                                                             \
  }                                                                                                  \
  Status launch_gemm_##name(const GemmKernelArgs& args, dim3 grid, size_t smem, cudaStream_t stream, bool pdl) { \
    using T = DecodeTraits<FM, WN, WK>;                                                              \
    return launch_kernel(&w4a16_decode_kernel<FM, WN, WK, F16>, grid, dim3(T::kThreads), smem, stream, pdl, args, \
                         "w4a16_decode_kernel(" #name ")",                                           \
                         unsigned(args.cluster_splits > 1 ? args.cluster_splits : 1));               \
  }

}  // namespace dsv4::cuda::w4a16_detail
