// harness.cpp: implementation of the CUDA kernel test harness (harness.h).
#include "harness.h"

#include <cuda_runtime_api.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "base/check.h"

namespace dsv4::cuda::test {

bool gpu_available() {
  static const bool available = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) (void)cudaGetLastError();  // clear the sticky "no device" error
    return err == cudaSuccess && n > 0;
  }();
  return available;
}

DeviceBuffer device_alloc(size_t bytes, bool zero) {
  auto r = DeviceBuffer::create(bytes, zero);
  DSV4_CHECK(r.is_ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

void poison(DeviceBuffer& b) { DSV4_CHECK(cudaMemset(b.get(), 0xFF, b.bytes()) == cudaSuccess, "poison"); }

void upload(DeviceBuffer& dst, const void* src, size_t bytes) {
  DSV4_CHECK(bytes <= dst.bytes(), "upload of {} bytes into {}", bytes, dst.bytes());
  DSV4_CHECK(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
}

template <typename T>
std::vector<T> download(const void* src, size_t count) {
  std::vector<T> v(count);
  const cudaError_t err = cudaMemcpy(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost);
  DSV4_CHECK(err == cudaSuccess, "download: {}", cudaGetErrorString(err));
  return v;
}
template std::vector<uint16_t> download<uint16_t>(const void*, size_t);
template std::vector<int32_t> download<int32_t>(const void*, size_t);
template std::vector<float> download<float>(const void*, size_t);
template std::vector<unsigned long long> download<unsigned long long>(const void*, size_t);

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f32_to_bf16(v[i]);
  return r;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(v[i]);
  return r;
}

std::vector<float> random_bf16_values(int64_t count, uint64_t seed, float scale) {
  std::vector<float> r(static_cast<size_t>(count));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) r[size_t(i)] = round_bf16(testing::random_uniform_pm2(seed, i) * scale);
  return r;
}

void build_packed(const std::vector<PackedPart>& parts, int n, int k, uint32_t* qweight, __half* scales,
                  DeviceBuffer& staging_q, DeviceBuffer& staging_s) {
  for (const PackedPart& p : parts) {
    DSV4_CHECK(p.src.k == k, "part K {} != {}", p.src.k, k);
    const size_t qb = size_t(k / 8) * p.src.n * 4, sb = size_t(k / 128) * p.src.n * 2;
    if (staging_q.bytes() < qb) staging_q = device_alloc(qb);
    if (staging_s.bytes() < sb) staging_s = device_alloc(sb);
    Status st = testing::fill_random_gptq(staging_q.as<int32_t>(), staging_s.as<__half>(), p.src.n, k, p.src.seed,
                                          p.src.spec, nullptr);
    DSV4_CHECK(st.is_ok(), "{}", st.to_string());
    GptqInt4Tensor t{staging_q.as<int32_t>(), staging_s.as<__half>(), p.src.n, k};
    st = repack_gptq_int4(t, qweight, scales, n, p.place, nullptr);
    DSV4_CHECK(st.is_ok(), "{}", st.to_string());
  }
  DSV4_CHECK(cudaDeviceSynchronize() == cudaSuccess, "build_packed");
}

std::vector<float> host_weights_kn(const std::vector<PackedPart>& parts, int n, int k) {
  std::vector<float> w(size_t(k) * n, 0.0f);
  for (const PackedPart& p : parts) {
    const HostGptq& g = p.src;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < k / 8; ++i) {
      for (int c = 0; c < g.n; ++c) {
        const uint32_t word = testing::gptq_qword(g.seed, int64_t(i) * g.n + c);
        const float s = g.scale(i * 8 / 128, c);
        const int d = packed_column(c, p.place);
        for (int j = 0; j < 8; ++j) w[size_t(i * 8 + j) * n + d] = s * float(int((word >> (4 * j)) & 0xF) - 8);
      }
    }
  }
  return w;
}

void ref_gemm_rows(const std::vector<float>& x, int k, const std::vector<int>& rows, const std::vector<float>& w_kn,
                   int n, std::vector<double>& y, std::vector<double>& absdot) {
  y.assign(rows.size() * size_t(n), 0.0);
  absdot.assign(rows.size() * size_t(n), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < rows.size(); ++i) {
    double* yr = &y[i * n];
    double* ar = &absdot[i * n];
    const float* xr = &x[size_t(rows[i]) * k];
    for (int kk = 0; kk < k; ++kk) {
      const double xv = xr[kk];
      if (xv == 0.0) continue;
      const float* wr = &w_kn[size_t(kk) * n];
      for (int c = 0; c < n; ++c) {
        const double t = xv * double(wr[c]);
        yr[c] += t;
        ar[c] += std::fabs(t);
      }
    }
  }
}

std::string CompareResult::summary() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "count %lld, non-finite %lld, over tolerance %lld, max |d|/tol %.3g, nmse %.3g, worst #%lld: gpu %.7g "
                "ref %.7g tol %.3g",
                (long long)count, (long long)n_nonfinite, (long long)n_bad, max_ratio, nmse, (long long)worst,
                worst_gpu, worst_ref, worst_tol);
  return buf;
}

CompareResult compare(const float* gpu, const double* ref, const double* tol, int64_t count) {
  CompareResult r;
  r.count = count;
  double se = 0, sr = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(gpu[i])) {
      ++r.n_nonfinite;
      if (r.worst < 0) {
        r.worst = i;
        r.worst_gpu = gpu[i];
        r.worst_ref = ref[i];
      }
      continue;
    }
    const double d = std::fabs(double(gpu[i]) - ref[i]);
    se += d * d;
    sr += ref[i] * ref[i];
    const double ratio = d / tol[i];
    if (d > tol[i]) ++r.n_bad;
    if (ratio > r.max_ratio) {
      r.max_ratio = ratio;
      if (r.n_nonfinite == 0) {
        r.worst = i;
        r.worst_gpu = gpu[i];
        r.worst_ref = ref[i];
        r.worst_tol = tol[i];
      }
    }
  }
  r.nmse = sr > 0 ? se / sr : se;
  return r;
}

std::vector<int> sample_rows(int m, int limit, uint64_t seed) {
  std::vector<int> rows;
  if (m <= limit) {
    for (int i = 0; i < m; ++i) rows.push_back(i);
    return rows;
  }
  rows = {0, 1, m - 1};
  std::mt19937_64 rng(seed);
  while (int(rows.size()) < limit) {
    const int r = int(rng() % uint64_t(m));
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace dsv4::cuda::test
