// dense_tc.cu: the decode GEMM of dense.h for 1..8 rows of x on tensor cores (mma.sync), for
// fp8-form weights (Fp8WeightView: fp16 mmas) and bf16 weights (bf16 mmas); dense.cu's dispatch
// says where it runs (dense.h).
//
// Why: the weight-streaming kernel (dense_stream.cu) turns each weight into fp32 for CUDA-core
// fmas; on fp8 codes that is ~7 instructions a weight and bound by instruction issue, not memory
// (H200, grouped wo_a at M = 1: 23.1 us for 33.5 MB, ncu 33% of DRAM peak, slower than cuBLAS on
// the bf16 weight of twice the bytes). Here 16 x 16 weights cost one ldmatrix and one or two mmas:
//   - fp8: an e4m3 code's 7 magnitude bits placed at fp16 bits 7..13 (its sign at bit 15) read as
//     the code's value times 2^-8, subnormal codes included (as fp16 subnormals): four codes of a
//     32-bit word become two f16x2 registers in 5 integer instructions (codes 0|2 and 1|3).
//   - The mma operands are swapped (as in the W4A16 decode kernel): 16 weight rows are the A
//     operand, the x rows the 8 columns of B. ldmatrix.x4 gives each lane four words: rows g and
//     g + 8 of two 16-byte chunks. bf16: those are the A fragment as it is. fp8: their 0|2 halves
//     feed one mma and their 1|3 halves another, which permutes k inside every 32 codes; x is
//     staged with the same permutation, so each mma still pairs a weight with its x.
//   - fp8: x becomes fp16 per row under a power-of-two scale that puts the row's largest values in
//     fp16's top binade (w4a16 ptx.cuh row_scale_down; exact but for values 2^29 below the row's
//     largest), and the results are scaled back; each (row, 128-column group) sum is scaled by
//     its power of two 2^(exp + 8) (exact) and added to the row's total in group order.
// Products are exact in the fp32 accumulators, so the result is the exact products summed in
// fp32 in another order than the other kernels': close to them, not their bits. Deterministic:
// fixed mma and slot order, and the K warps of a row tile add their sums in warp order.
// Block: 8 warps = 2 row tiles of 16 weight rows x 4 K warps (32-row blocks), or 1 x 8 where
// 32-row blocks would leave more than half the SMs without one (tc_kwarps). K warp wk owns the
// slots wk, wk + kw, ... of 128 bytes a row (fp8: a 128-column group; bf16: 64 columns) and
// streams each (16 rows x 128 bytes) through its own ring of `stages` slots, its 16-byte pieces
// XOR-swizzled so that ldmatrix is conflict-free: on SM90 one TMA box per slot (a 2-D tensor map
// with the 128-byte swizzle, completing on the slot's mbarrier), elsewhere 4 cp.async per lane.
// H100, one binary (DenseTcDiagnostics::cp_async_slots): TMA ties cp.async on wo_a at M = 1 (19.7
// against 19.8 us) and wins on the projections (CSA 13.9 against 14.1, HCA 10.1 against 10.5).
// fp8: each slot's 16 rows bring their exponents along (4 bytes a row by cp.async, into the warp's
// exponent ring). The first slots are requested before the PDL wait; the ring's depth keeps the
// grid's requests near kInFlightSeconds of the device's bandwidth. A block's rows lie in one group of a grouped GEMM (n % 32
// == 0). Measured against the other kernels: bench/results/NOTES.md, "The tensor-core decode
// kernel" and "What the tensor-core kernel waits for".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/tensor_map.h"
#include "cuda/common/trace.cuh"
#include "cuda/dense/dense_internal.h"
#include "cuda/dense/fp8_f16.h"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda {
namespace {

using w4a16_detail::bf16x8_max_exponent;
using w4a16_detail::row_scale_down;
using w4a16_detail::row_scale_up;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxBlockRows = 32;  // 2 row tiles x 4 K warps, or 1 x 8 (TcParams::kwarps)
constexpr int kRowMultiple = 32;   // n must be a multiple of this (either block shape)
constexpr int kSlotBytes = 16 * 128;  // 16 weight rows x one 128-code group
constexpr int kExpSlotBytes = 16 * 4;  // fp8: 4 bytes of exponents for each of the slot's 16 rows
constexpr int kMaxStages = 8;
// How long the grid's requests should last at the device's peak DRAM bandwidth: the ring depth is
// the smallest that keeps that many bytes requested over the grid (up to what shared memory allows
// at two blocks an SM). More only queues: every block's first slots are requested at once, and
// whatever else the GPU loads then (the predecessor's tail, this grid's x rows) waits behind them.
// H100 (3.35 TB/s peak: 15 MB), 20-layer B = 1 step with fp8 wo_a (256 blocks, 4 MB a slot):
// 4 slots a warp 3.208-3.217 ms, 6 (25 MB) 3.229-3.236; every launch capped at 2 or 3 slots
// 3.34-3.44, the CSA projection's 82 blocks then keeping too little requested (NOTES.md, "What the
// tensor-core kernel waits for"). An H200 (4.9 TB/s: 22 MB) keeps the 6 slots wo_a was measured
// with there; 4 is untested on it.
constexpr double kInFlightSeconds = 4.5e-6;
constexpr int64_t kInFlightFallbackBytes = int64_t(16) << 20;  // devices that report no bandwidth
constexpr int kMaxDevices = 64;

// Weight rows of a block with kw K warps per 16-row tile (8 warps in all).
__host__ __device__ constexpr int block_rows_of(int kw) { return 16 * (kWarps / kw); }

struct TcParams {
  CUtensorMap map;         // use_tma: W's bytes as u8 [groups * n, row bytes], boxes of 128 x 16, 128-byte swizzle
  const __nv_bfloat16* x;  // bf16 [m, ldx]; group g reads columns [g * xgs, + k)
  Fp8WeightView w8;        // kFp8: codes u8 [groups * n, k], exps i8 [groups * n, k / 128]
  const __nv_bfloat16* w;  // !kFp8: bf16 [groups * n, k]
  void* y;                 // bf16 (kBf16Out) or f32 [m, ldy]; group g writes columns [g * ygs, + n)
  int m, n, k;
  int64_t ldx, xgs, ldy, ygs;
  int stages;        // ring slots per warp, 2..kMaxStages
  int kwarps;        // K warps per 16-row tile: 4 (32-row blocks) or 8 (16-row blocks, for grids
                     // that 32-row blocks would leave short of one block per SM)
  bool evict_first;  // weights read with L2 evict-first priority (arch.h weights_evict_first)
  bool use_tma;      // SM90: the slots come by TMA (map), else by cp.async
  unsigned long long* trace;  // diagnostics (trace.cuh), null in production: entry, x staged, loop done, exit
};

// Bytes of one staged x row: k fp16 values and 16 bytes of padding (lds.128 of 8 rows spread
// over the banks).
__host__ __device__ constexpr int x_row_bytes(int k) { return 2 * k + 16; }

__device__ __forceinline__ int lds_s8(uint32_t addr) {
  int v;
  asm volatile("ld.shared.s8 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: mma::cp_async_wait<0>(); break;
    case 1: mma::cp_async_wait<1>(); break;
    case 2: mma::cp_async_wait<2>(); break;
    case 3: mma::cp_async_wait<3>(); break;
    case 4: mma::cp_async_wait<4>(); break;
    case 5: mma::cp_async_wait<5>(); break;
    case 6: mma::cp_async_wait<6>(); break;
    case 7: mma::cp_async_wait<7>(); break;
    default: mma::cp_async_wait<8>(); break;
  }
}

// kFp8: W in the fp8 form (above); otherwise bf16 W: ldmatrix gives the mma's A operand as it is,
// x stays bf16 in its own order, and a slot is 16 rows x 64 values (the same 128 bytes a row).
template <bool kFp8, bool kBf16Out>
__global__ void __launch_bounds__(kThreads, 2) dense_tc_kernel(const __grid_constant__ TcParams p) {
  constexpr int kSlotK = kFp8 ? 128 : 64;  // k per slot row (128 bytes)
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  // From the first 1024-byte boundary (the TMA swizzle's period): rings, x [m][x_row_bytes], and
  // (kFp8) the exponent rings, kExpSlotBytes a slot.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ float s_red[4 * kMaxBlockRows * 8];           // the K warps' sums: [wk][block row][x row]
  __shared__ unsigned s_row_exp[kWarps];                   // kFp8: largest bf16 exponent field of x row r
  trace_stamp(p.trace, 0);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int kw = p.kwarps, block_rows = block_rows_of(kw);
  const int rt = warp / kw, wk = warp % kw;
  const int g = lane >> 2, q = lane & 3;
  const int kg = p.k / 128;  // kFp8: exponents per row
  const int ks = p.k / kSlotK;  // slots along k
  const int64_t row0 = int64_t(blockIdx.x) * block_rows;  // first weight row of the block
  const int grp = int(row0 / p.n);                         // the grouped GEMM's group
  const int stages = p.stages;
  unsigned char* smem = smem_raw + ((1024 - (mma::smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t ring = mma::smem_u32(smem) + uint32_t(warp * stages * kSlotBytes);
  unsigned char* xs = smem + kWarps * stages * kSlotBytes;
  const int xrb = x_row_bytes(p.k);
  // kFp8: this warp's exponent ring; slot s holds, for each of its 16 rows, the aligned 4 bytes
  // of the row's exponents that hold the slot's group.
  const uint32_t ering = mma::smem_u32(xs + p.m * xrb) + uint32_t(warp * stages * kExpSlotBytes);
  const int n_items = wk < ks ? (ks - wk + kw - 1) / kw : 0;

  // Item i of this warp: slot column wk + kw i (fp8: that 128-column group) of rows row0 + 16 rt ..
  // + 15, 8 pieces of 16 bytes a row, piece c of row r at slot + r * 128 + ((c ^ (r & 7)) << 4).
  const int64_t row_bytes = int64_t(p.k) * kElemBytes;
  const uint8_t* wrows = (kFp8 ? p.w8.codes : reinterpret_cast<const uint8_t*>(p.w)) + (row0 + 16 * rt) * row_bytes;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(8) uint64_t s_bar[kWarps * kMaxStages];  // the warps' slot mbarriers (TMA)
  const uint32_t bar0 = mma::smem_u32(s_bar) + uint32_t(warp * kMaxStages * 8);
  uint32_t phases = 0;  // bit s: parity of slot s's next phase
  if (p.use_tma) {
    if (lane == 0) {
      for (int i = 0; i < stages; ++i) w4a16_detail::mbar_init(bar0 + i * 8, 1);
      w4a16_detail::fence_mbarrier_init();
    }
    __syncwarp();
  }
#endif
  // A slot's exponents come with it (same cp.async group; on SM90 waited for beside the slot's
  // mbarrier), so a warp's first mma waits for its own first slot only, not for the block's
  // exponents of every group (the block-wide load this replaced; same step time on an H100).
  auto issue = [&](int i, int slot) {
    const int gi = wk + i * kw;
    const uint32_t dst = ring + uint32_t(slot * kSlotBytes);
    const uint64_t pol = p.evict_first ? mma::l2_evict_first_policy() : 0;
    if constexpr (kFp8) {
      if (lane < 16) {  // rows * kg is a multiple of 4 and exps 16-byte aligned: in bounds
        const int64_t e = (row0 + 16 * rt + lane) * kg + gi;
        mma::cp_async4(ering + uint32_t(slot * kExpSlotBytes + lane * 4), p.w8.exps + (e & ~int64_t(3)), true);
      }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.use_tma) {
      if (lane == 0) {
        w4a16_detail::mbar_arrive_expect_tx(bar0 + slot * 8, kSlotBytes);
        tma_load_2d(dst, &p.map, gi * 128, int(row0) + 16 * rt, bar0 + slot * 8, p.evict_first, pol);
      }
      return;
    }
#endif
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = lane + 32 * j, r = c >> 3, pc = c & 7;
      const uint32_t d = dst + uint32_t(r * 128 + ((pc ^ (r & 7)) << 4));
      const uint8_t* src = wrows + int64_t(r) * row_bytes + gi * 128 + pc * 16;
      if (p.evict_first) mma::cp_async16_hint(d, src, pol);
      else mma::cp_async16(d, src, true);
    }
  };
  for (int i = 0; i < stages; ++i) {
    if (i < n_items) issue(i, i);
    mma::cp_async_commit();
  }

  // x may be the previous kernel's output: after the wait, through L2. Raw bf16 first (every
  // load in flight at once), then (kFp8) warp r finds row r's largest exponent (m <= kWarps; a
  // shared atomic per chunk serialized 512 of them on one address at k = 4096), then in place to
  // scaled fp16 in the mma's k order.
  pdl_wait();
  const int chunks = p.k / 8;  // 16-byte chunks of an x row
  for (int idx = tid; idx < p.m * chunks; idx += kThreads) {
    const int r = idx / chunks, c = idx - r * chunks;
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p.x + int64_t(r) * p.ldx + int64_t(grp) * p.xgs) + c);
    *reinterpret_cast<uint4*>(xs + r * xrb + c * 16) = v;
  }
  __syncthreads();
  if constexpr (kFp8) {
    if (warp < p.m) {
      unsigned e = 0;
      for (int c = lane; c < chunks; c += 32)
        e = max(e, bf16x8_max_exponent(*reinterpret_cast<const uint4*>(xs + warp * xrb + c * 16)));
      e = __reduce_max_sync(0xffffffffu, e);
      if (lane == 0) s_row_exp[warp] = e;
    }
    __syncthreads();
  }
  // Each 32-value block: unit u (16 bytes) holds values 4u, 4u + 2, 4u + 1, 4u + 3, then the same
  // four 16 further, so a lane's one lds.128 gives both mmas' B registers.
  for (int idx = tid; kFp8 && idx < p.m * (p.k / 32); idx += kThreads) {
    const int r = idx / (p.k / 32), b = idx - r * (p.k / 32);
    uint4* blk = reinterpret_cast<uint4*>(xs + r * xrb + b * 64);
    const uint4 in[4] = {blk[0], blk[1], blk[2], blk[3]};
    const float f = row_scale_down(s_row_exp[r]);
    auto val = [&](int e) {  // value e of the block, as fp32 times f (exact)
      const uint32_t w = (&in[e >> 3].x)[(e & 7) >> 1];
      return __uint_as_float((e & 1) != 0 ? (w & 0xffff0000u) : (w << 16)) * f;
    };
    auto pack = [&](int e0, int e1) {
      const __half2 h = __floats2half2_rn(val(e0), val(e1));
      return *reinterpret_cast<const uint32_t*>(&h);
    };
#pragma unroll
    for (int u = 0; u < 4; ++u)
      blk[u] = make_uint4(pack(4 * u, 4 * u + 2), pack(4 * u + 1, 4 * u + 3), pack(16 + 4 * u, 16 + 4 * u + 2),
                          pack(16 + 4 * u + 1, 16 + 4 * u + 3));
  }
  __syncthreads();
  trace_stamp(p.trace, 1);

  // ldmatrix: lane l addresses row (l & 7) + 8 ((l >> 3) & 1) of the slot, chunk 2 s + (l >> 4).
  const int lrow = (lane & 7) + 8 * ((lane >> 3) & 1), lhalf = lane >> 4;
  // B: x row g (clamped); kFp8: its unit q of each 32-value block, else its values 2q, 2q + 1.
  const unsigned char* xrow = xs + min(g, p.m - 1) * xrb + (kFp8 ? q * 16 : q * 4);
  // kFp8: exponents of rows g and g + 8 of item i: byte ((row0 + 16 rt + row) kg + gi) & 3 of the
  // row's 4 bytes in the slot.
  const int64_t erow0 = (row0 + 16 * rt + g) * kg, erow1 = erow0 + 8 * kg;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0;
  for (int i = 0; i < n_items; ++i) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.use_tma) {
      w4a16_detail::mbar_wait(bar0 + slot * 8, (phases >> slot) & 1u);
      phases ^= 1u << slot;
      if constexpr (kFp8) cp_async_wait_pending(stages - 1);  // the slot's exponents
    } else {
      cp_async_wait_pending(stages - 1);
    }
#else
    cp_async_wait_pending(stages - 1);
#endif
    __syncwarp();
    const int gi = wk + i * kw;
    const uint32_t sl = ring + uint32_t(slot * kSlotBytes);
    // bf16: two accumulator sets (even and odd k16 steps; e unused for fp8). fp8: one (a second one
    // measured slower on an H100: wo_a M = 1 21.2 against 20.8 us).
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t w[4];
      const int chunk = 2 * s + lhalf;
      // w[0]: row g chunk 2s, w[1]: row g + 8 chunk 2s, w[2]: row g chunk 2s + 1, w[3]: row g + 8.
      mma::ldmatrix_x4(w, sl + uint32_t(lrow * 128 + ((chunk ^ (lrow & 7)) << 4)));
      if constexpr (kFp8) {
        const uint4 xb = *reinterpret_cast<const uint4*>(xrow + (gi * 4 + s) * 64);
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) dense_detail::fp8x4_to_f16x2(w[j], lo[j], hi[j]);
        mma::mma_f16(d, lo, xb.x, xb.z);
        mma::mma_f16(d, hi, xb.y, xb.w);
      } else {
        // k16 step s of the slot: x values 64 gi + 16 s + 2q (+1) and 8 further.
        const unsigned char* xv = xrow + (gi * 64 + 16 * s) * 2;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xv), b1 = *reinterpret_cast<const uint32_t*>(xv + 16);
        mma::mma_bf16((s & 1) != 0 ? e : d, w, b0, b1);
      }
    }
    if constexpr (kFp8) {
      // 2^(exp + 8): the group's power of two and the codes' 2^-8.
      const uint32_t es = ering + uint32_t(slot * kExpSlotBytes);
      const int e0 = lds_s8(es + uint32_t(g * 4 + int((erow0 + gi) & 3)));
      const int e1 = lds_s8(es + uint32_t((g + 8) * 4 + int((erow1 + gi) & 3)));
      const float f0 = __uint_as_float(uint32_t(e0 + 135) << 23);
      const float f1 = __uint_as_float(uint32_t(e1 + 135) << 23);
      acc[0] = fmaf(d[0], f0, acc[0]);
      acc[1] = fmaf(d[1], f0, acc[1]);
      acc[2] = fmaf(d[2], f1, acc[2]);
      acc[3] = fmaf(d[3], f1, acc[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] += d[j] + e[j];
    }
    __syncwarp();  // every lane is done with the slot before it is refilled
    if (i + stages < n_items) issue(i + stages, slot);
    mma::cp_async_commit();
    slot = slot + 1 == stages ? 0 : slot + 1;
  }
  mma::cp_async_wait<0>();
  trace_stamp(p.trace, 2);
  // D rows g, g + 8 (weight rows), columns 2q, 2q + 1 (x rows).
  float* red = s_red + (wk * block_rows + 16 * rt + g) * 8 + 2 * q;  // kw x block_rows = 128 either way
  red[0] = acc[0];
  red[1] = acc[1];
  red[64] = acc[2];  // row g + 8
  red[65] = acc[3];
  __syncthreads();
  {
    const int r = tid >> 3, xr = tid & 7;  // 256 threads: up to 32 rows x 8 x rows
    if (xr < p.m && r < block_rows) {
      float sum = s_red[r * 8 + xr];
      for (int j = 1; j < kw; ++j) sum += s_red[(j * block_rows + r) * 8 + xr];
      if constexpr (kFp8) sum *= row_scale_up(s_row_exp[xr]);
      const int64_t off = int64_t(xr) * p.ldy + int64_t(grp) * p.ygs + (row0 + r) % p.n;
      if constexpr (kBf16Out) static_cast<__nv_bfloat16*>(p.y)[off] = __float2bfloat16_rn(sum);
      else static_cast<float*>(p.y)[off] = sum;
    }
  }
  trace_stamp(p.trace, 3);
}

