// dense_gemv.cu: the BF16 decode GEMM of dense.h for one row of x, with the weights streamed
// through registers (dense_decode_gemm picks it at M = 1 where it fits; kDenseForceGemv forces it).
//
// At one row the GEMM is a pure weight read, so its time is the weight bytes over the DRAM rate
// plus the launch's ramp and tail. The other decode kernels stage weights through shared-memory
// rings (per-piece barriers, per-warp pieces in a fixed order); this one keeps them in registers
// and has no barrier past x's staging:
//   - every warp owns whole weight rows: a block's rows are a contiguous, balanced range of all
//     groups' rows (so they span at most two groups of x), dealt to its warps in turn;
//   - a row is cut into units of kVec 16-byte loads per lane (kVec * 256 weights, coalesced
//     512-byte rows of loads), and each warp keeps kUnitsInFlight units in registers
//     (ld.global.nc, L1 no-allocate) while it multiplies the oldest by x; the first units are
//     requested before the PDL wait (weights never depend on the previous kernel);
//   - x (the row's groups, bf16) is staged in shared memory after the wait; the products go into
//     one fp32 chain per lane in unit order, a fixed butterfly ends the row, one rounding writes
//     it: deterministic, no atomics (not the other kernels' summation order: close, not their bits).
// Grid: about kBlocksPerSm blocks per SM, all resident at once (one wave).
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
constexpr int kMaxSmemBytes = 48 * 1024;  // x's groups, without the opt-in attribute

struct GemvParams {
  const __nv_bfloat16* x;  // bf16 [groups * xgs]: group g at columns [g * xgs, + k)
  const __nv_bfloat16* w;  // bf16 [groups * n, k]
  void* y;                 // bf16 or f32: group g at [g * ygs, + n)
  int n, k, groups;
  int64_t xgs, ygs;
  int x_groups;      // groups of x staged per block (the most a block's rows span)
  bool evict_first;  // weights read with L2 evict-first priority (arch.h weights_evict_first)
};

__device__ __forceinline__ uint4 ld_weights(const uint4* p, bool evict_first) {
  uint4 v;
  if (evict_first) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(mma::l2_evict_first_policy()));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  }
  return v;
}

template <bool kBf16Out>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) dense_gemv_kernel(const GemvParams p) {
  extern __shared__ __align__(16) unsigned char smem[];  // x: [x_groups][k] bf16
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t rows_total = int64_t(p.groups) * p.n;
  const int64_t r0 = int64_t(blockIdx.x) * rows_total / gridDim.x;
  const int64_t r1 = int64_t(blockIdx.x + 1) * rows_total / gridDim.x;
  const int g0 = int(r0 / p.n);
  const int units_per_row = p.k / kUnitElems;
  const int my_rows = r1 - r0 > warp ? int((r1 - r0 - warp + kWarps - 1) / kWarps) : 0;
  const int units = my_rows * units_per_row;
  // Unit u of this warp: row r0 + warp + (u / units_per_row) * kWarps, columns (u % units_per_row) * kUnitElems.
  auto unit_row = [&](int u) { return r0 + warp + int64_t(u / units_per_row) * kWarps; };
  auto unit_src = [&](int u) {
    return reinterpret_cast<const uint4*>(p.w + unit_row(u) * p.k + int64_t(u % units_per_row) * kUnitElems) + lane;
  };

  uint4 buf[kUnitsInFlight][kVec];
#pragma unroll
  for (int b = 0; b < kUnitsInFlight; ++b)
    if (b < units) {
      const uint4* src = unit_src(b);
#pragma unroll
      for (int v = 0; v < kVec; ++v) buf[b][v] = ld_weights(src + 32 * v, p.evict_first);
    }

  // x may be the previous kernel's output: staged after the wait, through L2.
  pdl_wait();
  {
    const int g_last = int(std::min<int64_t>(p.groups - 1, (r1 - 1) / p.n));
    const int chunks = p.k / 8;  // 16-byte chunks of one group's x
    uint4* xdst = reinterpret_cast<uint4*>(smem);
    for (int i = int(threadIdx.x); i < (g_last - g0 + 1) * chunks; i += kThreads) {
      const int gi = i / chunks, c = i - gi * chunks;
      xdst[i] = __ldcg(reinterpret_cast<const uint4*>(p.x + int64_t(g0 + gi) * p.xgs) + c);
    }
  }
  __syncthreads();

  const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(smem);
  float acc = 0.0f;
  for (int u0 = 0; u0 < units; u0 += kUnitsInFlight) {
#pragma unroll
    for (int b = 0; b < kUnitsInFlight; ++b) {
      const int u = u0 + b;
      if (u < units) {
        const int64_t row = unit_row(u);
        const int g = int(row / p.n);
        const int part = u % units_per_row;
        const uint4* xq = reinterpret_cast<const uint4*>(xs + int64_t(g - g0) * p.k + int64_t(part) * kUnitElems) + lane;
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc = dot8_bf16(buf[b][v], xq[32 * v], acc);
        if (part == units_per_row - 1) {
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
          if (lane == 0) {
            const int64_t off = int64_t(g) * p.ygs + (row - int64_t(g) * p.n);
            if constexpr (kBf16Out) static_cast<__nv_bfloat16*>(p.y)[off] = __float2bfloat16_rn(acc);
            else static_cast<float*>(p.y)[off] = acc;
          }
          acc = 0.0f;
        }
        // The buffer just multiplied takes the unit kUnitsInFlight ahead (registers are never
        // copied into each other: a copy would wait for the load in flight).
        if (u + kUnitsInFlight < units) {
          const uint4* src = unit_src(u + kUnitsInFlight);
#pragma unroll
          for (int v = 0; v < kVec; ++v) buf[b][v] = ld_weights(src + 32 * v, p.evict_first);
        }
      }
    }
  }
}

struct GemvPlan {
  int grid = 0, x_groups = 0;
  size_t smem = 0;
};

bool plan_gemv(const DenseDecodeShape& s, const DeviceInfo& dev, GemvPlan* out) {
  if (s.m != 1 || s.n < 1 || s.groups < 1 || s.k < kUnitElems || s.k % kUnitElems != 0) return false;
  const int64_t rows = int64_t(s.groups) * s.n;
  GemvPlan pl;
  pl.grid = int(std::min<int64_t>(rows, int64_t(kBlocksPerSm) * dev.n_sms));
  const int64_t rows_per_block = (rows + pl.grid - 1) / pl.grid;
  pl.x_groups = int(std::min<int64_t>(s.groups, (rows_per_block - 1) / s.n + 2));
  pl.smem = size_t(pl.x_groups) * size_t(s.k) * 2;
  *out = pl;
  return pl.smem <= size_t(kMaxSmemBytes);
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
    return invalid_argument("dense_gemv: unsupported m {} (1) n {} k {} (a multiple of {}) groups {}, or more than {} "
                            "bytes of x per block",
                            s.m, s.n, s.k, kUnitElems, s.groups, kMaxSmemBytes);
  const GemvParams p{x, w, y, s.n, s.k, s.groups, s.x_group_stride, s.y_group_stride, pl.x_groups,
                     weights_evict_first()};
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  if (out == DenseOut::kBf16)
    return launch_kernel(&dense_gemv_kernel<true>, dim3(unsigned(pl.grid)), dim3(kThreads), pl.smem, stream, pdl, p,
                         "dense_gemv_kernel");
  return launch_kernel(&dense_gemv_kernel<false>, dim3(unsigned(pl.grid)), dim3(kThreads), pl.smem, stream, pdl, p,
                       "dense_gemv_kernel");
}

}  // namespace dsv4::cuda
