// repack.cu: load-time conversion of auto_gptq INT4 tensors into the packed W4A16 layout
// (w4a16.h), and its inverse to bf16 for peers and checks. Runs once per tensor at load; not on
// the serving path, so the kernels favour obviously-correct indexing over speed.
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/w4a16/w4a16.h"

namespace dsv4::cuda {

namespace {

__device__ __forceinline__ bool half_is_zero(__half h) { return (__half_as_ushort(h) & 0x7FFFu) == 0; }

__device__ __forceinline__ int dst_column(int c, RepackPlacement pl) {
  return ((c >> 4) * pl.interleave + pl.slot) * 16 + (c & 15) + pl.n_base;
}

// One thread per destination word: lane t, k16 slice ks, source 16-column block cb.
__global__ void repack_qweight_kernel(const int32_t* __restrict__ qw, const __half* __restrict__ sc, int n_src,
                                      int k, uint32_t* __restrict__ dst, RepackPlacement pl) {
  const int n_slices = k >> 4;
  const int64_t total = int64_t(n_src >> 4) * n_slices * 32;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int lane = int(idx & 31);
  const int ks = int((idx >> 5) % n_slices);
  const int cb = int((idx >> 5) / n_slices);
  const int c0 = cb * 16 + (lane >> 2), c1 = c0 + 8;
  const int r = 2 * (lane & 3);
  const uint32_t lo0 = uint32_t(qw[int64_t(2 * ks) * n_src + c0]);
  const uint32_t hi0 = uint32_t(qw[int64_t(2 * ks + 1) * n_src + c0]);
  const uint32_t lo1 = uint32_t(qw[int64_t(2 * ks) * n_src + c1]);
  const uint32_t hi1 = uint32_t(qw[int64_t(2 * ks + 1) * n_src + c1]);
  auto nib = [](uint32_t w, int pos) { return (w >> (4 * pos)) & 0xFu; };
  uint32_t p[8];
  p[0] = nib(lo0, r);      // (r,   n0)
  p[1] = nib(hi0, r);      // (r+8, n0)
  p[2] = nib(lo1, r);      // (r,   n1)
  p[3] = nib(hi1, r);      // (r+8, n1)
  p[4] = nib(lo0, r + 1);  // (r+1, n0)
  p[5] = nib(hi0, r + 1);  // (r+9, n0)
  p[6] = nib(lo1, r + 1);  // (r+1, n1)
  p[7] = nib(hi1, r + 1);  // (r+9, n1)
  const int grp = ks >> 3;
  // A zero scale becomes 1 with codes 8: the same zero weights, and kernels may divide by it.
  if (half_is_zero(sc[int64_t(grp) * n_src + c0])) p[0] = p[1] = p[4] = p[5] = 8;
  if (half_is_zero(sc[int64_t(grp) * n_src + c1])) p[2] = p[3] = p[6] = p[7] = 8;
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) word |= p[i] << (4 * i);
  const int db = dst_column(cb * 16, pl) >> 4;  // destination 16-column block
  const int tile = db >> 2, j = db & 3;
  dst[((int64_t(tile) * n_slices + ks) * 32 + lane) * 4 + j] = word;
}

// One thread per source scale (group g, column c).
__global__ void repack_scales_kernel(const __half* __restrict__ sc, int n_src, int kg, __half* __restrict__ dst,
                                     RepackPlacement pl) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(n_src) * kg) return;
  const int c = int(idx % n_src), grp = int(idx / n_src);
  __half s = sc[idx];
  if (half_is_zero(s)) s = __float2half(1.0f);
  const int d = dst_column(c, pl);
  const int tile = d >> 6, lc = d & 63;
  const int sub = lc >> 3, q = (lc & 7) >> 1, e = lc & 1;
  dst[(int64_t(tile) * kg + grp) * 64 + q * 16 + sub * 2 + e] = s;
}

