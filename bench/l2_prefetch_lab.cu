// l2_prefetch_lab.cu: how well lines asked into L2 by one grid serve a later read by another, on
// SM90 (the weight prefetch of gpu/forward_pass.cpp, cuda/dense/weight_prefetch.h). A weight of a
// third of the L2 is flushed out (a read of 4x the L2), then made ready one of several ways on a
// side stream while the main stream is held for 40 or 20 us (a decode layer's latency-bound
// kernels), then read by a 4-blocks-per-SM streaming kernel, timed with CUDA events (median of
// 11): nothing (cold), the same read kernel first (resident), cp.async.bulk.prefetch.L2 per row
// in 8 / 2 / 1 KB pieces, prefetch.global.L2 (plain and evict_last) per 128-byte line, and plain
// loads of one word a line from another grid. Standalone (not in the CMake build, no project
// headers): nvcc -O3 -arch=sm_90 -std=c++17 bench/l2_prefetch_lab.cu -o l2_prefetch_lab
// Results: bench/results/prefetch_h100_7d10325/5_pflab_hold.txt.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void read_kernel(const int4* p, size_t n, float* sink) {
  float acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    int4 v = __ldcs(p + i);
    acc += __int_as_float(v.x ^ v.y ^ v.z ^ v.w);
  }
  if (acc == 1.2345f) sink[0] = acc;
}
__global__ void bulk_kernel(const char* base, int rows, int row, int piece) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  for (int at = 0; at < row; at += piece)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(base + size_t(r) * row + at), "r"(piece) : "memory");
}
// Each row asked for by `copies` threads of blocks nb apart in the grid (likely different SMs).
__global__ void bulk_copies_kernel(const char* base, int rows, int row, int nb) {
  const int r = (blockIdx.x % nb) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(base + size_t(r) * row), "r"(row) : "memory");
}
// One 16-byte load a 128-byte line, in the timed read's grid shape (same blocks, so likely the same
// SMs, reading the same lines).
__global__ void touch_same_kernel(const int4* p, size_t n, float* sink) {
  float acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if ((i & 7) == 0) { int4 v = p[i]; acc += __int_as_float(v.x); }
  }
  if (acc == 1.2345f) sink[0] = acc;
}
__global__ void line_kernel(const char* base, size_t bytes) {
  for (size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * 128; i < bytes; i += size_t(gridDim.x) * blockDim.x * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + i));
}
__global__ void line_last_kernel(const char* base, size_t bytes) {
  for (size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * 128; i < bytes; i += size_t(gridDim.x) * blockDim.x * 128)
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(base + i));
}
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { __nanosleep(1000); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
__global__ void touch_kernel(const int4* p, size_t n, float* sink) {
  float acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x * 8) {
    int4 v = p[i];  // one 16 B load per 128 B line (8 x int4)
    acc += __int_as_float(v.x);
  }
  if (acc == 1.2345f) sink[0] = acc;
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  const size_t l2 = prop.l2CacheSize; const int sms = prop.multiProcessorCount;
  const int row = 8192; const int rows = int(l2 / 3 / row); const size_t bytes = size_t(rows) * row;
  const size_t fb = 4 * l2;
  char *w, *f; float* sink;
  CK(cudaMalloc(&w, bytes)); CK(cudaMalloc(&f, fb)); CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(w, 1, bytes)); CK(cudaMemset(f, 2, fb));
  cudaEvent_t b, c; cudaEventCreate(&b); cudaEventCreate(&c);
  printf("%s: L2 %zu MB, %d SMs, weight %.1f MB\n", prop.name, l2 >> 20, sms, bytes / 1e6);
  const char* names[] = {"cold", "read first", "bulk 8K/row", "bulk 2K x4", "bulk 1K x8", "bulk 8K/row 2 blocks/SM-ish", "prefetch.L2 lines", "prefetch.L2::evict_last lines", "touch loads", "touch loads x4 grid",
                         "read kernel on the side", "bulk 8K/row x2 blocks", "bulk 8K/row x4 blocks",
                         "touch loads, read's grid"};
  cudaStream_t ms, ss; cudaStreamCreateWithFlags(&ms, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking);
  cudaEvent_t fk, jn; cudaEventCreateWithFlags(&fk, cudaEventDisableTiming); cudaEventCreateWithFlags(&jn, cudaEventDisableTiming);
  for (int hold : {40, 20}) for (int v = 0; v < 14; ++v) {
    std::vector<float> rd_us;
    for (int it = 0; it < 12; ++it) {
      read_kernel<<<sms * 4, 512, 0, ms>>>((const int4*)f, fb / 16, sink);
      if (v == 1) read_kernel<<<sms * 4, 512, 0, ms>>>((const int4*)w, bytes / 16, sink);
      cudaEventRecord(fk, ms); cudaStreamWaitEvent(ss, fk, 0);
      switch (v) {
        case 2: bulk_kernel<<<(rows + 63) / 64, 64, 0, ss>>>(w, rows, row, 8192); break;
        case 3: bulk_kernel<<<(rows + 63) / 64, 64, 0, ss>>>(w, rows, row, 2048); break;
        case 4: bulk_kernel<<<(rows + 63) / 64, 64, 0, ss>>>(w, rows, row, 1024); break;
        case 5: bulk_kernel<<<(rows + 15) / 16, 16, 0, ss>>>(w, rows, row, 8192); break;
        case 6: line_kernel<<<sms * 2, 256, 0, ss>>>(w, bytes); break;
        case 7: line_last_kernel<<<sms * 2, 256, 0, ss>>>(w, bytes); break;
        case 8: touch_kernel<<<sms * 2, 256, 0, ss>>>((const int4*)w, bytes / 16, sink); break;
        case 9: touch_kernel<<<sms * 8, 256, 0, ss>>>((const int4*)w, bytes / 16, sink); break;
        case 10: read_kernel<<<sms * 4, 512, 0, ss>>>((const int4*)w, bytes / 16, sink); break;
        case 11: bulk_copies_kernel<<<2 * ((rows + 63) / 64), 64, 0, ss>>>(w, rows, row, (rows + 63) / 64); break;
        case 12: bulk_copies_kernel<<<4 * ((rows + 63) / 64), 64, 0, ss>>>(w, rows, row, (rows + 63) / 64); break;
        case 13: touch_same_kernel<<<sms * 4, 512, 0, ss>>>((const int4*)w, bytes / 16, sink); break;
      }
      cudaEventRecord(jn, ss);
      hold_kernel<<<1, 1, 0, ms>>>(hold * 1000ull);
      cudaStreamWaitEvent(ms, jn, 0);
      cudaEventRecord(b, ms);
      read_kernel<<<sms * 4, 512, 0, ms>>>((const int4*)w, bytes / 16, sink);
      cudaEventRecord(c, ms);
      CK(cudaEventSynchronize(c));
      float t2; cudaEventElapsedTime(&t2, b, c);
      if (it) rd_us.push_back(t2 * 1e3f);
    }
    std::sort(rd_us.begin(), rd_us.end());
    printf("hold %d us  %-32s read %7.2f us (%5.0f GB/s)\n", hold, names[v], rd_us[rd_us.size() / 2], bytes / rd_us[rd_us.size() / 2] / 1e3);
  }
  return 0;
}
