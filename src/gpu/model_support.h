// model_support.h: which checkpoints GpuModel runs. The kernels are built for DeepSeek-V4-Flash's
// dimensions (hidden 4096, 4 mHC streams, 64 heads x 512, q_lora 1024, 8 x 1024 output groups,
// window 128, CSA ratio 4, HCA ratio 128, indexer 64 x 128 top-512, 256 experts + 1 shared of
// inter 2048); any other configuration is refused at load with the field, expected and found
// value. Only the vocabulary size, the layer count and pattern and the scalar hyper-parameters
// (eps, rope, route scale, clamp) are free. Host code only.
#pragma once

#include "base/status.h"
#include "model/config.h"

namespace dsv4::gpu {

// Ok when every dimension the GPU kernels fix matches `cfg`; else the first mismatch.
Status check_gpu_supported(const ModelConfig& cfg);

}  // namespace dsv4::gpu
