// arrival.cuh: the "last block to arrive" handoff of in-grid reductions (the W4A16 split-K sums,
// the MoE combine, the router's tail). Blocks write their part to global memory, count themselves
// on a counter, and the block whose arrival completes the count reads everyone's parts.
//
// The ordering comes from one acq_rel atomic per block after a block barrier, the pattern of
// CUTLASS's semaphore and of the cooperative-groups grid sync: bar.sync orders the block's writes
// before thread 0's release, and the PTX model makes release cumulative through it; the atomics
// on one counter form a chain in observation order, so the last adder's acquire sees every
// earlier adder's release. The previous form had every thread run __threadfence() (fence.sc.gpu)
// before the barrier and after it; that is correct too, and costs a sequentially consistent fence
// per thread on the reduction's critical path.
//
// Measured on the H200 (bench/results/NOTES.md, "One release per block"): wo_b at M = 1 9.04 ->
// 8.82-8.92 us, M = 16 12.5-12.6 -> 12.25-12.29, the MoE layer at M = 1 40.9-41.0 -> 40.5-40.6.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

// *addr += v with release and acquire semantics at GPU scope; returns the old value.
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* addr, int v) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(addr), "r"(v) : "memory");
  return old;
}

// Every thread of the (one-dimensional) block calls this after its global writes. Returns, in
// every thread, whether this block's arrival was the `expected`-th on *counter; that block then
// sees the writes every arrived block made before arriving. The last block resets the counter
// for the next launch (which reads it only after this grid completed). s_flag: a shared int.
__device__ __forceinline__ bool arrive_last(int* counter, int expected, int* s_flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool last = atomic_add_acq_rel_gpu(counter, 1) == expected - 1;
    if (last) atomicExch(counter, 0);
    *s_flag = last;
  }
  __syncthreads();
  return *s_flag != 0;
}

}  // namespace dsv4::cuda
