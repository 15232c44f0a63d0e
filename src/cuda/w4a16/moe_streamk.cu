// moe_streamk.cu: the MoE gate/up GEMM at decode sizes as a stream-K launch, so that every block
// streams the same bytes (the decode kernel's grid of whole 128-column tiles leaves some SMs two
// tiles and others one; the gate/up phase ends when the doubly loaded SMs do: NOTES.md, the
// SM-classed MoE timeline).
//
// Work is cut into units: one 128-k group of one 128-column block tile (2 x 4 KB of codes and
// their scales) of one row tile. The grid has two partitions, each split into equal contiguous
// unit ranges over its blocks: the first p.sk_shared_blocks blocks take the shared expert's
// tiles (known before routing: they start while the router runs), the rest the routed tiles
// (they wait for the router's tile list first). A range crosses at most kMaxSegs block tiles;
// each crossing is a segment. Inside a block the warps are as in d16n128 (decode_kernel.cuh):
// 2 x 64-column tiles (wn) x 4 warps along K (wk), each warp with its own ring of whole groups,
// and the ring keeps streaming across a segment boundary (the issue cursor runs over the warp's
// items of all segments), so the fixed part of a decode block (wait, A staged, ring filled) is
// paid once per block, not per segment.
//
// A segment's end: each warp puts its sums (scaled back from the fp16 row scale) in shared
// memory of its own, counts itself on a shared counter, and the last warp of a 64-column tile
// adds the 4 warps' sums in wk order. A tile whole in one block takes the SwiGLU epilogue there;
// otherwise each piece is published as fp32 and the last block to arrive (a per-tile counter)
// adds the pieces in block order (deterministic) and runs the epilogue. Only the tiles of at most
// 8 rows of the fp16 swapped-operand path (decode_kernel.cuh's kF16 tiles) run here.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "cuda/common/arch.h"
#include "cuda/common/arrival.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/moe_epilogue.cuh"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda::w4a16_detail {
namespace {

constexpr int kWN = 2, kWK = 4, kWarps = kWN * kWK, kThreads = 32 * kWarps;
constexpr int kRows = 8;  // the swapped tiles' rows
constexpr int kMaxSegs = kStreamKMaxSegs;
static_assert(kMaxSegs == 3, "the item counts below add three segments");

__device__ __forceinline__ void wait_pending(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// The partition of block b: its first unit, its block count and unit count, its first block.
struct Partition {
  int64_t unit0, units;
  int block0, blocks;
};
__device__ __forceinline__ Partition partition_of(const GemmKernelArgs& p, int b, int64_t tile_units) {
  const int64_t shared_units = int64_t(p.n_shared_tiles) * tile_units;
  if (b < p.sk_shared_blocks) return {0, shared_units, 0, p.sk_shared_blocks};
  return {shared_units, int64_t(p.sk_tiles) * tile_units - shared_units, p.sk_shared_blocks,
          int(gridDim.x) - p.sk_shared_blocks};
}
// The block of partition `pt` whose range holds unit u (partition-relative): the largest b with
// floor(b units / blocks) <= u.
__device__ __forceinline__ int block_of(const Partition& pt, int64_t u) {
  return int(((u + 1) * pt.blocks - 1) / pt.units);
}

__global__ void __launch_bounds__(kThreads, 2) w4a16_moe_up_streamk_kernel(const GemmKernelArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  // Segment s of this block: block tile (row tile z, column block nb), groups g0 .. g0 + len - 1;
  // its rows (0: a routed tile the router did not fill), first sorted row and expert.
  __shared__ int s_z[kMaxSegs], s_nb[kMaxSegs], s_g0[kMaxSegs], s_len[kMaxSegs], s_rows[kMaxSegs],
      s_row0[kMaxSegs], s_expert[kMaxSegs], s_aoff[kMaxSegs];
  __shared__ int s_nseg;
  __shared__ int64_t s_arow[kMaxSegs][kRows];     // element offset of A row r in p.a
  __shared__ unsigned s_row_exp[kMaxSegs][kRows];  // largest bf16 exponent field of the row
  __shared__ int s_count[kMaxSegs][kWN];           // warps done with (segment, wn)
  __shared__ int s_nit[kMaxSegs][kWarps];          // items of warp w in segment s
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(8) uint64_t s_bar[kWarps * kDecodeMaxStages];
#endif
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % kWK, wn = warp / kWK;
  trace_stamp(p.trace, 0);
  const int kg = p.k >> 7, nbs = p.n / (64 * kWN);
  const int64_t tile_units = int64_t(nbs) * kg;
  const Partition pt = partition_of(p, blockIdx.x, tile_units);
  const int b = blockIdx.x - pt.block0;

  // Geometry of the segments (no dependency on the router); the shared tiles' rows too.
  if (tid == 0) {
    int64_t u = pt.unit0 + int64_t(b) * pt.units / pt.blocks;
    const int64_t u1 = pt.unit0 + int64_t(b + 1) * pt.units / pt.blocks;
    int n = 0, aoff = 0;
    while (u < u1 && n < kMaxSegs) {
      const int64_t t = u / kg;  // block tile
      const int g0 = int(u - t * kg);
      const int len = int((u1 < (t + 1) * kg ? u1 : (t + 1) * kg) - u);
      s_z[n] = int(t / nbs);
      s_nb[n] = int(t % nbs);
      s_g0[n] = g0;
      s_len[n] = len;
      s_aoff[n] = aoff;
      aoff += len;
      if (s_z[n] < p.n_shared_tiles) {
        s_rows[n] = min(p.shared_tile_rows, p.m - s_z[n] * p.shared_tile_rows);
        s_row0[n] = p.shared_row0 + s_z[n] * p.shared_tile_rows;
        s_expert[n] = p.shared_expert;
      }
      u += len;
      ++n;
    }
    s_nseg = n;
  }
  if (tid < kMaxSegs * kRows) s_row_exp[tid / kRows][tid % kRows] = 0;
  if (tid < kMaxSegs * kWN) s_count[tid / kWN][tid % kWN] = 0;
  __syncthreads();
  const int nseg = s_nseg;
  const bool routed = s_z[nseg - 1] >= p.n_shared_tiles;  // segments go by increasing z

  const int stages = p.stages;
  const uint32_t smem_base = smem_u32(smem);
  const int ring_off = warp * stages * kDecodeSlotBytes;
  const int a_off = kWarps * stages * kDecodeSlotBytes;
  const int a_seg_bytes = p.a_rows * 256;  // A bytes of one group of a segment's rows
  const int red_off = a_off + a_seg_bytes * p.a_groups;
  // This warp's items: s_nit[s][warp] in segment s, groups g0 + first_group(s) + i kWK; those
  // of routed segments are known after the router's tile list. Unit j of the block's range goes
  // to warp j % kWK across segment boundaries, so no warp holds more than ceil(range / kWK)
  // items (per segment it could be one more per segment: 8 of 27 units where 7 is the bound).
  auto first_group = [&](int s) { return (wk - s_aoff[s]) & (kWK - 1); };
  auto count_items = [&](int s) {
    const int len = s_rows[s] > 0 ? s_len[s] : 0, g = first_group(s);
    return g < len ? (len - g + kWK - 1) / kWK : 0;
  };
  if (lane == 0)
    for (int s = 0; s < kMaxSegs; ++s) s_nit[s][warp] = (s < nseg && s_z[s] < p.n_shared_tiles) ? count_items(s) : 0;
  __syncwarp();

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulk = true;
  const uint32_t bar0 = smem_u32(s_bar) + warp * kDecodeMaxStages * 8;
  if (lane == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(bar0 + i * 8, 1);
    fence_mbarrier_init();
  }
  __syncwarp();
  uint32_t phases = 0;
#else
  constexpr bool kBulk = false;
#endif
  // Flat item f of this warp (items of segment 0, then 1, ...) into ring slot `slot`.
  auto issue = [&](int f, int slot) {
    int s = 0;
    while (s < kMaxSegs - 1 && f >= s_nit[s][warp]) {
      f -= s_nit[s][warp];
      ++s;
    }
    const int g = s_g0[s] + first_group(s) + f * kWK;
    const int expert = s_expert[s];
    const int nt = s_nb[s] * kWN + wn;
    const uint4* wbase = expert == p.shared_expert ? p.w_shared : p.w + expert * p.w_expert_stride;
    const __half* sbase = expert == p.shared_expert ? p.s_shared : p.s + expert * p.s_expert_stride;
    const uint4* src_w = wbase + int64_t(nt) * (p.k >> 4) * 32 + int64_t(g) * 256;
    const __half* src_s = sbase + int64_t(nt) * kg * 64 + g * 64;
    const uint32_t dst = smem_base + ring_off + slot * kDecodeSlotBytes;
    if constexpr (kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (lane == 0) {
        const uint32_t bar = bar0 + slot * 8;
        mbar_arrive_expect_tx(bar, kDecodeSlotBytes);
        bulk_g2s(dst, src_w, 4096, bar);
        bulk_g2s(dst + 4096, src_s, 128, bar);
      }
#endif
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) cp_async16(dst + lane * 16 + j * 512, src_w + lane + j * 32, true);
      if (lane < 8) cp_async16(dst + 4096 + lane * 16, src_s + lane * 8, true);
    }
  };
  auto wait_slot = [&](int slot) {
    if constexpr (kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      mbar_wait(bar0 + slot * 8, (phases >> slot) & 1u);
      phases ^= 1u << slot;
#endif
    } else {
      wait_pending(stages - 1);
      __syncwarp();
    }
  };

  // Prologue: the shared tiles' first items before the router's tile list, the rest after it.
  // One commit group per slot, in slot order (empty past the warp's items).
  int issued = 0;
  {
    const int known = s_nit[0][warp] + s_nit[1][warp] + s_nit[2][warp];
    for (; issued < stages && issued < known; ++issued) {
      issue(issued, issued);
      if constexpr (!kBulk) cp_async_commit();
    }
  }
  if (routed) {
    pdl_wait();
    if (tid < nseg && s_z[tid] >= p.n_shared_tiles) {
      const int t = s_z[tid] - p.n_shared_tiles;
      if (t < __ldcg(p.n_tiles)) {
        const int4 tile = __ldcg(p.tiles + t);
        s_expert[tid] = tile.x;
        s_row0[tid] = tile.y;
        s_rows[tid] = tile.z;
      } else {
        s_rows[tid] = 0;  // a row tile this batch does not have: no items, no output
      }
    }
    __syncthreads();
    if (lane == 0)
      for (int s = 0; s < nseg; ++s)
        if (s_z[s] >= p.n_shared_tiles) s_nit[s][warp] = count_items(s);
    __syncwarp();
  }
  const int total = s_nit[0][warp] + s_nit[1][warp] + s_nit[2][warp];
  for (; issued < stages; ++issued) {
    if (issued < total) issue(issued, issued);
    if constexpr (!kBulk) cp_async_commit();
  }
  trace_stamp(p.trace, 1);

  // A rows of every segment (rows x len groups, XOR-swizzled in 128 bytes for ldmatrix), then
  // fp16 in place, each row scaled into fp16's top binade (decode_kernel.cuh, kF16).
  if (tid < nseg * kRows) {
    const int s = tid / kRows, r = tid % kRows;
    if (r < s_rows[s]) {
      const int row = s_row0[s] + r;
      const int64_t token = s_z[s] < p.n_shared_tiles ? int64_t(row - p.shared_row0) : int64_t(__ldcg(p.sorted_token + row));
      s_arow[s][r] = token * p.lda + int64_t(s_g0[s]) * 128;
    }
  }
  __syncthreads();
  for (int s = 0; s < nseg; ++s) {
    const int rows = s_rows[s], cpr = s_len[s] * 16, row_bytes = s_len[s] * 256;
    unsigned char* a_seg = smem + a_off + s_aoff[s] * a_seg_bytes;
    for (int base = tid; base < rows * cpr; base += 4 * kThreads) {  // 4 loads in flight a thread
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int idx = base + j * kThreads, r = idx / cpr;
        if (idx < rows * cpr) v[j] = ld_cg_v4(p.a + s_arow[s][r] + (idx - r * cpr) * 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int idx = base + j * kThreads, r = idx / cpr, c = idx - r * cpr;
        if (idx < rows * cpr) {
          *reinterpret_cast<uint4*>(a_seg + r * row_bytes + ((c ^ (r & 7)) << 4)) = v[j];
          atomicMax(&s_row_exp[s][r], bf16x8_max_exponent(v[j]));
        }
      }
    }
  }
  __syncthreads();
  for (int s = 0; s < nseg; ++s) {
    const int rows = s_rows[s], cpr = s_len[s] * 16, row_bytes = s_len[s] * 256;
    unsigned char* a_seg = smem + a_off + s_aoff[s] * a_seg_bytes;
    for (int idx = tid; idx < rows * cpr; idx += kThreads) {
      const int r = idx / cpr, c = idx - r * cpr;
      const float f = row_scale_down(s_row_exp[s][r]);
      uint4* chunk = reinterpret_cast<uint4*>(a_seg + r * row_bytes + ((c ^ (r & 7)) << 4));
      const uint4 v = *chunk;
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      uint32_t h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __half2 hv = __floats2half2_rn(__uint_as_float(w[j] << 16) * f, __uint_as_float(w[j] & 0xffff0000u) * f);
        h[j] = *reinterpret_cast<const uint32_t*>(&hv);
      }
      *chunk = make_uint4(h[0], h[1], h[2], h[3]);  // this thread alone reads and writes this chunk
    }
  }
  __syncthreads();

