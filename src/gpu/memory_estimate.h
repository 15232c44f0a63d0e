// memory_estimate.h: the device bytes a GpuModel will hold, estimated on the host before anything
// is allocated, so that `dsv4 bench --layers max` can pick the largest synthetic model that fits
// (issue 3 asks for "the largest flash-shaped model that fits"). Three parts:
//   - weights, exact: every tensor in its device format (GPTQ INT4 linears packed: n k / 2 bytes
//     of codes + fp16 scales per 128-group; other linears bf16; small parameters fp32; tid2eid
//     int32; the embedding bf16, generated or loaded);
//   - KV state, exact for the pools: n_kv_blocks 256-token blocks and max_seqs slots
//     (kv::make_kv_layout's byte counts) plus the step's chunk buffer;
//   - activations and workspaces, fitted: a constant plus a term per step row, from
//     GpuModel::device_bytes() of synthetic Flash loads on the H200 (bench/results; the fit in
//     memory_estimate.cpp). Not exact for other shapes or after buffers change: the planner of
//     ARCHITECTURE.md §6 would count each buffer instead.
// Pure host code: unit-tested without a GPU against the measured loads.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace dsv4::gpu {

struct DeviceBytesEstimate {
  int64_t weights = 0;      // every tensor in its device format
  int64_t kv = 0;           // KV blocks, slots and the chunk buffer
  int64_t activations = 0;  // step buffers and kernel workspaces (fitted)
  int64_t total() const { return weights + kv + activations; }
};

// The options of GpuModel::load that size its buffers (GpuModelOptions' fields of the same names).
struct DeviceBytesShape {
  int max_seqs = 1;
  int max_tokens_per_step = 1;
  int64_t max_positions = 0;
  int64_t n_kv_blocks = 0;
  bool wo_a_fp8 = false;  // wo_a in the fp8 form (as every layer of an FP8-derived or synthetic model)
};

// The buffers `dsv4 bench` asks of GpuModel for a ladder (tools/cmd_bench.cpp): every sequence of
// the largest batch holds the largest context plus the decode steps of every batch size (graphs
// and eager, warm-ups, traced steps), in 256-token blocks plus one; a step holds a prefill chunk
// or the largest batch.
DeviceBytesShape ladder_shape(int max_batch, int n_batches, int64_t max_ctx, int chunk, int decode_steps,
                              int traced_steps);

// What GpuModel keeps back when it sizes the KV pool from the free memory: room for graphs,
// cuBLAS and the CUDA context's growth (5% of the device, at least 1 GiB).
int64_t device_reserve_bytes(int64_t total_bytes);

// The bytes on the device of the global tensors of `w` (ModelWeights::load or ::synthetic) and of
// its first cfg.n_layers layers. Counting a prefix lets one synthetic model of many layers stand
// for every shorter one: make_model_config's layer pattern depends only on the layer's index.
// wo_a_fp8: every wo_a in the fp8 form (1 byte a weight + 1 per 128 columns).
int64_t device_weight_bytes(const ModelConfig& cfg, const ModelWeights& w, bool wo_a_fp8 = false);

// Weights as above, KV state for cfg's layers, activations for the shape.
DeviceBytesEstimate estimate_device_bytes(const ModelConfig& cfg, const ModelWeights& w, const DeviceBytesShape& s);

// The largest n <= cfg.n_layers such that cfg's first n layers (weights from w) fit `budget`
// bytes for the shape; 0 when not even one does.
int layers_that_fit(const ModelConfig& cfg, const ModelWeights& w, const DeviceBytesShape& s, int64_t budget);

}  // namespace dsv4::gpu
