// pdl.cuh: programmatic dependent launch (SM90) for decode chains. A kernel launched with
// launch_kernel(..., pdl = true) may start while the previous kernel of the stream is finishing:
// it may prefetch what does not depend on that kernel (weights), and must call pdl_wait() before
// touching anything the previous kernel writes or reads. Every kernel of the forward step and of
// the sampler is launched this way (the optional dense decode kernel too; not cuBLAS's, launched
// plainly: the chain resumes after them), so:
//   - before pdl_wait() a kernel reads only constant data (weights, norm weights, inv_freq) and
//     the step's arrays (StepBatchView: token ids, positions, sequences, slots, block tables),
//     never anything a kernel writes, and it writes no global memory (an earlier kernel may still
//     read it). The step's arrays are host copies on the stream before the step's first kernel
//     (a copy is not a programmatic launch: what follows it starts after it completes), and no
//     kernel writes them, so the row bookkeeping (which sequence, slot, position; its rope
//     angles) runs before the wait and only the data loads wait;
//   - a grid completes only after its predecessor did, as long as one of its blocks waited, so one
//     wait covers every earlier kernel of the stream. The small kernels (ops, compressor,
//     indexer, sampling) wait in every block before any early return;
//   - pdl_wait() also lets the next kernel launch: its blocks then prefetch their weights while
//     this grid works, and wait in turn. Triggering any earlier (at a kernel's start, as the
//     first version did) let a whole cascade of later kernels' blocks launch and squat SM slots
//     while they waited: on the H200 a batch-1 step took 4.26 ms that way, 3.70 ms with the
//     trigger in pdl_wait() and 4.04 ms without PDL (bench/results/forward_h200.md).
// On SM86 the call compiles to nothing and launches are plain; whether to use PDL is decided in
// one place, pdl_supported() (common/arch.h).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

// Waits for the previous kernel (and so every earlier one), then lets the next kernel launch.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(arg), as a programmatic dependent of the
// previous kernel in the stream when pdl is set, in thread-block clusters of (1, cluster_y, 1)
// blocks when cluster_y > 1 (SM90; the caller checks clusters_supported()).
template <typename Arg>
Status launch_kernel(void (*kernel)(Arg), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                     const Arg& arg, const char* name, unsigned cluster_y = 1) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster_y > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 1;
    attr[n].val.clusterDim.y = cluster_y;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaLaunchKernelEx(&cfg, kernel, arg), name));
  return last_launch_status(name);
}

}  // namespace dsv4::cuda
