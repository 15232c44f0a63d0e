// bf16_bits.cuh: bf16 pairs widened to fp32 by bit operations, for kernels whose loops unpack
// many values per useful instruction (weight streams, mHC mixes, the router's dots).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// The two bf16 of a word (low element first) as fp32, exactly: the low one shifted up, the high
// one masked, one instruction each. cuda_bf16's __bfloat1622float2 gives the same bits but
// compiles to three instructions for the pair (a PRMT and two shifts; nvcc 13, sm_86/sm_90):
// the dense streaming kernel's K loop went from 38 to 30 instructions per 8 weights.
__device__ __forceinline__ float2 bf16x2_to_f32x2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

}  // namespace dsv4::cuda
