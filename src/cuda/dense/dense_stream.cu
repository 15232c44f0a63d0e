// dense_stream.cu: the BF16 decode GEMM of dense.h for 1..4 rows of x (dense_decode_gemm picks it).
//
// At one to four rows the GEMM is a pure weight stream, so it is shaped like the W4A16 decode
// kernel's K loop (bench/results/NOTES.md, "Stream order"): each weight row is cut into pieces
// of up to 4 KB, a block's pieces are dealt to its 8 warps in turn, and every warp streams its
// pieces through its own ring of 2-3 slots (SM90: one bulk copy per piece that completes on
// the slot's mbarrier; SM80/86: cp.async). The first slots' pieces of every warp are requested
// before the PDL wait (the weights do not depend on the previous kernel); x, which may, is
// staged in shared memory after it. A piece's dot products are summed over the warp by a fixed
// butterfly and parked in shared memory; at the end one thread per (row, x row) adds its row's
// pieces in order: fp32 throughout, one rounding, deterministic, no atomics. With
// cuda::weights_evict_first() the weights are read with an L2 evict-first policy (arch.h).
// Grid: rows_per_block weight rows per block, sized so that the grid is about two blocks per SM
// (one wave; two blocks fit beside each other and beside the next kernel's early blocks).
// Fp8 weights (kFp8, dense.h Fp8WeightView): the same pieces of 2048 weights, 2 KB of codes each
// through the ring; the block's exponents (k / 128 bytes a row) are read into shared memory
// before the PDL wait, and each lane turns its 8 codes back into the exact weights
// (fp8_weight.cuh) before the same products in the same order: the bf16 kernel's bits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "cuda/common/arch.h"
#include "cuda/common/bf16_bits.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/dense/dense_internal.h"
#include "cuda/dense/fp8_weight.cuh"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda {
namespace {

using w4a16_detail::smem_u32;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPieceElems = 2048;  // bf16 elements of a full piece (4 KB)
constexpr int kPieceBytes = kPieceElems * 2;
constexpr int kMaxStages = 3;   // ring slots per warp: 3 where two blocks fit per SM (SM90), else 2
constexpr int kFp8StageFactor = 2;  // fp8 slots hold half the bytes: twice the slots, the same ring
constexpr int kMaxRingSlots = kMaxStages * kFp8StageFactor;
constexpr int kMaxItems = 128;  // pieces per block: their partial sums live in static smem
constexpr int kStaticSmemBytes = 4096;  // a bound on the static smem: s_part (M = 4), the barriers

struct StreamParams {
  const __nv_bfloat16* x;  // bf16 [m, ldx]; group g reads columns [g * xgs, + k)
  const __nv_bfloat16* w;  // bf16 [groups * n, k] (kFp8: null)
  Fp8WeightView w8;        // kFp8: codes u8 [groups * n, k], exps i8 [groups * n, k / 128]
  void* y;                 // bf16 or f32 [m, ldy]; group g writes columns [g * ygs, + n)
  int m, n, k, groups;
  int64_t ldx, xgs, ldy, ygs;
  int rows_per_block;  // weight rows per block
  int pieces;          // pieces per weight row: ceil(k / kPieceElems)
  int x_groups;        // groups of x staged per block (the most a block's rows can span)
  int stages;          // ring slots per warp, 2..kMaxStages (kFp8: 4..kMaxRingSlots)
  bool evict_first;    // weights read with L2 evict-first priority (arch.h weights_evict_first)
};

// dot8_bf16 (bf16_bits.cuh) with the weights given as fp32 (the fp8 form's exact values): the
// same fmas in the same order.
__device__ __forceinline__ float dot8_f32(const float (&w)[8], const uint4 b, float acc) {
  const uint32_t wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fb = bf16x2_to_f32x2(wb[i]);
    acc = fmaf(w[2 * i], fb.x, acc);
    acc = fmaf(w[2 * i + 1], fb.y, acc);
  }
  return acc;
}

// Bytes of one weight of the kernel's format.
template <bool kFp8>
constexpr int kWeightBytes = kFp8 ? 1 : 2;

