#!/usr/bin/env python3
"""hf_peer.py: the Hugging Face transformers peer of `dsv4 bench` (issue: single-GPU forward): a
flash-shaped DeepseekV4ForCausalLM (Flash's dimensions, 256 experts, the given layer types; random
bf16 weights, i.e. dequantized W4A16 in spirit: the same shapes at 16 bits) on the same GPU, batch 1:
prefill a prompt, then greedy decode with its KV cache; prints and writes tokens/s. Runs on the GPU
machine (torch + transformers installed there). Usage:
  python3 bench/hf_peer.py --layers csa,hca --prompt 512 --new 32 --out peer.json"""
import argparse
import json
import time

import torch
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

KIND = {"swa": "sliding_attention", "csa": "compressed_sparse_attention", "hca": "heavily_compressed_attention"}


def flash_config(layer_types, vocab):
    return DeepseekV4Config(
        vocab_size=vocab, hidden_size=4096, num_hidden_layers=len(layer_types),
        layer_types=[KIND[t] for t in layer_types],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        mlp_layer_types=["moe"] * len(layer_types), num_attention_heads=64, num_key_value_heads=1, head_dim=512,
        partial_rotary_factor=64 / 512, q_lora_rank=1024, o_groups=8, o_lora_rank=1024, n_routed_experts=256,
        num_experts_per_tok=6, n_shared_experts=1, moe_intermediate_size=2048, routed_scaling_factor=1.5,
        swiglu_limit=10.0, scoring_func="sqrtsoftplus", norm_topk_prob=True, sliding_window=128, index_n_heads=64,
        index_head_dim=128, index_topk=512, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters=dict(rope_type="yarn", factor=16.0, original_max_position_embeddings=65536, beta_fast=32,
                             beta_slow=1),
        max_position_embeddings=1048576, num_nextn_predict_layers=0, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="csa,hca")
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    cfg = flash_config(a.layers.split(","), a.vocab)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = DeepseekV4ForCausalLM(cfg).to(torch.bfloat16).eval()
    load_s = time.time() - t0
    ids = torch.randint(0, a.vocab, (1, a.prompt), device="cuda")
    with torch.no_grad():
        model.generate(ids[:, :64], max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
        torch.cuda.synchronize()
        t0 = time.time()
        out = model(ids, use_cache=True)
        torch.cuda.synchronize()
        prefill_s = time.time() - t0
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(a.new):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        decode_s = time.time() - t0
    res = {"peer": "transformers DeepseekV4ForCausalLM bf16 (eager)", "layers": a.layers, "vocab": a.vocab,
           "prompt": a.prompt, "new_tokens": a.new, "load_s": load_s, "prefill_tokens_per_s": a.prompt / prefill_s,
           "decode_ms_per_token": 1e3 * decode_s / a.new, "decode_tokens_per_s": a.new / decode_s,
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import transformers
    res["transformers"] = transformers.__version__
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
