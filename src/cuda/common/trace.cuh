// trace.cuh: per-block timestamps for the benchmark's timelines (diagnostics only). A kernel that
// takes a `trace` pointer (null in every production launch) stores, from thread 0 of each block,
// %globaltimer (ns) at a few fixed points of its life into trace[block][kTracePoints]. The
// benchmark reads them back to see when each grid's blocks entered, got past their dependency,
// finished streaming and exited, relative to each other (w4a16_bench, the MoE decode timeline).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

inline constexpr int kTracePoints = 4;  // entry, dependency met, main loop done, exit

#if defined(__CUDACC__)  // host code (a test reading the stamps) needs only the layout above

// Stamp `point` of this block (thread 0), or with `slot` >= 0 of that pseudo-block instead (a
// kernel's one-off tail: the slots past the grid's blocks).
__device__ __forceinline__ void trace_stamp(unsigned long long* trace, int point, int64_t slot = -1) {
  if (trace == nullptr || threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  const int64_t block =
      slot >= 0 ? slot : blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  trace[block * kTracePoints + point] = t;
}
#endif

}  // namespace dsv4::cuda
