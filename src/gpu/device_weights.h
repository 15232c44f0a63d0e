// device_weights.h: the model's weights on the device, as views the kernel launchers take.
// upload_weights() walks ModelWeights once: GPTQ INT4 linears (Intel W4A16 layout) go through one
// device staging buffer into the kernels' packed layout (repack_gptq_int4; wq_a | wkv share one
// packed weight, MoE w1 | w3 are interleaved, experts are stacked), dense linears are converted
// to bf16 (LinearWeight::dequant_rows; BF16 tensors are copied as they are), small parameters
// (norms, mHC, sinks, ape, router bias) stay fp32. Every buffer belongs to the DeviceArena.
// With wo_a_fp8, each wo_a whose bf16 values are all FP8-derived (model/fp8_groups.h: checked
// value by value on the host) is stored in the lossless fp8 form instead (half the bytes, the
// same values); one that is not stays bf16, and fp8_refused says which and why.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cuda/compressor/compressor.h"
#include "cuda/dense/dense.h"
#include "cuda/moe/moe.h"
#include "cuda/ops/ops.h"
#include "cuda/w4a16/w4a16.h"
#include "gpu/device_arena.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::gpu {

// Column blocks of a compressed layer's fp32 projection output (one cuBLAS GEMM over the
// concatenated dense weights that read the attention input x).
struct ProjColumns {
  int comp_a = 0, comp_z = 0;          // compressor.wkv, .wgate: coff * head_dim columns each
  int idx_a = -1, idx_z = -1;          // CSA: indexer.compressor.wkv, .wgate: 2 * index_head_dim each
  int idx_w = -1;                      // CSA: indexer.weights_proj: index_n_heads columns
  int n = 0;                           // total columns (row stride of the output)
};
ProjColumns proj_columns(const ModelConfig& cfg, const LayerSpec& spec);

struct LayerDeviceWeights {
  LayerSpec spec;
  const float* attn_norm = nullptr;   // f32 [D]
  const float* ffn_norm = nullptr;    // f32 [D]
  cuda::HcParamsView hc_attn, hc_ffn; // fn f32 [24, hc*D], base f32 [24], scale f32 [3]
  cuda::W4A16Weight wqkv;             // packed [q_lora + d, D]: wq_a columns, then wkv
  const float* q_norm = nullptr;      // f32 [q_lora]
  cuda::W4A16Weight wq_b;             // packed [H*d, q_lora]
  const float* kv_norm = nullptr;     // f32 [d]
  const __nv_bfloat16* wo_a = nullptr;  // bf16 [o_groups * o_lora, H*d / o_groups], or null when:
  cuda::Fp8WeightView wo_a8;            // the same in the fp8 form (codes null unless wo_a_fp8)
  cuda::W4A16Weight wo_b;             // packed [D, o_groups * o_lora]
  const float* sink = nullptr;        // f32 [H]
  const float* inv_freq = nullptr;    // f32 [rope_dim / 2]: main rope (SWA) or compress rope (CSA/HCA)
  // CSA and HCA layers
  ProjColumns proj;
  const __nv_bfloat16* wproj = nullptr;  // bf16 [proj.n, D]: the dense weights of ProjColumns, in order
  cuda::CompressorParamsView comp;       // main compressor (fp8 entries)
  // CSA layers
  cuda::CompressorParamsView idx_comp;   // indexer compressor (fp4 keys)
  cuda::W4A16Weight idx_wq_b;            // packed [nI * dI, q_lora]
  // every layer
  cuda::MoeLayerWeights moe;
};

struct DeviceModelWeights {
  const __nv_bfloat16* embed = nullptr;  // bf16 [vocab, D]
  const __nv_bfloat16* head = nullptr;   // bf16 [vocab, D]
  const float* norm = nullptr;           // f32 [D]
  cuda::HcParamsView hc_head;            // fn f32 [hc, hc*D], base f32 [hc], scale f32 [1]
  const float* inv_freq_main = nullptr;      // f32 [rope_dim / 2]
  const float* inv_freq_compress = nullptr;  // f32 [rope_dim / 2]
  std::vector<LayerDeviceWeights> layers;
  int64_t n_int4_linears = 0;            // GPTQ tensors repacked (experts counted one by one)
  int64_t n_fp8_linears = 0;             // linears stored in the fp8 form (wo_a_fp8)
  size_t int4_bytes = 0, bf16_bytes = 0, f32_bytes = 0, fp8_bytes = 0;
  std::string fp8_refused;               // the first weight asked in fp8 that stayed bf16, and why
};

// Uploads everything (synchronizes `stream` before returning). Errors: a linear the W4A16 path
// needs as GPTQ INT4 stored otherwise (names it), int4 parameters the kernels do not take (group
// size, asymmetric zeros, scale dtype), tid2eid ids out of range, allocation failures. Synthetic
// weights with wo_a_fp8 get random fp8-form wo_a (the real checkpoints' kind).
Result<DeviceModelWeights> upload_weights(const ModelConfig& cfg, const ModelWeights& w, DeviceArena& arena,
                                          cudaStream_t stream, bool wo_a_fp8 = false);

}  // namespace dsv4::gpu
