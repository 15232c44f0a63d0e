// dense_test.cpp: the BF16 decode GEMM (cuda/dense/dense.h) against a double-precision host
// reference, on the forward pass's shapes and on edge shapes.
//
// Shapes: the grouped wo_a (8 groups of 1024 x 4096, bf16 out, the o / u strides of the forward
// pass), the compressed layers' fp32 projection (2624 x 4096 on CSA, 1024 x 4096 on HCA), each at
// M in {1, 2, 7, 16, 32} and with both tile heights (8 and 16 W rows per block) and the automatic
// choice; edge shapes: N not a multiple of 8 or 16, K of one partial chunk or not a multiple of
// a chunk, padded strides, three groups, M = 9 and 20 (partial m16 tiles).
// Contract checked: every owned output within |ref| 2^-8 (bf16) or 2^-22 (f32) plus
// sum|x w| 2^-15 of the reference (fp32 sums in another order, one rounding); every other
// element of the poisoned output (row and group padding, rows past M) left untouched; repeated
// launches bit-identical. The timed runs print the weight stream's bandwidth (no threshold).
// VsCublas times the kernel and the cuBLAS calls of src/gpu/blas.cpp on the same data (the
// numbers behind blas.cpp's routing switches); it prints, it asserts only that the calls run.
// Fp8 weights (dense_decode_gemm_fp8, the lossless form of model/fp8_groups.h): FP8-derived
// weights (random e4m3 codes, subnormals and signed zeros included, times a power of two per
// (row, 128 columns)) give exactly the bf16 kernels' bits on the same values, at every M, tile
// height and edge shape, and fp8_groups_to_bf16 gives exactly those values.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "base/numeric.h"
#include "cuda/common/arch.h"
#include "cuda/common/tensor_map.h"
#include "cuda/common/trace.cuh"
#include "cuda/dense/dense.h"
#include "cuda/dense/dense_internal.h"
#include "cuda/dense/fp8_f16.h"
#include "cuda/testing/random_gptq.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

constexpr int kMaxM = kDenseDecodeMaxRows;

// One problem's host data (x for kMaxM rows; a launch with m rows uses the first m), its device
// copies and the reference for all kMaxM rows.
struct Problem {
  DenseDecodeShape shape;  // m set per launch
  std::vector<float> x, w;
  std::vector<double> ref, absdot;  // [kMaxM][groups][n]
  DeviceBuffer d_x, d_w;
  // fp8: w's fp8 form (codes u8 [rows, k], exps i8 [rows, k / 128]); empty otherwise
  std::vector<uint8_t> codes;
  std::vector<int8_t> exps;
  DeviceBuffer d_codes, d_exps;
  Fp8WeightView w8() const { return {d_codes.as<uint8_t>(), d_exps.as<int8_t>()}; }
};

// fp8: W drawn as random e4m3 codes (no NaN) times 2^e, e in [-12, -6] per (row, 128 columns),
// the way FP8-derived checkpoints hold wo_a; otherwise random bf16 values.
// x_row_exps: x row r scaled by 2^x_row_exps[r] (rows past the list unscaled; exact in bf16).
Problem make_problem(int n, int k, int groups, int64_t ldx, int64_t xgs, int64_t ldy, int64_t ygs, uint64_t seed,
                     bool fp8 = false, const std::vector<int>& x_row_exps = {}) {
  Problem p;
  p.shape.n = n;
  p.shape.k = k;
  p.shape.groups = groups;
  p.shape.ldx = ldx;
  p.shape.x_group_stride = xgs;
  p.shape.ldy = ldy;
  p.shape.y_group_stride = ygs;
  p.x = random_bf16_values(int64_t(kMaxM) * ldx, seed, 1.0f);
  for (size_t r = 0; r < x_row_exps.size() && r < size_t(kMaxM); ++r)
    for (int64_t c = 0; c < ldx; ++c) p.x[r * size_t(ldx) + size_t(c)] = std::ldexp(p.x[r * size_t(ldx) + size_t(c)], x_row_exps[r]);
  if (fp8) {
    const int64_t rows = int64_t(groups) * n, kg = k / 128;
    p.codes.resize(size_t(rows * k));
    p.exps.resize(size_t(rows * kg));
    p.w.resize(p.codes.size());
    uint64_t h = seed * 0x9E3779B97F4A7C15ull + 1;
    auto next = [&h] {
      h ^= h << 13;
      h ^= h >> 7;
      h ^= h << 17;
      return h;
    };
    for (int8_t& e : p.exps) e = int8_t(-12 + int(next() % 7));
    for (int64_t i = 0; i < rows * k; ++i) {
      uint8_t c = uint8_t(next());
      if ((c & 0x7f) == 0x7f) c &= 0xfe;  // NaN codes -> +-448
      p.codes[size_t(i)] = c;
      p.w[size_t(i)] = std::ldexp(e4m3_to_f32(c), p.exps[size_t(i / 128)]);  // k % 128 == 0: flat group i / 128
    }
    p.d_codes = upload_vector(p.codes);
    p.d_exps = upload_vector(p.exps);
  } else {
    p.w = random_bf16_values(int64_t(groups) * n * k, seed + 1, 0.02f);
  }
  p.ref.assign(size_t(kMaxM) * groups * n, 0.0);
  p.absdot.assign(p.ref.size(), 0.0);
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t r = 0; r < int64_t(groups) * n; ++r) {
    const int g = int(r / n), j = int(r % n);
    const float* wr = &p.w[size_t(r) * size_t(k)];
    for (int m = 0; m < kMaxM; ++m) {
      const float* xr = &p.x[size_t(m) * size_t(ldx) + size_t(g) * size_t(xgs)];
      double s = 0, a = 0;
      for (int kk = 0; kk < k; ++kk) {
        const double v = double(xr[kk]) * double(wr[kk]);
        s += v;
        a += std::fabs(v);
      }
      const size_t o = (size_t(m) * groups + g) * size_t(n) + j;
      p.ref[o] = s;
      p.absdot[o] = a;
    }
  }
  p.d_x = upload_vector(to_bf16(p.x));
  p.d_w = upload_vector(to_bf16(p.w));
  return p;
}

// y buffer of kMaxM rows x ldy, poisoned; returns the raw bits after one launch with m rows (fp8:
// on the problem's fp8 form of W).
std::vector<uint8_t> run(const Problem& p, int m, DenseOut out, int rows_per_block, DeviceBuffer& d_y,
                         bool fp8 = false) {
  poison(d_y);
  DenseDecodeShape s = p.shape;
  s.m = m;
  const Status st =
      fp8 ? dense_decode_gemm_fp8(p.d_x.as<__nv_bfloat16>(), p.w8(), d_y.get(), out, s, nullptr, rows_per_block)
          : dense_decode_gemm(p.d_x.as<__nv_bfloat16>(), p.d_w.as<__nv_bfloat16>(), d_y.get(), out, s, nullptr,
                              rows_per_block);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> halves = download<uint16_t>(d_y.get(), d_y.bytes() / 2);  // bytes are even
  std::vector<uint8_t> bytes(halves.size() * 2);
  std::memcpy(bytes.data(), halves.data(), bytes.size());
  return bytes;
}

