// ptx.cuh: device helpers shared by the W4A16 GEMM kernels (gemm_kernel.cuh, decode_kernel.cuh):
// cp.async, ldmatrix, mma.sync, the int4 -> bf16 / fp16 conversions (with the fp16 tiles' row
// scaling) and the packed scale layout.
// SM80-level instructions, so every helper builds for sm_86 and sm_90; the cluster helpers exist
// only for SM90 (the decode kernel's split-K fast path).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace dsv4::cuda::w4a16_detail {

using mma::cp_async16;
using mma::cp_async16_hint;
using mma::l2_evict_first_policy;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::mma_f16;
using mma::pack_bf16x2;
using mma::round_bf16;
using mma::smem_u32;


// (a & b) | c in one instruction (the compiler does not reliably fuse it).
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// One packed word -> four bf16x2 B registers holding (q - 8), exactly:
// (q & 0xF) | 0x4300 is the bf16 128 + q; times 1 minus 136 leaves q - 8.
// out[0], out[1]: b0b1, b2b3 of sub-tile 2j; out[2], out[3]: of sub-tile 2j + 1.
__device__ __forceinline__ void dequant_word(uint32_t q, uint32_t (&out)[4]) {
  constexpr uint32_t kMask = 0x000F000Fu, kMagic = 0x43004300u;
  constexpr uint32_t kOne = 0x3F803F80u, kMinus136 = 0xC308C308u;
  out[0] = fma_bf16x2(lop3_and_or(q, kMask, kMagic), kOne, kMinus136);
  out[1] = fma_bf16x2(lop3_and_or(q >> 4, kMask, kMagic), kOne, kMinus136);
  out[2] = fma_bf16x2(lop3_and_or(q >> 8, kMask, kMagic), kOne, kMinus136);
  out[3] = fma_bf16x2(lop3_and_or(q >> 12, kMask, kMagic), kOne, kMinus136);
}

// One packed word -> four bf16x2 B registers holding 128 + q (= 136 + (q - 8)), exactly: the
// magic-exponent half of dequant_word without its fma. The caller subtracts 136 * sum_k a_k per
// row (one extra mma against a B of ones) and so spends 7 instead of 11 instructions per word.
__device__ __forceinline__ void dequant_word_offset(uint32_t q, uint32_t (&out)[4]) {
  constexpr uint32_t kMask = 0x000F000Fu, kMagic = 0x43004300u;
  out[0] = lop3_and_or(q, kMask, kMagic);
  out[1] = lop3_and_or(q >> 4, kMask, kMagic);
  out[2] = lop3_and_or(q >> 8, kMask, kMagic);
  out[3] = lop3_and_or(q >> 12, kMask, kMagic);
}
inline constexpr uint32_t kBf16x2Ones = 0x3F803F80u;
inline constexpr float kCodeOffset = 136.0f;  // 128 (magic exponent) + 8 (GPTQ zero point)

__device__ __forceinline__ uint32_t sub_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t fma_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// One packed word -> four fp16x2 registers holding q - 8 exactly, with 5 integer instructions
// instead of dequant_word_offset's 7: fp16 has room for a code in mantissa bits 4-7 as well as
// 0-3, so only one shift is needed. (q & 0xF) | 0x6400 is the fp16 1024 + q, less 1032; a code
// in bits 4-7 gives 1024 + 16 q, times 1/16 less 72. The two fp16 ops run on the FMA pipe, which
// the decode loop uses far less than the ALU pipe (ncu_moe_f16_05d321f.txt). Same register order
// as dequant_word_offset.
__device__ __forceinline__ void dequant_word_f16(uint32_t q, uint32_t (&out)[4]) {
  constexpr uint32_t kLo = 0x000F000Fu, kHi = 0x00F000F0u, kMagic = 0x64006400u;  // fp16 1024
  constexpr uint32_t k1032 = 0x64086408u, kSixteenth = 0x2C002C00u, kMinus72 = 0xD480D480u;
  const uint32_t t = q >> 8;
  out[0] = sub_f16x2(lop3_and_or(q, kLo, kMagic), k1032);
  out[1] = fma_f16x2(lop3_and_or(q, kHi, kMagic), kSixteenth, kMinus72);
  out[2] = sub_f16x2(lop3_and_or(t, kLo, kMagic), k1032);
  out[3] = fma_f16x2(lop3_and_or(t, kHi, kMagic), kSixteenth, kMinus72);
}

// The largest exponent field (bits 7-14) of 8 bf16 values.
__device__ __forceinline__ unsigned bf16x8_max_exponent(uint4 v) {
  constexpr uint32_t kExp = 0x7F807F80u;
  const uint32_t m = __vmaxu2(__vmaxu2(v.x & kExp, v.y & kExp), __vmaxu2(v.z & kExp, v.w & kExp));
  return max(m & 0xffffu, m >> 16);
}
// Block floating point for the fp16 tiles: a row whose largest exponent field is f is scaled by
// 2^-e, e = f - 142, which puts its largest values in fp16's top binade [2^15, 65280] (bf16 keeps
// 8 significant bits, so they stay below fp16's 65504), and its results by 2^e; both exact. e is
// clamped to [-100, 113]: zero rows, and inf and nan rows stay inf and nan. Values more than 2^29
// below the row's largest lose bits as fp16 subnormals.
__device__ __forceinline__ int row_f16_exponent(unsigned max_exp_field) {
  return min(max(int(max_exp_field >> 7) - 142, -100), 113);
}
__device__ __forceinline__ float row_scale_down(unsigned max_exp_field) {
  return __int_as_float((127 - row_f16_exponent(max_exp_field)) << 23);
}
__device__ __forceinline__ float row_scale_up(unsigned max_exp_field) {
  return __int_as_float((127 + row_f16_exponent(max_exp_field)) << 23);
}

// Global loads that bypass L1: data written by the previous kernel of a PDL chain (L1 is not
// coherent, and a co-resident block of another grid may have cached an older copy).
__device__ __forceinline__ uint4 ld_cg_v4(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }


#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// SM90 thread-block clusters: a barrier over every thread of the cluster (writes before it are
// visible to reads after it), and loads from another block's shared memory.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The shared::cluster address of this block's shared address `addr` in block `rank` of the cluster.
__device__ __forceinline__ uint32_t map_dsmem(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
__device__ __forceinline__ float4 ld_dsmem_v4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// Shared-memory mbarriers of stage rings (SM90 PTX; CTA scope): the wgmma kernel's, and the
// decode kernel's per-warp rings on SM90.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// After mbar_init and before any bulk copy may complete on the barrier: the initialization is
// visible to the TMA unit (the async proxy).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on the barrier when every cp.async this thread issued so far has landed (the
// barrier's count includes it: noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also raises the phase's expected transaction bytes by `bytes` (the bulk copies
// below count their bytes down as they land); expect_tx alone raises them without arriving.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// A bulk copy by the TMA unit, completing on `bar` (complete_tx): `bytes` contiguous bytes (a
// multiple of 16, both addresses 16-byte aligned).
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// The same with an L2 cache policy (mma::l2_evict_first_policy).
__device__ __forceinline__ void bulk_g2s_hint(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                              uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// Returns once the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}
#endif

// A lane's 16 scales (column 8 s + 2 q + e at index 2 s + e) of one 64-column block.
__device__ __forceinline__ void load_scales(const __half* s_smem, int q, float (&out)[16]) {
  const uint4* p = reinterpret_cast<const uint4*>(s_smem + q * 16);
  const uint4 v0 = p[0], v1 = p[1];
  const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

}  // namespace dsv4::cuda::w4a16_detail