// M: x rows the kernel computes (1, or 4 with rows >= p.m zero); kBf16Out: y's type; kFp8: W in
// the fp8 form.
template <int M, bool kBf16Out, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) dense_stream_kernel(const StreamParams p) {
  constexpr int kSlotBytes = kPieceElems * kWeightBytes<kFp8>;
  extern __shared__ __align__(128) unsigned char smem[];  // the warps' rings, then x, then (kFp8) exps
  __shared__ float s_part[kMaxItems * M];                 // [item][m]: one piece's dot products
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t row0 = int64_t(blockIdx.x) * p.rows_per_block;
  const int rows = int(min(int64_t(p.rows_per_block), int64_t(p.groups) * p.n - row0));
  const int items = rows * p.pieces;
  const int n_mine = items > warp ? (items - warp + kWarps - 1) / kWarps : 0;  // items warp, warp + 8, ..
  const int g0 = int(row0 / p.n);
  const int stages = p.stages, ring_bytes = kWarps * stages * kSlotBytes;
  const uint32_t ring = smem_u32(smem) + uint32_t(warp * stages * kSlotBytes);
  const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(smem + ring_bytes);  // [x_groups][M][k]
  const int kg = p.k / 128;  // kFp8: exponents per row
  int8_t* es = reinterpret_cast<int8_t*>(smem + ring_bytes + size_t(p.x_groups) * M * p.k * 2);  // [rows][kg]

  auto piece_elems = [&](int item) { return min(kPieceElems, p.k - (item % p.pieces) * kPieceElems); };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(8) uint64_t s_bar[kWarps * kMaxRingSlots];
  const uint32_t bar0 = smem_u32(s_bar) + uint32_t(warp * kMaxRingSlots * 8);
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) w4a16_detail::mbar_init(bar0 + s * 8, 1);
    w4a16_detail::fence_mbarrier_init();
  }
  __syncwarp();
  uint32_t phases = 0;  // bit s: parity of slot s's next phase
#endif
  // Item i of this warp (block item warp + i kWarps) into ring slot `slot`.
  auto issue = [&](int i, int slot) {
    const int item = warp + i * kWarps;
    const int r = item / p.pieces, pc = item - r * p.pieces;
    const int64_t first = (row0 + r) * p.k + int64_t(pc) * kPieceElems;  // the piece's first weight
    const void* src;
    if constexpr (kFp8) src = p.w8.codes + first;
    else src = p.w + first;
    // A multiple of 64 (bf16: k % 32 == 0) or of 128 (fp8: k % 128 == 0).
    const uint32_t bytes = uint32_t(piece_elems(item)) * kWeightBytes<kFp8>;
    const uint32_t dst = ring + uint32_t(slot * kSlotBytes);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (lane == 0) {
      w4a16_detail::mbar_arrive_expect_tx(bar0 + slot * 8, bytes);
      if (p.evict_first) w4a16_detail::bulk_g2s_hint(dst, src, bytes, bar0 + slot * 8, mma::l2_evict_first_policy());
      else w4a16_detail::bulk_g2s(dst, src, bytes, bar0 + slot * 8);
    }
#else
    const uint4* src16 = static_cast<const uint4*>(src);
    if (p.evict_first) {
      const uint64_t pol = mma::l2_evict_first_policy();
      for (uint32_t c = uint32_t(lane); c < bytes / 16; c += 32) mma::cp_async16_hint(dst + c * 16, src16 + c, pol);
    } else {
      for (uint32_t c = uint32_t(lane); c < bytes / 16; c += 32) mma::cp_async16(dst + c * 16, src16 + c, true);
    }
#endif
  };
  auto wait_slot = [&](int slot) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    w4a16_detail::mbar_wait(bar0 + slot * 8, (phases >> slot) & 1u);
    phases ^= 1u << slot;
#else
    (void)slot;
    switch (stages) {  // at most stages - 1 groups pending: the oldest slot has landed
      case 2: mma::cp_async_wait<1>(); break;
      case 3: mma::cp_async_wait<2>(); break;
      case 4: mma::cp_async_wait<3>(); break;
      case 5: mma::cp_async_wait<4>(); break;
      default: mma::cp_async_wait<5>(); break;
    }
    __syncwarp();
