// kv_state.cpp: sizes and allocation of the device KV state (see kv_state.h).
#include "gpu/kv_state.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cuda/common/cuda_check.h"
#include "cuda/compressor/compressor.h"
#include "gpu/step_plan.h"
#include "kvcache/kv_record.h"

namespace dsv4::gpu {

KvStateSizes kv_state_sizes(const ModelConfig& cfg, const std::vector<LayerDeviceWeights>& layers, int max_seqs,
                            int max_tokens, int n_kv_blocks) {
  KvStateSizes s;
  s.max_seqs = max_seqs;
  s.max_tokens = max_tokens;
  s.n_kv_blocks = n_kv_blocks;
  s.entry_bytes = kv::entry_bytes(cfg.nope_dim(), cfg.rope_dim);
  s.index_key_bytes = kv::indexer_key_bytes(cfg.index_head_dim);
  s.chunk_bytes = int64_t(max_tokens) * s.entry_bytes;
  for (const LayerDeviceWeights& l : layers) {
    s.slot_bytes += int64_t(cfg.sliding_window) * s.entry_bytes;
    if (l.spec.attn == AttnType::kSliding) continue;
    const int64_t per_block = cuda::kKvBlockTokens / l.spec.compress_ratio;
    s.block_bytes += per_block * s.entry_bytes;
    s.slot_bytes += cuda::compressor_state_floats(l.comp) * 4;
    if (l.spec.attn == AttnType::kCsa) {
      s.block_bytes += per_block * s.index_key_bytes;
      s.slot_bytes += cuda::compressor_state_floats(l.idx_comp) * 4;
    }
  }
  return s;
}

Result<KvState> create_kv_state(const ModelConfig& cfg, const std::vector<LayerDeviceWeights>& layers,
                                const KvStateSizes& sizes, DeviceArena& arena) {
  KvState kv;
  kv.sizes = sizes;
  const MemCategory cat = MemCategory::kKvState;
  DSV4_ASSIGN_OR_RETURN(uint8_t * chunk, arena.alloc_n<uint8_t>(sizes.chunk_bytes, cat, "the KV chunk buffer", true));
  kv.layers.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerDeviceWeights& l = layers[i];
    LayerKvState& st = kv.layers[i];
    cuda::LayerKvView& v = st.view;
    v.window_size = cfg.sliding_window;
    v.chunk = chunk;
    v.ratio = l.spec.compress_ratio;
    v.nope = cfg.nope_dim();
    v.rope = cfg.rope_dim;
    v.entry_bytes = int(sizes.entry_bytes);
    v.index_dim = cfg.index_head_dim;
    v.index_key_bytes = int(sizes.index_key_bytes);
    const std::string name = fmt::format("layer {} ", i);
    DSV4_ASSIGN_OR_RETURN(v.window, arena.alloc_n<uint8_t>(int64_t(sizes.max_seqs) * cfg.sliding_window *
                                                               sizes.entry_bytes,
                                                           cat, name + "window rings", true));
    if (l.spec.attn == AttnType::kSliding) continue;
    const int64_t per_block = cuda::kKvBlockTokens / l.spec.compress_ratio;
    DSV4_ASSIGN_OR_RETURN(v.entries, arena.alloc_n<uint8_t>(int64_t(sizes.n_kv_blocks) * per_block * sizes.entry_bytes,
                                                            cat, name + "compressed entries", true));
    st.comp_state_floats = cuda::compressor_state_floats(l.comp);
    DSV4_ASSIGN_OR_RETURN(st.comp_state, arena.alloc_n<float>(int64_t(sizes.max_seqs) * st.comp_state_floats, cat,
                                                              name + "compressor state", true));
    if (l.spec.attn == AttnType::kCsa) {
      st.idx_state_floats = cuda::compressor_state_floats(l.idx_comp);
      DSV4_ASSIGN_OR_RETURN(v.index_keys,
                            arena.alloc_n<uint8_t>(int64_t(sizes.n_kv_blocks) * per_block * sizes.index_key_bytes, cat,
                                                   name + "indexer keys", true));
      DSV4_ASSIGN_OR_RETURN(st.idx_state,
                            arena.alloc_n<float>(int64_t(sizes.max_seqs) * st.idx_state_floats,
                                                 cat, name + "indexer compressor state", true));
    }
  }
  return kv;
}

Status copy_sequence_state(const KvState& kv, int src_slot, int dst_slot, std::span<const int32_t> src_blocks,
                           std::span<const int32_t> dst_blocks, int64_t n_tokens, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  auto copy = [st](void* dst, const void* src, int64_t bytes) {
    return cuda::cuda_status(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, st),
                             "copy a sequence's KV state");
  };
  const int64_t n_blocks = blocks_for_positions(n_tokens);
  for (const LayerKvState& l : kv.layers) {
    const cuda::LayerKvView& v = l.view;
    const int64_t ring = int64_t(v.window_size) * v.entry_bytes;
    DSV4_RETURN_IF_ERROR(copy(v.window + dst_slot * ring, v.window + src_slot * ring, ring));
    if (l.comp_state_floats > 0) {
      const int64_t n = l.comp_state_floats;
      DSV4_RETURN_IF_ERROR(copy(l.comp_state + dst_slot * n, l.comp_state + src_slot * n, n * 4));
    }
    if (l.idx_state_floats > 0) {
      const int64_t n = l.idx_state_floats;
      DSV4_RETURN_IF_ERROR(copy(l.idx_state + dst_slot * n, l.idx_state + src_slot * n, n * 4));
    }
    if (v.ratio == 0) continue;
    const int64_t per_block = cuda::kKvBlockTokens / v.ratio;
    // Runs of blocks numbered consecutively in both tables go in one copy; a block both tables
    // hold (shared by the engine) is skipped.
    for (int64_t b = 0; b < n_blocks;) {
      if (src_blocks[size_t(b)] == dst_blocks[size_t(b)]) {
        ++b;
        continue;
      }
      int64_t run = 1;
      while (b + run < n_blocks && src_blocks[size_t(b + run)] == src_blocks[size_t(b)] + run &&
             dst_blocks[size_t(b + run)] == dst_blocks[size_t(b)] + run)
        ++run;
      const int64_t s0 = src_blocks[size_t(b)] * per_block, d0 = dst_blocks[size_t(b)] * per_block;
      DSV4_RETURN_IF_ERROR(copy(v.entries + d0 * v.entry_bytes, v.entries + s0 * v.entry_bytes,
                                run * per_block * v.entry_bytes));
      if (v.index_keys != nullptr)
        DSV4_RETURN_IF_ERROR(copy(v.index_keys + d0 * v.index_key_bytes, v.index_keys + s0 * v.index_key_bytes,
                                  run * per_block * v.index_key_bytes));
      b += run;
    }
  }
  return Status::ok();
}

}  // namespace dsv4::gpu
