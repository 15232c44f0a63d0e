// dense.cu: the BF16 decode GEMM of dense.h.
//
// The mma is "swapped": W rows are the mma's N (n8 tiles), x rows its M (one or two m16 tiles),
// so a 16-row x batch costs no padding of W and the weight rows need no shared memory. K is
// permuted inside every 32-wide step so that each fragment is one 16-byte load: lane (g, t)
// (g = lane / 4, t = lane % 4) loads elements [8t, 8t + 8) of a step from W row g and from x rows
// g, g + 8, ...; registers .x/.y feed k16 slice 0 as logical columns (2t, 2t+1)/(2t+8, 2t+9) and
// .z/.w feed slice 1 the same way. A and B use the same permutation, so each product pairs the
// same physical k (the sum is over all k, in another order).
//
// Block: 8 warps over the block's 8 or 16 W rows (one or two n8 tiles); warp w takes the chunks
// w, w + 8, ... of K (a chunk is 8 loads of 16 bytes per lane per tile row set: 8 steps with one
// n8 tile, 4 with two), in two register buffers used in turn, so two chunks of weights per warp
// (8 KB) are in flight while the warp multiplies. x comes from L1/L2 (__ldg); lanes whose x row is past M
// use zeros. At the end the 8 warps add their fp32 sums through shared memory in warp order and
// one rounding writes y. W rows past N read a copy of row N-1 and are never stored.
//
// Fp8 weights (kFp8, dense.h Fp8WeightView): a step's 8 codes per lane are one 8-byte load and
// the exponents of the chunk's 128-k groups ride along in the buffer; each code becomes the exact
// weight (fp8_weight.cuh) packed into the bf16 pair the bf16 kernel would have loaded. Chunks
// keep the bf16 kernel's steps (so half its bytes in flight per warp), so every warp runs the
// same mmas in the same order: the same bits. Fp8 blocks may also take four n8 tiles (32 W rows,
// rows_per_block 32; chunks of 2 steps): each x row a block reads then serves twice the weight
// rows, which matters at 32 x rows (the grouped wo_a's x slice is 256 KB a block, read from L2
// per block: 128 MB a call at two tiles against 34 MB of fp8 weights). Other chunks, so the sums
// run in another order than the bf16 kernel's: not its bits.
#include "cuda/dense/dense.h"
#include "cuda/dense/dense_internal.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/dense/fp8_weight.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLoadsPerChunk = 8;  // 16-byte W loads per lane per chunk

struct Params {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;  // bf16 [groups * n, k] (kFp8: null)
  Fp8WeightView w8;        // kFp8: codes u8 [groups * n, k], exps i8 [groups * n, k / 128]
  void* y;
  int m, n, k;
  int64_t ldx, xgs, ldy, ygs;
};

