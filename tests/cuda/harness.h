// harness.h: the kernel test harness shared by every CUDA test (and meant for later kernels):
// GPU presence check and skip, Status/CUDA assertions, device upload/download, poisoned output
// buffers, hash-generated GPTQ tensors mirrored on the host, the exact CPU reference of a W4A16
// GEMM row, and a tolerance-aware comparison that also counts unwritten (NaN-poisoned) elements.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/numeric.h"
#include "cuda/common/arch.h"
#include "cuda/common/device_buffer.h"
#include "cuda/testing/random_gptq.h"
#include "cuda/w4a16/w4a16.h"

namespace dsv4::cuda::test {

using testing::ScaleSpec;

// True when the CUDA runtime reports at least one device (CI has none).
bool gpu_available();

#define DSV4_SKIP_WITHOUT_GPU()                                                      \
  do {                                                                               \
    if (!::dsv4::cuda::test::gpu_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

#define DSV4_ASSERT_OK(expr)                                             \
  do {                                                                   \
    const ::dsv4::Status dsv4_st_ = (expr);                              \
    ASSERT_TRUE(dsv4_st_.is_ok()) << #expr << ": " << dsv4_st_.to_string(); \
  } while (0)

#define DSV4_ASSERT_CUDA(expr)                                                         \
  do {                                                                                 \
    const cudaError_t dsv4_err_ = (expr);                                              \
    ASSERT_EQ(dsv4_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(dsv4_err_); \
  } while (0)

// The process-wide weight L2 priority (arch.h set_weights_evict_first) for one scope; the value
// before it comes back at the end, whatever the build's default.
class ScopedWeightsEvictFirst {
 public:
  explicit ScopedWeightsEvictFirst(bool on) : before_(weights_evict_first()) { set_weights_evict_first(on); }
  ~ScopedWeightsEvictFirst() { set_weights_evict_first(before_); }
  ScopedWeightsEvictFirst(const ScopedWeightsEvictFirst&) = delete;
  ScopedWeightsEvictFirst& operator=(const ScopedWeightsEvictFirst&) = delete;

 private:
  bool before_;
};

// Allocation that aborts the test binary on failure (tests size their data well below memory).
DeviceBuffer device_alloc(size_t bytes, bool zero = false);
// 0xFF in every byte: bf16/fp16 NaN, f32 NaN, i32 -1. Kernels must overwrite what they own.
void poison(DeviceBuffer& b);
void upload(DeviceBuffer& dst, const void* src, size_t bytes);
template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer b = device_alloc(v.size() * sizeof(T));
  upload(b, v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> download(const void* src, size_t count);

// bf16 conversions of whole vectors.
std::vector<uint16_t> to_bf16(const std::vector<float>& v);
std::vector<float> from_bf16(const std::vector<uint16_t>& v);
// Random activations: bf16 values (returned as exact floats) from the shared hash.
std::vector<float> random_bf16_values(int64_t count, uint64_t seed, float scale);

// A GPTQ tensor [K/8, N] + scales [K/128, N] defined by (seed, spec): the device fill and these
// host accessors produce the same values.
struct HostGptq {
  uint64_t seed = 0;
  int n = 0, k = 0;
  ScaleSpec spec;

  float scale(int group, int col) const { return f16_to_f32(testing::gptq_scale_bits(seed, int64_t(group) * n + col, spec)); }
  int code(int kk, int col) const {
    return int((testing::gptq_qword(seed, int64_t(kk / 8) * n + col) >> (4 * (kk % 8))) & 0xF);
  }
  float weight(int kk, int col) const { return scale(kk / 128, col) * float(code(kk, col) - 8); }
};

// The columns one checkpoint tensor occupies in a packed weight.
struct PackedPart {
  HostGptq src;
  RepackPlacement place;
};

// Packed column of source column c under a placement (the formula of w4a16.h).
inline int packed_column(int c, const RepackPlacement& pl) {
  return ((c / 16) * pl.interleave + pl.slot) * 16 + c % 16 + pl.n_base;
}

// Fills each part's GPTQ tensor on the device (one staging buffer, reused) and repacks it into
// qweight/scales of a packed weight with n columns. Test-fatal on error.
void build_packed(const std::vector<PackedPart>& parts, int n, int k, uint32_t* qweight, __half* scales,
                  DeviceBuffer& staging_q, DeviceBuffer& staging_s);

// Exact fp32 weights of a packed weight, k-major: w_kn[k * n + col].
std::vector<float> host_weights_kn(const std::vector<PackedPart>& parts, int n, int k);

// Reference rows of y = x . W^T in double: y[i * n + col] for x row rows[i] (x is [M, k]), and
// absdot = sum_k |x w| (the scale of the fp32 accumulation error). OpenMP over rows.
void ref_gemm_rows(const std::vector<float>& x, int k, const std::vector<int>& rows, const std::vector<float>& w_kn,
                   int n, std::vector<double>& y, std::vector<double>& absdot);

struct CompareResult {
  int64_t count = 0;
  int64_t n_nonfinite = 0;  // NaN/Inf in the GPU output: unwritten (poisoned) or broken
  int64_t n_bad = 0;        // |gpu - ref| > tol
  double max_ratio = 0;     // max |gpu - ref| / tol
  double nmse = 0;          // sum (gpu - ref)^2 / sum ref^2
  int64_t worst = -1;
  double worst_gpu = 0, worst_ref = 0, worst_tol = 0;
  std::string summary() const;
  bool ok(double nmse_max) const { return n_nonfinite == 0 && n_bad == 0 && nmse <= nmse_max; }
};
CompareResult compare(const float* gpu, const double* ref, const double* tol, int64_t count);

// Rows to check for a batch of m: all when m <= limit, else 0, 1, m-1 and random ones.
std::vector<int> sample_rows(int m, int limit, uint64_t seed);

}  // namespace dsv4::cuda::test
