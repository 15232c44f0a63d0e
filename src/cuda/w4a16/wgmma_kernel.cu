// wgmma_kernel.cu: the SM90 prefill path of the W4A16 GEMM (dense, and the MoE gate/up and down
// GEMMs on 128-row router tiles), built for sm_90a only (the warpgroup MMA instructions exist
// nowhere else; src/cuda/CMakeLists.txt compiles this file on its own). The portable m64/m128
// kernels (gemm_kernel.cuh) issue mma.sync, which on Hopper reaches about 0.37x of cuBLAS BF16 at
// M = 4096; these reach 0.65-0.81x (bench/results/NOTES.md, "Prefill on wgmma ..."). Chosen through
// wgmma_supported() (common/arch.h) by choose_wgmma_config() (dense) and moe_forward().
//
// One block: 2 consumer warpgroups x TPW packed 64-column tiles each x 128 rows of x (wg128: TPW
// 1, wg256: TPW 2), and a producer warpgroup. The weights are wgmma's A operand (64 x k16, from
// registers): a lane's 16-byte word of a packed k16 slice holds, in word w, the mma.sync B
// fragments of columns 16 w .. 16 w + 15, which are exactly the A fragment of warp w of the
// warpgroup (rows g and g + 8, k 2t.. and 2t + 8..), so the decode kernels' repacked layout
// serves both. The rows of x are the B operand (k16 x 128, K-major) in shared memory with the
// 128-byte swizzle, one 64-k half per region. Scales stay exact in fp32: an accumulator is kept
// in units of the current group's scale (at a group change acc *= s_prev / s_new, at the end
// acc *= s_last), as in the m128 kernel; that rescale needs the group's wgmmas finished. wg128
// alternates two accumulator sets by group parity, so the rescale never waits for the tensor
// cores to drain; wg256 has registers for one set only.
// Warp specialization: the producer warpgroup streams whole 128-k groups (x rows, weights, scales)
// into a ring of kStages slots and publishes each through an mbarrier (full); the consumer warps
// release a slot through another (empty) once their wgmmas read it. The two consumer warpgroups
// never wait for each other (the first version shared one __syncthreads per group and so drained
// the tensor cores together, at 0.53-0.63x cuBLAS): while one rescales and dequantizes, the
// other's wgmmas run. The dense GEMM's producer is one thread driving the TMA unit (x by a tensor
// map, weights and scales by bulk copies); the MoE GEMMs' 128 producer threads use cp.async (see
// `bulk` below). No split-K, so the planner leaves grids of fewer than an eighth of the SMs to
// the portable kernels.
#include <cuda.h>  // CUtensorMap and its enums (the encoder comes through the runtime: no libcuda link)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/tensor_map.h"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/moe_epilogue.cuh"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda::w4a16_detail {
namespace {

constexpr int kRows = 128;                 // rows of x per block: the wgmma N
constexpr int kThreads = 256;              // the consumers: 2 warpgroups
constexpr int kConsumerWarps = kThreads / 32;
constexpr int kProducerThreads = 128;        // the producer warpgroup
constexpr int kBlockThreads = kThreads + kProducerThreads;
// Registers per thread after setmaxnreg: an SM sub-partition holds one warp of each warpgroup
// (16K registers: 40 + 2 x 232 per lane). A plain 384-thread block gets 168 each, too few for
// the consumers' accumulators with the wgmmas pipelined (ptxas serializes them).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
// setmaxnreg.inc waits until the registers exist: the split must fit exactly what the launch
// bounds give every thread at entry (65536 / 384 = 168), or the consumers spin forever.
static_assert(kProducerThreads * kProducerRegs + kThreads * kConsumerRegs <= kBlockThreads * (65536 / kBlockThreads / 8 * 8),
              "register split exceeds the block's registers");
constexpr int kHalfBytes = kRows * 128;    // one 64-k half of the x tile: [128 rows][128 B], swizzled
constexpr int kActBytes = 2 * kHalfBytes;  // 32 KB
constexpr int kTileWBytes = 8 * 512;       // one 64-column tile's k16 slices x 32 lanes x 16 B
// Per configuration (TPW 64-column tiles per warpgroup).
template <int TPW>
struct WgTraits {
  // Accumulator sets per tile, alternating by group parity when registers allow (TPW 1): a group's
  // rescale then touches the set the previous group's wgmmas do not write, and the tensor cores
  // never drain at a group boundary. TPW 2 has one set and drains there.
  static constexpr int kSets = TPW == 1 ? 2 : 1;
  static constexpr int kStages = TPW == 1 ? 5 : 4;
  static constexpr int kTiles = 2 * TPW;
  static constexpr int kCols = 64 * kTiles;
  static constexpr int kWBytes = kTiles * kTileWBytes;
  static constexpr int kSBytes = kTiles * 128;  // 64 fp16 scales per tile
  static constexpr int kStageBytes = (kActBytes + kWBytes + kSBytes + 1023) / 1024 * 1024;  // x stays 1024-aligned
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align the dynamic smem base
  static constexpr int kOutStride = kCols + 8;  // bf16 per staged output row: few bank conflicts
  static_assert(kRows * kOutStride * 2 <= kStages * kStageBytes, "the output tile reuses the ring");
};

// Shared-memory matrix descriptor of a K-major operand with the 128-byte swizzle: 8-row groups of
// 128-byte rows lie 1024 bytes apart (stride byte offset); the leading byte offset is unused for
// this layout. Advancing the start address by 32 bytes steps one k16 slice within the 64-k row.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Keeps the compiler from moving reads of wgmma results above the wait (the asm that wrote them
// is the last thing it sees them depend on).
__device__ __forceinline__ void fence_operands(float (&r)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Generic-proxy writes (cp.async, st.shared) become visible to wgmma's async-proxy reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d[64 x 128 fp32 fragment] (+)= a[64 x 16 bf16, registers] * B[16 x 128 bf16, smem descriptor].
// Accumulator of warp w, lane (g, t): d[4 j + e] at (row 16 w + g, col 8 j + 2 t + e), d[4 j + 2 + e]
// at row 16 w + g + 8. accumulate == 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc,
                                                 int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, "
      "%40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %69, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc));
}

// Position of column c (0..63) of a packed 64-column tile's scales: column 8 s + 2 q + e is
// stored at q * 16 + 2 s + e (ptx.cuh, load_scales).
__device__ __forceinline__ int scale_pos(int c) { return ((c & 7) >> 1) * 16 + (c >> 3) * 2 + (c & 1); }

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The kernel's parameter: the family's argument block, and for a dense GEMM the tensor map of x
// that lets the producer fetch a group's 128 x 128 slab of x as two TMA boxes, swizzled as the
// wgmma descriptors expect, rows past M zero-filled.
struct WgParams {
  GemmKernelArgs g;
  CUtensorMap x_map;  // dense: bf16 [m, k], row stride lda, box 64 k x 128 rows, 128-byte swizzle
};

template <int TPW>
__global__ void __launch_bounds__(kBlockThreads, 1) w4a16_wgmma_kernel(const __grid_constant__ WgParams wp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using T = WgTraits<TPW>;
  const GemmKernelArgs& p = wp.g;  // stays in parameter space (the tensor map must)
  // How the producer fills a slot. Dense: producer thread 0 alone, with the TMA unit (x by the
  // tensor map, weights and scales as contiguous bulk copies): a few instructions per group, where
  // 128 threads of cp.async could not keep wg128's tensor cores fed (0.48x cuBLAS on wkv against
  // 0.73x). MoE: x rows are gathered (gate/up) or offset (down), so all 128 producer threads copy
  // x and weights with cp.async; bulk weight copies measured slower there (weights of many
  // experts come from DRAM, 4096-token MoE layer 1.3x slower).
  const bool bulk = p.mode == GemmMode::kDense;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t pad = (1024u - (raw & 1023u)) & 1023u;  // the swizzle works on absolute address bits
  unsigned char* smem = smem_raw + pad;
  const uint32_t sbase = raw + pad;

  __shared__ int s_row[kRows];  // source row of x for each tile row; the MoE combine's tokens after
  // full[s]: stage s holds its group. Bulk: producer thread 0 arrives once with the bytes its
  // copies will bring; cp.async: each of the 128 producer threads' copies arrive once landed.
  // empty[s]: every consumer warp is done with it (lane 0 of each of the 8 arrives).
  __shared__ __align__(8) uint64_t s_full[T::kStages], s_empty[T::kStages];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool producer = warp >= kConsumerWarps;
  const int ptid = tid - kThreads;  // producer thread 0..127
  const int wg = warp >> 2, wi = warp & 3, g8 = lane >> 2;
  const int n_tiles64 = p.n >> 6, kg = p.k >> 7;
  const int tile0 = blockIdx.x * T::kTiles;  // first 64-column tile of the block
  // This warpgroup's tiles tile0 + wg TPW + i; the valid ones are a prefix (warpgroup-uniform).
  const int my_tiles = max(0, min(TPW, n_tiles64 - tile0 - wg * TPW));

  // PDL: a dense GEMM's weights do not depend on the previous kernel, so the producer requests
  // its first groups before waiting; the MoE GEMMs wait first (the experts come from the router).
  if (p.mode != GemmMode::kDense || !producer) pdl_wait();
  // Which rows this block owns (as in gemm_kernel.cuh): dense row blocks; MoE: the shared
  // expert's static tiles first, then the router's tiles of 128 sorted rows at most.
  int expert = 0, row_begin = 0, rows = 0;
  if (p.mode == GemmMode::kDense) {
    row_begin = blockIdx.z * kRows;
    rows = min(kRows, p.m - row_begin);
  } else if (int(blockIdx.z) < p.n_shared_tiles) {
    expert = p.shared_expert;
    row_begin = p.shared_row0 + blockIdx.z * kRows;
    rows = min(kRows, p.m - int(blockIdx.z) * kRows);
  } else {
    const int tz = blockIdx.z - p.n_shared_tiles;
    if (tz >= __ldcg(p.n_tiles)) return;  // fixed grid for a batch size; fewer tiles this step
    const int4 t = __ldcg(p.tiles + tz);
    expert = t.x;
    row_begin = t.y;
    rows = t.z;
  }
  const uint4* wbase = p.w;
  const __half* sbase_s = p.s;
  if (p.mode != GemmMode::kDense) {
    wbase = expert == p.shared_expert ? p.w_shared : p.w + expert * p.w_expert_stride;
    sbase_s = expert == p.shared_expert ? p.s_shared : p.s + expert * p.s_expert_stride;
  }
  auto full_bar = [&](int slot) { return smem_u32(&s_full[slot]); };
  auto empty_bar = [&](int slot) { return smem_u32(&s_empty[slot]); };

  // Producer thread 0 initializes the barriers: it is the one that may start bulk copies onto
  // them before the block barrier below (the dense prefetch), so the init is fenced for the
  // async proxy.
  if (ptid == 0) {
#pragma unroll
    for (int st = 0; st < T::kStages; ++st) {
      mbar_init(full_bar(st), bulk ? 1 : kProducerThreads);
      mbar_init(empty_bar(st), kConsumerWarps);
    }
    fence_mbarrier_init();
  }

  // Bulk: a group of a tile is one contiguous 4 KB run of weights (8 k16 slices x 32 lanes x
  // 16 B) and 128 B of scales; x is two boxes (64-k halves) of 128 rows from row_begin. Tiles past
  // N are not fetched: their slots hold stale bytes that only feed outputs never stored.
  const int valid_tiles = max(0, min(T::kTiles, n_tiles64 - tile0));
  const uint32_t w_bytes = uint32_t(valid_tiles) * (kTileWBytes + 128);
  auto bulk_w = [&](int g) {
    const uint32_t base = sbase + (g % T::kStages) * T::kStageBytes + kActBytes, bar = full_bar(g % T::kStages);
    for (int j = 0; j < valid_tiles; ++j) {
      bulk_g2s(base + j * kTileWBytes, wbase + (int64_t(tile0 + j) * kg + g) * 256, kTileWBytes, bar);
      bulk_g2s(base + T::kWBytes + j * 128, sbase_s + (int64_t(tile0 + j) * kg + g) * 64, 128, bar);
    }
  };
  auto bulk_x = [&](int g) {
    const uint32_t base = sbase + (g % T::kStages) * T::kStageBytes, bar = full_bar(g % T::kStages);
    tma_load_2d(base, &wp.x_map, g * 128, row_begin, bar, false, 0);
    tma_load_2d(base + kHalfBytes, &wp.x_map, g * 128 + 64, row_begin, bar, false, 0);
  };
  // cp.async: producer thread ptid copies weight entries ptid and ptid + 128 of each tile, the
  // scales' 16-byte chunk ptid (kTiles x 8), and x rows (ptid >> 4) + 8 i, chunk ptid & 15 (16
  // threads read one row's 256 contiguous bytes).
  auto load_w = [&](int g) {
    const uint32_t base = sbase + (g % T::kStages) * T::kStageBytes + kActBytes + ptid * 16;
#pragma unroll
    for (int j = 0; j < T::kTiles; ++j) {
      const bool ok = tile0 + j < n_tiles64;
      const uint4* src = wbase + (ok ? (int64_t(tile0 + j) * kg + g) * 256 + ptid : 0);
#pragma unroll
      for (int i = 0; i < 2; ++i) cp_async16(base + j * kTileWBytes + i * 2048, src + 128 * i, ok);
    }
    if (ptid < T::kTiles * 8) {
      const bool ok = tile0 + (ptid >> 3) < n_tiles64;
      cp_async16(sbase + (g % T::kStages) * T::kStageBytes + kActBytes + T::kWBytes + ptid * 16,
                 sbase_s + (ok ? (int64_t(tile0 + (ptid >> 3)) * kg + g) * 64 + (ptid & 7) * 8 : 0), ok);
    }
  };
  const int c16 = ptid & 15, xr0 = ptid >> 4;
  const uint32_t x_col = (c16 >> 3) * kHalfBytes;
  auto load_x = [&](int g) {
    const uint32_t base = sbase + (g % T::kStages) * T::kStageBytes + x_col;
    const __nv_bfloat16* src = p.a + c16 * 8 + g * 128;
#pragma unroll 4
    for (int r = xr0; r < rows; r += 8)
      cp_async16(base + r * 128 + (((c16 & 7) ^ (r & 7)) << 4), src + int64_t(s_row[r]) * p.lda, true);
  };
  // Dense: the first kStages groups' weights (every slot is free) before the dependency on the
  // previous kernel; their bytes are expected on the slots' barriers without an arrival (the
  // group's arrival below adds x's).
  if (producer && p.mode == GemmMode::kDense) {
    if (ptid == 0)
      for (int g = 0; g < T::kStages && g < kg; ++g) {
        mbar_expect_tx(full_bar(g), w_bytes);
        bulk_w(g);
      }
    pdl_wait();
  }

  if (!producer && !bulk) {
    if (tid < rows)
      s_row[tid] = p.mode == GemmMode::kMoeUp ? __ldcg(p.sorted_token + row_begin + tid) : row_begin + tid;
    // Rows past the block's valid rows are zeroed once in every slot and never copied: thread
    // tid zeroes chunk tid % 16 of rows tid / 16 + 16 j. wgmma reads them through the async
    // proxy, hence the proxy fence before the barrier.
    const int zc = tid & 15, zr = tid >> 4;
    const uint32_t z_off = (zc >> 3) * kHalfBytes + zr * 128 + (((zc & 7) ^ (zr & 7)) << 4);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (zr + 16 * j >= rows)
#pragma unroll
        for (int st = 0; st < T::kStages; ++st)
          *reinterpret_cast<uint4*>(smem + st * T::kStageBytes + z_off + j * 2048) = make_uint4(0, 0, 0, 0);
    fence_proxy_async();
  }
  __syncthreads();  // barriers initialized, s_row written, padding rows zeroed

  if (producer) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // The ring: group g goes to slot g % kStages once the consumers released the group before it
    // in that slot. Each thread's copies arrive on the slot's full barrier by themselves when they
    // land (cp.async.mbarrier.arrive.noinc: the thread never waits for them), so a group is
    // published the moment it is complete. (The first version waited for each group with
    // cp.async.wait_group before arriving, which tied a group's publication to the issue of the
    // groups after it, and wg128 lost 25% to that.)
    // Bulk: a group is four to ten copies issued by thread 0; the other producer threads idle.
    if (ptid == 0 || !bulk)
      for (int g = 0; g < kg; ++g) {
        const int slot = g % T::kStages;
        if (g >= T::kStages) mbar_wait(empty_bar(slot), uint32_t((g / T::kStages - 1) & 1));
        if (bulk) {
          const bool prefetched = g < T::kStages;
          mbar_arrive_expect_tx(full_bar(slot), (prefetched ? 0u : w_bytes) + uint32_t(kActBytes));
          if (!prefetched) bulk_w(g);
          bulk_x(g);
        } else {
          load_w(g);
          load_x(g);
          cp_async_arrive_noinc(full_bar(slot));
        }
      }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    float acc[T::kSets][TPW][64];
    float s_cur[T::kSets][TPW][2];  // scales of rows g and g + 8 of each tile that acc is expressed in
#pragma unroll
    for (int u = 0; u < T::kSets; ++u)
#pragma unroll
      for (int t = 0; t < TPW; ++t) {
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[u][t][i] = 0.0f;
        s_cur[u][t][0] = s_cur[u][t][1] = 1.0f;
      }
    const int pos[2] = {scale_pos(16 * wi + g8), scale_pos(16 * wi + 8 + g8)};

    // One group into one accumulator set: move the set to the units of this group's scales (never
    // zero: the repack stores a zero scale as 1 with codes 8, repack.cu; tiles past N read zero
    // scales and turn NaN, but are never stored), then 8 k16 slices.
    auto run_group = [&](int g, float (&ac)[TPW][64], float (&sc_cur)[TPW][2]) {
      const unsigned char* stage = smem + (g % T::kStages) * T::kStageBytes;
      const uint32_t x_smem = sbase + (g % T::kStages) * T::kStageBytes;
#pragma unroll
      for (int t = 0; t < TPW; ++t) {
        fence_operands(ac[t]);
        const __half* sc = reinterpret_cast<const __half*>(stage + kActBytes + T::kWBytes + (wg * TPW + t) * 128);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s_new = __half2float(sc[pos[h]]);
          const float ratio = __fdiv_rn(sc_cur[t][h], s_new);
          sc_cur[t][h] = s_new;
#pragma unroll
          for (int i = 0; i < 64; ++i)
            if (((i >> 1) & 1) == h) ac[t][i] *= ratio;
        }
      }
      const uint32_t* w_smem = reinterpret_cast<const uint32_t*>(stage + kActBytes + wg * TPW * kTileWBytes);
      auto dequant_slice = [&](int j, uint32_t (&a)[TPW][4]) {
#pragma unroll
        for (int t = 0; t < TPW; ++t) {
          uint32_t o[4];
          dequant_word(w_smem[t * (kTileWBytes / 4) + (j * 32 + lane) * 4 + wi], o);
          a[t][0] = o[0];  // row g, k 2t..2t+1
          a[t][1] = o[2];  // row g + 8
          a[t][2] = o[1];  // row g, k 2t+8..
          a[t][3] = o[3];
        }
      };
      auto issue_slice = [&](int j, const uint32_t (&a)[TPW][4]) {
        const uint64_t desc = desc_sw128(x_smem + (j >> 2) * kHalfBytes + (j & 3) * 32);
#pragma unroll
        for (int t = 0; t < TPW; ++t) wgmma_m64n128k16(ac[t], a[t], desc, 1);
      };
      if constexpr (T::kSets == 1) {
        // One commit group per slice: the next slice's dequantization overlaps this one's wgmmas
        // and reuses the registers of the one before.
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          uint32_t a[TPW][4];
          dequant_slice(j, a);
          wgmma_fence();
          issue_slice(j, a);
          wgmma_commit();
          wgmma_wait<1>();
        }
      } else {
        // One commit group per group, its A fragments defined before the first wgmma (ptxas
        // serializes wgmmas whose inputs are defined inside an open group); the previous group's
        // wgmmas run meanwhile.
        uint32_t a[8][TPW][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) dequant_slice(j, a[j]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 8; ++j) issue_slice(j, a[j]);
        wgmma_commit();
      }
    };

    // One step per group: once the wgmmas of group g - kSets are done (kSets 1: every earlier one;
    // kSets 2: g - 1's may run on) release its slot, then wait until group g landed. The two
    // warpgroups never wait for each other, so one's rescale and dequantization overlap the
    // other's wgmmas. Every warpgroup issues its wgmmas even for tiles past N (zero-filled, never
    // stored): a branch around them makes ptxas serialize every wgmma of the kernel.
    auto step = [&](int g, float (&ac)[TPW][64], float (&sc_cur)[TPW][2]) {
      wgmma_wait<T::kSets - 1>();
      if (g >= T::kSets) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar((g - T::kSets) % T::kStages));
      }
      mbar_wait(full_bar(g % T::kStages), uint32_t((g / T::kStages) & 1));
      // The producer's cp.async writes (generic proxy), now visible to this thread, are ordered
      // before its wgmmas' shared-memory reads (async proxy).
      fence_proxy_async();
      __syncwarp();  // reconverged before the .aligned wgmma instructions
      run_group(g, ac, sc_cur);
    };
    if constexpr (T::kSets == 2) {
      // Straight-line runs of 4 (then 2, then 1) groups alternating the sets, each run ending with
      // the tensor cores drained: ptxas serializes every wgmma when one is still pending at a loop
      // back edge while an accumulator is read (C7514), so a drain every 4 groups is the price.
      int g = 0;
      for (; g + 3 < kg; g += 4) {
        step(g, acc[0], s_cur[0]);
        step(g + 1, acc[1], s_cur[1]);
        step(g + 2, acc[0], s_cur[0]);
        step(g + 3, acc[1], s_cur[1]);
        wgmma_wait<0>();
      }
      if (g + 1 < kg) {
        step(g, acc[0], s_cur[0]);
        step(g + 1, acc[1], s_cur[1]);
        wgmma_wait<0>();
        g += 2;
      }
      if (g < kg) step(g, acc[0], s_cur[0]);
    } else {
      for (int g = 0; g < kg; ++g) step(g, acc[0], s_cur[0]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int u = 0; u < T::kSets; ++u)
#pragma unroll
      for (int t = 0; t < TPW; ++t) fence_operands(acc[u][t]);
    // Every consumer is done reading the ring (and every copy landed: all groups were published)
    // before it turns into the output tile, staged as [row][column] for wide stores.
    mma::named_barrier(1, kThreads);  // the two consumer warpgroups; the producers do not take part
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(smem);
    const int t4 = lane & 3;
#pragma unroll
    for (int t = 0; t < TPW; ++t) {
      if (t >= my_tiles) continue;
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int h = (i >> 1) & 1;
        const int row = 8 * (i >> 2) + 2 * t4 + (i & 1);
        const int col = (wg * TPW + t) * 64 + 16 * wi + g8 + 8 * h;
        float v = 0.0f;
#pragma unroll
        for (int u = 0; u < T::kSets; ++u) v += acc[u][t][i] * s_cur[u][t][h];
        out[row * T::kOutStride + col] = __float2bfloat16_rn(v);
      }
    }
  }
  __syncthreads();  // the output tile is staged (the producers join here: the stores use all threads)

  const __nv_bfloat16* out = reinterpret_cast<const __nv_bfloat16*>(smem);
  const int col0 = blockIdx.x * T::kCols;
  if (p.mode == GemmMode::kMoeUp) {
    // act [pairs, N / 2]: packed 64-column tile nt holds [gate 0..15 | up 0..15 | gate 16..31 |
    // up 16..31] of intermediate columns 32 nt .. 32 nt + 31; chunks of 8 act columns.
    constexpr int kActChunks = T::kCols / 16;
    for (int idx = tid; idx < rows * kActChunks; idx += kBlockThreads) {
      const int r = idx / kActChunks, ch = idx % kActChunks;
      const int gcol = (ch >> 1) * 32 + (ch & 1) * 8;  // gate column in the tile; up is 16 further
      if (col0 + gcol >= p.n) continue;
      const float wr = __ldcg(p.sorted_weight + row_begin + r);
      const __nv_bfloat16* src = out + r * T::kOutStride;
      uint32_t packed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float a0 = swiglu_act(__bfloat162float(src[gcol + 2 * e]), __bfloat162float(src[gcol + 16 + 2 * e]),
                                    p.swiglu_limit, wr);
        const float a1 = swiglu_act(__bfloat162float(src[gcol + 2 * e + 1]),
                                    __bfloat162float(src[gcol + 16 + 2 * e + 1]), p.swiglu_limit, wr);
        packed[e] = pack_bf16x2(a0, a1);
      }
      uint32_t* dst = reinterpret_cast<uint32_t*>(p.c + int64_t(row_begin + r) * p.ldc + col0 / 2 + ch * 8);
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = packed[e];
    }
    return;
  }
  const bool wide = (p.ldc % 8 == 0) && (reinterpret_cast<uintptr_t>(p.c) & 15) == 0;
  constexpr int kChunks = T::kCols / 8;
  for (int idx = tid; idx < rows * kChunks; idx += kBlockThreads) {
    const int r = idx / kChunks, ch = idx % kChunks, col = col0 + ch * 8;
    if (col >= p.n) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(out + r * T::kOutStride + ch * 8);
    __nv_bfloat16* dst = p.c + int64_t(row_begin + r) * p.ldc + col;
    if (wide) {
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      uint32_t* d32 = reinterpret_cast<uint32_t*>(dst);
      d32[0] = v.x;
      d32[1] = v.y;
      d32[2] = v.z;
      d32[3] = v.w;
    }
  }
  if (p.mode == GemmMode::kMoeDown) moe_combine<T::kCols, kBlockThreads, false>(p, row_begin, rows, s_row);