__device__ __forceinline__ uint4 ld_stream16(const __nv_bfloat16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 ld_stream8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// The bf16 pairs (elements 0 1 | 2 3 | 4 5 | 6 7) of 8 fp8 codes under factor f: exact weights.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 codes, float f) {
  float lo[4], hi[4];
  dense_detail::fp8x4_to_f32(codes.x, f, lo);
  dense_detail::fp8x4_to_f32(codes.y, f, hi);
  auto pack = [](float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  };
  return make_uint4(pack(lo[0], lo[1]), pack(lo[2], lo[3]), pack(hi[0], hi[1]), pack(hi[2], hi[3]));
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// XR: 8-row blocks of x loaded (1: M <= 8, 2: M <= 16, 4: M <= 32); NT: n8 tiles of W per block;
// kFp8: W in the fp8 form.
template <int XR, int NT, bool kBf16Out, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) dense_decode_kernel(const Params p) {
  constexpr int MT = (XR + 1) / 2;  // m16 tiles
  constexpr int U = kLoadsPerChunk / NT;  // 32-wide k steps per chunk
  // fp8: 128-k groups a chunk touches (U = 2: half of one; chunks never straddle a group).
  constexpr int UG = kFp8 ? (U + 3) / 4 : 1;
  constexpr int kRows = 8 * NT;
  using WLoad = std::conditional_t<kFp8, uint2, uint4>;

  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int group = int(blockIdx.y);
  const int row0 = int(blockIdx.x) * kRows;
  const int kg = p.k / 128;

  int64_t wrow[NT];  // element offset of the lane's first weight of each tile row
  const int8_t* erow[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = min(row0 + nt * 8 + g, p.n - 1);
    wrow[nt] = (int64_t(group) * p.n + r) * p.k + 8 * t;
    erow[nt] = p.w8.exps + (int64_t(group) * p.n + r) * kg;  // kFp8 only
  }
  const __nv_bfloat16* xrow[XR];
  bool xok[XR];
#pragma unroll
  for (int i = 0; i < XR; ++i) {
    const int m = g + 8 * i;
    xok[i] = m < p.m;
    xrow[i] = p.x + int64_t(min(m, p.m - 1)) * p.ldx + int64_t(group) * p.xgs + 8 * t;
  }

  const int steps = p.k / 32;
  const int chunks = (steps + U - 1) / U;

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Two register buffers used in turn (never copied into each other: a register copy would wait
  // for the load in flight), so each warp keeps two chunks of weights in flight while it
  // multiplies: the buffer just multiplied is refilled with the chunk 2 * kWarps ahead.
  struct Buf {
    WLoad w[U][NT];
    int e[UG][NT];  // fp8: the chunk's group exponents
  };
  Buf buf_a, buf_b;
  auto load_chunk = [&](int c, Buf& buf) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = c * U + u;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if constexpr (kFp8) buf.w[u][nt] = s < steps ? ld_stream8(p.w8.codes + wrow[nt] + int64_t(s) * 32) : make_uint2(0, 0);
        else buf.w[u][nt] = s < steps ? ld_stream16(p.w + wrow[nt] + int64_t(s) * 32) : zero;
      }
    }
    if constexpr (kFp8) {
#pragma unroll
      for (int ug = 0; ug < UG; ++ug)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int grp = c * U / 4 + ug;
          buf.e[ug][nt] = grp < kg ? int(__ldg(erow[nt] + grp)) : 0;
        }
    }
  };
  auto mma_chunk = [&](int c, const Buf& buf) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = c * U + u;
      if (s < steps) {
        uint4 xa[XR];
#pragma unroll
        for (int i = 0; i < XR; ++i)
          xa[i] = xok[i] ? __ldg(reinterpret_cast<const uint4*>(xrow[i] + int64_t(s) * 32)) : zero;
        uint4 wb[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if constexpr (kFp8)
            wb[nt] = fp8x8_to_bf16x8(buf.w[u][nt], dense_detail::fp8_group_factor(buf.e[(c * U + u) / 4 - c * U / 4][nt]));
          else wb[nt] = buf.w[u][nt];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint4 lo = xa[2 * mt];  // x row g + 16 mt
          uint4 hi = zero;              // x row g + 16 mt + 8
          if constexpr (XR >= 2) hi = xa[2 * mt + 1];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint4 b = wb[nt];
            mma_bf16_16816(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            mma_bf16_16816(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
          }
        }
      }
    }
  };

  // Warp w takes chunks w, w + kWarps, w + 2 kWarps, ...: even ones through buf_a, odd ones
  // through buf_b.
  int c = warp;
  if (c < chunks) load_chunk(c, buf_a);
  if (c + kWarps < chunks) load_chunk(c + kWarps, buf_b);
  // Weights do not depend on the previous kernel; x may (PDL launches only).
  pdl_wait();
  for (; c < chunks; c += 2 * kWarps) {
    mma_chunk(c, buf_a);
    if (c + 2 * kWarps < chunks) load_chunk(c + 2 * kWarps, buf_a);
    if (c + kWarps < chunks) {
      mma_chunk(c + kWarps, buf_b);
      if (c + 3 * kWarps < chunks) load_chunk(c + 3 * kWarps, buf_b);
    }
  }

  // Cross-warp sum in warp order. red[w][reg][lane]: conflict-free writes and reads.
  constexpr int kRegs = MT * NT * 4;
  __shared__ float red[kWarps][kRegs][32];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][(mt * NT + nt) * 4 + i][lane] = acc[mt][nt][i];
  __syncthreads();
  for (int e = int(threadIdx.x); e < kRegs * 32; e += kThreads) {
    const int reg = e >> 5, ln = e & 31;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][reg][ln];
    const int mt = reg / (NT * 4), nt = (reg / 4) % NT, i = reg % 4;
    // mma C fragment: c0, c1 at (row g, cols 2t, 2t+1), c2, c3 at row g + 8.
    const int m = 16 * mt + (ln >> 2) + (i >= 2 ? 8 : 0);
    const int col = row0 + nt * 8 + 2 * (ln & 3) + (i & 1);
    if (m < p.m && col < p.n) {
      const int64_t off = int64_t(m) * p.ldy + int64_t(group) * p.ygs + col;
      if constexpr (kBf16Out)
        static_cast<__nv_bfloat16*>(p.y)[off] = __float2bfloat16_rn(sum);
      else
        static_cast<float*>(p.y)[off] = sum;
    }
  }
}