// K warps per row tile: 4 (blocks of 32 rows), or 8 (16 rows) where 32-row blocks would not give
// half the SMs one. H100, M = 1: the 1024-row HCA projection (32 blocks of 32 rows) 11.2 us, 10.1
// in 64 blocks of 16 rows; the 2624-row CSA projection (82 blocks) 13.3 us, 14.7 in 164.
int tc_kwarps(const DenseDecodeShape& s, const DeviceInfo& dev) {
  return 2 * (int64_t(s.groups) * s.n / 32) < dev.n_sms ? 8 : 4;
}

// Dynamic shared memory: the rings, x, (fp8) the exponent rings and up to 1 KB to the first
// 1024-byte boundary.
size_t tc_smem(int m, int k, int stages, bool fp8) {
  return size_t(kWarps) * stages * (kSlotBytes + (fp8 ? kExpSlotBytes : 0)) + size_t(m) * x_row_bytes(k) + 1024;
}

// The ring depth: enough for kInFlightSeconds of requests over the grid, at most a warp's items, and the deepest
// at which two blocks fit on an SM below that (else one block's).
int tc_stages(const DenseDecodeShape& s, bool fp8, int kwarps, const DeviceInfo& dev) {
  const int items = (s.k / (fp8 ? 128 : 64) + kwarps - 1) / kwarps;
  const int64_t grid_slot_bytes = int64_t(s.groups) * s.n / block_rows_of(kwarps) * kWarps * kSlotBytes;
  const int64_t in_flight = dev.mem_peak_bytes_per_s > 0 ? int64_t(dev.mem_peak_bytes_per_s * kInFlightSeconds)
                                                          : kInFlightFallbackBytes;
  const int64_t wanted = std::max<int64_t>(2, (in_flight + grid_slot_bytes - 1) / grid_slot_bytes);
  const int top = int(std::min<int64_t>({kMaxStages, std::max(2, items), wanted}));
  const size_t fixed = sizeof(float) * 4 * kMaxBlockRows * 8 + 64 + 8 * kWarps * kMaxStages + dev.smem_reserved_per_block;
  for (int st = top; st >= 2; --st)
    if (2 * (tc_smem(s.m, s.k, st, fp8) + fixed) <= dev.smem_per_sm_bytes) return st;
  for (int st = top; st >= 2; --st)
    if (tc_smem(s.m, s.k, st, fp8) + fixed <= dev.smem_optin_bytes) return st;
  return 0;
}

