// kernel_trace.h: KernelTracer, the start and end of every kernel the process runs, from CUPTI's
// activity API (concurrent-kernel records: kernels of graph replays and programmatic dependents
// keep their overlap). `dsv4 bench --kernel-trace N` uses it to split graph decode steps by
// kernel (gpu/kernel_timeline.h). libcupti is opened at start() (dlopen: libcupti.so.13, then
// libcupti.so), so nothing else in the binary depends on it; where it is missing, start() says so.
// CUPTI instruments kernels while tracing is on: compare the traced step's span with an untraced
// run's step time before reading small differences.
//
// CUPTI hands records to process-wide callbacks, so at most one tracer exists at a time; it owns
// that state (records collected since the last take()) behind a mutex, because CUPTI may call
// back from its own thread.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "gpu/kernel_timeline.h"

namespace dsv4::gpu {

class KernelTracer {
 public:
  // Loads CUPTI and enables concurrent-kernel records. Start it before the graphs to be traced
  // are instantiated: graph kernels are instrumented when the graph is built.
  static Result<std::unique_ptr<KernelTracer>> start();
  ~KernelTracer();  // disables the records and drops what was not taken
  KernelTracer(const KernelTracer&) = delete;
  KernelTracer& operator=(const KernelTracer&) = delete;

  // Waits for the device, flushes CUPTI's buffers and returns every kernel completed since the
  // last take() (or start()). Fails if CUPTI dropped records (its buffers were full).
  Result<std::vector<KernelRecord>> take();
  // Records the last take() left out because CUPTI gave them no start or end time.
  int64_t last_incomplete() const { return last_incomplete_; }

 private:
  KernelTracer() = default;
  int64_t last_incomplete_ = 0;
};

}  // namespace dsv4::gpu
