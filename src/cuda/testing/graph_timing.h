// graph_timing.h: the benchmarks' timing method (METHOD.md): calls captured into one CUDA graph,
// warm-up replays, then event-timed replays; the caller takes the median.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "base/status.h"

namespace dsv4::cuda::testing {

// Captures body(0) .. body(calls - 1) on `stream` into one graph, replays it `warmup` times, then
// `reps` times with CUDA events around each replay. Returns each timed replay's time divided by
// calls, in microseconds (unsorted).
Result<std::vector<double>> time_graph_calls(cudaStream_t stream, int calls, const std::function<void(int)>& body,
                                             int warmup, int reps);

}  // namespace dsv4::cuda::testing