template <bool kFp8, bool kBf16Out>
Status launch_tc(const TcParams& p, const DenseDecodeShape& s, size_t smem, const DeviceInfo& dev, cudaStream_t stream) {
  auto* kernel = &dense_tc_kernel<kFp8, kBf16Out>;
  static std::once_flag once[kMaxDevices];
  static cudaError_t attr_err[kMaxDevices] = {};
  if (dev.device < 0 || dev.device >= kMaxDevices)
    return invalid_argument("dense_tc_gemm: device {} beyond the {} it tracks", dev.device, kMaxDevices);
  std::call_once(once[dev.device], [&] {
    // All of the block's opt-in shared memory past the static part (tc_stages keeps the dynamic part
    // below optin - its `fixed` bound, which covers the static part).
    cudaFuncAttributes fa{};
    attr_err[dev.device] = cudaFuncGetAttributes(&fa, kernel);
    if (attr_err[dev.device] == cudaSuccess)
      attr_err[dev.device] = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  int(dev.smem_optin_bytes - fa.sharedSizeBytes));
  });
  DSV4_RETURN_IF_ERROR(cuda_status(attr_err[dev.device], "cudaFuncSetAttribute(dense_tc_kernel)"));
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const unsigned grid = unsigned(int64_t(s.groups) * s.n / block_rows_of(p.kwarps));
  return launch_kernel(kernel, dim3(grid), dim3(kThreads), smem, stream, pdl, p, "dense_tc_kernel");
}

}  // namespace

