// kernel_trace.cpp: KernelTracer (kernel_trace.h): CUPTI's activity API through dlopen.
#include "gpu/kernel_trace.h"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace dsv4::gpu {
namespace {

// The CUPTI entry points the tracer uses, resolved once from the loaded library.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

// Process-wide, as CUPTI's callbacks are: the loaded entry points, and the records of the live
// tracer (kernel_trace.h: at most one).
struct TraceState {
  std::mutex mu;
  bool loaded = false, registered = false, live = false;
  Cupti api;
  std::vector<KernelRecord> records;  // completed since the last take()
  int64_t incomplete = 0;             // records without both timestamps, since the last take()
};

TraceState& state() {
  static TraceState s;
  return s;
}

constexpr size_t kBufferBytes = size_t(8) << 20;  // ~25K kernel records per buffer
constexpr size_t kBufferAlign = 8;                // CUPTI's record alignment

Status cupti_status(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::ok();
  const char* msg = "unknown CUPTI error";
  if (state().api.result_string != nullptr) state().api.result_string(r, &msg);
  return internal_error("{}: {} (CUPTI error {})", what, msg, int(r));
}

// Caller holds state().mu.
Status load_cupti() {
  TraceState& s = state();
  if (s.loaded) return Status::ok();
  void* lib = nullptr;
  for (const char* name : {"libcupti.so.13", "libcupti.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr)
    return not_found("kernel trace: CUPTI is not loadable (looked for libcupti.so.13 and libcupti.so: {}); it ships "
                     "with the CUDA toolkit; put its folder on LD_LIBRARY_PATH",
                     dlerror());
  // Never closed: CUPTI keeps threads and callbacks for the process's lifetime.
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  Cupti& a = s.api;
  a.register_callbacks = reinterpret_cast<decltype(a.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
  a.enable = reinterpret_cast<decltype(a.enable)>(sym("cuptiActivityEnable"));
  a.disable = reinterpret_cast<decltype(a.disable)>(sym("cuptiActivityDisable"));
  a.flush_all = reinterpret_cast<decltype(a.flush_all)>(sym("cuptiActivityFlushAll"));
  a.next_record = reinterpret_cast<decltype(a.next_record)>(sym("cuptiActivityGetNextRecord"));
  a.dropped = reinterpret_cast<decltype(a.dropped)>(sym("cuptiActivityGetNumDroppedRecords"));
  a.result_string = reinterpret_cast<decltype(a.result_string)>(sym("cuptiGetResultString"));
  if (!a.register_callbacks || !a.enable || !a.disable || !a.flush_all || !a.next_record || !a.dropped ||
      !a.result_string)
    return not_found("kernel trace: the loaded libcupti lacks an activity API entry point");
  s.loaded = true;
  return Status::ok();
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;  // size 0: CUPTI drops records, take() reports it
  *max_records = 0;                               // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  TraceState& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (s.api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !s.live) continue;
      // The record layout of the CUPTI headers this file is built with (CUDA 13.0: version 10).
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      if (k->start == 0 || k->end < k->start) {  // CUPTI could not time it: not a usable record
        ++s.incomplete;
        continue;
      }
      KernelRecord r;
      r.name = k->name != nullptr ? k->name : "?";
      r.grid = {k->gridX, k->gridY, k->gridZ};
      r.block = {k->blockX, k->blockY, k->blockZ};
      r.stream = k->streamId;
      r.start_ns = k->start;
      r.end_ns = k->end;
      s.records.push_back(std::move(r));
    }
  }
  std::free(buffer);
}

}  // namespace

Result<std::unique_ptr<KernelTracer>> KernelTracer::start() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.live) return invalid_argument("kernel trace: a tracer is already running (CUPTI's callbacks are process-wide)");
  DSV4_RETURN_IF_ERROR(load_cupti());
  if (!s.registered) {
    DSV4_RETURN_IF_ERROR(cupti_status(s.api.register_callbacks(buffer_requested, buffer_completed),
                                      "cuptiActivityRegisterCallbacks"));
    s.registered = true;
  }
  DSV4_RETURN_IF_ERROR(cupti_status(s.api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                                    "cuptiActivityEnable(CONCURRENT_KERNEL)"));
  s.records.clear();
  s.incomplete = 0;
  s.live = true;
  return std::unique_ptr<KernelTracer>(new KernelTracer());
}

KernelTracer::~KernelTracer() {
  TraceState& s = state();
  cudaDeviceSynchronize();
  s.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // outside the lock: it calls buffer_completed
  std::lock_guard<std::mutex> lock(s.mu);
  s.api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  s.records.clear();
  s.live = false;
}

Result<std::vector<KernelRecord>> KernelTracer::take() {
  TraceState& s = state();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return internal_error("kernel trace: cudaDeviceSynchronize: {}", cudaGetErrorString(e));
  DSV4_RETURN_IF_ERROR(cupti_status(s.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll"));
  size_t dropped = 0;
  DSV4_RETURN_IF_ERROR(cupti_status(s.api.dropped(nullptr, 0, &dropped), "cuptiActivityGetNumDroppedRecords"));
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<KernelRecord> out = std::move(s.records);
  s.records.clear();
  last_incomplete_ = s.incomplete;
  s.incomplete = 0;
  if (dropped != 0)
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("kernel trace: CUPTI dropped {} records (its buffers were full); take() more often",
                              dropped));
  return out;
}

}  // namespace dsv4::gpu
