// dense_gemv.cu: the BF16 decode GEMM of dense.h for 1..4 rows of x, with the weights streamed
// through registers (dense_decode_gemm picks it at 1..4 rows where it fits; kDenseForceGemv
// forces it).
//
// At a few rows the GEMM is a pure weight read, so its time is the weight bytes over the DRAM
// rate plus the launch's ramp and tail. The other decode kernels stage weights through
// shared-memory rings (per-piece barriers, per-warp pieces in a fixed order); this one keeps them
// in registers and has no barrier past x's staging:
//   - blocks lie within one group of x (blockIdx.y), each a contiguous, balanced range of the
//     group's rows, dealt to its warps in turn: every warp owns whole weight rows;
//   - a row is cut into units of kVec 16-byte loads per lane (kVec * 256 weights, coalesced
//     512-byte rows of loads), and each warp keeps kUnitsInFlight units in registers
//     (ld.global.nc, L1 no-allocate) while it multiplies the oldest by x; the first units are
//     requested before the PDL wait (weights never depend on the previous kernel);
//   - x (the group's M rows, bf16; rows past m zero) is staged in shared memory after the wait;
//     each weight word is widened once and multiplied into every row's fp32 chain, in unit order;
//     a fixed butterfly ends each row, one rounding writes it: deterministic, no atomics, and a
//     row's sum does not depend on M or the grid (not the other kernels' summation order: close,
//     not their bits).
// Kernels of 1, 2 and 4 rows (3 runs the 4-row one); about kBlocksPerSm blocks per SM, all
// resident at once (one wave).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/arch.h"
#include "cuda/common/bf16_bits.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/dense/dense_internal.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlocksPerSm = 2;
constexpr int kVec = 8;                  // 16-byte loads per lane per unit
constexpr int kUnitElems = kVec * 256;   // weights per unit (a warp's kVec 512-byte rows of loads)
constexpr int kUnitsInFlight = 2;        // register buffers per warp
constexpr int kMaxSmemBytes = 48 * 1024;  // x's rows of one group, without the opt-in attribute
static_assert(kDenseGemvMaxRows == 4, "kernels of 1, 2 and 4 rows");

struct GemvParams {
  const __nv_bfloat16* x;  // bf16 [m, ldx]: group g of row i at columns [i * ldx + g * xgs, + k)
  const __nv_bfloat16* w;  // bf16 [groups * n, k]
  void* y;                 // bf16 or f32 [m, ldy]: group g of row i at [i * ldy + g * ygs, + n)
  int m, n, k;
  int64_t ldx, xgs, ldy, ygs;
  bool evict_first;  // weights read with L2 evict-first priority (arch.h weights_evict_first)
};

// One unit of a lane's weights: kVec 16-byte loads 512 bytes apart, with the L2 evict-first
// policy (created once a unit) where asked.
__device__ __forceinline__ void load_unit(const uint4* src, bool evict_first, uint4 (&dst)[kVec]) {
  if (evict_first) {
    const uint64_t policy = mma::l2_evict_first_policy();
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                   : "=r"(dst[v].x), "=r"(dst[v].y), "=r"(dst[v].z), "=r"(dst[v].w)
                   : "l"(src + 32 * v), "l"(policy));
  } else {
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(dst[v].x), "=r"(dst[v].y), "=r"(dst[v].z), "=r"(dst[v].w)
                   : "l"(src + 32 * v));
  }
}

// acc[i] + the 8 products of the weight vector w and row i's x vector xs[i * row_stride], fp32
// fmas in element order: dot8_bf16's chain, with each weight word widened once for all rows.
template <int kRows>
__device__ __forceinline__ void dot8_rows(const uint4 w, const uint4* xs, int row_stride, float (&acc)[kRows]) {
  float fw[8];
  bf16x8_to_f32(w, fw);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float fx[8];
    bf16x8_to_f32(xs[i * row_stride], fx);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i] = fmaf(fw[e], fx[e], acc[i]);
  }
}