bool dense_tc_fills_gpu(const DenseDecodeShape& s, const DeviceInfo& dev) { return tc_kwarps(s, dev) == 4; }

int dense_tc_ring_slots(const DenseDecodeShape& s, bool fp8, const DeviceInfo& dev) {
  return tc_stages(s, fp8, tc_kwarps(s, dev), dev);
}

bool dense_tc_supported(const DenseDecodeShape& s, const void* w, Fp8WeightView w8, const DeviceInfo& dev) {
  const bool fp8 = w == nullptr;
  // 16-byte aligned weights (cp.async, TMA) and exponents (cp.async).
  const void* wp = fp8 ? static_cast<const void*>(w8.codes) : w;
  const bool ok_ptrs = (reinterpret_cast<uintptr_t>(wp) & 15) == 0 &&
                       (!fp8 || (w8.exps != nullptr && (reinterpret_cast<uintptr_t>(w8.exps) & 15) == 0));
  return ok_ptrs && s.m >= 1 && s.m <= kDenseTcMaxRows && s.n >= kRowMultiple && s.n % kRowMultiple == 0 &&
         s.k >= (fp8 ? 128 : 64) && s.k % (fp8 ? 128 : 64) == 0 && s.groups >= 1 &&
         int64_t(s.groups) * s.n / 16 <= INT32_MAX && tc_stages(s, fp8, tc_kwarps(s, dev), dev) != 0;
}

