// attention_device.cuh: device helpers of the attention kernels: the SM80-level tensor-core and
// shared-memory instructions (mma.sync m16n8k16 bf16, ldmatrix, named barriers) and the output
// epilogue shared by the split and combine kernels (bf16 rounding and the inverse RoPE of a pair,
// written to round exactly as cpu::Rope::rotate).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::attention_detail {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a . b, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (whole warps).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Inverse RoPE of the pair (x0, x1) = dims (2k, 2k+1) of the rope part at position `pos`, in
// place, rounded to bf16 (MODEL_SPEC.md §6.8). The inputs are already bf16 values.
// NOTE: explicit _rn operations keep nvcc from contracting into FMAs, so the products round as
// the CPU reference's (which is built without FMA); sincosf is the precise one (no fast math).
__device__ __forceinline__ void inverse_rope_pair(float& x0, float& x1, int pos, float inv_freq) {
  const float angle = __fmul_rn(float(pos), inv_freq);
  float sn, cs;
  sincosf(angle, &sn, &cs);
  sn = -sn;
  const float a = x0, b = x1;
  x0 = round_bf16(__fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)));
  x1 = round_bf16(__fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn)));
}

}  // namespace dsv4::cuda::attention_detail