template <int kRows, bool kBf16Out>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) dense_gemv_kernel(const GemvParams p) {
  extern __shared__ __align__(16) unsigned char smem[];  // x: [kRows][k] bf16 of group blockIdx.y
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int g = int(blockIdx.y);
  const int r0 = int(int64_t(blockIdx.x) * p.n / gridDim.x);  // rows of the group: [r0, r1)
  const int r1 = int(int64_t(blockIdx.x + 1) * p.n / gridDim.x);
  const int units_per_row = p.k / kUnitElems;
  const int my_rows = r1 - r0 > warp ? (r1 - r0 - warp + kWarps - 1) / kWarps : 0;
  const int units = my_rows * units_per_row;
  const __nv_bfloat16* wg = p.w + int64_t(g) * p.n * p.k;
  // Unit u of this warp: row r0 + warp + (u / units_per_row) * kWarps, columns (u % units_per_row) * kUnitElems.
  auto unit_row = [&](int u) { return r0 + warp + (u / units_per_row) * kWarps; };
  auto unit_src = [&](int u) {
    return reinterpret_cast<const uint4*>(wg + int64_t(unit_row(u)) * p.k + int64_t(u % units_per_row) * kUnitElems) +
           lane;
  };

  uint4 buf[kUnitsInFlight][kVec];
#pragma unroll
  for (int b = 0; b < kUnitsInFlight; ++b)
    if (b < units) load_unit(unit_src(b), p.evict_first, buf[b]);

  // x may be the previous kernel's output: staged after the wait, through L2; rows past m zero.
  pdl_wait();
  {
    const int chunks = p.k / 8;  // 16-byte chunks of one row's group
    uint4* xdst = reinterpret_cast<uint4*>(smem);
    for (int i = int(threadIdx.x); i < kRows * chunks; i += kThreads) {
      const int row = i / chunks, c = i - row * chunks;
      xdst[i] = row < p.m ? __ldcg(reinterpret_cast<const uint4*>(p.x + int64_t(row) * p.ldx + int64_t(g) * p.xgs) + c)
                          : make_uint4(0, 0, 0, 0);
    }
  }
  __syncthreads();

  const uint4* xs = reinterpret_cast<const uint4*>(smem);
  const int x_row_chunks = p.k / 8;
  float acc[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
  for (int u0 = 0; u0 < units; u0 += kUnitsInFlight) {
#pragma unroll
    for (int b = 0; b < kUnitsInFlight; ++b) {
      const int u = u0 + b;
      if (u < units) {
        const int part = u % units_per_row;
        const uint4* xq = xs + part * (kUnitElems / 8) + lane;
#pragma unroll
        for (int v = 0; v < kVec; ++v) dot8_rows<kRows>(buf[b][v], xq + 32 * v, x_row_chunks, acc);
        if (part == units_per_row - 1) {
          const int64_t col = int64_t(g) * p.ygs + unit_row(u);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
            if (lane == 0 && i < p.m) {
              const int64_t off = int64_t(i) * p.ldy + col;
              if constexpr (kBf16Out) static_cast<__nv_bfloat16*>(p.y)[off] = __float2bfloat16_rn(acc[i]);
              else static_cast<float*>(p.y)[off] = acc[i];
            }
            acc[i] = 0.0f;
          }
        }
        // The buffer just multiplied takes the unit kUnitsInFlight ahead (registers are never
        // copied into each other: a copy would wait for the load in flight).
        if (u + kUnitsInFlight < units) load_unit(unit_src(u + kUnitsInFlight), p.evict_first, buf[b]);
      }
    }
  }
}

struct GemvPlan {
  int kernel_rows = 0;  // 1, 2 or 4
  int blocks_per_group = 0;
  size_t smem = 0;
};

bool plan_gemv(const DenseDecodeShape& s, const DeviceInfo& dev, GemvPlan* out) {
  if (s.m < 1 || s.m > kDenseGemvMaxRows || s.n < 1 || s.groups < 1 || s.groups > 65535 || s.k < kUnitElems ||
      s.k % kUnitElems != 0)
    return false;
  GemvPlan pl;
  pl.kernel_rows = s.m == 1 ? 1 : s.m == 2 ? 2 : 4;
  // About kBlocksPerSm blocks an SM over all groups, at most one a row.
  const int64_t target = int64_t(kBlocksPerSm) * dev.n_sms;
  pl.blocks_per_group = int(std::clamp<int64_t>((target + s.groups / 2) / s.groups, 1, s.n));
  pl.smem = size_t(pl.kernel_rows) * size_t(s.k) * 2;
  *out = pl;
  return pl.smem <= size_t(kMaxSmemBytes);
}

template <int kRows>
Status launch_rows(const GemvParams& p, DenseOut out, const GemvPlan& pl, int groups, cudaStream_t stream) {
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const dim3 grid(unsigned(pl.blocks_per_group), unsigned(groups));
  if (out == DenseOut::kBf16)
    return launch_kernel(&dense_gemv_kernel<kRows, true>, grid, dim3(kThreads), pl.smem, stream, pdl, p,
                         "dense_gemv_kernel");
  return launch_kernel(&dense_gemv_kernel<kRows, false>, grid, dim3(kThreads), pl.smem, stream, pdl, p,
                       "dense_gemv_kernel");
}

}  // namespace

bool dense_gemv_supported(const DenseDecodeShape& s, const DeviceInfo& dev) {
  GemvPlan pl;
  return plan_gemv(s, dev, &pl);
}

Status dense_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, DenseOut out, const DenseDecodeShape& s,
                  cudaStream_t stream) {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  GemvPlan pl;
  if (!plan_gemv(s, *dev, &pl))
    return invalid_argument("dense_gemv: unsupported m {} (1..{}) n {} k {} (a multiple of {}) groups {}, or more "
                            "than {} bytes of x per block",
                            s.m, kDenseGemvMaxRows, s.n, s.k, kUnitElems, s.groups, kMaxSmemBytes);
  const GemvParams p{x, w, y, s.m, s.n, s.k, s.ldx, s.x_group_stride, s.ldy, s.y_group_stride, weights_evict_first()};
  switch (pl.kernel_rows) {
    case 1: return launch_rows<1>(p, out, pl, s.groups, stream);
    case 2: return launch_rows<2>(p, out, pl, s.groups, stream);
    default: return launch_rows<4>(p, out, pl, s.groups, stream);
  }
}

}  // namespace dsv4::cuda