// A programmatic dependent (pdl.cuh) where the device has PDL: every block waits before it reads
// x, after requesting its first two chunks of weights. Fp8 weights: bf16 out only (checked).
template <int XR, int NT>
Status launch_xr_nt(const Params& p, DenseOut out, int groups, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + 8 * NT - 1) / (8 * NT)), unsigned(groups));
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  if (p.w == nullptr)
    return launch_kernel(dense_decode_kernel<XR, NT, true, true>, grid, dim3(kThreads), 0, stream, pdl, p,
                         "dense_decode_kernel<fp8, bf16>");
  if (out == DenseOut::kBf16)
    return launch_kernel(dense_decode_kernel<XR, NT, true, false>, grid, dim3(kThreads), 0, stream, pdl, p,
                         "dense_decode_kernel<bf16>");
  return launch_kernel(dense_decode_kernel<XR, NT, false, false>, grid, dim3(kThreads), 0, stream, pdl, p,
                       "dense_decode_kernel<f32>");
}

template <int XR>
Status launch_xr(const Params& p, DenseOut out, int groups, int nt, cudaStream_t stream) {
  if (nt == 4) {  // fp8 only (decode_gemm checks)
    const dim3 grid(unsigned((p.n + 31) / 32), unsigned(groups));
    DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
    return launch_kernel(dense_decode_kernel<XR, 4, true, true>, grid, dim3(kThreads), 0, stream, pdl, p,
                         "dense_decode_kernel<fp8, bf16, 32 rows>");
  }
  return nt == 1 ? launch_xr_nt<XR, 1>(p, out, groups, stream) : launch_xr_nt<XR, 2>(p, out, groups, stream);
}

bool aligned(const void* ptr, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0; }