  // The K loop over the warp's items of every segment; lane (g, q) accumulates columns
  // 16 w + g (+ 8) of its 64-column tile for rows 2q, 2q + 1 (decode_kernel.cuh's swapped path).
  const int g = lane >> 2, q = lane & 3, x_mat = lane >> 3;
  int slot = 0, f = 0;
  for (int s = 0; s < nseg; ++s) {
    const int rows = s_rows[s];
    if (rows == 0) continue;  // uniform over the block: nobody arrives for this tile
    const int row_bytes = s_len[s] * 256;
    const int xrow = min(lane & 7, rows - 1);
    const uint32_t x_addr = smem_base + a_off + s_aoff[s] * a_seg_bytes + xrow * row_bytes;
    const int x_xor = xrow & 7, gl0 = first_group(s);
    float sacc[4][4];
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[w][e] = 0.0f;
    for (int i = 0, n = s_nit[s][warp]; i < n; ++i, ++f) {
      wait_slot(slot);
      const unsigned char* sl = smem + ring_off + slot * kDecodeSlotBytes;
      const uint4* bq = reinterpret_cast<const uint4*>(sl);
      const int gl = gl0 + i * kWK;
      float g4[4][4];
#pragma unroll
      for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) g4[w][e] = 0.0f;
#pragma unroll 2
      for (int kp = 0; kp < 4; ++kp) {
        uint32_t xb[4];
        ldmatrix_x4(xb, x_addr + (((gl * 16 + kp * 4 + x_mat) ^ x_xor) << 4));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint4 qv = bq[(kp * 2 + kk) * 32 + lane];
          const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            uint32_t bw[4];
            dequant_word_f16(qw[w], bw);
            const uint32_t wa[4] = {bw[0], bw[2], bw[1], bw[3]};
            mma_f16(g4[w], wa, xb[2 * kk], xb[2 * kk + 1]);
          }
        }
      }
      const uint4* sp = reinterpret_cast<const uint4*>(sl + 4096) + (g >> 1) * 2;
      const uint4 v0 = sp[0], v1 = sp[1];
      const uint32_t sw[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      const int sh = (g & 1) * 16;
#pragma unroll
      for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sc = __half2float(__ushort_as_half((unsigned short)(sw[2 * w + (e >> 1)] >> sh)));
          sacc[w][e] = fmaf(sc, g4[w][e], sacc[w][e]);
        }
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (f + stages < total) issue(f + stages, slot);
      if constexpr (!kBulk) cp_async_commit();
      slot = slot + 1 == stages ? 0 : slot + 1;
    }

    if (s == nseg - 1) trace_stamp(p.trace, 2);  // warp 0's K loop is done
    // This warp's sums of the segment: [rows][64] fp32 in its own shared slice, back in A's scale.
    float* red = reinterpret_cast<float*>(smem + red_off) + (s * kWarps + warp) * p.a_rows * 64;
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 2 * q + (e & 1);
        if (row < rows) red[row * 64 + 16 * w + g + 8 * (e >> 1)] = sacc[w][e] * row_scale_up(s_row_exp[s][row]);
      }
    __syncwarp();
    int done = 0;
    if (lane == 0) {
      __threadfence_block();
      done = atomicAdd(&s_count[s][wn], 1);
    }
    if (__shfl_sync(0xffffffffu, done, 0) != kWK - 1) continue;
    __threadfence_block();

    // The last warp of (segment, wn): lane j holds intermediate column j of the tile's 32, gate
    // in packed column j (j < 16) or j + 16, up 16 columns further ([gate 0..15 | up 0..15 |
    // gate 16..31 | up 16..31]); the 4 warps' sums in wk order.
    const int cg = lane < 16 ? lane : lane + 16, cu = cg + 16;
    float vg[kRows], vu[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      vg[r] = 0.0f;
      vu[r] = 0.0f;
      if (r < rows) {
#pragma unroll
        for (int w2 = 0; w2 < kWK; ++w2) {
          const float* src = reinterpret_cast<const float*>(smem + red_off) + (s * kWarps + wn * kWK + w2) * p.a_rows * 64;
          vg[r] += src[r * 64 + cg];
          vu[r] += src[r * 64 + cu];
        }
      }
    }
    const int64_t t = int64_t(s_z[s]) * nbs + s_nb[s];
    const int first = block_of(pt, t * kg - pt.unit0), last = block_of(pt, (t + 1) * kg - 1 - pt.unit0);
    if (first != last) {
      // Pieces of the tile in other blocks: publish this one, the last to arrive adds them all.
      const int pieces = last - first + 1, piece = b - first;
      const int tile64 = int(t) * kWN + wn;
      float* part = p.partials + int64_t(tile64) * p.sk_pieces * p.a_rows * 64;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < rows) {
          __stcg(part + (piece * p.a_rows + r) * 64 + cg, vg[r]);
          __stcg(part + (piece * p.a_rows + r) * 64 + cu, vu[r]);
        }
      // One acq_rel arrival from lane 0 after the warp barrier, which orders the other lanes'
      // stores before it (common/arrival.cuh, with bar.warp.sync for bar.sync); the barrier after
      // the arrival carries its acquire to the lanes that read the other pieces.
      __syncwarp();
      int old = 0;
      if (lane == 0) {
        old = atomic_add_acq_rel_gpu(p.counters + tile64, 1);
        if (old == pieces - 1) atomicExch(p.counters + tile64, 0);
      }
      old = __shfl_sync(0xffffffffu, old, 0);
      __syncwarp();
      if (old != pieces - 1) continue;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < rows) {
          float sg = 0.0f, su = 0.0f;
          for (int pc = 0; pc < pieces; ++pc) {  // block order: the same bits wherever it runs
            sg += pc == piece ? vg[r] : __ldcg(part + (pc * p.a_rows + r) * 64 + cg);
            su += pc == piece ? vu[r] : __ldcg(part + (pc * p.a_rows + r) * 64 + cu);
          }
          vg[r] = sg;
          vu[r] = su;
        }
    }
    // Epilogue: act = bf16(silu(min(g, L)) * clamp(u, -L, L) * w) of the bf16-rounded sums.
    const bool shared_tile = s_z[s] < p.n_shared_tiles;
    const int nt = s_nb[s] * kWN + wn;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) {
        const int row = s_row0[s] + r;
        const float wr = shared_tile ? 1.0f : __ldcg(p.sorted_weight + row);
        p.c[int64_t(row) * p.ldc + nt * 32 + lane] =
            __float2bfloat16_rn(swiglu_act(round_bf16(vg[r]), round_bf16(vu[r]), p.swiglu_limit, wr));
      }
  }
  cp_async_wait<0>();
  trace_stamp(p.trace, 3);
}

}  // namespace

