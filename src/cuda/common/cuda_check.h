// cuda_check.h: the ways a CUDA call can fail here. DSV4_CUDA_CHECK aborts (a broken invariant:
// a kernel launch we validated failed); cuda_status() turns an error into a dsv4::Status for
// calls whose failure is a resource problem the caller must handle (allocation); check_free()
// is for frees in destructors, which must unwind after a device fault.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>

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

// A free in a destructor. A bad pointer is a broken invariant and aborts. Any other error is
// one the device already returned elsewhere: after a fault (an illegal address in a kernel)
// every later call returns it, and the failed step reported it; a server must still unwind and
// exit cleanly then. So it is printed, and the error state cleared where it can be.
inline void check_free(cudaError_t err, const char* what) {
  DSV4_CHECK(err != cudaErrorInvalidValue && err != cudaErrorInvalidDevicePointer, "{}: {}", what,
             cudaGetErrorString(err));
  if (err == cudaSuccess) return;
  fmt::print(stderr, "{} after an earlier device error: {} ({})\n", what, cudaGetErrorString(err),
             cudaGetErrorName(err));
  cudaGetLastError();
}

// Status of the last kernel launch (configuration errors surface here, not at <<<>>>).
inline Status last_launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace dsv4::cuda