#endif
  };
  // One commit group per slot on SM80/86 (empty past the warp's items), so that "at most
  // stages - 1 groups pending" means the oldest slot has landed.
  for (int i = 0; i < stages; ++i) {
    if (i < n_mine) issue(i, i);
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
    mma::cp_async_commit();
#endif
  }

  // The block's exponents are weights too: read before the wait (into smem past x).
  if constexpr (kFp8)
    for (int i = tid; i < rows * kg; i += kThreads) es[i] = __ldg(p.w8.exps + row0 * kg + i);
  // x may be the previous kernel's output: read it after the wait, through L2 (ld.global.cg).
  pdl_wait();
  {
    const int g_last = int((row0 + rows - 1) / p.n);
    const int chunks = p.k / 8;  // 16-byte chunks of one x row of one group
    const int total = (g_last - g0 + 1) * M * chunks;
    uint4* xdst = reinterpret_cast<uint4*>(smem + ring_bytes);
    for (int idx = tid; idx < total; idx += kThreads) {
      const int c = idx % chunks, gm = idx / chunks, mm = gm % M, gi = gm / M;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (mm < p.m) v = __ldcg(reinterpret_cast<const uint4*>(p.x + int64_t(mm) * p.ldx + int64_t(g0 + gi) * p.xgs) + c);
      xdst[idx] = v;
    }
  }
  __syncthreads();

  int slot = 0;
  for (int i = 0; i < n_mine; ++i) {
    wait_slot(slot);
    const int item = warp + i * kWarps;
    const int r = item / p.pieces, pc = item - r * p.pieces;
    const int gi = int((row0 + r) / p.n) - g0;
    const int nchunks = piece_elems(item) / 8;
    const unsigned char* sl = smem + (warp * stages + slot) * kSlotBytes;
    const uint4* xq = reinterpret_cast<const uint4*>(xs + int64_t(gi) * M * p.k + int64_t(pc) * kPieceElems);
    float acc[M];
#pragma unroll
    for (int mm = 0; mm < M; ++mm) acc[mm] = 0.0f;
    if constexpr (kFp8) {
      const uint2* wq = reinterpret_cast<const uint2*>(sl);
      const int8_t* er = es + r * kg + pc * (kPieceElems / 128);  // the piece's exponents
#pragma unroll 4
      for (int c = lane; c < nchunks; c += 32) {  // chunk c: weights 8c .. 8c + 7, group c / 16
        const uint2 wv = wq[c];
        const float f = dense_detail::fp8_group_factor(er[c >> 4]);
        float wf[8];
        dense_detail::fp8x4_to_f32(wv.x, f, *reinterpret_cast<float(*)[4]>(wf));
        dense_detail::fp8x4_to_f32(wv.y, f, *reinterpret_cast<float(*)[4]>(wf + 4));
#pragma unroll
        for (int mm = 0; mm < M; ++mm) acc[mm] += dot8_f32(wf, xq[mm * (p.k / 8) + c], 0.0f);
      }
    } else {
      const uint4* wq = reinterpret_cast<const uint4*>(sl);
#pragma unroll 4
      for (int c = lane; c < nchunks; c += 32) {
        const uint4 wv = wq[c];
#pragma unroll
        for (int mm = 0; mm < M; ++mm) acc[mm] += dot8_bf16(wv, xq[mm * (p.k / 8) + c], 0.0f);  // short chains
      }
    }
#pragma unroll
    for (int mm = 0; mm < M; ++mm) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[mm] += __shfl_xor_sync(0xffffffffu, acc[mm], off);
    }
    if (lane == 0) {
#pragma unroll
      for (int mm = 0; mm < M; ++mm) s_part[item * M + mm] = acc[mm];
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
    if (i + stages < n_mine) issue(i + stages, slot);
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
    mma::cp_async_commit();
#endif
    slot = slot + 1 == stages ? 0 : slot + 1;
  }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
  mma::cp_async_wait<0>();
#endif
  __syncthreads();

  // A row's pieces in order, one rounding.
  for (int idx = tid; idx < rows * M; idx += kThreads) {
    const int r = idx / M, mm = idx - r * M;
    if (mm >= p.m) continue;
    float sum = 0.0f;
    for (int pc = 0; pc < p.pieces; ++pc) sum += s_part[(r * p.pieces + pc) * M + mm];
    const int64_t grow = row0 + r;
    const int64_t off = int64_t(mm) * p.ldy + (grow / p.n) * p.ygs + grow % p.n;
    if constexpr (kBf16Out)
      static_cast<__nv_bfloat16*>(p.y)[off] = __float2bfloat16_rn(sum);
    else
      static_cast<float*>(p.y)[off] = sum;
  }
}

// Dynamic shared memory above 48 KB needs the attribute (per device): the device's limit, set
// once per kernel and device.
constexpr int kMaxDevices = 64;
template <int M, bool kBf16Out, bool kFp8>
Status launch_stream(const StreamParams& p, int grid, size_t smem, const DeviceInfo& dev, cudaStream_t stream) {
  auto* kernel = &dense_stream_kernel<M, kBf16Out, kFp8>;
  static std::once_flag once[kMaxDevices];
  static cudaError_t attr_err[kMaxDevices] = {};
  if (dev.device < 0 || dev.device >= kMaxDevices)
    return invalid_argument("dense_stream_gemm: device {} beyond the {} it tracks", dev.device, kMaxDevices);
  std::call_once(once[dev.device], [&] {
    attr_err[dev.device] = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(dev.smem_optin_bytes) - kStaticSmemBytes);
  });
  DSV4_RETURN_IF_ERROR(cuda_status(attr_err[dev.device], "cudaFuncSetAttribute(dense_stream_kernel)"));
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  return launch_kernel(kernel, dim3(unsigned(grid)), dim3(kThreads), smem, stream, pdl, p, "dense_stream_kernel");
}

struct StreamPlan {
  int rows_per_block = 0, pieces = 0, x_groups = 0, grid = 0, stages = 0;
  size_t smem = 0;  // dynamic
};