// One thread per packed word; writes its 8 values into W[N, K].
__global__ void dequant_kernel(const uint32_t* __restrict__ qw, const __half* __restrict__ sc, int n, int k,
                               __nv_bfloat16* __restrict__ out) {
  const int n_slices = k >> 4, kg = k >> 7;
  const int64_t total = int64_t(n) * k / 8;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int j = int(idx & 3), lane = int((idx >> 2) & 31);
  const int ks = int((idx >> 7) % n_slices);
  const int tile = int((idx >> 7) / n_slices);
  const uint32_t word = qw[idx];
  const int r = 2 * (lane & 3);
  const int kr[8] = {r, r + 8, r, r + 8, r + 1, r + 9, r + 1, r + 9};
  const int n0 = 16 * j + (lane >> 2);
  const int nc[8] = {n0, n0, n0 + 8, n0 + 8, n0, n0, n0 + 8, n0 + 8};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int col = tile * 64 + nc[i];
    const int kk = ks * 16 + kr[i];
    const int lc = nc[i];
    const float s = __half2float(sc[(int64_t(tile) * kg + (kk >> 7)) * 64 + ((lc & 7) >> 1) * 16 + (lc >> 3) * 2 + (lc & 1)]);
    const float v = s * float(int((word >> (4 * i)) & 0xFu) - 8);
    out[int64_t(col) * k + kk] = __float2bfloat16_rn(v);
  }
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace

Status repack_gptq_int4(const GptqInt4Tensor& src, uint32_t* dst_qweight, __half* dst_scales, int dst_n,
                        const RepackPlacement& pl, cudaStream_t stream) {
  if (src.qweight == nullptr || src.scales == nullptr || dst_qweight == nullptr || dst_scales == nullptr)
    return invalid_argument("repack_gptq_int4: null pointer");
  if (src.n < 16 || src.n % 16 != 0 || src.k < 128 || src.k % 128 != 0)
    return invalid_argument("repack_gptq_int4: need N % 16 == 0 and K % 128 == 0, got N={} K={}", src.n, src.k);
  if (dst_n < 64 || dst_n % 64 != 0) return invalid_argument("repack_gptq_int4: packed N={} is not a multiple of 64", dst_n);
  if (pl.interleave < 1 || pl.slot < 0 || pl.slot >= pl.interleave || pl.n_base < 0 || pl.n_base % 16 != 0)
    return invalid_argument("repack_gptq_int4: bad placement (n_base {}, interleave {}, slot {})", pl.n_base,
                            pl.interleave, pl.slot);
  const int64_t last = int64_t((src.n / 16 - 1) * pl.interleave + pl.slot) * 16 + 15 + pl.n_base;
  if (last >= dst_n)
    return invalid_argument("repack_gptq_int4: source N={} placed up to column {} of a packed N={}", src.n, last, dst_n);
  if ((reinterpret_cast<uintptr_t>(dst_qweight) & 15) != 0 || (reinterpret_cast<uintptr_t>(dst_scales) & 15) != 0)
    return invalid_argument("repack_gptq_int4: packed buffers must be 16-byte aligned");
  constexpr int kThreads = 256;
  const int64_t n_words = int64_t(src.n / 16) * (src.k / 16) * 32;
  repack_qweight_kernel<<<blocks_for(n_words, kThreads), kThreads, 0, stream>>>(src.qweight, src.scales, src.n, src.k,
                                                                                 dst_qweight, pl);
  DSV4_RETURN_IF_ERROR(last_launch_status("repack_qweight_kernel"));
  const int64_t n_scales = int64_t(src.n) * (src.k / 128);
  repack_scales_kernel<<<blocks_for(n_scales, kThreads), kThreads, 0, stream>>>(src.scales, src.n, src.k / 128,
                                                                               dst_scales, pl);
  return last_launch_status("repack_scales_kernel");
}

Status dequant_w4a16(const W4A16Weight& w, __nv_bfloat16* out, cudaStream_t stream) {
  if (w.qweight == nullptr || w.scales == nullptr || out == nullptr) return invalid_argument("dequant_w4a16: null pointer");
  if (w.n % 64 != 0 || w.k % 128 != 0 || w.n <= 0 || w.k <= 0)
    return invalid_argument("dequant_w4a16: bad shape N={} K={}", w.n, w.k);
  constexpr int kThreads = 256;
  const int64_t n_words = int64_t(w.n) * w.k / 8;
  dequant_kernel<<<blocks_for(n_words, kThreads), kThreads, 0, stream>>>(w.qweight, w.scales, w.n, w.k, out);
  return last_launch_status("dequant_kernel");
}

}  // namespace dsv4::cuda
