// cuda_check.h: the two ways a CUDA call can fail here. DSV4_CUDA_CHECK aborts (a broken invariant:
// a kernel launch we validated failed, a free failed); cuda_status() turns an error into a
// dsv4::Status for calls whose failure is a resource problem the caller must handle (allocation).
#pragma once

#include <cuda_runtime_api.h>

#include "base/check.h"
#include "base/status.h"

#define DSV4_CUDA_CHECK(expr)                                                                  \
  do {                                                                                         \
    const cudaError_t dsv4_cuda_err_ = (expr);                                                 \
    DSV4_CHECK(dsv4_cuda_err_ == cudaSuccess, "{}: {}", #expr, cudaGetErrorString(dsv4_cuda_err_)); \
  } while (0)

namespace dsv4::cuda {

// Status for a CUDA error code; `what` names the call. cudaSuccess gives ok.
inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  const StatusCode code =
      err == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, fmt::format("{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

// Status of the last kernel launch (configuration errors surface here, not at <<<>>>).
inline Status last_launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace dsv4::cuda
