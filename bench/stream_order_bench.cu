// stream_order_bench.cu: does the order in which the SMs walk a weight matrix change the DRAM rate?
// The decode GEMMs give each block a contiguous slab of the weights (its column tiles' groups), so
// at any moment ~128 SMs read ~128 regions far apart; a copy kernel's grid-stride loop reads one
// compact window at a time. This program streams the same bytes with the same per-warp rings of
// 4 KB slots (SM90 bulk copies, as the decode kernel's) or the same register loads, changing only
// the map from (block, warp, item) to the chunk read, and reports GB/s per launch.
// Usage: stream_order_bench [--reps R] [--out FILE.json] [--commit C] [--command S]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_json.h"
#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/testing/graph_timing.h"
#include "cuda/w4a16/ptx.cuh"

namespace {

using json = nlohmann::json;
using namespace dsv4::cuda::w4a16_detail;

constexpr int kWarps = 8;
constexpr int kChunk = 4096;  // one decode ring slot's codes
constexpr int kMaxStages = 4;

// Which 4 KB chunk item i of warp w in block b reads; `items` per warp, `blocks` in the grid.
enum Order : int {
  kSlab = 0,    // block-contiguous, the block's warps interleaved (a d16n64 block: WK = 8)
  kTile = 1,    // block-contiguous, 4 tiles of 2 warps along K (the d16n256 decode block of wq_b)
  kGlobal = 2,  // GPU-wide contiguous at each step: item i of every warp lies in one window
  kKMajor = 3,  // the d16n256 walk over a [group][tile] layout (tiles of one group adjacent)
};
const char* order_name(int o) {
  switch (o) {
    case kSlab: return "slab";
    case kTile: return "tile";
    case kGlobal: return "global";
    default: return "kmajor";
  }
}

[[maybe_unused]] __device__ __forceinline__ int64_t chunk_of(int order, int b, int w, int i, int items, int blocks) {
  switch (order) {
    case kSlab: return int64_t(b) * kWarps * items + int64_t(i) * kWarps + w;
    case kTile: return int64_t(b) * kWarps * items + int64_t(w / 2) * 2 * items + (w % 2) + 2 * i;
    case kGlobal: return int64_t(i) * blocks * kWarps + int64_t(b) * kWarps + w;
    default: {
      const int64_t tiles = int64_t(blocks) * 4, tile = int64_t(b) * 4 + w / 2, group = (w % 2) + 2 * i;
      return group * tiles + tile;
    }
  }
}

struct Args {
  const unsigned char* base;  // u8 [blocks * 8 * items * 4096]
  int items, stages, order;
  int* sink;  // i32 [1]: written only if the data had a set bit (it is zero-filled)
};

// Per-warp rings of `stages` 4 KB slots filled by one bulk copy each (SM90), as in the decode kernel.
__global__ void __launch_bounds__(256) bulk_stream_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kWarps * kMaxStages];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, b = blockIdx.x;
  const uint32_t ring = smem_u32(smem) + w * a.stages * kChunk;
  const uint32_t bar0 = smem_u32(bars) + w * kMaxStages * 8;
  if (lane == 0) {
    for (int s = 0; s < a.stages; ++s) mbar_init(bar0 + s * 8, 1);
    fence_mbarrier_init();
  }
  __syncwarp();
  auto issue = [&](int i, int slot) {
    if (lane == 0) {
      mbar_arrive_expect_tx(bar0 + slot * 8, kChunk);
      bulk_g2s(ring + slot * kChunk, a.base + chunk_of(a.order, b, w, i, a.items, gridDim.x) * kChunk, kChunk,
               bar0 + slot * 8);
    }
  };
  for (int s = 0; s < a.stages && s < a.items; ++s) issue(s, s);
  uint32_t phases = 0, acc = 0;
  int slot = 0;
  for (int i = 0; i < a.items; ++i) {
    mbar_wait(bar0 + slot * 8, (phases >> slot) & 1u);
    phases ^= 1u << slot;
    acc |= reinterpret_cast<const uint32_t*>(smem + (w * a.stages + slot) * kChunk)[lane];
    __syncwarp();
    if (i + a.stages < a.items) issue(i + a.stages, slot);
    slot = slot + 1 == a.stages ? 0 : slot + 1;
  }
  if (acc != 0) a.sink[0] = int(acc);
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) a.sink[0] = -1;  // SM90 only; the host skips it elsewhere
#endif
}