namespace {
// The kernel's static shared memory and occupancy on the current device (queried once per device;
// the dynamic shared memory limit is raised to the device maximum then).
Result<GemmConfigInfo> streamk_info() {
  static std::mutex mu;
  static std::map<int, GemmConfigInfo> cache;
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(dev->device); it != cache.end()) return it->second;
  auto* kernel = &w4a16_moe_up_streamk_kernel;
  cudaFuncAttributes attr{};
  DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes(moe_up_streamk)"));
  const int max_dyn = int(dev->smem_optin_bytes) - int(attr.sharedSizeBytes);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dyn),
                                   "cudaFuncSetAttribute(moe_up_streamk)"));
  int blocks = 0;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0),
                                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor(moe_up_streamk)"));
  GemmConfigInfo ci;
  ci.block_m = kRows;
  ci.block_n = 64 * kWN;
  ci.threads = kThreads;
  ci.warps_k = kWK;
  ci.static_smem = int(attr.sharedSizeBytes);
  ci.blocks_per_sm = blocks;
  ci.decode = true;
  cache[dev->device] = ci;
  return ci;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Result<GemmLaunch> plan_moe_up_streamk(int n_shared_tiles, int max_tiles, int tile_rows, int n, int k,
                                       int shared_blocks, int stages, const DeviceInfo& dev, size_t partial_floats,
                                       int n_counters) {
  if (tile_rows < 1 || tile_rows > kRows || n % (64 * kWN) != 0 || k % 128 != 0 || n_shared_tiles < 1 ||
      max_tiles <= n_shared_tiles || stages < 1 || stages > kDecodeMaxStages || shared_blocks < 0)
    return invalid_argument("stream-K gate/up: needs tiles of 1..{} rows (got {}), N % {} == 0 (N={}), K % 128 == 0 "
                            "(K={}), routed tiles (shared {} of {}), stages 1..{} (got {})",
                            kRows, tile_rows, 64 * kWN, n, k, n_shared_tiles, max_tiles, kDecodeMaxStages, stages);
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, streamk_info());
  const int kg = k / 128;
  const int64_t tile_units = int64_t(n / (64 * kWN)) * kg;
  const int64_t shared_units = n_shared_tiles * tile_units, routed_units = (max_tiles - n_shared_tiles) * tile_units;
  if (shared_blocks == 0) shared_blocks = int(shared_units / kg);  // one per shared block tile
  if (shared_blocks > shared_units)
    return invalid_argument("stream-K gate/up: {} shared blocks for {} shared units", shared_blocks, shared_units);
  // As many blocks as are resident at once (two per SM where the shared memory allows).
  for (int bps = ci.blocks_per_sm; bps >= 1; --bps) {
    const int64_t routed_blocks = int64_t(dev.n_sms) * bps - shared_blocks;
    if (routed_blocks < 1 || routed_blocks > routed_units) continue;
    const int64_t l_max = std::max(ceil_div(shared_units, shared_blocks), ceil_div(routed_units, routed_blocks));
    const int64_t l_min = std::min(shared_units / shared_blocks, routed_units / routed_blocks);
    if (ceil_div(l_max - 1, kg) + 1 > kStreamKMaxSegs) continue;  // a range touching too many tiles
    GemmLaunch l;
    l.cfg = GemmConfig::kD16N128;  // the same warps and tiles, for the tables that name a config
    l.streamk = true;
    l.stages = stages;
    l.a_rows = tile_rows;
    l.a_groups = int(l_max);
    l.grid = dim3(unsigned(shared_blocks + routed_blocks));
    l.sk_shared_blocks = shared_blocks;
    l.sk_pieces = int(std::min<int64_t>(std::max(shared_blocks, int(routed_blocks)), ceil_div(kg - 1, l_min) + 1));
    l.smem = size_t(kWarps) * stages * kDecodeSlotBytes + size_t(tile_rows) * l_max * 256 +
             size_t(kStreamKMaxSegs) * kWarps * tile_rows * 64 * 4;
    if (decode_blocks_per_sm(ci, l.smem, dev) < bps || l.smem + size_t(ci.static_smem) > dev.smem_optin_bytes) continue;
    const int64_t tiles64 = int64_t(max_tiles) * (n / 64);
    if (tiles64 > n_counters || size_t(tiles64) * l.sk_pieces * tile_rows * 64 > partial_floats)
      return invalid_argument("stream-K gate/up: {} tiles of {} pieces exceed the workspace", tiles64, l.sk_pieces);
    l.pdl = pdl_supported(dev);
    return l;
  }
  return invalid_argument("stream-K gate/up: no resident grid fits ({} + {} units, {} shared blocks, {} stages)",
                          shared_units, routed_units, shared_blocks, stages);
}

Status launch_moe_up_streamk(const GemmKernelArgs& args, dim3 grid, size_t smem, cudaStream_t stream, bool pdl) {
  return launch_kernel(&w4a16_moe_up_streamk_kernel, grid, dim3(kThreads), smem, stream, pdl, args,
                       "w4a16_moe_up_streamk_kernel");
}

}  // namespace dsv4::cuda::w4a16_detail
