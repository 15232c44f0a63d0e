// attention_device.cuh: device helpers of the attention kernels: the SM80-level tensor-core and
// shared-memory instructions (mma.sync m16n8k16 bf16, ldmatrix, named barriers) and the output
// epilogue shared by the split and combine kernels (bf16 rounding and the inverse RoPE of a pair,
// written to round exactly as cpu::Rope::rotate).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace dsv4::cuda::attention_detail {

using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma_bf16;
using mma::named_barrier;
using mma::pack_bf16x2;
using mma::round_bf16;
using mma::smem_u32;

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