void check(const char* name, const Problem& p, int m, DenseOut out, int rows_per_block, bool fp8 = false) {
  const DenseDecodeShape& s = p.shape;
  const size_t esz = out == DenseOut::kBf16 ? 2 : 4;
  DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(s.ldy) * esz);
  const std::vector<uint8_t> bits = run(p, m, out, rows_per_block, d_y, fp8);
  auto value = [&](size_t idx) {
    if (esz == 2) {
      uint16_t h;
      std::memcpy(&h, &bits[idx * 2], 2);
      return bf16_to_f32(h);
    }
    float f;
    std::memcpy(&f, &bits[idx * 4], 4);
    return f;
  };
  // Owned elements against the reference.
  std::vector<float> gpu;
  std::vector<double> ref, tol;
  std::vector<char> owned(size_t(kMaxM) * size_t(s.ldy), 0);
  for (int r = 0; r < m; ++r)
    for (int g = 0; g < s.groups; ++g)
      for (int j = 0; j < s.n; ++j) {
        const size_t idx = size_t(r) * size_t(s.ldy) + size_t(g) * size_t(s.y_group_stride) + size_t(j);
        owned[idx] = 1;
        const size_t o = (size_t(r) * s.groups + g) * size_t(s.n) + j;
        gpu.push_back(value(idx));
        ref.push_back(p.ref[o]);
        tol.push_back(std::ldexp(std::fabs(p.ref[o]), esz == 2 ? -8 : -22) + std::ldexp(p.absdot[o], -15));
      }
  const CompareResult cr = compare(gpu.data(), ref.data(), tol.data(), int64_t(gpu.size()));
  EXPECT_TRUE(cr.ok(esz == 2 ? 1e-5 : 1e-8)) << name << " M=" << m << " rpb=" << rows_per_block << ": " << cr.summary();
  // Everything else keeps the poison (0xFF bytes).
  int64_t touched = 0;
  for (size_t idx = 0; idx < owned.size(); ++idx) {
    if (owned[idx]) continue;
    for (size_t b = 0; b < esz; ++b) touched += bits[idx * esz + b] != 0xFF;
  }
  EXPECT_EQ(touched, 0) << name << " M=" << m << ": bytes written outside the output";
  // Bit-identical on a second launch.
  const std::vector<uint8_t> again = run(p, m, out, rows_per_block, d_y, fp8);
  EXPECT_TRUE(again == bits) << name << " M=" << m << ": second launch differs";
  std::printf("[ dense ] %-10s M=%-2d rpb=%-2d max|d|/tol=%.3f nmse=%.2e\n", name, m, rows_per_block, cr.max_ratio,
              cr.nmse);
}

// Median-free simple timing: 20 launches after a warm-up, weight bytes / mean time.
void time_it(const char* name, const Problem& p, int m, DenseOut out) {
  const DenseDecodeShape& s0 = p.shape;
  DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(s0.ldy) * (out == DenseOut::kBf16 ? 2 : 4));
  DenseDecodeShape s = s0;
  s.m = m;
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  constexpr int kIters = 20;
  for (int i = 0; i < 3; ++i)
    DSV4_ASSERT_OK(dense_decode_gemm(p.d_x.as<__nv_bfloat16>(), p.d_w.as<__nv_bfloat16>(), d_y.get(), out, s, nullptr));
  ASSERT_EQ(cudaEventRecord(a, nullptr), cudaSuccess);
  for (int i = 0; i < kIters; ++i)
    DSV4_ASSERT_OK(dense_decode_gemm(p.d_x.as<__nv_bfloat16>(), p.d_w.as<__nv_bfloat16>(), d_y.get(), out, s, nullptr));
  ASSERT_EQ(cudaEventRecord(b, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  const double us = 1000.0 * ms / kIters;
  const double bytes = double(s.groups) * s.n * s.k * 2;
  std::printf("[ time  ] %-10s M=%-2d %8.2f us  %7.1f GB/s (weights %.1f MB)\n", name, m, us, bytes / us * 1e-3,
              bytes * 1e-6);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

// rows_per_block 0 at 1..4 rows is the register GEMV (dense_gemv.cu) on these k % 2048 == 0
// shapes (else the tensor-core kernel of dense_tc.cu where it fits, else the weight-streaming
// kernel of dense_stream.cu); 8 and 16 the mma one.
const int kRealM[] = {1, 2, 4, 7, 16, 32};

TEST(DenseDecode, GroupedWoA) {
  DSV4_SKIP_WITHOUT_GPU();
  // Flash: 8 groups, o_lora_rank 1024, group_in_dim 4096; o [T, 8 * 4096], u [T, 8 * 1024].
  const Problem p = make_problem(1024, 4096, 8, 8 * 4096, 4096, 8 * 1024, 1024, 101);
  for (int m : kRealM)
    for (int rpb : {0, 8, 16, kDenseForceTc, kDenseForceGemv}) {
      if ((rpb == kDenseForceTc && m > kDenseTcMaxRows) || (rpb == kDenseForceGemv && m > kDenseGemvMaxRows)) continue;
      check("wo_a", p, m, DenseOut::kBf16, rpb);
    }
  for (int m : {1, 32}) time_it("wo_a", p, m, DenseOut::kBf16);
}

TEST(DenseDecode, CompressedProjections) {
  DSV4_SKIP_WITHOUT_GPU();
  for (int n : {2624, 1024}) {
    const Problem p = make_problem(n, 4096, 1, 4096, 0, n, 0, 202 + uint64_t(n));
    const char* name = n == 2624 ? "proj_csa" : "proj_hca";
    for (int m : kRealM)
      for (int rpb : {0, 8, 16, kDenseForceTc, kDenseForceGemv}) {
        if ((rpb == kDenseForceTc && m > kDenseTcMaxRows) || (rpb == kDenseForceGemv && m > kDenseGemvMaxRows)) continue;
        check(name, p, m, DenseOut::kF32, rpb);
      }
    for (int m : {1, 32}) time_it(name, p, m, DenseOut::kF32);
  }
}

// The weight streams with L2 evict-first priority (arch.h set_weights_evict_first): the same bytes
// at 1..4 rows from the tensor-core and the streaming kernel, bf16 (grouped wo_a) and fp32 out
// (the CSA projection).
TEST(DenseDecode, EvictFirstWeightsGiveTheSameBits) {
  DSV4_SKIP_WITHOUT_GPU();
  const Problem woa = make_problem(1024, 4096, 8, 8 * 4096, 4096, 8 * 1024, 1024, 301);
  const Problem proj = make_problem(2624, 4096, 1, 4096, 0, 2624, 0, 302);
  for (const Problem* p : {&woa, &proj}) {
    const DenseOut out = p == &woa ? DenseOut::kBf16 : DenseOut::kF32;
    DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(p->shape.ldy) * (out == DenseOut::kBf16 ? 2 : 4));
    for (int m : {1, 2, 4})
      for (int rpb : {0, kDenseForceStream}) {  // the tensor-core kernel, the streaming one
        std::vector<uint8_t> normal;
        {
          const ScopedWeightsEvictFirst l2(false);
          normal = run(*p, m, out, rpb, d_y);
        }
        const ScopedWeightsEvictFirst l2(true);
        EXPECT_EQ(run(*p, m, out, rpb, d_y), normal) << (p == &woa ? "wo_a" : "proj_csa") << " M=" << m << " rpb=" << rpb;
      }
  }
}

// A named problem shape (make_problem's arguments).
struct Case {
  const char* name;
  int n, k, groups;
  int64_t ldx, xgs, ldy, ygs;
};

// The fp8 form against the bf16 weights it stands for: the same bits from both kernels (1..4 rows
// the streaming kernel, kDenseForceStream; rows_per_block 8 / 16 the mma kernel), on wo_a and on
// edge shapes with k % 128 == 0 (partial pieces and chunks, padded strides, blocks spanning
// groups). Blocks of 32 rows (fp8 only; the automatic choice at 9..32 rows) and the tensor-core
// kernel (the automatic choice at 1..8 rows where n % 32 == 0; Fp8TensorCoreKernel below) sum in
// other orders: against the reference, with the contract's tolerance.
TEST(DenseDecode, Fp8WeightsGiveTheBf16Bits) {
  DSV4_SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {"wo_a", 1024, 4096, 8, 8 * 4096, 4096, 8 * 1024, 1024},
      {"n1000", 1000, 4096, 1, 4104, 0, 1003, 0},
      {"n5_k128", 5, 128, 1, 128, 0, 5, 0},
      {"grp3", 24, 384, 3, 3 * 384 + 16, 384 + 8, 3 * 30 + 2, 30},
      {"grp20", 35, 384, 20, 20 * 384 + 8, 384, 20 * 40, 40},
      {"k6272", 300, 6272, 1, 6272, 0, 300, 0},  // stream pieces 2048 x 3 + 128
  };
  for (const Case& c : cases) {
    const Problem p = make_problem(c.n, c.k, c.groups, c.ldx, c.xgs, c.ldy, c.ygs, 404, /*fp8=*/true);
    DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(p.shape.ldy) * 2);
    for (int m : {1, 2, 3, 4, 7, 9, 16, 20, 32})
      for (int rpb : {kDenseForceStream, 8, 16}) {
        if (rpb == kDenseForceStream && m > 4) continue;  // the streaming kernel's rows
        const std::vector<uint8_t> bf16 = run(p, m, DenseOut::kBf16, rpb, d_y);
        EXPECT_TRUE(run(p, m, DenseOut::kBf16, rpb, d_y, /*fp8=*/true) == bf16) << c.name << " M=" << m << " rpb=" << rpb;
      }
    for (int m : {1, 9, 17, 32}) check(c.name, p, m, DenseOut::kBf16, 32, /*fp8=*/true);
    for (int m : {5, 8, 32}) check(c.name, p, m, DenseOut::kBf16, 0, /*fp8=*/true);
    check(c.name, p, 1, DenseOut::kBf16, 0);  // the values themselves, against the reference
    check(c.name, p, 32, DenseOut::kBf16, 0);
  }
  // Evict-first reads (arch.h) change nothing either.
  const Problem woa = make_problem(1024, 4096, 8, 8 * 4096, 4096, 8 * 1024, 1024, 405, /*fp8=*/true);
  DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(woa.shape.ldy) * 2);
  for (int m : {1, 4})
    for (int rpb : {0, kDenseForceStream}) {
      std::vector<uint8_t> normal;
      {
        const ScopedWeightsEvictFirst l2(false);
        normal = run(woa, m, DenseOut::kBf16, rpb, d_y, true);
      }
      const ScopedWeightsEvictFirst l2(true);
      EXPECT_TRUE(run(woa, m, DenseOut::kBf16, rpb, d_y, true) == normal) << "wo_a evict-first M=" << m << " rpb=" << rpb;
    }
}

