// model_support.cpp: the dimension check of model_support.h.
#include "gpu/model_support.h"

namespace dsv4::gpu {

Status check_gpu_supported(const ModelConfig& c) {
  struct Dim {
    const char* field;
    int found, want;
  };
  const Dim dims[] = {
      {"hidden_size", c.hidden, 4096},
      {"hc_mult", c.hc_mult, 4},
      {"num_attention_heads", c.n_heads, 64},
      {"num_key_value_heads", c.n_kv_heads, 1},
      {"head_dim", c.head_dim, 512},
      {"qk_rope_head_dim", c.rope_dim, 64},
      {"q_lora_rank", c.q_lora_rank, 1024},
      {"o_groups", c.o_groups, 8},
      {"o_lora_rank", c.o_lora_rank, 1024},
      {"n_routed_experts", c.n_routed_experts, 256},
      {"n_shared_experts", c.n_shared_experts, 1},
      {"moe_intermediate_size", c.moe_inter, 2048},
      {"sliding_window", c.sliding_window, 128},
      {"index_n_heads", c.index_n_heads, 64},
      {"index_head_dim", c.index_head_dim, 128},
      {"index_topk", c.index_topk, 512},
  };
  for (const Dim& d : dims)
    if (d.found != d.want)
      return unimplemented("the GPU kernels are built for DeepSeek-V4-Flash: {} must be {}, found {}", d.field, d.want,
                           d.found);
  // The fused MoE takes 1..8 routed experts per token (Flash: 6).
  if (c.n_experts_per_tok < 1 || c.n_experts_per_tok > 8)
    return unimplemented("the GPU MoE takes 1..8 experts per token, found num_experts_per_tok = {}",
                         c.n_experts_per_tok);
  if (c.vocab_size < 1) return invalid_argument("vocab_size must be positive, found {}", c.vocab_size);
  if (c.n_layers < 1 || int(c.layers.size()) != c.n_layers)
    return invalid_argument("{} layer specs for num_hidden_layers = {}", c.layers.size(), c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerSpec& l = c.layers[size_t(i)];
    switch (l.attn) {
      case AttnType::kSliding: break;
      case AttnType::kCsa:
        if (l.compress_ratio != 4)
          return unimplemented("layer {}: the GPU path runs CSA with compress ratio 4, found {}", i, l.compress_ratio);
        break;
      case AttnType::kHca:
        if (l.compress_ratio != 128)
          return unimplemented("layer {}: the GPU path runs HCA with compress ratio 128, found {}", i,
                               l.compress_ratio);
        break;
    }
  }
  return Status::ok();
}

}  // namespace dsv4::gpu
