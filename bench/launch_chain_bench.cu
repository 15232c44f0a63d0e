// launch_chain_bench.cu: what a chain of kernels costs when the kernels do (almost) nothing, the
// floor under a batch-1 decode step of ~24 launches per layer (bench/results/forward_h200.md).
// Each chain is captured once as a CUDA graph of N launches of one trivial kernel (every block
// waits for its predecessor as the forward pass's kernels do, pdl.cuh, then writes one word) and
// replayed; reported: microseconds per launch, for several grid sizes, with and without
// programmatic dependent launch, and with a per-block load of `bytes` (a weight-prefetch stand-in
// issued before the wait).
// Usage: launch_chain_bench [--launches N] [--reps R] [--out FILE.json] [--commit C] [--command S]
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
#include "cuda/common/pdl.cuh"
#include "cuda/testing/graph_timing.h"

namespace {

using dsv4::Status;
using json = nlohmann::json;

struct ChainArgs {
  const uint4* src;  // u32x4 [blocks * words]: read before the wait (constant data)
  int words;         // 16-byte words each block reads
  int* sink;         // i32 [blocks]: one write per block after the wait
};

__global__ void chain_kernel(const ChainArgs a) {
  uint32_t acc = 0;
  for (int i = threadIdx.x; i < a.words; i += blockDim.x) {
    const uint4 v = __ldg(a.src + int64_t(blockIdx.x) * a.words + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  dsv4::cuda::pdl_wait();
  // Keeps the loads alive; acc is 0 for the zero-filled source, so the write is a constant.
  if (threadIdx.x == 0) a.sink[blockIdx.x] = int(acc);
}

// Median microseconds per launch of a graph of n launches (grid blocks x 256 threads).
double time_chain(int n, int blocks, int words, bool pdl, int reps, const uint4* src, int* sink, cudaStream_t s) {
  const ChainArgs a{src, words, sink};
  auto launch = [&](int) {
    const Status st = dsv4::cuda::launch_kernel(&chain_kernel, dim3(blocks), dim3(256), 0, s, pdl, a, "chain_kernel");
    DSV4_CHECK(st.is_ok(), "{}", st.to_string());
  };
  dsv4::Result<std::vector<double>> us = dsv4::cuda::testing::time_graph_calls(s, n, launch, /*warmup=*/3, reps);
  DSV4_CHECK(us.is_ok(), "{}", us.status().to_string());
  std::sort(us->begin(), us->end());
  return (*us)[us->size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int n = 480, reps = 50;
  std::string out, commit = "unknown", command;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--launches" && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--command" && i + 1 < argc) command = argv[++i];
    else {
      std::fprintf(stderr, "usage: launch_chain_bench [--launches N] [--reps R] [--out FILE] [--commit C] [--command S]\n");
      return 2;
    }
  }
  if (n < 1 || reps < 1) {
    std::fprintf(stderr, "launch_chain_bench: --launches and --reps must be >= 1 (got %d, %d)\n", n, reps);
    return 2;
  }
  auto dev = dsv4::cuda::current_device_info();
  if (!dev.is_ok()) {
    std::fprintf(stderr, "launch_chain_bench: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  const int sms = (*dev)->n_sms;
  const bool pdl_ok = dsv4::cuda::pdl_supported(**dev);
  const std::vector<int> grids = {1, sms / 4, sms, 2 * sms};
  const std::vector<int> kbytes = {0, 16, 64};  // per block, before the wait
  const int max_words = 64 * 1024 / 16;
  uint4* src = nullptr;
  int* sink = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&src, size_t(2 * sms) * max_words * 16));
  DSV4_CUDA_CHECK(cudaMemset(src, 0, size_t(2 * sms) * max_words * 16));
  DSV4_CUDA_CHECK(cudaMalloc(&sink, size_t(2 * sms) * 4));
  cudaStream_t s;
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  json rows = json::array();
  std::printf("GPU %s (%d SMs): graph of %d launches, median of %d replays, us per launch\n", (*dev)->name, sms,
              n, reps);
  for (int kb : kbytes)
    for (int blocks : grids)
      for (int p = 0; p < (pdl_ok ? 2 : 1); ++p) {
        const double us = time_chain(n, blocks, kb * 1024 / 16, p == 1, reps, src, sink, s);
        std::printf("chain blocks=%-4d load=%2d KB/block pdl=%d  %.2f us\n", blocks, kb, p, us);
        rows.push_back({{"blocks", blocks}, {"load_kb_per_block", kb}, {"pdl", p == 1}, {"us_per_launch", us}});
      }
  DSV4_CUDA_CHECK(cudaFree(src));
  DSV4_CUDA_CHECK(cudaFree(sink));
  DSV4_CUDA_CHECK(cudaStreamDestroy(s));
  if (!out.empty()) {
    const json j = {{"benchmark", "launch_chain_bench"}, {"gpu", (*dev)->name}, {"sms", sms},  {"commit", commit},
                    {"command", command},                {"launches", n},        {"reps", reps}, {"rows", rows}};
    if (!dsv4::bench::write_json(out, j, "launch_chain_bench")) return 1;
  }
  return 0;
}
