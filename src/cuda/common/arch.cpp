// arch.cpp: DeviceInfo queries, cached per device ordinal, and the PDL benchmarking switch.
#include "cuda/common/arch.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mu;
DeviceInfo g_info[kMaxDevices];
bool g_have[kMaxDevices] = {};
std::atomic<bool> g_pdl_enabled{true};
std::atomic<bool> g_weights_evict_first{false};
}  // namespace

void set_pdl_enabled(bool on) { g_pdl_enabled.store(on, std::memory_order_relaxed); }
bool pdl_enabled() { return g_pdl_enabled.load(std::memory_order_relaxed); }
void set_weights_evict_first(bool on) { g_weights_evict_first.store(on, std::memory_order_relaxed); }
bool weights_evict_first() { return g_weights_evict_first.load(std::memory_order_relaxed); }

const char* gpu_arch_name(GpuArch a) {
  switch (a) {
    case GpuArch::kSm86: return "sm_86";
    case GpuArch::kSm90: return "sm_90";
    case GpuArch::kOther: return "other";
  }
  return "?";
}

Result<const DeviceInfo*> current_device_info() {
  int dev = 0;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  if (dev < 0 || dev >= kMaxDevices) return internal_error("device ordinal {} out of range", dev);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_have[dev]) {
    cudaDeviceProp p{};
    DSV4_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"));
    DeviceInfo& d = g_info[dev];
    d.device = dev;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.n_sms = p.multiProcessorCount;
    d.smem_optin_bytes = p.sharedMemPerBlockOptin;
    d.smem_per_sm_bytes = p.sharedMemPerMultiprocessor;
    d.smem_reserved_per_block = p.reservedSharedMemPerBlock;
    d.l2_bytes = size_t(p.l2CacheSize);
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
      d.mem_peak_bytes_per_s = 2.0 * 1e3 * mem_khz * (bus_bits / 8.0);
    else
      cudaGetLastError();  // unreported: the kernels that use it fall back to fixed sizes
    std::snprintf(d.name, sizeof(d.name), "%s", p.name);
    if (p.major < 8) return unimplemented("{} is sm_{}{}: dsv4 kernels need SM80 or newer", p.name, p.major, p.minor);
    d.arch = (p.major == 8 && p.minor == 6) ? GpuArch::kSm86 : (p.major == 9 ? GpuArch::kSm90 : GpuArch::kOther);
    g_have[dev] = true;
  }
  return &g_info[dev];
}

Result<bool> pdl_on_current_device() {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  return pdl_supported(*dev);
}

}  // namespace dsv4::cuda
