// kernel_timeline.h: where one traced step's time went, kernel by kernel (`dsv4 bench
// --kernel-trace`). The records come from gpu/kernel_trace.h (CUPTI), each kernel's first block
// start and last block end on the GPU clock. With programmatic dependent launch the kernels of a
// step overlap, so a kernel's own duration says little about the step; what matters is how far
// it moved the step's end. Kernels are ordered by start, and kernel i's *exposed* time is
//   exposed_i = max(0, end_i - max(end_j, j < i))   (the first kernel: its whole duration),
// so the exposed times add up to the step's span (last end - first start) exactly, and a kernel
// that ran entirely beside others (a side stream, or hidden behind a longer predecessor) shows 0.
// `lead` is start_i - max(end_j, j < i): negative when the kernel started before everything
// launched ahead of it had finished (its blocks were resident and waiting, or working ahead).
// Pure host code: unit-tested without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::gpu {

// One kernel as the tracer saw it.
struct KernelRecord {
  std::string name;              // as CUPTI gives it (usually mangled)
  std::array<int, 3> grid{};     // blocks in x, y, z
  std::array<int, 3> block{};    // threads in x, y, z
  uint32_t stream = 0;           // CUPTI's stream id
  uint64_t start_ns = 0, end_ns = 0;
};

// "w4a16_decode_kernel<1, 2, 4, 0>" from "_ZN4dsv44cuda...": demangled, without the return type,
// the parameter list, the namespaces and "(anonymous namespace)"; unmangled names (cuBLAS's nvjet
// kernels) come back unchanged.
std::string short_kernel_name(std::string_view name);

struct TimelineRow {
  int index = 0;             // in start order
  std::string name;          // short_kernel_name
  std::array<int, 3> grid{};
  uint32_t stream = 0;
  double start_us = 0, end_us = 0;  // from the step's first start
  double duration_us = 0, exposed_us = 0, lead_us = 0;
};

struct KernelGroup {
  std::string key;           // "name (gx,gy,gz)": the same kernel at the same grid is one group
  int count = 0;
  double exposed_us = 0, duration_us = 0;
};

struct StepTimeline {
  std::vector<TimelineRow> rows;    // start order
  std::vector<KernelGroup> groups;  // by exposed time, largest first (ties: by key)
  double span_us = 0;               // last end - first start = sum of rows' exposed_us
};

// The timeline of one step's records (any order; empty records give an empty timeline).
StepTimeline step_timeline(std::vector<KernelRecord> records);

// Index of the median span (the lower middle for an even count); -1 for none.
int median_step(const std::vector<StepTimeline>& steps);

}  // namespace dsv4::gpu