Status dense_tc_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, Fp8WeightView w8, void* y, DenseOut out,
                     const DenseDecodeShape& s, cudaStream_t stream, const DenseTcDiagnostics& diag) {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const bool fp8 = w == nullptr;
  if (!dense_tc_supported(s, w, w8, *dev) || (fp8 && out != DenseOut::kBf16))
    return invalid_argument(
        "dense_tc_gemm: unsupported m {} n {} (a multiple of {}) k {} (a multiple of {}), weights or exponents not "
        "16-byte aligned, "
        "or fp8 weights with f32 out",
        s.m, s.n, kRowMultiple, s.k, fp8 ? 128 : 64);
  TcParams p{};
  p.x = x;
  p.w8 = w8;
  p.w = w;
  p.y = y;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.ldx = s.ldx;
  p.xgs = s.x_group_stride;
  p.ldy = s.ldy;
  p.ygs = s.y_group_stride;
  p.kwarps = tc_kwarps(s, *dev);
  p.stages = tc_stages(s, fp8, p.kwarps, *dev);
  p.evict_first = weights_evict_first();
  p.use_tma = tma_supported(*dev) && !diag.cp_async_slots;
  p.trace = diag.trace;
  const int64_t row_bytes = int64_t(s.k) * (fp8 ? 1 : 2);
  if (p.use_tma)
    DSV4_RETURN_IF_ERROR(encode_u8_map_sw128(fp8 ? static_cast<const void*>(w8.codes) : w, int64_t(s.groups) * s.n,
                                             row_bytes, row_bytes, 128, 16, &p.map));
  const size_t smem = tc_smem(s.m, s.k, p.stages, fp8);
  if (fp8) return launch_tc<true, true>(p, s, smem, *dev, stream);
  if (out == DenseOut::kBf16) return launch_tc<false, true>(p, s, smem, *dev, stream);
  return launch_tc<false, false>(p, s, smem, *dev, stream);
}

}  // namespace dsv4::cuda