// The tensor-core kernel (dense_tc.cu: what rows_per_block 0 picks for fp8 weights at 1..8 rows
// where n % 32 == 0; kDenseForceTc for bf16 weights, bf16 and f32 out) against the reference, with
// the contract's tolerance, on wo_a and on shapes where K warps own unequal slot counts or none
// (k = 128, 192, 384, 640), padded strides and several groups; x rows of very different magnitudes
// (2^+-40, 2^+-100, a zero row) for the fp8 form's per-row fp16 scaling. check() also asserts the
// poison outside the output and repeatable bits.
TEST(DenseDecode, Fp8TensorCoreKernel) {
  DSV4_SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {"wo_a", 1024, 4096, 8, 8 * 4096, 4096, 8 * 1024, 1024},
      {"n32_k128", 32, 128, 3, 3 * 128 + 8, 128, 3 * 40, 40},
      {"n64_k384", 64, 384, 2, 2 * 384 + 16, 384 + 8, 2 * 64 + 2, 65},
      {"n96_k640", 96, 640, 1, 648, 0, 100, 0},
      {"n2048_k4096", 2048, 4096, 1, 4096, 0, 2048, 0},
  };
  const std::vector<int> exps = {0, 40, -40, 100, -100, 7, -7, 0};
  for (const Case& c : cases) {
    const Problem p = make_problem(c.n, c.k, c.groups, c.ldx, c.xgs, c.ldy, c.ygs, 411, /*fp8=*/true, exps);
    for (int m = 1; m <= kDenseTcMaxRows; ++m) check(c.name, p, m, DenseOut::kBf16, 0, /*fp8=*/true);
  }
  // The bf16 form of the kernel on the same shapes (k a multiple of 64 here too), both outputs.
  for (const Case& c : cases) {
    const Problem p = make_problem(c.n, c.k, c.groups, c.ldx, c.xgs, c.ldy, c.ygs, 413, /*fp8=*/false, exps);
    for (int m : {1, 2, 5, 8}) {
      check(c.name, p, m, DenseOut::kBf16, kDenseForceTc);
      check(c.name, p, m, DenseOut::kF32, kDenseForceTc);
    }
  }
  {
    const Problem p = make_problem(96, 64 * 3, 1, 64 * 3, 0, 96, 0, 414, /*fp8=*/false, exps);  // k = 192
    for (int m : {1, 8}) check("n96_k192", p, m, DenseOut::kF32, kDenseForceTc);
  }
  // A zero row among others.
  Problem z = make_problem(64, 512, 1, 512, 0, 64, 0, 412, /*fp8=*/true, {3, 0, -3});
  std::fill(z.x.begin() + 512, z.x.begin() + 1024, 0.0f);
  z.d_x = upload_vector(to_bf16(z.x));
  for (int j = 0; j < 64; ++j) z.ref[size_t(64 + j)] = z.absdot[size_t(64 + j)] = 0.0;
  check("zero_row", z, 3, DenseOut::kBf16, 0, /*fp8=*/true);
  // Forcing the streaming kernel past its rows is refused with a message, not run elsewhere.
  DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(z.shape.ldy) * 2);
  DenseDecodeShape s5 = z.shape;
  s5.m = 5;
  const Status st = dense_decode_gemm_fp8(z.d_x.as<__nv_bfloat16>(), z.w8(), d_y.get(), DenseOut::kBf16, s5, nullptr,
                                          kDenseForceStream);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("streaming kernel does not take"), std::string::npos) << st.to_string();
}