// x rows the kernel instantiation for m rows computes (its template M).
int kernel_rows(int m) { return m == 1 ? 1 : 4; }

// The launch of s on dev; false where the kernel does not take it (rows, k % 32 (fp8: % 128),
// pieces, its shared memory: the rings plus the x rows of the groups a block spans, and fp8's
// exponents). Rings of three 4 KB slots per warp where two such blocks fit on an SM, else two
// (SM86: 100 KB per SM); fp8 rings have the same bytes in twice as many 2 KB slots. The grid and
// pieces do not depend on the format, so both sum the same products in the same order.
bool plan_stream(const DenseDecodeShape& s, const DeviceInfo& dev, bool fp8, StreamPlan* out) {
  if (s.m < 1 || s.m > kDenseStreamMaxRows || s.k < 32 || s.k % 32 != 0 || s.n < 1 || s.groups < 1) return false;
  if (fp8 && s.k % 128 != 0) return false;
  if (int64_t(s.groups) * s.n > INT32_MAX) return false;
  const int n_sms = dev.n_sms;
  StreamPlan pl;
  const int64_t total_rows = int64_t(s.groups) * s.n;
  pl.pieces = (s.k + kPieceElems - 1) / kPieceElems;
  const int max_rows = std::max(1, kMaxItems / pl.pieces);
  const int64_t target = std::max<int64_t>(1, 2 * int64_t(n_sms));
  pl.rows_per_block = int(std::clamp<int64_t>((total_rows + target - 1) / target, 1, max_rows));
  pl.grid = int((total_rows + pl.rows_per_block - 1) / pl.rows_per_block);
  // A block's rows span at most this many groups.
  pl.x_groups = int(std::min<int64_t>(s.groups, (pl.rows_per_block - 1) / s.n + 2));
  const size_t x_bytes = size_t(pl.x_groups) * kernel_rows(s.m) * s.k * 2;
  const size_t e_bytes = fp8 ? size_t(pl.rows_per_block) * (s.k / 128) : 0;
  int slots4k = kMaxStages;  // ring bytes in 4 KB units
  for (; slots4k > 2; --slots4k) {
    const size_t need = size_t(kWarps) * slots4k * kPieceBytes + x_bytes + e_bytes + kStaticSmemBytes +
                        dev.smem_reserved_per_block;
    if (2 * need <= dev.smem_per_sm_bytes) break;
  }
  pl.stages = fp8 ? kFp8StageFactor * slots4k : slots4k;
  pl.smem = size_t(kWarps) * slots4k * kPieceBytes + x_bytes + e_bytes;
  *out = pl;
  return pl.pieces <= kMaxItems && pl.smem + kStaticSmemBytes <= dev.smem_optin_bytes;
}

}  // namespace

bool dense_stream_supported(const DenseDecodeShape& s, const DeviceInfo& dev, bool fp8) {
  StreamPlan pl;
  return plan_stream(s, dev, fp8, &pl);
}

// One entry for both formats: exactly one of w (bf16) and w8 (fp8 form, bf16 out) is set.
Status dense_stream_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, Fp8WeightView w8, void* y, DenseOut out,
                         const DenseDecodeShape& s, cudaStream_t stream) {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const bool fp8 = w == nullptr;
  if (fp8 && out != DenseOut::kBf16) return invalid_argument("dense_stream_gemm: fp8 weights take bf16 output only");
  StreamPlan pl;
  if (!plan_stream(s, *dev, fp8, &pl))
    return invalid_argument("dense_stream_gemm: unsupported m {} n {} k {} groups {} (at most {} rows, k % {} == 0, "
                            "{} bytes of shared memory per block)",
                            s.m, s.n, s.k, s.groups, kDenseStreamMaxRows, fp8 ? 128 : 32, dev->smem_optin_bytes);
  StreamParams p{x, w, w8, y, s.m, s.n, s.k, s.groups, s.ldx, s.x_group_stride, s.ldy, s.y_group_stride,
                 pl.rows_per_block, pl.pieces, pl.x_groups, pl.stages, weights_evict_first()};
  const bool bf16 = out == DenseOut::kBf16;
  if (fp8)
    return kernel_rows(s.m) == 1 ? launch_stream<1, true, true>(p, pl.grid, pl.smem, *dev, stream)
                                 : launch_stream<4, true, true>(p, pl.grid, pl.smem, *dev, stream);
  if (kernel_rows(s.m) == 1)
    return bf16 ? launch_stream<1, true, false>(p, pl.grid, pl.smem, *dev, stream)
                : launch_stream<1, false, false>(p, pl.grid, pl.smem, *dev, stream);
  return bf16 ? launch_stream<4, true, false>(p, pl.grid, pl.smem, *dev, stream)
              : launch_stream<4, false, false>(p, pl.grid, pl.smem, *dev, stream);
}

}  // namespace dsv4::cuda
