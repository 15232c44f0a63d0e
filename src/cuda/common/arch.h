// arch.h: what the kernels need to know about the GPU, read once per device, and the one place
// where the architecture decides anything. Every kernel family builds SM80-level code (mma.sync,
// ldmatrix, cp.async) for sm_86 and sm_90; SM90-only paths (PDL, clusters, wgmma) are chosen
// through the predicates of this header and nowhere else.
#pragma once

#include <cstddef>

#include "base/status.h"

namespace dsv4::cuda {

enum class GpuArch {
  kSm86,   // RTX 3090 class: 82 SMs, ~99 KB opt-in shared memory per block
  kSm90,   // H100/H200
  kOther,  // any other SM80+ part: runs the portable path
};

struct DeviceInfo {
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  int n_sms = 0;
  size_t smem_optin_bytes = 0;  // max dynamic + static shared memory per block after opt-in
  size_t smem_per_sm_bytes = 0;       // shared memory of one SM
  size_t smem_reserved_per_block = 0;  // taken by the system from the SM's smem for each block
  size_t l2_bytes = 0;
  // Peak DRAM bandwidth, 2 x memory clock x bus width (H100 SXM 3.35e12, H200 4.8e12, RTX 3090
  // 0.94e12); 0 where the device does not report them.
  double mem_peak_bytes_per_s = 0;
  GpuArch arch = GpuArch::kOther;
  char name[256] = {};
};

// Properties of the current device, queried on first use per device and cached (thread-safe).
Result<const DeviceInfo*> current_device_info();

const char* gpu_arch_name(GpuArch a);

// Benchmarking knob, process-wide: whether kernels launch as programmatic dependents where the
// GPU allows it (default true). Set only by `dsv4 bench --pdl on|off` (tools/cmd_bench.cpp), once,
// before the model loads: launch plans (w4a16, moe) and captured graphs must not see it change.
void set_pdl_enabled(bool on);
bool pdl_enabled();

// Benchmarking knob, process-wide, set like set_pdl_enabled (`dsv4 bench --weights-l2`,
// `w4a16_bench --weights-l2`): whether the decode GEMMs (dense and MoE) and the dense weight
// stream read their weights with L2 evict-first priority (default false: normal priority). A
// decode layer streams ~130 MB of weights through a 50 MB L2; at normal priority they evict what
// the step reuses (kernel code, which every layer runs again, and the activations and partials
// passed between kernels). Prefill GEMMs keep normal priority: their row tiles reuse weights.
void set_weights_evict_first(bool on);
bool weights_evict_first();

// Programmatic dependent launch (common/pdl.cuh): SM90 only, and only while pdl_enabled().
inline bool pdl_supported(const DeviceInfo& d) { return pdl_enabled() && d.arch == GpuArch::kSm90; }

// Thread-block clusters with distributed shared memory (SM90): the W4A16 decode GEMM adds its
// split-K partials through them instead of global memory (w4a16/decode_kernel.cuh).
inline bool clusters_supported(const DeviceInfo& d) { return d.arch == GpuArch::kSm90; }
// TMA tensor copies (cp.async.bulk.tensor) with maps from common/tensor_map.h.
inline bool tma_supported(const DeviceInfo& d) { return d.arch == GpuArch::kSm90; }
// Bulk L2 prefetches of weights ahead of their reader (cp.async.bulk.prefetch.L2:
// dense/weight_prefetch.h). SM90 only; an SM86 L2 (6 MB) would hold nothing worth asking for.
inline bool l2_prefetch_supported(const DeviceInfo& d) { return d.arch == GpuArch::kSm90; }

// Warpgroup MMA (wgmma): the SM90 prefill path of the W4A16 GEMM (w4a16/wgmma_kernel.cu), which
// exists only in builds that include sm_90a (DSV4_CUDA_ARCHS containing 90 defines DSV4_HAVE_SM90A).
inline bool wgmma_supported(const DeviceInfo& d) {
#if DSV4_HAVE_SM90A
  return d.arch == GpuArch::kSm90;
#else
  (void)d;
  return false;
#endif
}

// pdl_supported() for the current device (current_device_info() is cached: cheap per launch).
Result<bool> pdl_on_current_device();

}  // namespace dsv4::cuda