// Both formats: exactly one of w and w8.codes is set (validated by the callers).
Status decode_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, Fp8WeightView w8, void* y, DenseOut out,
                   const DenseDecodeShape& s, cudaStream_t stream, int rows_per_block) {
  if (rows_per_block != 0 && rows_per_block != kDenseForceStream && rows_per_block != kDenseForceTc &&
      rows_per_block != 8 && rows_per_block != 16 && !(rows_per_block == 32 && w == nullptr) &&
      !(rows_per_block == kDenseForceGemv && w != nullptr))
    return invalid_argument(
        "dense_decode_gemm: rows_per_block {} (0, {} (streaming), {} (tensor cores), 8 or 16; {} (register GEMV) with "
        "bf16 weights, 32 with fp8 weights)",
        rows_per_block, kDenseForceStream, kDenseForceTc, kDenseForceGemv);
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  // 1..4 rows of x on bf16 weights: the register-streaming GEMV (dense_gemv.cu), where it fits.
  const bool gemv_fits = w != nullptr && dense_gemv_supported(s, *dev);
  if (rows_per_block == kDenseForceGemv && !gemv_fits)
    return invalid_argument("dense_decode_gemm: the register-streaming GEMV does not take m {} (1..{}) n {} k {} (a "
                            "multiple of 2048) groups {}",
                            s.m, kDenseGemvMaxRows, s.n, s.k, s.groups);
  if (gemv_fits && (rows_per_block == 0 || rows_per_block == kDenseForceGemv)) return dense_gemv(x, w, y, out, s, stream);
  // The tensor-core kernel (dense_tc.cu), where it fits: fp8 weights at 1..8 rows; bf16 weights at
  // the streaming kernel's 1..4 rows where its grid fills the GPU (H100, M = 1: the CSA projection
  // 13.3 against 15.4 us, wo_a 28.0 against 28.9; the HCA projection stays on the streaming
  // kernel; bench/results/NOTES.md). 5..8 bf16 rows stay on the mma kernel, which the model sends
  // to cuBLAS there anyway (gpu/blas.cpp).
  const bool tc_fits = dense_tc_supported(s, w, w8, *dev) && (w != nullptr || out == DenseOut::kBf16);
  if (rows_per_block == kDenseForceTc && !tc_fits)
    return invalid_argument("dense_decode_gemm: the tensor-core kernel does not take m {} n {} k {} groups {}", s.m, s.n,
                            s.k, s.groups);
  const bool tc_auto = tc_fits && (w == nullptr || (s.m <= kDenseStreamMaxRows && dense_tc_fills_gpu(s, *dev)));
  if ((rows_per_block == 0 && tc_auto) || rows_per_block == kDenseForceTc)
    return dense_tc_gemm(x, w, w8, y, out, s, stream);
  // 1..4 rows: the weight-streaming kernel (dense_stream.cu); rows_per_block 8 or 16 force the mma one.
  const bool stream_fits = dense_stream_supported(s, *dev, w == nullptr);
  if (rows_per_block == kDenseForceStream && !stream_fits)
    return invalid_argument("dense_decode_gemm: the streaming kernel does not take m {} n {} k {} groups {}", s.m, s.n,
                            s.k, s.groups);
  if ((rows_per_block == 0 || rows_per_block == kDenseForceStream) && stream_fits)
    return dense_stream_gemm(x, w, w8, y, out, s, stream);
  const int xr = s.m <= 8 ? 1 : s.m <= 16 ? 2 : 4;
  int nt = rows_per_block / 8;
  if (nt == 0 && w == nullptr) {
    // Fp8 weights: blocks of 32 W rows. Each fp8 chunk holds half the bf16 chunk's bytes, so a
    // block of 16 rows keeps too few in flight; 32 rows also halve the x reads per weight byte
    // (H100, wo_a: 28.2 against 33.3 us at 8 rows, 34.1 against 38.8 at 32; bench/results/NOTES.md).
    nt = 4;
  } else if (nt == 0) {
    // Two n8 tiles per block halve the x reads per weight byte. One tile doubles the blocks, for
    // grids of 16-row blocks that would leave SMs idle, as long as the 8-row grid still runs in
    // one wave (two blocks per SM): a partial second wave costs more than unequal SMs.
    const int64_t blocks16 = int64_t(s.groups) * ((s.n + 15) / 16);
    const int64_t blocks8 = int64_t(s.groups) * ((s.n + 7) / 8);
    nt = xr < 4 && blocks16 < dev->n_sms && blocks8 <= 2 * int64_t(dev->n_sms) ? 1 : 2;
  }
  const Params p{x, w, w8, y, s.m, s.n, s.k, s.ldx, s.x_group_stride, s.ldy, s.y_group_stride};
  switch (xr) {
    case 1: return launch_xr<1>(p, out, s.groups, nt, stream);
    case 2: return launch_xr<2>(p, out, s.groups, nt, stream);
    default: return launch_xr<4>(p, out, s.groups, nt, stream);
  }
}

// Thread = 8 weights (one 8-byte load, one 16-byte store) at flat index 8 i of [rows][k]. With k
// a multiple of 128 the flat group index 8 i / 128 is row * k / 128 + col / 128: the exps' order.
__global__ void fp8_to_bf16_kernel(Fp8WeightView w, int64_t n8, __nv_bfloat16* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 codes = __ldg(reinterpret_cast<const uint2*>(w.codes) + i);
    const int64_t group = i / 16;
    const float f = dense_detail::fp8_group_factor(__ldg(w.exps + group));
    reinterpret_cast<uint4*>(out)[i] = fp8x8_to_bf16x8(codes, f);
  }
}

}  // namespace

