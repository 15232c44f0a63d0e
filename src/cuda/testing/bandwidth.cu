// bandwidth.cu: streaming copy / read kernels for bandwidth.h.
#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/mma.cuh"
#include "cuda/testing/bandwidth.h"

namespace dsv4::cuda::testing {

namespace {
constexpr int kBlocks = 4096, kThreads = 256;

__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {  // four loads in flight per thread
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void read_kernel(const uint4* __restrict__ src, size_t n, float* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= src[i].x;
  if (acc == 0x12345678u) sink[blockIdx.x] = float(acc);  // practically never: keeps the loads
}
__global__ void hold_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

constexpr int kTileWarps = 8, kTileWk = 4;     // d16n128: 2 column tiles x 4 warps along K
constexpr int kSlotU4 = (4096 + 128) / 16;      // one ring slot: a group's codes and scales

// The launch's parameters. The experts come as two int4, not an int[8]: an array parameter
// indexed at run time is copied to local memory by every thread.
struct TileReadKernelArgs {
  const uint4* qweight;
  const uint4* scales;
  size_t expert_u4, expert_scale_u4;  // uint4 units
  int kg;                             // 128-k groups
  int4 experts_lo, experts_hi;        // experts[0..3], experts[4..7]
  float* sink;
};

template <int kStages>
__global__ void __launch_bounds__(kTileWarps * 32) tile_read_kernel(const TileReadKernelArgs g) {
  extern __shared__ uint4 ring[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wk = warp % kTileWk, wn = warp / kTileWk;
  const int tile = blockIdx.x * (kTileWarps / kTileWk) + wn, kg = g.kg, z = blockIdx.z;
  const int4 q = z < 4 ? g.experts_lo : g.experts_hi;
  const int e = (z & 3) == 0 ? q.x : (z & 3) == 1 ? q.y : (z & 3) == 2 ? q.z : q.w;
  // Tile t's codes: kg groups of 4 KB from t kg 4 KB; its scales: kg groups of 128 B (w4a16.h).
  const uint4* code = g.qweight + size_t(e) * g.expert_u4 + size_t(tile) * kg * 256;
  const uint4* scale = g.scales + size_t(e) * g.expert_scale_u4 + size_t(tile) * kg * 8;
  uint4* mine = ring + warp * kStages * kSlotU4;
  const int n_items = (kg - wk + kTileWk - 1) / kTileWk;
  auto issue = [&](int i, int slot) {
    const int grp = wk + i * kTileWk;
    uint4* dst = mine + slot * kSlotU4;
#pragma unroll
    for (int j = 0; j < 8; ++j) mma::cp_async16(mma::smem_u32(dst + j * 32 + lane), code + grp * 256 + j * 32 + lane, true);
    if (lane < 8) mma::cp_async16(mma::smem_u32(dst + 256 + lane), scale + grp * 8 + lane, true);
  };
#pragma unroll
  for (int st = 0; st < kStages; ++st) {
    if (st < n_items) issue(st, st);
    mma::cp_async_commit();
  }
  uint32_t acc = 0;
  int slot = 0;
  for (int i = 0; i < n_items; ++i) {
    mma::cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint4* src = mine + slot * kSlotU4;
    acc ^= src[lane].x ^ src[256 + (lane & 7)].y;  // a word of the codes and of the scales: they arrived
    __syncwarp();  // every lane has read the slot before it is refilled
    if (i + kStages < n_items) issue(i + kStages, slot);
    mma::cp_async_commit();
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
  mma::cp_async_wait<0>();
  if (acc == 0x12345678u) g.sink[blockIdx.x] = float(acc);  // practically never: keeps the copies
}

template <int kStages>
Status launch_tile_read(const TileReadKernelArgs& g, int n, int n_experts, cudaStream_t stream) {
  // At least 80 KB a block, so that two share an SM as the GEMM's 128-register blocks do (its
  // register file holds two of them); the ring itself takes 68-135 KB.
  const size_t smem = std::max<size_t>(size_t(kTileWarps) * kStages * kSlotU4 * 16, size_t(80) << 10);
  auto* kernel = &tile_read_kernel<kStages>;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                                   "cudaFuncSetAttribute(tile_read_kernel)"));
  const dim3 grid(unsigned(n / (64 * kTileWarps / kTileWk)), 1, unsigned(n_experts));
  kernel<<<grid, kTileWarps * 32, smem, stream>>>(g);
  return last_launch_status("tile_read_kernel");
}
}  // namespace

Status tile_stream_read(const TileReadArgs& a, float* sink, cudaStream_t stream) {
  if (a.qweight == nullptr || a.scales == nullptr || sink == nullptr)
    return invalid_argument("tile_stream_read: null pointer");
  if (a.n < 128 || a.n % 128 != 0 || a.k < 512 || a.k % 512 != 0 || a.n_experts < 1 || a.n_experts > 8)
    return invalid_argument("tile_stream_read: n {} (a multiple of 128), k {} (a multiple of 512), {} experts (1..8)",
                            a.n, a.k, a.n_experts);
  if ((reinterpret_cast<uintptr_t>(a.qweight) & 15) != 0 || (reinterpret_cast<uintptr_t>(a.scales) & 15) != 0 ||
      a.expert_bytes % 16 != 0 || a.expert_scale_bytes % 16 != 0)
    return invalid_argument("tile_stream_read: weights and their expert strides must be 16-byte aligned");
  const int* x = a.experts;
  const TileReadKernelArgs g{static_cast<const uint4*>(a.qweight), static_cast<const uint4*>(a.scales),
                             a.expert_bytes / 16, a.expert_scale_bytes / 16, a.k / 128,
                             make_int4(x[0], x[1], x[2], x[3]), make_int4(x[4], x[5], x[6], x[7]), sink};
  switch (a.stages) {
    case 2: return launch_tile_read<2>(g, a.n, a.n_experts, stream);
    case 3: return launch_tile_read<3>(g, a.n, a.n_experts, stream);
    case 4: return launch_tile_read<4>(g, a.n, a.n_experts, stream);
  }
  return invalid_argument("tile_stream_read: stages {} (2, 3 or 4)", a.stages);
}

Status stream_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  copy_kernel<<<kBlocks, kThreads, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), bytes / 16);
  return last_launch_status("copy_kernel");
}

Status stream_read(const void* src, size_t bytes, float* sink, cudaStream_t stream) {
  read_kernel<<<kBlocks, kThreads, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  return last_launch_status("read_kernel");
}

Status hold_stream(double us, cudaStream_t stream) {
  if (!(us > 0.0 && us <= 1e6)) return invalid_argument("hold_stream: {} us (0 < us <= 1e6)", us);
  hold_kernel<<<1, 1, 0, stream>>>(uint64_t(us * 1e3));
  return last_launch_status("hold_kernel");
}

}  // namespace dsv4::cuda::testing