TEST(DenseDecode, Fp8ToBf16GivesTheExactValues) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const int k : {128, 4096, 6272}) {
    const int rows = k == 4096 ? 8 * 1024 : 37;
    const Problem p = make_problem(rows, k, 1, k, 0, rows, 0, 406 + uint64_t(k), /*fp8=*/true);
    DeviceBuffer d_out = device_alloc(size_t(rows) * size_t(k) * 2 + 64);
    poison(d_out);
    DSV4_ASSERT_OK(fp8_groups_to_bf16(p.w8(), rows, k, d_out.as<__nv_bfloat16>(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> got = download<uint16_t>(d_out.get(), d_out.bytes() / 2);
    int64_t bad = 0;
    for (size_t i = 0; i < size_t(rows) * size_t(k); ++i) bad += got[i] != f32_to_bf16(p.w[i]);
    EXPECT_EQ(bad, 0) << "k=" << k;
    for (size_t i = size_t(rows) * size_t(k); i < got.size(); ++i) EXPECT_EQ(got[i], 0xFFFF) << "past the weight";
  }
}

// The synthetic benchmark's fp8-form weights (testing::fill_random_fp8_groups): every code and
// exponent as the host regenerates it, no NaN code, exponents in range; their bf16 copy exact.
TEST(DenseDecode, SyntheticFp8WeightsAreValid) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows = 300;
  const int k = 4096, kg = k / 128;
  DeviceBuffer d_c = device_alloc(size_t(rows) * k), d_e = device_alloc(size_t(rows) * kg);
  DeviceBuffer d_out = device_alloc(size_t(rows) * k * 2);
  DSV4_ASSERT_OK(testing::fill_random_fp8_groups(d_c.as<uint8_t>(), d_e.as<int8_t>(), rows, k, 77, -15, -14, nullptr));
  DSV4_ASSERT_OK(fp8_groups_to_bf16({d_c.as<uint8_t>(), d_e.as<int8_t>()}, rows, k, d_out.as<__nv_bfloat16>(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> codes(static_cast<size_t>(rows * k));
  std::vector<int8_t> exps(static_cast<size_t>(rows * kg));
  ASSERT_EQ(cudaMemcpy(codes.data(), d_c.get(), codes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(exps.data(), d_e.get(), exps.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const std::vector<uint16_t> out = download<uint16_t>(d_out.get(), size_t(rows) * k);
  int64_t bad = 0, nan_codes = 0, ranged = 0;
  for (int64_t i = 0; i < rows * k; ++i) {
    bad += codes[size_t(i)] != testing::fp8_code(77, i);
    nan_codes += (codes[size_t(i)] & 0x7f) == 0x7f;
    bad += out[size_t(i)] != f32_to_bf16(std::ldexp(e4m3_to_f32(codes[size_t(i)]), exps[size_t(i / 128)]));
  }
  for (int64_t j = 0; j < rows * kg; ++j) {
    bad += exps[size_t(j)] != testing::fp8_group_exp(77, j, -15, -14);
    ranged += exps[size_t(j)] == -15 || exps[size_t(j)] == -14;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(nan_codes, 0);
  EXPECT_EQ(ranged, rows * kg);
  EXPECT_FALSE(testing::fill_random_fp8_groups(d_c.as<uint8_t>(), d_e.as<int8_t>(), rows, 100, 1, -15, -14, nullptr).is_ok());
  EXPECT_FALSE(testing::fill_random_fp8_groups(d_c.as<uint8_t>(), d_e.as<int8_t>(), rows, k, 1, -5, 8, nullptr).is_ok());
}

TEST(DenseDecode, EdgeShapes) {
  DSV4_SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {"n1000", 1000, 4096, 1, 4104, 0, 1003, 0},         // N % 16 != 0, padded rows
      {"n5_k96", 5, 96, 1, 96, 0, 5, 0},                   // one partial chunk, most warps idle
      {"k4128", 40, 4128, 1, 4128, 0, 40, 0},              // K one step past a chunk multiple
      {"grp3", 24, 288, 3, 3 * 288 + 16, 288 + 8, 3 * 30 + 2, 30},  // groups with padded strides
      {"grp20", 35, 320, 20, 20 * 320 + 8, 320, 20 * 40, 40},        // stream kernel: blocks span two groups
      {"k6176", 300, 6176, 1, 6176, 0, 300, 0},                      // stream kernel: pieces 2048, 2048, 2048, 32
      {"n5_k2048", 5, 2048, 1, 2048, 0, 7, 0},                       // GEMV: 5 one-row blocks, 7 warps idle each
      {"grp20_k2048", 35, 2048, 20, 20 * 2048 + 8, 2048, 20 * 40, 40},  // GEMV: 20 groups on blockIdx.y, a few rows a block
      {"grp2_k6144", 700, 6144, 2, 2 * 6144 + 8, 6144 + 8, 2 * 704, 704},  // GEMV: 3 units a row, padded strides
  };
  for (const Case& c : cases) {
    const Problem p = make_problem(c.n, c.k, c.groups, c.ldx, c.xgs, c.ldy, c.ygs, 303);
    for (int m : {1, 2, 3, 4, 7, 9, 16, 20, 32})
      for (int rpb : {0, 8, 16}) {
        check(c.name, p, m, DenseOut::kF32, rpb);
        check(c.name, p, m, DenseOut::kBf16, rpb);
      }
    if (c.k % 2048 == 0) {  // the register GEMV where it fits (1..4 rows: kernels of 1, 2 and 4)
      for (int m = 1; m <= kDenseGemvMaxRows; ++m) {
        check(c.name, p, m, DenseOut::kF32, kDenseForceGemv);
        check(c.name, p, m, DenseOut::kBf16, kDenseForceGemv);
      }
      // A row's sum does not depend on how many rows run beside it: rows 0..m-1 at m = 1..3 have
      // the bits of the same rows at m = 4.
      DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(p.shape.ldy) * 4);
      const std::vector<uint8_t> all = run(p, kDenseGemvMaxRows, DenseOut::kF32, kDenseForceGemv, d_y);
      for (int m = 1; m < kDenseGemvMaxRows; ++m) {
        const std::vector<uint8_t> some = run(p, m, DenseOut::kF32, kDenseForceGemv, d_y);
        int64_t differ = 0;
        for (int r = 0; r < m; ++r)
          for (int g = 0; g < p.shape.groups; ++g)
            for (int j = 0; j < p.shape.n; ++j) {
              const size_t at = 4 * (size_t(r) * size_t(p.shape.ldy) + size_t(g) * size_t(p.shape.y_group_stride) + j);
              differ += std::memcmp(&all[at], &some[at], 4) != 0;
            }
        EXPECT_EQ(differ, 0) << c.name << ": rows at M=" << m << " differ from the same rows at M=4";
      }
    }
  }
  // The GEMV refuses what it does not take, with the reason.
  const Problem p = make_problem(1000, 4096, 1, 4104, 0, 1003, 0, 304);
  DenseDecodeShape s = p.shape;
  s.m = 5;
  DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(s.ldy) * 4);
  Status st = dense_decode_gemm(p.d_x.as<__nv_bfloat16>(), p.d_w.as<__nv_bfloat16>(), d_y.get(), DenseOut::kF32, s,
                                nullptr, kDenseForceGemv);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("register-streaming GEMV does not take m 5 (1..4)"), std::string::npos)
      << st.to_string();
  s.m = 1;
  s.k = 4096 - 32;  // k not a multiple of 2048
  st = dense_decode_gemm(p.d_x.as<__nv_bfloat16>(), p.d_w.as<__nv_bfloat16>(), d_y.get(), DenseOut::kF32, s, nullptr,
                         kDenseForceGemv);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("k 4064 (a multiple of 2048)"), std::string::npos) << st.to_string();
  const Problem p8 = make_problem(1024, 4096, 1, 4096, 0, 1024, 0, 305, /*fp8=*/true);
  s = p8.shape;
  s.m = 1;
  st = dense_decode_gemm_fp8(p8.d_x.as<__nv_bfloat16>(), p8.w8(), d_y.get(), DenseOut::kBf16, s, nullptr,
                             kDenseForceGemv);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("(register GEMV) with bf16 weights"), std::string::npos) << st.to_string();
}

// ---- Kernel vs cuBLAS timing ----
//
// Each timed call reads one of `copies` weight copies in turn (together > 2x the 50 MB L2, and
// at least 4), so the weights come from HBM as in the model. The stream is held by a host
// function until all 50 calls and the 51 events between them are queued, so the calls run back
// to back as in a replayed graph (no host launch gaps): call i takes events i .. i + 1. Printed:
// the median and the mean of the 50, and weight bytes / median.
struct TimedShape {
  const char* name;
  int n, k, groups;
  bool bf16_out;  // grouped wo_a: bf16; projections: f32
};

std::atomic<bool> g_release{false};
void CUDART_CB hold_stream(void*) {
  while (!g_release.load(std::memory_order_acquire)) std::this_thread::yield();
}

// Runs call(i) for i < kTimed after warm-up; returns {median, mean} in microseconds.
std::pair<double, double> time_calls(cudaStream_t stream, const std::function<void(int)>& call) {
  constexpr int kTimed = 50;
  for (int i = 0; i < 5; ++i) call(i);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<cudaEvent_t> ev(kTimed + 1);
  for (cudaEvent_t& e : ev) EXPECT_EQ(cudaEventCreate(&e), cudaSuccess);
  g_release.store(false, std::memory_order_release);
  EXPECT_EQ(cudaLaunchHostFunc(stream, hold_stream, nullptr), cudaSuccess);
  for (int i = 0; i < kTimed; ++i) {
    EXPECT_EQ(cudaEventRecord(ev[size_t(i)], stream), cudaSuccess);
    call(i);
  }
  EXPECT_EQ(cudaEventRecord(ev[kTimed], stream), cudaSuccess);
  g_release.store(true, std::memory_order_release);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<double> us(kTimed);
  for (int i = 0; i < kTimed; ++i) {
    float ms = 0;
    EXPECT_EQ(cudaEventElapsedTime(&ms, ev[size_t(i)], ev[size_t(i) + 1]), cudaSuccess);
    us[size_t(i)] = 1000.0 * ms;
  }
  float total = 0;
  EXPECT_EQ(cudaEventElapsedTime(&total, ev[0], ev[kTimed]), cudaSuccess);
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return {0.5 * (us[kTimed / 2 - 1] + us[kTimed / 2]), 1000.0 * total / kTimed};
}

// A stream and a cuBLAS handle on it as Blas::init sets them up (own 32 MB workspace, as
// gpu_model.cpp's kBlasWorkspaceBytes; fp32 split-K reductions), for the timing tests.
struct TimingBlas {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  DeviceBuffer workspace;
  bool ok = false;
  TimingBlas() {
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
      return;
    workspace = device_alloc(size_t(32) << 20);
    ok = cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS &&
         cublasSetWorkspace(handle, workspace.get(), workspace.bytes()) == CUBLAS_STATUS_SUCCESS &&
         cublasSetMathMode(handle, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
             CUBLAS_STATUS_SUCCESS;
  }
  ~TimingBlas() {
    if (handle != nullptr) cublasDestroy(handle);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // As Blas::grouped_bf16_out: u [m, groups * n] = bf16(o [m, groups * k] . w^T) per group g of
  // w (bf16 [groups * n, k]), o's columns at g k with row stride ldx, u's at g n.
  void grouped_wo_a(const void* w, const void* o, void* u, int m, int n, int k, int groups, int64_t ldx) const {
    const float one = 1.0f, zero = 0.0f;
    EXPECT_EQ(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k,
                                         int64_t(n) * k, o, CUDA_R_16BF, int(ldx), k, &zero, u, CUDA_R_16BF,
                                         groups * n, n, groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
  }
};

TEST(DenseDecode, VsCublas) {
  DSV4_SKIP_WITHOUT_GPU();
  const TimedShape shapes[] = {
      {"wo_a", 1024, 4096, 8, true},
      {"proj_csa", 2624, 4096, 1, false},
      {"proj_hca", 1024, 4096, 1, false},
  };
  const TimingBlas tb;
  ASSERT_TRUE(tb.ok);
  const cudaStream_t stream = tb.stream;
  auto dev_or = current_device_info();
  ASSERT_TRUE(dev_or.is_ok());
  const DeviceInfo* dev = *dev_or;
  for (const TimedShape& ts : shapes) {
    const size_t wbytes = size_t(ts.groups) * size_t(ts.n) * size_t(ts.k) * 2;
    const int copies = int(std::max<size_t>(4, (size_t(120) << 20) / wbytes + 1));
    const std::vector<uint16_t> w_host = to_bf16(random_bf16_values(int64_t(wbytes / 2), 7, 0.02f));
    DeviceBuffer d_w = device_alloc(wbytes * size_t(copies));
    for (int c = 0; c < copies; ++c)
      ASSERT_EQ(cudaMemcpy(static_cast<char*>(d_w.get()) + wbytes * size_t(c), w_host.data(), wbytes,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    const int64_t ldx = int64_t(ts.groups) * ts.k, ldy = int64_t(ts.groups) * ts.n;
    const DeviceBuffer d_x = upload_vector(to_bf16(random_bf16_values(int64_t(kMaxM) * ldx, 8, 1.0f)));
    DeviceBuffer d_y = device_alloc(size_t(kMaxM) * size_t(ldy) * (ts.bf16_out ? 2 : 4));
    const auto* x = d_x.as<__nv_bfloat16>();
    auto weights = [&](int i) {
      return reinterpret_cast<const __nv_bfloat16*>(static_cast<const char*>(d_w.get()) + wbytes * size_t(i % copies));
    };
    // The fp8 form's copies (codes of random bytes, no NaN; exponents -10): as many, half the bytes.
    const size_t cbytes = wbytes / 2, ebytes = cbytes / 128;
    DeviceBuffer d_c, d_e;
    if (ts.bf16_out) {
      std::vector<uint8_t> c(cbytes);
      for (size_t i = 0; i < cbytes; ++i) c[i] = uint8_t((i * 2654435761u) >> 13) & 0xbe;  // never 0x7f / 0xff
      const std::vector<int8_t> e(ebytes, int8_t(-10));
      d_c = device_alloc(cbytes * size_t(copies));
      d_e = device_alloc(ebytes * size_t(copies));
      for (int cp = 0; cp < copies; ++cp) {
        ASSERT_EQ(cudaMemcpy(static_cast<char*>(d_c.get()) + cbytes * size_t(cp), c.data(), cbytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(static_cast<char*>(d_e.get()) + ebytes * size_t(cp), e.data(), ebytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
    auto fp8_weights = [&](int i) {
      return Fp8WeightView{static_cast<const uint8_t*>(d_c.get()) + cbytes * size_t(i % copies),
                           static_cast<const int8_t*>(d_e.get()) + ebytes * size_t(i % copies)};
    };
    for (int m : {1, 4, 8, 32}) {
      DenseDecodeShape s;
      s.m = m;
      s.n = ts.n;
      s.k = ts.k;
      s.groups = ts.groups;
      s.ldx = ldx;
      s.x_group_stride = ts.groups > 1 ? ts.k : 0;
      s.ldy = ldy;
      s.y_group_stride = ts.groups > 1 ? ts.n : 0;
      const DenseOut out = ts.bf16_out ? DenseOut::kBf16 : DenseOut::kF32;
      auto report = [&](const char* who, std::pair<double, double> t) {
        std::printf("[ vs    ] %-8s M=%-2d %-12s median %7.2f us  mean %7.2f us  %7.1f GB/s  (%d copies of %.1f MB)\n",
                    ts.name, m, who, t.first, t.second, double(wbytes) / t.first * 1e-3, copies, double(wbytes) * 1e-6);
      };
      for (int rpb : {0, kDenseForceStream, 8, 16, kDenseForceTc, kDenseForceGemv}) {
        if ((rpb == kDenseForceTc && m > kDenseTcMaxRows) || (rpb == kDenseForceStream && m > 4) ||
            (rpb == kDenseForceGemv && m > kDenseGemvMaxRows))
          continue;
        const auto t = time_calls(stream, [&](int i) {
          const Status st = dense_decode_gemm(x, weights(i), d_y.get(), out, s, stream, rpb);
          EXPECT_TRUE(st.is_ok()) << st.to_string();
        });
        report(rpb == 0 ? "dense" : rpb == kDenseForceStream ? "dense stream" : rpb == 8 ? "dense rpb8"
               : rpb == 16 ? "dense rpb16" : rpb == kDenseForceGemv ? "dense gemv" : "dense tc", t);
      }
      // SM90: the tensor-core kernel with its slots by cp.async instead of TMA (the A/B of dense_tc.cu).
      const bool tma = tma_supported(*dev);
      if (tma && m <= kDenseTcMaxRows) {
        report("dense tc cpa", time_calls(stream, [&](int i) {
                 const Status st = dense_tc_gemm(x, weights(i), {}, d_y.get(), out, s, stream, {.cp_async_slots = true});
                 EXPECT_TRUE(st.is_ok()) << st.to_string();
               }));
        if (ts.bf16_out)
          report("fp8 tc cpa", time_calls(stream, [&](int i) {
                   const Status st = dense_tc_gemm(x, nullptr, fp8_weights(i), d_y.get(), out, s, stream,
                                                   {.cp_async_slots = true});
                   EXPECT_TRUE(st.is_ok()) << st.to_string();
                 }));
      }
      if (ts.bf16_out) {  // wo_a in the fp8 form: half the bytes (GB/s below: of the bf16 bytes)
        for (int rpb : {0, kDenseForceStream, 16, 32}) {
          if (rpb == kDenseForceStream && m > 4) continue;
          const auto t = time_calls(stream, [&](int i) {
            const Status st = dense_decode_gemm_fp8(x, fp8_weights(i), d_y.get(), out, s, stream, rpb);
            EXPECT_TRUE(st.is_ok()) << st.to_string();
          });
          report(rpb == 0 ? (m <= 8 ? "fp8 tc" : "fp8") : rpb == kDenseForceStream ? "fp8 stream"
                 : rpb == 16 ? "fp8 rpb16" : "fp8 rpb32", t);
        }
      }
      const float one = 1.0f, zero = 0.0f;
      const auto t = time_calls(stream, [&](int i) {
        if (ts.groups > 1) {
          tb.grouped_wo_a(weights(i), x, d_y.get(), m, ts.n, ts.k, ts.groups, ldx);
        } else {  // as Blas::gemm_f32_out
          EXPECT_EQ(cublasGemmEx(tb.handle, CUBLAS_OP_T, CUBLAS_OP_N, ts.n, m, ts.k, &one, weights(i), CUDA_R_16BF,
                                 ts.k, x, CUDA_R_16BF, int(ldx), &zero, d_y.get(), CUDA_R_32F, int(ldy),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
        }
      });
      report("cublas", t);
    }
  }
}

// Prefill steps of a model holding wo_a in the fp8 form copy it to bf16 (fp8_groups_to_bf16) and
// run cuBLAS on the copy (gpu/blas.cpp grouped_fp8_bf16_out). Times the copy, cuBLAS at 4096 rows
// on random bf16 weights and on the copy of synthetic fp8-form weights (bench --wo-a fp8), and
// the two in a row; asserts only that the calls run.
TEST(DenseDecode, Fp8PrefillCopyVsCublas) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int kN = 1024, kK = 4096, kGroups = 8, kM = 4096, kCopies = 4;
  const int64_t rows = int64_t(kGroups) * kN, wn = rows * kK;
  const TimingBlas tb;
  ASSERT_TRUE(tb.ok);
  const cudaStream_t stream = tb.stream;
  DeviceBuffer d_x = device_alloc(size_t(kM) * kGroups * kK * 2), d_y = device_alloc(size_t(kM) * rows * 2);
  DeviceBuffer d_wbf = device_alloc(size_t(wn) * 2), d_copy = device_alloc(size_t(wn) * 2);
  DeviceBuffer d_c = device_alloc(size_t(wn) * kCopies), d_e = device_alloc(size_t(wn / 128) * kCopies);
  DSV4_ASSERT_OK(testing::fill_random_bf16(d_x.as<__nv_bfloat16>(), int64_t(kM) * kGroups * kK, 11, 1.0f, stream));
  DSV4_ASSERT_OK(testing::fill_random_bf16(d_wbf.as<__nv_bfloat16>(), wn, 12, 0.03f, stream));
  for (int c = 0; c < kCopies; ++c)  // as device_weights.cpp draws synthetic fp8-form weights for k = 4096
    DSV4_ASSERT_OK(testing::fill_random_fp8_groups(d_c.as<uint8_t>() + wn * c, d_e.as<int8_t>() + wn / 128 * c, rows, kK,
                                                   13 + uint64_t(c), -15, -14, stream));
  auto fp8 = [&](int i) {
    return Fp8WeightView{d_c.as<uint8_t>() + wn * (i % kCopies), d_e.as<int8_t>() + wn / 128 * (i % kCopies)};
  };
  auto gemm = [&](const void* w) { tb.grouped_wo_a(w, d_x.get(), d_y.get(), kM, kN, kK, kGroups, int64_t(kGroups) * kK); };
  auto copy = [&](int i) {
    const Status st = fp8_groups_to_bf16(fp8(i), rows, kK, d_copy.as<__nv_bfloat16>(), stream);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  };
  const double flop = 2.0 * kM * double(wn);
  auto report = [&](const char* who, std::pair<double, double> t, bool gemm_flops) {
    std::printf("[ pre   ] wo_a M=%d %-18s median %9.2f us  mean %9.2f us", kM, who, t.first, t.second);
    if (gemm_flops) std::printf("  %6.1f TFLOP/s", flop / t.first * 1e-6);
    else std::printf("  %7.1f GB/s (codes + exps + bf16)", double(wn) * (3.0 + 1.0 / 128) / t.first * 1e-3);
    std::printf("\n");
  };
  report("fp8 -> bf16 copy", time_calls(stream, copy), false);
  report("cublas, bf16", time_calls(stream, [&](int) { gemm(d_wbf.get()); }), true);
  copy(0);
  report("cublas, fp8 copy", time_calls(stream, [&](int) { gemm(d_copy.get()); }), true);
  report("copy + cublas", time_calls(stream, [&](int i) {
           copy(i);
           gemm(d_copy.get());
         }),
         true);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

// The tensor-core kernel's fp8 -> fp16 bit placement (no GPU needed): every code (but the two
// NaNs, which the fp8 form never holds) in every byte of a word reads as its e4m3 value times 2^-8,
// subnormals, signed zeros and +-448 included, in the 0|2 / 1|3 halves the kernel expects.
// The tensor-core kernel's phases, per block (trace stamps, cuda/common/trace.cuh): wo_a in the
// fp8 form at M = 1 and 8 and the CSA projection's bf16 weight at M = 1, each launched 16 times
// back to back (PDL where on) over 4 weight copies larger than L2; printed for launch 12 relative
// to its first block's entry, with the previous launch's last exit. Asserts every block of every
// launch stamped its four points in order (entry <= x staged <= loop done <= exit).
TEST(DenseDecode, TensorCoreTimeline) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int kLaunches = 16, kShown = 12, kCopies = 4;
  struct Run {
    const char* name;
    int n, k, groups, m;
    bool fp8;
  };
  const Run runs[] = {{"wo_a fp8", 1024, 4096, 8, 1, true}, {"wo_a fp8", 1024, 4096, 8, 8, true},
                      {"proj_csa bf16", 2624, 4096, 1, 1, false}};
  for (const Run& r : runs) {
    const int64_t rows = int64_t(r.groups) * r.n, wn = rows * r.k;
    const size_t wbytes = size_t(wn) * (r.fp8 ? 1 : 2), ebytes = size_t(wn / 128);
    DeviceBuffer d_w = device_alloc(wbytes * kCopies), d_e = device_alloc(r.fp8 ? ebytes * kCopies : 16);
    DeviceBuffer d_x = device_alloc(size_t(r.m) * r.groups * r.k * 2), d_y = device_alloc(size_t(r.m) * rows * 4);
    DSV4_ASSERT_OK(testing::fill_random_bf16(d_x.as<__nv_bfloat16>(), int64_t(r.m) * r.groups * r.k, 31, 1.0f, nullptr));
    for (int c = 0; c < kCopies; ++c) {
      if (r.fp8)
        DSV4_ASSERT_OK(testing::fill_random_fp8_groups(d_w.as<uint8_t>() + wbytes * c, d_e.as<int8_t>() + ebytes * c,
                                                       rows, r.k, 40 + uint64_t(c), -15, -14, nullptr));
      else
        DSV4_ASSERT_OK(testing::fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(d_w.as<uint8_t>() + wbytes * c), wn,
                                                 40 + uint64_t(c), 0.03f, nullptr));
    }
    const DenseDecodeShape s{.m = r.m, .n = r.n, .k = r.k, .groups = r.groups, .ldx = int64_t(r.groups) * r.k,
                             .x_group_stride = r.groups > 1 ? r.k : 0, .ldy = rows,
                             .y_group_stride = r.groups > 1 ? r.n : 0};
    auto dev_or = current_device_info();
    ASSERT_TRUE(dev_or.is_ok());
    const DeviceInfo* dev = *dev_or;
    const void* w0 = r.fp8 ? nullptr : d_w.get();
    const Fp8WeightView w80 = r.fp8 ? Fp8WeightView{d_w.as<uint8_t>(), d_e.as<int8_t>()} : Fp8WeightView{};
    ASSERT_TRUE(dense_tc_supported(s, w0, w80, *dev)) << r.name;
    const int block_rows = dense_tc_fills_gpu(s, *dev) ? 32 : 16;
    const int64_t blocks = rows / block_rows;
    DeviceBuffer d_tr = device_alloc(size_t(kLaunches) * size_t(blocks) * kTracePoints * 8);
    for (const bool cpa : {false, true}) {
      if (cpa && !tma_supported(*dev)) continue;  // SM90: TMA slots, then cp.async ones
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      // On the launches' stream: a plain cudaMemset (legacy stream) does not order against it.
      ASSERT_EQ(cudaMemsetAsync(d_tr.get(), 0, size_t(kLaunches) * size_t(blocks) * kTracePoints * 8, stream),
                cudaSuccess);
      for (int i = 0; i < kLaunches; ++i) {
        const int c = i % kCopies;
        const __nv_bfloat16* w = r.fp8 ? nullptr : reinterpret_cast<const __nv_bfloat16*>(d_w.as<uint8_t>() + wbytes * c);
        const Fp8WeightView w8 =
            r.fp8 ? Fp8WeightView{d_w.as<uint8_t>() + wbytes * c, d_e.as<int8_t>() + ebytes * c} : Fp8WeightView{};
        const Status st = dense_tc_gemm(d_x.as<__nv_bfloat16>(), w, w8, d_y.get(), r.fp8 ? DenseOut::kBf16 : DenseOut::kF32,
                                        s, stream,
                                        {.trace = d_tr.as<unsigned long long>() + int64_t(i) * blocks * kTracePoints,
                                         .cp_async_slots = cpa});
        ASSERT_TRUE(st.is_ok()) << st.to_string();
      }
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
      const std::vector<unsigned long long> tr =
          download<unsigned long long>(d_tr.get(), size_t(kLaunches) * size_t(blocks) * kTracePoints);
      int64_t unordered = 0;
      for (int64_t b = 0; b < kLaunches * blocks; ++b) {
        const unsigned long long* t = &tr[size_t(b) * kTracePoints];
        unordered += t[0] == 0 || t[0] > t[1] || t[1] > t[2] || t[2] > t[3];
      }
      EXPECT_EQ(unordered, 0) << r.name << ": blocks whose stamps are missing or out of order";
      auto stamp = [&](int launch, int64_t b, int pt) { return tr[size_t((launch * blocks + b) * kTracePoints + pt)]; };
      unsigned long long t0 = ~0ull, prev_exit = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        t0 = std::min(t0, stamp(kShown, b, 0));
        prev_exit = std::max(prev_exit, stamp(kShown - 1, b, 3));
      }
      std::printf("[ tc    ] %-13s M=%d %s  %lld blocks of %d rows; us from the first entry "
                  "(previous launch's last exit %+.2f):",
                  r.name, r.m, tma_supported(*dev) && !cpa ? "tma" : "cpa", static_cast<long long>(blocks), block_rows,
                  (double(prev_exit) - double(t0)) * 1e-3);
      const char* names[kTracePoints] = {"entry", "x staged", "loop done", "exit"};
      for (int pt = 0; pt < kTracePoints; ++pt) {
        std::vector<double> v;
        for (int64_t b = 0; b < blocks; ++b) v.push_back((double(stamp(kShown, b, pt)) - double(t0)) * 1e-3);
        std::sort(v.begin(), v.end());
        std::printf("  %s p50 %.2f max %.2f", names[pt], v[v.size() / 2], v.back());
      }
      std::printf("\n");
    }
  }
}

TEST(DenseDecode, Fp8CodesAsFp16) {
  auto f16 = [](uint32_t h) {  // fp16 bits -> value (exact in double)
    const int e = int((h >> 10) & 31), m = int(h & 1023);
    const double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    return (h & 0x8000) != 0 ? -v : v;
  };
  int64_t bad = 0, checked = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const double want = std::ldexp(double(e4m3_to_f32(uint8_t(c))), -8);
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t other = 0xA5u;  // a different code in the other bytes
      uint32_t w = 0;
      for (int b = 0; b < 4; ++b) w |= uint32_t(b == pos ? c : other) << (8 * b);
      uint32_t lo = 0, hi = 0;
      dense_detail::fp8x4_to_f16x2(w, lo, hi);
      const uint32_t half = (pos % 2 == 0 ? lo : hi) >> (pos >= 2 ? 16 : 0);
      bad += f16(half & 0xffff) != want || ((half & 0x8000) != 0) != ((c & 0x80) != 0);
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(checked, 254 * 4);
}

// Where the tensor-core kernel runs (no GPU needed: the shape rules on H100- and RTX 3090-like
// device descriptions): rows, n % 32, k % 128 (fp8) or 64 (bf16), aligned weights, given
// exponents, its shared memory (the 3090's 99 KB per block holds one fp8 row of x beside the
// rings, not eight), which grids count as filling the GPU, the ring depth; and the tensor map's
// argument checks.
TEST(DenseDecode, TensorCoreShapeRules) {
  DeviceInfo h100;
  h100.n_sms = 132;
  h100.smem_optin_bytes = 232448;
  h100.smem_per_sm_bytes = 233472;
  h100.smem_reserved_per_block = 1024;
  h100.mem_peak_bytes_per_s = 2.0 * 2619e6 * (5120 / 8);  // HBM3 at 2619 MHz, 5120 bits
  h100.arch = GpuArch::kSm90;
  DeviceInfo rtx3090 = h100;
  rtx3090.n_sms = 82;
  rtx3090.smem_optin_bytes = 101376;
  rtx3090.smem_per_sm_bytes = 102400;
  rtx3090.mem_peak_bytes_per_s = 2.0 * 9751e6 * (384 / 8);
  rtx3090.arch = GpuArch::kSm86;
  alignas(16) static uint8_t buf[64];
  const Fp8WeightView w8{buf, reinterpret_cast<const int8_t*>(buf)};
  const void* bf16 = buf;
  DenseDecodeShape woa{.m = 1, .n = 1024, .k = 4096, .groups = 8, .ldx = 8 * 4096, .x_group_stride = 4096,
                       .ldy = 8 * 1024, .y_group_stride = 1024};
  EXPECT_TRUE(dense_tc_supported(woa, nullptr, w8, h100));
  EXPECT_TRUE(dense_tc_supported(woa, bf16, {}, h100));
  EXPECT_TRUE(dense_tc_supported(woa, nullptr, w8, rtx3090));
  woa.m = kDenseTcMaxRows;
  EXPECT_TRUE(dense_tc_supported(woa, nullptr, w8, h100));
  EXPECT_FALSE(dense_tc_supported(woa, nullptr, w8, rtx3090)) << "8 x rows of 8 KB beside the rings";
  woa.m = kDenseTcMaxRows + 1;
  EXPECT_FALSE(dense_tc_supported(woa, nullptr, w8, h100));
  woa.m = 1;
  EXPECT_FALSE(dense_tc_supported(woa, nullptr, Fp8WeightView{buf + 8, w8.exps}, h100)) << "codes not 16-byte aligned";
  EXPECT_FALSE(dense_tc_supported(woa, nullptr, Fp8WeightView{buf, nullptr}, h100)) << "no exponents";
  EXPECT_FALSE(dense_tc_supported(woa, nullptr, Fp8WeightView{buf, reinterpret_cast<const int8_t*>(buf + 8)}, h100))
      << "exponents not 16-byte aligned";
  EXPECT_FALSE(dense_tc_supported(woa, buf + 8, {}, h100)) << "bf16 weight not 16-byte aligned";
  DenseDecodeShape s = woa;
  s.n = 1000;  // not a multiple of 32
  EXPECT_FALSE(dense_tc_supported(s, nullptr, w8, h100));
  s = woa;
  s.k = 4096 + 64;  // a multiple of 64, not of 128
  EXPECT_FALSE(dense_tc_supported(s, nullptr, w8, h100));
  EXPECT_TRUE(dense_tc_supported(s, bf16, {}, h100));
  s.k = 4096 + 32;
  EXPECT_FALSE(dense_tc_supported(s, bf16, {}, h100));
  // Grids: wo_a (256 blocks of 32 rows) and the CSA projection (82) fill an H100; the HCA
  // projection (32) does not, so its bf16 weight stays on the streaming kernel.
  EXPECT_TRUE(dense_tc_fills_gpu(woa, h100));
  const DenseDecodeShape csa{.m = 1, .n = 2624, .k = 4096, .groups = 1, .ldx = 4096, .ldy = 2624};
  const DenseDecodeShape hca{.m = 1, .n = 1024, .k = 4096, .groups = 1, .ldx = 4096, .ldy = 1024};
  EXPECT_TRUE(dense_tc_fills_gpu(csa, h100));
  EXPECT_FALSE(dense_tc_fills_gpu(hca, h100));
  EXPECT_TRUE(dense_tc_supported(hca, bf16, {}, h100)) << "it still runs there when forced";
  // Ring depth (4.5 us of requests at the peak bandwidth): wo_a's 256 blocks (4 MB a slot) take 4
  // slots a warp on an H100 (15 MB), 6 on an H200 (22 MB), and 4 (16 MB) where no bandwidth is
  // reported; the CSA projection's 82 take the deepest ring at which two blocks fit (6); at 8 rows
  // the x rows leave room for 2; the 3090's shared memory allows 2.
  DeviceInfo h200 = h100, unknown = h100;
  h200.mem_peak_bytes_per_s = 2.0 * 3201e6 * (6144 / 8);
  unknown.mem_peak_bytes_per_s = 0;
  EXPECT_EQ(dense_tc_ring_slots(woa, true, h100), 4);
  EXPECT_EQ(dense_tc_ring_slots(woa, false, h100), 4);
  EXPECT_EQ(dense_tc_ring_slots(woa, true, h200), 6);
  EXPECT_EQ(dense_tc_ring_slots(woa, true, unknown), 4);
  EXPECT_EQ(dense_tc_ring_slots(csa, false, h100), 6);
  EXPECT_EQ(dense_tc_ring_slots(woa, true, rtx3090), 2);
  woa.m = kDenseTcMaxRows;
  EXPECT_EQ(dense_tc_ring_slots(woa, true, h100), 2);
  woa.m = 1;

  CUtensorMap map;
  EXPECT_FALSE(encode_u8_map_sw128(buf, 16, 256, 260, 128, 16, &map).is_ok()) << "row stride not a multiple of 16";
  EXPECT_FALSE(encode_u8_map_sw128(buf + 8, 16, 256, 256, 128, 16, &map).is_ok()) << "base not 16-byte aligned";
  EXPECT_FALSE(encode_u8_map_sw128(buf, 16, 256, 256, 64, 16, &map).is_ok()) << "boxes of 128 bytes only";
  EXPECT_FALSE(encode_u8_map_sw128(buf, 8, 256, 256, 128, 16, &map).is_ok()) << "fewer rows than a box";
}

TEST(DenseDecode, RejectsUnsupported) {
  DenseDecodeShape s;
  s.m = 33;
  s.n = 8;
  s.k = 64;
  s.ldx = 64;
  s.ldy = 8;
  alignas(16) static char buf[64];
  EXPECT_FALSE(dense_decode_supported(s, buf, buf, buf));
  s.m = 1;
  EXPECT_TRUE(dense_decode_supported(s, buf, buf, buf));
  s.k = 48;  // not a multiple of 32
  s.ldx = 48;
  EXPECT_FALSE(dense_decode_supported(s, buf, buf, buf));
  s.k = 64;
  s.ldx = 68;  // rows not 16-byte aligned
  EXPECT_FALSE(dense_decode_supported(s, buf, buf, buf));
  s.ldx = 64;
  EXPECT_FALSE(dense_decode_supported(s, buf + 8, buf, buf));

  // The fp8 form: k a multiple of 128, exponents given, bf16 out only; each refused with a message.
  s.k = 64;
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(buf);
  const Fp8WeightView w8{reinterpret_cast<const uint8_t*>(buf), reinterpret_cast<const int8_t*>(buf)};
  Status st = dense_decode_gemm_fp8(x, w8, buf, DenseOut::kBf16, s, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("multiple of 128"), std::string::npos) << st.to_string();
  s.k = 128;
  s.ldx = 128;
  st = dense_decode_gemm_fp8(x, Fp8WeightView{w8.codes, nullptr}, buf, DenseOut::kBf16, s, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("null exponents"), std::string::npos) << st.to_string();
  st = dense_decode_gemm_fp8(x, w8, buf, DenseOut::kF32, s, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("bf16 output only"), std::string::npos) << st.to_string();
  st = dense_decode_gemm(x, reinterpret_cast<const __nv_bfloat16*>(buf), buf, DenseOut::kBf16, s, nullptr, 32);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("32 with fp8 weights"), std::string::npos) << st.to_string();
  st = fp8_groups_to_bf16(w8, 2, 100, reinterpret_cast<__nv_bfloat16*>(buf), nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.to_string().find("multiple of 128"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace dsv4::cuda::test