bool dense_decode_streams(const DenseDecodeShape& s) {
  const Result<const DeviceInfo*> dev = current_device_info();
  return dev.is_ok() && (dense_gemv_supported(s, *dev.value()) || dense_stream_supported(s, *dev.value(), false));
}

bool dense_decode_runs_gemv(const DenseDecodeShape& s) {
  const Result<const DeviceInfo*> dev = current_device_info();
  return dev.is_ok() && dense_gemv_supported(s, *dev.value());
}

bool dense_decode_supported(const DenseDecodeShape& s, const void* x, const void* w, const void* y) {
  if (s.m < 1 || s.m > kDenseDecodeMaxRows || s.n < 1 || s.k < 32 || s.k % 32 != 0) return false;
  if (s.groups < 1 || s.groups > 65535) return false;
  if (s.ldx % 8 != 0 || s.x_group_stride % 8 != 0 || s.x_group_stride < 0 || s.y_group_stride < 0) return false;
  if (s.ldx < (s.groups - 1) * s.x_group_stride + s.k || s.ldy < (s.groups - 1) * s.y_group_stride + s.n) return false;
  if (s.groups > 1 && (s.x_group_stride < s.k || s.y_group_stride < s.n)) return false;
  return x != nullptr && w != nullptr && y != nullptr && aligned(x, 16) && aligned(w, 16) && aligned(y, 4);
}

Status dense_decode_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, DenseOut out,
                         const DenseDecodeShape& s, cudaStream_t stream, int rows_per_block) {
  if (!dense_decode_supported(s, x, w, y))
    return invalid_argument("dense_decode_gemm: unsupported m {} n {} k {} groups {} ldx {} xgs {} ldy {} ygs {}", s.m,
                            s.n, s.k, s.groups, s.ldx, s.x_group_stride, s.ldy, s.y_group_stride);
  return decode_gemm(x, w, Fp8WeightView{}, y, out, s, stream, rows_per_block);
}

Status dense_decode_gemm_fp8(const __nv_bfloat16* x, Fp8WeightView w, void* y, DenseOut out,
                             const DenseDecodeShape& s, cudaStream_t stream, int rows_per_block) {
  if (!dense_decode_supported(s, x, w.codes, y) || s.k % 128 != 0 || w.exps == nullptr)
    return invalid_argument("dense_decode_gemm_fp8: unsupported m {} n {} k {} (a multiple of 128) groups {} ldx {} "
                            "xgs {} ldy {} ygs {}, or null exponents",
                            s.m, s.n, s.k, s.groups, s.ldx, s.x_group_stride, s.ldy, s.y_group_stride);
  if (out != DenseOut::kBf16) return invalid_argument("dense_decode_gemm_fp8: fp8 weights take bf16 output only");
  return decode_gemm(x, nullptr, w, y, out, s, stream, rows_per_block);
}

Status fp8_groups_to_bf16(Fp8WeightView w, int64_t rows, int k, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows < 1 || k < 128 || k % 128 != 0 || w.codes == nullptr || w.exps == nullptr || out == nullptr ||
      !aligned(w.codes, 8) || !aligned(out, 16))
    return invalid_argument("fp8_groups_to_bf16: rows {} k {} (a multiple of 128), codes 8-byte and out 16-byte "
                            "aligned, none null",
                            rows, k);
  const int64_t n8 = rows * (k / 8);
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const int blocks = int(std::min<int64_t>((n8 + 255) / 256, int64_t(dev->n_sms) * 8));
  // A plain launch: it runs at load or before a prefill GEMM, not inside a decode chain.
  fp8_to_bf16_kernel<<<blocks, 256, 0, stream>>>(w, n8, out);
  return cuda_status(cudaGetLastError(), "fp8_to_bf16_kernel");
}

}  // namespace dsv4::cuda
