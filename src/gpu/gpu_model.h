// gpu_model.h: GpuModel, the whole DeepSeek-V4 forward pass on one GPU: weights resident on the
// device (W4A16 linears repacked at load, BF16 dense ones, fp32 small parameters), the paged fp8
// KV cache and per-slot window/compressor state, static activation buffers sized once, and a
// step = many sequences' decode tokens and prompt chunks at once. It computes what
// cpu::CpuModel computes in Numerics::bf16_gpu() (the CPU reference is its oracle).
// One owner (the engine thread) drives it; nothing allocates or synchronizes inside a decode step
// except the final copy of results to the host; decode batches can replay captured CUDA graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::gpu {

// Where a decode step's query projection runs (GpuModelOptions::query_branch).
enum class QueryBranch {
  kOff,      // on the model's stream, in the reference's order
  kCsa,      // CSA layers: the compress launches on the side stream from the layer's start, then wq_b
  kCsaLate,  // the same, the compress launches forked after wqkv (beside the q norm) instead
};
inline constexpr QueryBranch kQueryBranches[] = {QueryBranch::kOff, QueryBranch::kCsa, QueryBranch::kCsaLate};
// The names `dsv4 bench --query-branch` takes: off, csa, csa-late.
inline const char* query_branch_name(QueryBranch q) {
  return q == QueryBranch::kCsa ? "csa" : q == QueryBranch::kCsaLate ? "csa-late" : "off";
}

struct GpuModelOptions {
  int max_seqs = 64;               // state slots (window rings, compressor state); slot ids < this
  int max_tokens_per_step = 2048;  // rows of the largest step (prefill chunk budget)
  int n_kv_blocks = 0;             // 256-token KV blocks in the pool; 0: enough for max_seqs x max_positions / 256... capped by memory
  int64_t max_positions = 0;       // longest sequence (0: the config's max_position_embeddings)
  // options() reports the resolved values (n_kv_blocks, max_positions) after load.
  std::vector<int> graph_batch_sizes;  // decode batch sizes to capture (empty: eager only)
  // Decode batches of these dense BF16 linears on the project's dense decode kernels instead of
  // cuBLAS (gpu/blas.cpp): "none", "woa" (grouped wo_a, 1..4 rows: the register GEMV), "proj"
  // (compressor and indexer projections, 1..4 rows: the weight-streaming kernels), "woa,proj".
  std::string dense_decode = "woa,proj";
  // Sparse attention blocks of 1 or 4 groups of 16 heads for every batch; 0: the plan picks by
  // batch size (for A/B runs: `dsv4 bench --attention-head-groups`).
  int attention_head_groups = 0;
  // The compressor and indexer projections and the compressors' emits of each CSA/HCA layer on a
  // second stream, forked after the layer's HCPre and joined before the first reader of their
  // outputs (the indexer's prep, or attention), so they run beside the query path's launches, in
  // steps whose projection runs on cuBLAS (more than 4 rows; gpu/forward_pass.cpp says why not the
  // others). false: one stream, the launches in the reference's order (A/B runs: `dsv4 bench
  // --compressor-branch off`). Profiled eager steps always run on one stream.
  bool compressor_branch = true;
  // In steps where the compressor branch does not run (decode batches of 1..4), a CSA layer's
  // chain from the q norm to attention is wq_b, the compressor projections and emits, the
  // indexer's wq_b, prep, scores and merge, one after another on one stream; only the indexer's
  // part depends on the others. The query branch puts the compress launches (which read only x)
  // on the side stream at the layer's start, beside wqkv and the q norm, then wq_b and the heads'
  // norm + RoPE after the q norm, so the indexer chain starts at once; joined before the prep and
  // before attention. kCsaLate forks the compress launches after wqkv instead, whose blocks they
  // would otherwise slow. Same values either way. H100, 20 layers, 4K, against off (two calls,
  // three rounds each): kCsa batch 1 flat, 2 -2%, 4 -1%; kCsaLate 1 +0.4%, 2 -3%, 4 -2%
  // (bench/results/query_branch_h100). A/B runs: `dsv4 bench --query-branch off|csa|csa-late`.
  QueryBranch query_branch = QueryBranch::kCsa;
  // Each layer's wo_a (8 x 1024 x 4096, bf16 in the W4A16 checkpoints, FP8 at the source) in the
  // lossless fp8 form (gpu/device_weights.h) where every value allows it: half its bytes. Decode
  // batches run the dense decode kernels on it, larger steps a bf16 copy made per layer into a
  // 67 MB workspace (cuBLAS). Same values either way; the bits equal those of the bf16 weight on
  // cuBLAS (prefill); decode batches sum in the fp8 kernels' own orders (the tensor-core kernel at
  // 1..8 rows, blocks of 32 weight rows at 9..32; cuda/dense/dense.h), close to the bf16 result.
  bool wo_a_fp8 = false;
  // MB of each layer's bf16 wo_a (67 MB in Flash) asked into L2 ahead of its decode GEMV, in steps
  // of 1..4 rows: a launch on a third stream, forked at the layer's start, reads them while the
  // layer's latency-bound kernels (the mHC pair, the norms, the attention chain) leave DRAM idle
  // (gpu/forward_pass.h WeightPrefetch). 0: off; at most the L2's size. SM90 only (elsewhere the
  // option is ignored); same values either way. 16 MB measured best on an H100 (20 layers, 4K:
  // batch 1 -1.0%, 2 -0.9%, 4 -0.3%; 8 and 24 MB a little less, 32 and 40 none: the prefetch's
  // reads then slow the layer's first weight streams; bench/results/prefetch_h100_7d10325).
  int l2_prefetch_mb = 16;
  // Fork that prefetch at the layer's start (before wqkv) rather than after wq_b (which gained
  // nothing: the attention chain alone is too short a window). For A/B runs (`dsv4 bench
  // --l2-prefetch-from wq_b`).
  bool l2_prefetch_early = true;
};