#endif
}

template <int TPW>
Status query_wg(GemmConfigInfo* info, const char* name) {
  using T = WgTraits<TPW>;
  auto* kernel = &w4a16_wgmma_kernel<TPW>;
  DSV4_RETURN_IF_ERROR(
      cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes), name));
  int blocks = 0;
  DSV4_RETURN_IF_ERROR(
      cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockThreads, T::kSmemBytes), name));
  GemmConfigInfo ci;
  ci.block_m = kRows;
  ci.block_n = T::kCols;
  ci.threads = kBlockThreads;
  ci.smem_bytes = T::kSmemBytes;
  ci.blocks_per_sm = blocks;
  ci.split_k = false;
  *info = ci;
  return Status::ok();
}

// The tensor map of a dense GEMM's x: [m rows, k] bf16 with row stride lda, boxes of 64 k x 128
// rows in the 128-byte swizzle of the consumers' descriptors (desc_sw128).
Status encode_x_map(const GemmKernelArgs& a, CUtensorMap* map) {
  DSV4_ASSIGN_OR_RETURN(const PFN_cuTensorMapEncodeTiled_v12000 encode, tensor_map_encoder());
  const cuuint64_t dims[2] = {cuuint64_t(a.k), cuuint64_t(a.m)};
  const cuuint64_t strides[1] = {cuuint64_t(a.lda) * 2};
  const cuuint32_t box[2] = {64, kRows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(a.a), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("cuTensorMapEncodeTiled(x [{}, {}], stride {}) failed: CUresult {}", a.m, a.k, a.lda, int(r));
  return Status::ok();
}

template <int TPW>
Status launch_wg(const GemmKernelArgs& args, dim3 grid, cudaStream_t stream, bool pdl, const char* name) {
  if (args.splits != 1) return internal_error("{}: no split-K (splits {})", name, args.splits);
  WgParams wp{};  // MoE launches pass an all-zero tensor map they never use
  wp.g = args;
  // Dense x by TMA (the launcher guarantees a 16-byte aligned x with ldx % 8 == 0, which the
  // tensor map needs); the MoE GEMMs gather or offset their rows, so they copy x themselves.
  if (args.mode == GemmMode::kDense) DSV4_RETURN_IF_ERROR(encode_x_map(args, &wp.x_map));
  return launch_kernel(&w4a16_wgmma_kernel<TPW>, grid, dim3(kBlockThreads), size_t(WgTraits<TPW>::kSmemBytes), stream,
                       pdl, wp, name);
}

}  // namespace

Status query_gemm_wg128(GemmConfigInfo* info) { return query_wg<1>(info, "w4a16 wgmma kernel (wg128)"); }
Status launch_gemm_wg128(const GemmKernelArgs& args, dim3 grid, size_t, cudaStream_t stream, bool pdl) {
  return launch_wg<1>(args, grid, stream, pdl, "w4a16_wgmma_kernel(wg128)");
}
Status query_gemm_wg256(GemmConfigInfo* info) { return query_wg<2>(info, "w4a16 wgmma kernel (wg256)"); }
Status launch_gemm_wg256(const GemmKernelArgs& args, dim3 grid, size_t, cudaStream_t stream, bool pdl) {
  return launch_wg<2>(args, grid, stream, pdl, "w4a16_wgmma_kernel(wg256)");
}

}  // namespace dsv4::cuda::w4a16_detail