// Register loads: every thread keeps 8 x 16 bytes in flight; the block walks either its own slab
// (slab) or the grid-stride order of a copy kernel (global). Same bytes, same loads.
__global__ void __launch_bounds__(256) ldg_stream_kernel(const Args a) {
  const uint4* base = reinterpret_cast<const uint4*>(a.base);
  const int64_t per_block = int64_t(kWarps) * a.items * kChunk / 16;  // uint4 per block
  const int64_t step = 8 * 256;                                        // uint4 per block iteration
  uint32_t acc = 0;
  for (int64_t it = 0; it < per_block / step; ++it) {
    const int64_t first = a.order == kGlobal ? (it * gridDim.x + blockIdx.x) * step : blockIdx.x * per_block + it * step;
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __ldcs(base + first + j * 256 + threadIdx.x);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc |= v[j].x | v[j].y | v[j].z | v[j].w;
  }
  if (acc != 0) a.sink[0] = int(acc);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  std::string out, commit = "unknown", command;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (s == "--out" && i + 1 < argc) out = argv[++i];
    else if (s == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (s == "--command" && i + 1 < argc) command = argv[++i];
    else {
      std::fprintf(stderr, "usage: stream_order_bench [--reps R] [--out FILE] [--commit C] [--command S]\n");
      return 2;
    }
  }
  auto dev = dsv4::cuda::current_device_info();
  if (!dev.is_ok()) {
    std::fprintf(stderr, "stream_order_bench: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  const bool bulk_ok = (*dev)->cc_major >= 9;
  const int blocks = 128;
  const size_t total = size_t(512) << 20;  // rotated over: much larger than L2
  unsigned char* buf = nullptr;
  int* sink = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&buf, total));
  DSV4_CUDA_CHECK(cudaMemset(buf, 0, total));
  DSV4_CUDA_CHECK(cudaMalloc(&sink, 4));
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(&bulk_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kWarps * kMaxStages * kChunk));
  cudaStream_t st;
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  json rows = json::array();
  std::printf("GPU %s: %d blocks x 8 warps, 4 KB chunks, median of %d graph replays\n", (*dev)->name, blocks, reps);
  for (const int items : {4, 8, 32}) {
    const size_t bytes = size_t(blocks) * kWarps * items * kChunk;
    const int copies = int(total / bytes);
    for (const int method : {0, 1}) {  // 0: bulk rings, 1: register loads
      if (method == 0 && !bulk_ok) continue;
      for (const int order : {kSlab, kTile, kGlobal, kKMajor}) {
        if (method == 1 && order != kSlab && order != kGlobal) continue;
        for (const int stages : {2, 3, 4}) {
          if (method == 1 && stages != 2) continue;
          auto launch = [&](int c) {
            const Args a{buf + size_t(c % copies) * bytes, items, stages, order, sink};
            if (method == 0)
              bulk_stream_kernel<<<blocks, 256, kWarps * stages * kChunk, st>>>(a);
            else
              ldg_stream_kernel<<<blocks, 256, 0, st>>>(a);
          };
          auto us = dsv4::cuda::testing::time_graph_calls(st, copies, launch, 3, reps);
          DSV4_CHECK(us.is_ok(), "{}", us.status().to_string());
          std::sort(us->begin(), us->end());
          const double med = (*us)[us->size() / 2];
          const double gbs = double(bytes) / (med * 1e3);
          std::printf("%-5s order=%-6s items=%-2d stages=%d  %6.2f MB  %7.2f us  %7.1f GB/s\n",
                      method == 0 ? "bulk" : "ldg", order_name(order), items, method == 0 ? stages : 0,
                      double(bytes) / 1e6, med, gbs);
          rows.push_back({{"method", method == 0 ? "bulk" : "ldg"},
                          {"order", order_name(order)},
                          {"items_per_warp", items},
                          {"stages", method == 0 ? stages : 0},
                          {"bytes", bytes},
                          {"us_per_launch", med},
                          {"gbs", gbs}});
        }
      }
    }
  }
  DSV4_CUDA_CHECK(cudaFree(buf));
  DSV4_CUDA_CHECK(cudaFree(sink));
  DSV4_CUDA_CHECK(cudaStreamDestroy(st));
  if (!out.empty()) {
    const json j = {{"benchmark", "stream_order_bench"}, {"gpu", (*dev)->name}, {"blocks", blocks},
                    {"commit", commit}, {"command", command}, {"reps", reps}, {"rows", rows}};
    if (!dsv4::bench::write_json(out, j, "stream_order_bench")) return 1;
  }
  return 0;
}