// One sequence's part of a step (host memory; the model copies it to its static device buffers).
struct GpuStepSeq {
  int32_t slot = 0;                      // [0, max_seqs)
  std::span<const int32_t> block_table;  // KV block ids in position order, covering pos0 + tokens
  int64_t pos0 = 0;                      // position of tokens[0]; 0 starts the sequence fresh
  std::span<const int32_t> tokens;       // >= 1 token ids
  bool logits = false;                   // produce logits for this sequence's last token
};

// Discrete choices of one step for tests and the CLI (copied to the host when requested).
struct GpuStepTrace {
  // [layer][row] selected compressed entries of CSA layers (empty for other layers), -1 removed
  std::vector<std::vector<std::vector<int32_t>>> selected;
  // [layer][row * top_k + j] routed experts (sorted by expert id per row)
  std::vector<std::vector<int32_t>> experts;
};

class GpuModel {
 public:
  // Uploads the weights (tensor by tensor through one staging buffer) and allocates every buffer.
  // Errors: no CUDA device, a format the GPU path does not run (names the tensor), dimensions other
  // than the ones the kernels support, not enough device memory (says how much was asked).
  static Result<std::unique_ptr<GpuModel>> load(const ModelConfig& cfg, const ModelWeights& w,
                                                const GpuModelOptions& opts);
  ~GpuModel();

  // Runs one step. logits_out (host): f32 [n_logits, vocab] for the sequences with logits = true,
  // in step order. all_rows = true instead returns logits for every row of the step ([n_rows,
  // vocab], for `dsv4 logits`). trace: optional. Errors: bad slot, block table too short, step
  // larger than max_tokens_per_step, token outside the vocabulary; nothing is modified then.
  // logits_out may be null (the runner samples from device_logits()): then, without a trace,
  // forward() returns without synchronizing and device errors surface at the next synchronization.
  // A slot's sequence continues only from where it stopped: pos0 is 0 (a new sequence) or the
  // slot's current length. Pure decode steps (one token per sequence) without all_rows or trace
  // replay the smallest captured graph that fits; everything else runs eagerly.
  Status forward(std::span<const GpuStepSeq> seqs, float* logits_out, bool all_rows = false,
                 GpuStepTrace* trace = nullptr);
  // The slot's sequence has ended: from now on the slot only starts a new one (pos0 = 0), so a
  // stale continuation is refused instead of attending to the old sequence's window and state.
  // Out-of-range slots are ignored.
  void release_slot(int slot);
  // Slot dst continues from slot src's sequence as it is now (n_tokens long): copies src's window
  // rings and compressor states to dst and the compressed records of the blocks covering n_tokens
  // from src_blocks to dst_blocks (a block id at the same index of both is shared: not copied),
  // on the model's stream (ordered after the last step; no host
  // synchronization). Errors (nothing copied): a slot out of range or src == dst, src not
  // n_tokens long, a block table too short or a block id outside the pool.
  Status fork_slot(int src, int dst, std::span<const int32_t> src_blocks, std::span<const int32_t> dst_blocks,
                   int64_t n_tokens);

  // Device logits of the last forward ([n_logits, vocab] f32, row stride vocab) and the stream, for
  // sampling on the device without a host round trip (the runner). After an all_rows step it
  // holds only the last chunk the head computed (max(max_seqs, 64) rows per chunk).
  const float* device_logits() const;
  void* stream() const;  // cudaStream_t

  const ModelConfig& config() const;
  const GpuModelOptions& options() const;
  size_t device_bytes() const;          // everything this model allocated
  int64_t fp8_linears() const;          // linears stored in the fp8 form (GpuModelOptions::wo_a_fp8)
  const std::string& fp8_refused() const;  // the first weight asked in fp8 that stayed bf16, and why ("": none)
  std::vector<std::string> manifest() const;  // lines: weights, KV pool, buffers, graphs

  // Test hook: number of device allocations made after load() returned (must stay 0).
  int64_t allocations_after_load() const;
  // Whether the last forward() replayed a CUDA graph, and the switch that allows replays
  // (enabled = false runs every step eagerly: graph replay against eager execution of the same step).
  bool last_step_replayed_graph() const;
  void set_graph_replay(bool enabled);

  // Profiling (dsv4 bench): while on, steps run eagerly with CUDA events between the launch groups
  // of each category; last_profile() gives milliseconds per category of the last step, then "total".
  void set_profiling(bool enabled);
  std::vector<std::pair<std::string, double>> last_profile() const;

 private:
  GpuModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::gpu
