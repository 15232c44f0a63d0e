// state.h: the per-sequence decode state of the CPU reference (MODEL_SPEC.md §9): per layer the
// sliding-window ring, the compressed entries emitted so far, the indexer keys, and the fp32
// compressor buffers of the window being filled. With it a prompt can be fed in chunks of any size
// and then decoded token by token, with the same result as one forward over everything.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::cpu {

// One compressor (main or indexer) of one layer.
struct CompressorState {
  int ratio = 0;      // m: tokens per entry
  int coff = 1;       // 2 with overlap (CSA), 1 without (HCA)
  int dim = 0;        // Dc: entry width
  // Rows of (a, z) with z already including ape, fp32 [ratio, coff * dim]. `cur` is the window
  // being filled (row p mod m); `prev` is the last complete window (only read with overlap).
  std::vector<float> cur_a, cur_z, prev_a, prev_z;
  std::vector<float> entries;  // emitted entries [n_entries, dim], post-processed
  int64_t n_entries = 0;

  void init(int ratio_, int coff_, int dim_);
};

struct LayerState {
  std::vector<float> window;  // ring [W, d], slot = pos mod W, post-processed keys (= values)
  bool has_compressor = false;
  CompressorState compressor;
  bool has_indexer = false;
  CompressorState indexer;    // its entries are the indexer keys [n, dI]
};

struct SequenceState {
  int64_t pos = 0;                 // tokens consumed so far
  std::vector<LayerState> layers;  // [n_layers]
  bool has_mtp = false;
  LayerState mtp;
  int64_t mtp_pos = 0;
};

}  // namespace dsv4::cpu
