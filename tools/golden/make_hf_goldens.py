#!/usr/bin/env python3
"""make_hf_goldens.py: builds tiny random DeepSeek-V4 models with Hugging Face transformers and writes the
golden fixtures the C++ engine is checked against (issue 2, item 10).

For every tiny config it writes, under <out>/<config>/:
  hf/        HF module names (model.layers.N.self_attn.q_a_proj.weight, fused 3-D experts) + new-style config
  ds_w4a16/  DeepSeek names + Intel AutoRound W4A16 (auto_gptq INT4, group 128) + legacy config
  input_ids.npy, logits_hf.npy, logits_ds_w4a16.npy, meta.json
logits_hf is the fp32 full forward of the HF model holding exactly the hf/ weights; logits_ds_w4a16 is the fp32 full
forward of the same model after every INT4 weight is replaced by its exact dequantization s * (q - 8).

It never trains or downloads anything; everything is derived from a fixed seed, so a rerun with the same torch and
transformers versions reproduces the files bit for bit (modulo CPU GEMM summation order in the logits).
Run with the transformers 5.17 environment: /opt/hfenv/bin/python tools/golden/make_hf_goldens.py --out fixtures/hf
"""

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hfm

# ----------------------------------------------------------------------------------------------------------------
# Tiny configs
# ----------------------------------------------------------------------------------------------------------------
# Shared constraints behind the numbers (why they are what they are):
# * every INT4 linear needs in_features % 128 == 0 (group 128): hidden, q_lora_rank, o_groups*o_lora_rank and
#   moe_intermediate_size are 128-multiples; out_features % 8 == 0 for qzeros.
# * index_n_heads >= 16, otherwise many indexer scores tie at exactly 0 and top-k becomes arbitrary (MODEL_SPEC §14).
# * T >= vocab so the input ids hit every (randomized) tid2eid row; vocab is kept small so logits stay small.
# * swiglu_limit, routed_scaling_factor, hc_sinkhorn_iters, rms_norm_eps, window, thetas differ from the real model
#   and between configs so an engine that hard-codes a Flash constant fails loudly.
# * original_max_position_embeddings is chosen so the YaRN ramp (low, high) falls strictly inside the rope pairs:
#   tiny_a (rope 16, 8 pairs):  low 3, high 6  -> pairs 0-3 plain, 4-5 blended, 6-7 divided by factor.
#   tiny_b (rope 32, 16 pairs): low 4, high 10 -> pairs 0-4 plain, 5-9 blended, 10-15 divided by factor.
CONFIGS = {
    "tiny_a": dict(
        seed=1001,
        seq_len=300,
        hf=dict(
            vocab_size=256,
            hidden_size=128,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
            mlp_layer_types=["hash_moe", "hash_moe", "moe"],
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            partial_rotary_factor=16 / 64,  # qk_rope_head_dim 16
            q_lora_rank=128,
            o_groups=2,
            o_lora_rank=128,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=128,
            routed_scaling_factor=1.5,
            swiglu_limit=2.5,
            scoring_func="sqrtsoftplus",
            norm_topk_prob=True,
            sliding_window=32,
            index_n_heads=16,
            index_head_dim=32,
            index_topk=8,
            hc_mult=4,
            hc_sinkhorn_iters=20,
            hc_eps=1e-6,
            rms_norm_eps=1e-6,
            rope_theta=10000.0,
            compress_rope_theta=160000.0,
            rope_parameters=dict(
                rope_type="yarn", factor=16.0, original_max_position_embeddings=32768, beta_fast=32, beta_slow=1
            ),
            max_position_embeddings=16 * 32768,
            num_nextn_predict_layers=0,
            bos_token_id=0,
            eos_token_id=1,
            tie_word_embeddings=False,
        ),
    ),
    "tiny_b": dict(
        seed=2002,
        seq_len=333,
        hf=dict(
            vocab_size=192,
            hidden_size=128,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
            mlp_layer_types=["hash_moe", "moe", "moe"],
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            partial_rotary_factor=32 / 64,  # qk_rope_head_dim 32
            q_lora_rank=128,
            o_groups=2,
            o_lora_rank=64,  # only o_groups * o_lora_rank (wo_b's K) must be a 128-multiple; wo_a stays BF16
            n_routed_experts=4,
            num_experts_per_tok=3,
            n_shared_experts=1,
            moe_intermediate_size=128,
            routed_scaling_factor=2.5,
            swiglu_limit=1.5,
            scoring_func="sqrtsoftplus",
            norm_topk_prob=True,
            sliding_window=64,
            index_n_heads=16,
            index_head_dim=64,  # a power of two: the bf16 path Hadamard-rotates indexer keys
            index_topk=16,
            hc_mult=4,
            hc_sinkhorn_iters=7,
            hc_eps=1e-6,
            rms_norm_eps=1e-5,
            rope_theta=20000.0,
            compress_rope_theta=80000.0,
            rope_parameters=dict(
                rope_type="yarn", factor=8.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1
            ),
            max_position_embeddings=8 * 4096,
            num_nextn_predict_layers=0,
            bos_token_id=0,
            eos_token_id=1,
            tie_word_embeddings=False,
        ),
    ),
}

# Which config's ds_w4a16 is written as 2 shards + model.safetensors.index.json (instead of one file).
SHARDED_DS_CONFIG = "tiny_b"

# Margins below this make a top-k choice (indexer or router) fragile against fp32 summation-order noise in another
# implementation; the generator then tries the next seed.
MIN_TOPK_MARGIN = 1e-4


# ----------------------------------------------------------------------------------------------------------------
# Randomization
# ----------------------------------------------------------------------------------------------------------------
def bf16_round(t):
    # Weights are kept fp32 but exactly bf16-representable, so the bf16 files carry them losslessly.
    return t.to(torch.bfloat16).to(torch.float32)


def random_value(name, shape, cfg, gen):
    """Scaled random values: every linear is normal/sqrt(fan_in) so activations stay O(1) through all layers."""
    n = lambda: torch.randn(shape, generator=gen, dtype=torch.float32)
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float32)
    hc_width = cfg.hc_mult * cfg.hidden_size
    if name.endswith("embed_tokens.weight"):
        return n()
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return 1.0 + 0.2 * n()
    if name.endswith("_hc.fn") or name.endswith("hc_head.hc_fn"):
        return n() / math.sqrt(hc_width)
    if name.endswith("_hc.base") or name.endswith("hc_head.hc_base"):
        return 0.5 * n()
    if name.endswith("_hc.scale") or name.endswith("hc_head.hc_scale"):
        return u(0.5, 1.5)
    if name.endswith("self_attn.sinks"):
        return n()
    if name.endswith("position_bias"):
        return 0.5 * n()
    if name.endswith("e_score_correction_bias"):
        return 0.3 * n()
    if name.endswith("experts.gate_up_proj"):  # [E, 2I, H]
        return n() / math.sqrt(shape[-1])
    if name.endswith("experts.down_proj"):  # [E, H, I]
        return n() / math.sqrt(shape[-1])
    if name.endswith(".weight") and len(shape) == 2:  # every nn.Linear [out, in]
        return n() / math.sqrt(shape[1])
    raise KeyError(f"no randomization rule for {name} {tuple(shape)}")


def randomize(model, cfg, seed):
    """Overwrite every persistent parameter and buffer (HF zero-initializes tid2eid, biases, sinks, position biases and
    sets HC scales to one: those code paths would otherwise be untested)."""
    gen = torch.Generator().manual_seed(seed)
    sd = model.state_dict()  # persistent tensors only; rotary inv_freq buffers are derived, not stored
    new = {}
    for name in sorted(sd):
        t = sd[name]
        if name.endswith("tid2eid"):
            # Each row: distinct valid expert ids, as in the real table.
            rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok] for _ in range(t.shape[0])]
            new[name] = torch.stack(rows).to(torch.int64)
        else:
            new[name] = bf16_round(random_value(name, tuple(t.shape), cfg, gen))
    model.load_state_dict(new, strict=True)
    return new


def param_table(sd):
    """One row per tensor; fails if any tensor is constant 0 or 1 (would hide a missing load in the engine)."""
    rows, bad = [], []
    for name in sorted(sd):
        t = sd[name]
        tf = t.double()
        all0 = bool((tf == 0).all())
        all1 = bool((tf == 1).all())
        rows.append((name, tuple(t.shape), str(t.dtype).replace("torch.", ""), float(tf.min()), float(tf.max()),
                     float(tf.abs().mean()), all0, all1))
        if all0 or all1:
            bad.append(name)
    return rows, bad


# ----------------------------------------------------------------------------------------------------------------
# Forward helpers and self-checks
# ----------------------------------------------------------------------------------------------------------------
def build_model(hf_kwargs):
    cfg = DeepseekV4Config(**hf_kwargs)
    cfg._attn_implementation = "eager"  # V4 ships eager only; the sink needs it
    model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
    return cfg, model


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=ids[None], use_cache=False)
    return out.logits[0].float().clone()


@torch.no_grad()
def cached_logits(model, ids, prefill, n_single):
    """Prefill `prefill` tokens, then `n_single` one-token steps, then the rest as one chunk, through HF's cache."""
    T = ids.shape[0]
    pieces, pkv, pos = [], None, 0
    bounds = [prefill] + [prefill + i + 1 for i in range(n_single)] + [T]
    for end in bounds:
        chunk = ids[pos:end]
        position_ids = torch.arange(pos, end)[None]
        out = model(input_ids=chunk[None], position_ids=position_ids, past_key_values=pkv, use_cache=True)
        pkv = out.past_key_values
        pieces.append(out.logits[0].float())
        pos = end
    return torch.cat(pieces, 0)


class TopkMarginProbe:
    """Records, for every indexer and score router, the smallest gap between the k-th and (k+1)-th candidate.
    A tiny gap means another fp32 implementation could legitimately pick a different set."""

    def __init__(self, model):
        self.indexer_min, self.router_min = float("inf"), float("inf")
        self.handles = []
        for mod in model.modules():
            if isinstance(mod, hfm.DeepseekV4Indexer):
                self.handles.append(mod.register_forward_hook(self._indexer_hook, with_kwargs=True))
            if isinstance(mod, hfm.DeepseekV4TopKRouter):
                self.handles.append(mod.register_forward_hook(self._router_hook))
        self._scores = None
        for mod in model.modules():
            if isinstance(mod, hfm.DeepseekV4IndexerScorer):
                self.handles.append(mod.register_forward_hook(self._scorer_hook))

    def _scorer_hook(self, mod, args, out):
        self._scores = out.detach()

    def _indexer_hook(self, mod, args, kwargs, out):
        scores = self._scores[0]  # [S, n_entries]
        pos = (args[2] if len(args) > 2 else kwargs["position_ids"])[0]
        visible = (pos + 1) // mod.compress_rate
        k = mod.index_topk
        for s in range(scores.shape[0]):
            v = int(visible[s])
            if v > k:  # a real choice happens only when more entries are visible than selected
                top = torch.topk(scores[s, :v], k + 1).values
                self.indexer_min = min(self.indexer_min, float(top[k - 1] - top[k]))

    def _router_hook(self, mod, args, out):
        logits = out[0]
        scores = mod.score_fn(logits) + mod.e_score_correction_bias
        top = torch.topk(scores, mod.top_k + 1, dim=-1).values
        self.router_min = min(self.router_min, float((top[:, mod.top_k - 1] - top[:, mod.top_k]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


def _set_plain_compress_rope(m):
    for mod in m.modules():
        if isinstance(mod, hfm.DeepseekV4RotaryEmbedding):
            rp = mod.config.rope_parameters["compress"]
            dim = int(mod.config.head_dim * rp["partial_rotary_factor"])
            plain = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            mod.compress_inv_freq.copy_(plain)


def _set_attr_on(cls, attr, fn):
    def apply(m):
        for mod in m.modules():
            if isinstance(mod, cls):
                setattr(mod, attr, fn(getattr(mod, attr)))
    return apply


def _edit_tensors(suffix, fn):
    def apply(m):
        with torch.no_grad():
            for name, t in list(m.named_parameters()) + list(m.named_buffers()):
                if name.endswith(suffix):
                    t.copy_(fn(t))
    return apply


def _drop_compressors(kind):
    def apply(m):
        for layer in m.model.layers:
            if layer.self_attn.layer_type == kind:
                layer.self_attn.compressor = None
    return apply


def _shift_compressed_rope(m):
    # Rope compressed entries at the window's LAST token instead of its first (a plausible engine bug). Only the
    # main compressors' own rotary is patched: it rotates nothing but compressed entries.
    for layer in m.model.layers:
        comp = layer.self_attn.compressor
        if comp is None:
            continue
        rot, shift = comp.rotary_emb, comp.compress_rate - 1
        orig = rot.forward
        rot.forward = lambda x, position_ids, layer_type=None, _o=orig, _s=shift: _o(x, position_ids + _s, layer_type)


# Each entry perturbs one feature the engine must implement; the resulting max|delta logit| shows the fixture
# actually constrains that feature (it must be far above the 1e-4 * max|logit| tolerance).
ABLATIONS = {
    "no_csa_entries": _drop_compressors("compressed_sparse_attention"),
    "no_hca_entries": _drop_compressors("heavily_compressed_attention"),
    "compressed_rope_at_last_token": _shift_compressed_rope,
    "csa_attends_all_visible_entries": _set_attr_on(hfm.DeepseekV4Indexer, "index_topk", lambda v: 10**9),
    "compress_rope_without_yarn": _set_plain_compress_rope,
    "no_attention_sink": _edit_tensors("self_attn.sinks", lambda t: torch.full_like(t, -1e30)),
    "sliding_window_plus_1": lambda m: setattr(m.config, "sliding_window", m.config.sliding_window + 1),
    "tid2eid_rows_rolled": _edit_tensors("gate.tid2eid", lambda t: t.roll(1, dims=0)),
    "no_router_bias": _edit_tensors("e_score_correction_bias", torch.zeros_like),
    "no_swiglu_clamp": lambda m: (_set_attr_on(hfm.DeepseekV4Experts, "limit", lambda v: 1e9)(m),
                                  _set_attr_on(hfm.DeepseekV4MLP, "limit", lambda v: 1e9)(m)),
    "no_compressor_position_bias": _edit_tensors("position_bias", torch.zeros_like),
    "sinkhorn_single_iter": _set_attr_on(hfm.DeepseekV4HyperConnection, "hc_sinkhorn_iters", lambda v: 1),
    # Informational only: with 20 iterations Sinkhorn has converged (tiny_a), so only tiny_b's 7 pins the count.
    "sinkhorn_one_more_iter": _set_attr_on(hfm.DeepseekV4HyperConnection, "hc_sinkhorn_iters", lambda v: v + 1),
    "routed_scaling_plus_0.1": lambda m: (
        _set_attr_on(hfm.DeepseekV4TopKRouter, "routed_scaling_factor", lambda v: v + 0.1)(m),
        _set_attr_on(hfm.DeepseekV4HashRouter, "routed_scaling_factor", lambda v: v + 0.1)(m)),
}


def sensitivity(model, ids, ref):
    out = {}
    for name, edit in ABLATIONS.items():
        m = copy.deepcopy(model)
        edit(m)
        out[name] = max_abs(full_logits(m, ids), ref)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Layout A: HF module names
# ----------------------------------------------------------------------------------------------------------------
# Every float tensor is stored as BF16 (lossless: all values are bf16-representable), tid2eid as I64. This is the
# complement of ds_w4a16, where hc_*, sinks, ape and gate.bias are F32: between the two layouts the loader has to
# widen both dtypes into the same fp32 values.
def hf_disk_dtype(name, t):
    return torch.bfloat16 if t.is_floating_point() else t.dtype


def write_hf_layout(cfg, sd, out_dir):
    # NOTE: not model.save_pretrained(): in transformers 5.17 it runs the deepseek_v4 conversion mapping backwards
    # and writes a hybrid naming (model.layers.N.attn.wq_a.weight, head.weight, attention kv_norm as attn.norm, ...)
    # that is neither the HF module names nor the DeepSeek names. We write the plain state-dict names instead;
    # from_pretrained loads them unchanged (checked below).
    os.makedirs(out_dir, exist_ok=True)
    cfg.save_pretrained(out_dir)
    tensors = {k: v.to(hf_disk_dtype(k, v)).contiguous() for k, v in sd.items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


# ----------------------------------------------------------------------------------------------------------------
# Layout B: DeepSeek names + Intel AutoRound W4A16 (auto_round:auto_gptq)
# ----------------------------------------------------------------------------------------------------------------
GROUP = 128
QZERO_WORD = 0x77777777  # 8 nibbles of 7: GPTQ-v1 stores zero - 1


def rtn_quantize(w):
    """CHECKPOINTS.md §3.3 RTN rule for one [N, K] weight: per (row n, group g) the scale is chosen so that -8*s hits
    the larger-magnitude extreme, hence NEGATIVE scales when |max| >= |min|. Returns int codes q in [-8, 7] [N, K] and
    fp16 scales [K/128, N]."""
    N, K = w.shape
    assert K % GROUP == 0 and N % 8 == 0, (N, K)
    wg = w.reshape(N, K // GROUP, GROUP).double()
    wmin = torch.clamp(wg.amin(-1), max=0.0)
    wmax = torch.clamp(wg.amax(-1), min=0.0)
    s = torch.where(wmin.abs() > wmax.abs(), wmin.abs() / 8.0, -wmax / 8.0)
    s16 = s.to(torch.float16)
    tiny = s16.abs().float() < 1e-5
    s16 = torch.where(tiny, torch.where(s16 < 0, -1e-5, 1e-5).to(torch.float16), s16)
    q = torch.clamp(torch.round(wg / s16.double()[..., None]), -8, 7).to(torch.int64)
    return q.reshape(N, K), s16.t().contiguous()  # scales [K/128, N]


def pack_gptq(q, s16):
    """auto_gptq v1 tensors for codes q [N, K]: qweight I32 [K/8, N] (nibble j of word (i, n) = row k = 8i + j),
    qzeros I32 [K/128, N/8] all 0x77777777, scales F16 [K/128, N]."""
    N, K = q.shape
    codes = (q + 8).t().reshape(K // 8, 8, N)  # [K/8, 8, N], values 0..15
    word = torch.zeros(K // 8, N, dtype=torch.int64)
    for j in range(8):
        word |= codes[:, j, :] << (4 * j)
    qweight = torch.from_numpy(word.numpy().astype(np.uint32).view(np.int32))
    qzeros = torch.from_numpy(np.full((K // GROUP, N // 8), QZERO_WORD, dtype=np.uint32).view(np.int32))
    return {"qweight": qweight, "qzeros": qzeros, "scales": s16}


def dequant_gptq(qweight, qzeros, scales):
    """Reader side (CHECKPOINTS.md §3.4), written independently of the packer: W[n, k] = s[g, n] * (q[k, n] - z)."""
    qw = torch.from_numpy(qweight.numpy().view(np.uint32).astype(np.int64))  # [K/8, N]
    K8, N = qw.shape
    K = K8 * 8
    shifts = torch.arange(8, dtype=torch.int64) * 4
    q = ((qw[:, None, :] >> shifts[None, :, None]) & 0xF).reshape(K, N)  # row k = 8i + j
    qz = torch.from_numpy(qzeros.numpy().view(np.uint32).astype(np.int64))  # [K/128, N/8]
    z = (((qz[:, :, None] >> shifts[None, None, :]) & 0xF).reshape(K // GROUP, N) + 1)  # [K/128, N]
    zk = z.repeat_interleave(GROUP, dim=0)  # [K, N]
    sk = scales.float().repeat_interleave(GROUP, dim=0)  # [K, N]
    return (sk * (q - zk).float()).t().contiguous()  # [N, K] fp32, exact


def ds_name_map(cfg):
    """HF state-dict name -> (DeepSeek name, kind) for everything except the fused experts.
    kind: 'int4' (GPTQ triple), 'bf16', 'f32', 'i64'. Table: CHECKPOINTS.md §2.3 / §4.2."""
    m = {
        "model.embed_tokens.weight": ("embed.weight", "bf16"),
        "lm_head.weight": ("head.weight", "bf16"),
        "model.norm.weight": ("norm.weight", "bf16"),
        "model.hc_head.hc_fn": ("hc_head_fn", "f32"),
        "model.hc_head.hc_base": ("hc_head_base", "f32"),
        "model.hc_head.hc_scale": ("hc_head_scale", "f32"),
    }
    for i in range(cfg.num_hidden_layers):
        h, d = f"model.layers.{i}.", f"layers.{i}."
        m.update({
            h + "input_layernorm.weight": (d + "attn_norm.weight", "bf16"),
            h + "post_attention_layernorm.weight": (d + "ffn_norm.weight", "bf16"),
            h + "attn_hc.fn": (d + "hc_attn_fn", "f32"),
            h + "attn_hc.base": (d + "hc_attn_base", "f32"),
            h + "attn_hc.scale": (d + "hc_attn_scale", "f32"),
            h + "ffn_hc.fn": (d + "hc_ffn_fn", "f32"),
            h + "ffn_hc.base": (d + "hc_ffn_base", "f32"),
            h + "ffn_hc.scale": (d + "hc_ffn_scale", "f32"),
            h + "self_attn.q_a_proj.weight": (d + "attn.wq_a", "int4"),
            h + "self_attn.q_a_norm.weight": (d + "attn.q_norm.weight", "bf16"),
            h + "self_attn.q_b_proj.weight": (d + "attn.wq_b", "int4"),
            h + "self_attn.kv_proj.weight": (d + "attn.wkv", "int4"),
            h + "self_attn.kv_norm.weight": (d + "attn.kv_norm.weight", "bf16"),
            h + "self_attn.o_a_proj.weight": (d + "attn.wo_a.weight", "bf16"),
            h + "self_attn.o_b_proj.weight": (d + "attn.wo_b", "int4"),
            h + "self_attn.sinks": (d + "attn.attn_sink", "f32"),
            h + "mlp.gate.weight": (d + "ffn.gate.weight", "bf16"),
            h + "mlp.shared_experts.gate_proj.weight": (d + "ffn.shared_experts.w1", "int4"),
            h + "mlp.shared_experts.up_proj.weight": (d + "ffn.shared_experts.w3", "int4"),
            h + "mlp.shared_experts.down_proj.weight": (d + "ffn.shared_experts.w2", "int4"),
        })
        if cfg.mlp_layer_types[i] == "hash_moe":
            m[h + "mlp.gate.tid2eid"] = (d + "ffn.gate.tid2eid", "i64")
        else:
            m[h + "mlp.gate.e_score_correction_bias"] = (d + "ffn.gate.bias", "f32")
        if cfg.layer_types[i] != "sliding_attention":
            c, dc = h + "self_attn.compressor.", d + "attn.compressor."
            m.update({
                c + "kv_proj.weight": (dc + "wkv.weight", "bf16"),
                c + "gate_proj.weight": (dc + "wgate.weight", "bf16"),
                c + "position_bias": (dc + "ape", "f32"),
                c + "kv_norm.weight": (dc + "norm.weight", "bf16"),
            })
        if cfg.layer_types[i] == "compressed_sparse_attention":
            x, dx = h + "self_attn.compressor.indexer.", d + "attn.indexer."
            m.update({
                x + "q_b_proj.weight": (dx + "wq_b", "int4"),
                x + "scorer.weights_proj.weight": (dx + "weights_proj.weight", "bf16"),
                x + "kv_proj.weight": (dx + "compressor.wkv.weight", "bf16"),
                x + "gate_proj.weight": (dx + "compressor.wgate.weight", "bf16"),
                x + "position_bias": (dx + "compressor.ape", "f32"),
                x + "kv_norm.weight": (dx + "compressor.norm.weight", "bf16"),
            })
    return m


KIND_DTYPE = {"bf16": torch.bfloat16, "f32": torch.float32, "i64": torch.int64}


def build_ds_layout(cfg, sd):
    """Returns (ds_tensors, sd_dequant): the DeepSeek-named tensor dict as Intel would store it, and the HF state dict
    in which every INT4 weight is replaced by its exact fp32 dequantization."""
    names = ds_name_map(cfg)
    ds, deq = {}, {k: v.clone() for k, v in sd.items()}
    stats = {"n_int4_linears": 0, "n_groups": 0, "n_negative_scales": 0, "max_abs_quant_err": 0.0}

    def put_int4(prefix, w):
        q, s16 = rtn_quantize(w)
        for suffix, t in pack_gptq(q, s16).items():
            ds[f"{prefix}.{suffix}"] = t
        wq = (s16.float().t().repeat_interleave(GROUP, dim=1) * q.float())  # [N, K], s * (q - 8) with q already -8..7
        stats["n_int4_linears"] += 1
        stats["n_groups"] += s16.numel()
        stats["n_negative_scales"] += int((s16 < 0).sum())
        stats["max_abs_quant_err"] = max(stats["max_abs_quant_err"], float((wq - w).abs().max()))
        return wq

    used = set()
    for hf_name, (ds_name, kind) in names.items():
        t = sd[hf_name]
        used.add(hf_name)
        if kind == "int4":
            deq[hf_name] = put_int4(ds_name, t)
        else:
            ds[ds_name] = t.to(KIND_DTYPE[kind]).contiguous()
    I = cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        gu, dn = f"model.layers.{i}.mlp.experts.gate_up_proj", f"model.layers.{i}.mlp.experts.down_proj"
        used.update([gu, dn])
        new_gu, new_dn = sd[gu].clone(), sd[dn].clone()
        for e in range(cfg.n_routed_experts):
            p = f"layers.{i}.ffn.experts.{e}."
            new_gu[e, :I] = put_int4(p + "w1", sd[gu][e, :I])  # gate rows 0..I-1
            new_gu[e, I:] = put_int4(p + "w3", sd[gu][e, I:])  # up rows I..2I-1
            new_dn[e] = put_int4(p + "w2", sd[dn][e])
        deq[gu], deq[dn] = new_gu, new_dn
    leftover = set(sd) - used
    assert not leftover, f"HF tensors without a DeepSeek name: {sorted(leftover)}"
    return ds, deq, stats


def legacy_config(cfg):
    """config.json in the DeepSeek / Intel style (legacy field names) for the ds_w4a16 layout."""
    rate = {"sliding_attention": 0,
            "compressed_sparse_attention": cfg.compress_rates["compressed_sparse_attention"],
            "heavily_compressed_attention": cfg.compress_rates["heavily_compressed_attention"]}
    n_hash = sum(t == "hash_moe" for t in cfg.mlp_layer_types)
    assert cfg.mlp_layer_types == ["hash_moe"] * n_hash + ["moe"] * (cfg.num_hidden_layers - n_hash)
    yarn = cfg.rope_parameters["compress"]
    extra = {"wo_a": {"bits": 16}, "head": {"bits": 16, "data_type": "float"}}
    for i, lt in enumerate(cfg.layer_types):
        extra[f"layers.{i}.ffn.gate"] = {"bits": 16, "data_type": "float"}
        if lt != "sliding_attention":
            for p in ("wkv", "wgate"):
                extra[f"layers.{i}.attn.compressor.{p}"] = {"bits": 16, "data_type": "float"}
        if lt == "compressed_sparse_attention":
            extra[f"layers.{i}.attn.indexer.weights_proj"] = {"bits": 16, "data_type": "float"}
            for p in ("wkv", "wgate"):
                extra[f"layers.{i}.attn.indexer.compressor.{p}"] = {"bits": 16, "data_type": "float"}
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "q_lora_rank": cfg.q_lora_rank,
        "o_groups": cfg.o_groups,
        "o_lora_rank": cfg.o_lora_rank,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "n_routed_experts": cfg.n_routed_experts,
        "n_shared_experts": cfg.n_shared_experts,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "scoring_func": cfg.scoring_func,
        "topk_method": "noaux_tc",
        "norm_topk_prob": cfg.norm_topk_prob,
        "routed_scaling_factor": cfg.routed_scaling_factor,
        "num_hash_layers": n_hash,
        "swiglu_limit": cfg.swiglu_limit,
        "hidden_act": cfg.hidden_act,
        "sliding_window": cfg.sliding_window,
        "index_n_heads": cfg.index_n_heads,
        "index_head_dim": cfg.index_head_dim,
        "index_topk": cfg.index_topk,
        "hc_mult": cfg.hc_mult,
        "hc_sinkhorn_iters": cfg.hc_sinkhorn_iters,
        "hc_eps": cfg.hc_eps,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_parameters["main"]["rope_theta"],
        "compress_rope_theta": yarn["rope_theta"],
        "rope_scaling": {
            "type": "yarn",
            "factor": yarn["factor"],
            "original_max_position_embeddings": yarn["original_max_position_embeddings"],
            "beta_fast": yarn["beta_fast"],
            "beta_slow": yarn["beta_slow"],
        },
        "compress_ratios": [rate[t] for t in cfg.layer_types],  # + one entry per MTP layer (none here)
        "num_nextn_predict_layers": 0,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": cfg.initializer_range,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "auto-round",
            "packing_format": "auto_round:auto_gptq",
            "bits": 4,
            "group_size": GROUP,
            "sym": True,
            "data_type": "int",
            "iters": 0,
            "model_free": True,
            "autoround_version": "0.14.0",
            "extra_config": extra,
        },
    }


def write_ds_layout(ds, legacy, out_dir, sharded):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(legacy, f, indent=2)
        f.write("\n")
    if not sharded:
        save_file(ds, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        return
    # Two shards split at half the bytes in DeepSeek tensor order, so one layer's tensors straddle the boundary
    # (as in the real 46-shard export, whose boundaries follow the source shards, not layers).
    order = sorted(ds, key=ds_sort_key)
    total = sum(t.numel() * t.element_size() for t in ds.values())
    shards, acc = [[], []], 0
    for name in order:
        shards[0 if acc < total / 2 else 1].append(name)
        acc += ds[name].numel() * ds[name].element_size()
    weight_map = {}
    for idx, names in enumerate(shards):
        fname = f"model-{idx + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: ds[n] for n in names}, os.path.join(out_dir, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def ds_sort_key(name):
    parts = name.split(".")
    if parts[0] == "embed":
        return (0, 0, name)
    if parts[0] == "layers":
        return (1, int(parts[1]), name)
    return (2, 0, name)


def read_safetensors_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), "pt") as f:
            for k in f.keys():
                assert k not in out, k
                out[k] = f.get_tensor(k)
    return out


def hf_from_ds_files(cfg, d):
    """Independent reader for layout B: rebuild the HF fp32 state dict from the files (dequantizing INT4)."""
    raw = read_safetensors_dir(d)
    names = ds_name_map(cfg)
    seen = set()

    def linear(prefix):
        if prefix + ".qweight" in raw:
            seen.update(prefix + s for s in (".qweight", ".qzeros", ".scales"))
            assert raw[prefix + ".qweight"].dtype == torch.int32 and raw[prefix + ".qzeros"].dtype == torch.int32
            assert raw[prefix + ".scales"].dtype == torch.float16
            assert bool((raw[prefix + ".qzeros"] == np.int32(np.uint32(QZERO_WORD).view(np.int32))).all())
            return dequant_gptq(raw[prefix + ".qweight"], raw[prefix + ".qzeros"], raw[prefix + ".scales"])
        seen.add(prefix)
        return raw[prefix].float() if raw[prefix].is_floating_point() else raw[prefix]

    sd = {}
    for hf_name, (ds_name, kind) in names.items():
        sd[hf_name] = linear(ds_name)
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}.ffn.experts."
        E = cfg.n_routed_experts
        sd[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([linear(f"{p}{e}.w1"), linear(f"{p}{e}.w3")], 0) for e in range(E)])
        sd[f"model.layers.{i}.mlp.experts.down_proj"] = torch.stack([linear(f"{p}{e}.w2") for e in range(E)])
    assert seen == set(raw), f"unread tensors in {d}: {sorted(set(raw) - seen)[:5]}"
    return sd, raw


def check_hf_conversion_mapping(cfg, sd_deq, legacy, tmp):
    """Cross-check our DeepSeek name table against transformers' own deepseek_v4 conversion mapping: write the
    dequantized weights densely under DeepSeek names with the legacy config and let from_pretrained load them.
    HF parses compress_ratios only for {0, 4, 128}, so a non-128 HCA rate is passed as compress_rate_hca here."""
    d = os.path.join(tmp, "ds_dense")
    os.makedirs(d, exist_ok=True)
    names = ds_name_map(cfg)
    dense = {}
    for hf_name, (ds_name, kind) in names.items():
        key = ds_name + ".weight" if kind == "int4" else ds_name
        dense[key] = sd_deq[hf_name].contiguous()
    I = cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        gu = sd_deq[f"model.layers.{i}.mlp.experts.gate_up_proj"]
        dn = sd_deq[f"model.layers.{i}.mlp.experts.down_proj"]
        for e in range(cfg.n_routed_experts):
            p = f"layers.{i}.ffn.experts.{e}."
            dense[p + "w1.weight"] = gu[e, :I].contiguous()
            dense[p + "w3.weight"] = gu[e, I:].contiguous()
            dense[p + "w2.weight"] = dn[e].contiguous()
    lc = {k: v for k, v in legacy.items() if k not in ("quantization_config", "torch_dtype")}
    hca = cfg.compress_rates["heavily_compressed_attention"]
    lc["compress_ratios"] = [128 if r == hca and r != 4 else r for r in lc["compress_ratios"]]
    lc["compress_rate_hca"] = hca
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(lc, f)
    save_file(dense, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    m = DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float32)
    got = m.state_dict()
    bad = [k for k in sd_deq if k not in got or not torch.equal(got[k], sd_deq[k])]
    # The legacy fields must parse to the same architecture as the new-style config.
    same = {
        "layer_types": m.config.layer_types == cfg.layer_types,
        "mlp_layer_types": m.config.mlp_layer_types == cfg.mlp_layer_types,
        "compress_rates": m.config.compress_rates == cfg.compress_rates,
        "qk_rope_head_dim": m.config.qk_rope_head_dim == cfg.qk_rope_head_dim,
        # HF keeps the legacy "type" key next to the "rope_type" it derives from it; ignore that leftover.
        "rope_parameters": {k: {kk: vv for kk, vv in v.items() if kk != "type"} for k, v in
                            m.config.rope_parameters.items()} == cfg.rope_parameters,
    }
    return bad, same, m.config.rope_parameters


# ----------------------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------------------
def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_input_ids(vocab, T, seed):
    # Every id once (so every tid2eid row is exercised), the rest random, then shuffled.
    assert T >= vocab
    gen = torch.Generator().manual_seed(seed + 7)
    ids = torch.cat([torch.randperm(vocab, generator=gen), torch.randint(0, vocab, (T - vocab,), generator=gen)])
    return ids[torch.randperm(T, generator=gen)].to(torch.int64)


def max_abs(a, b):
    return float((a - b).abs().max())


def generate_one(name, spec, out_root, tmp_root, log):
    t0 = time.time()
    T = spec["seq_len"]
    for attempt in range(8):
        seed = spec["seed"] + 100 * attempt
        torch.manual_seed(seed)  # HF's own init draws from the global RNG before we overwrite everything
        cfg, model = build_model(spec["hf"])
        sd = randomize(model, cfg, seed)
        ids = make_input_ids(cfg.vocab_size, T, seed)
        probe = TopkMarginProbe(model)
        logits_hf = full_logits(model, ids)
        probe.close()
        # Layout B's model differs (dequantized INT4 weights), so its top-k margins are checked separately.
        ds, sd_deq, qstats = build_ds_layout(cfg, sd)
        model_b = copy.deepcopy(model)
        model_b.load_state_dict(sd_deq, strict=True)
        probe_b = TopkMarginProbe(model_b)
        logits_ds = full_logits(model_b, ids)
        probe_b.close()
        margins = {"indexer_hf": probe.indexer_min, "router_hf": probe.router_min,
                   "indexer_ds_w4a16": probe_b.indexer_min, "router_ds_w4a16": probe_b.router_min}
        log(f"[{name}] seed {seed}: min top-k margins " + ", ".join(f"{k} {v:.2e}" for k, v in margins.items()))
        if min(margins.values()) >= MIN_TOPK_MARGIN:
            break
    else:
        raise RuntimeError(f"{name}: no seed with safe top-k margins")

    rows, bad = param_table(sd)
    log(f"[{name}] {'tensor':72s} {'shape':>16s} {'dtype':>8s} {'min':>9s} {'max':>9s} {'mean|x|':>9s}")
    for r in rows:
        log(f"[{name}] {r[0]:72s} {str(r[1]):>16s} {r[2]:>8s} {r[3]:9.4f} {r[4]:9.4f} {r[5]:9.4f}")
    assert not bad, f"constant tensors: {bad}"
    assert torch.isfinite(logits_hf).all()

    # HF self-consistency: a prefix forward must reproduce the first rows of the full forward (causality, and no
    # dependence of the indexer top-k on the row length), and so must HF's cached prefill + decode path.
    prefix_lens = [T // 2 + 1, T - 5]
    prefix_diff = max(max_abs(full_logits(m, ids[:p]), ref[:p])
                      for p in prefix_lens for m, ref in ((model, logits_hf), (model_b, logits_ds)))
    decode_diff = max(max_abs(cached_logits(m, ids, prefill=T // 2 + 3, n_single=24), ref)
                      for m, ref in ((model, logits_hf), (model_b, logits_ds)))
    log(f"[{name}] prefix-vs-full max|diff| {prefix_diff:.3e}; cached prefill+decode-vs-full {decode_diff:.3e}")
    assert prefix_diff < 1e-4 and decode_diff < 1e-4

    # Activation scale per layer (residual streams), to show nothing overflows or collapses.
    resid = []
    hooks = [layer.register_forward_hook(lambda mod, a, out: resid.append(float(out.abs().max())))
             for layer in model.model.layers]
    full_logits(model, ids)
    for h in hooks:
        h.remove()
    log(f"[{name}] max|residual| after each layer: " + ", ".join(f"{v:.2f}" for v in resid))

    sens = sensitivity(model, ids, logits_hf)
    tol = 1e-4 * float(logits_hf.abs().max())
    log(f"[{name}] sensitivity (max|delta logit|, tolerance {tol:.1e}): " +
        ", ".join(f"{k} {v:.2e}" for k, v in sens.items()))
    weak = [k for k, v in sens.items() if v <= 100 * tol and k != "sinkhorn_one_more_iter"]
    assert not weak, f"features that barely move the logits (the fixture would not test them): {weak}"

    cfg_dir = os.path.join(out_root, name)
    if os.path.exists(cfg_dir):
        shutil.rmtree(cfg_dir)
    os.makedirs(cfg_dir)

    # Layout A.
    hf_dir = os.path.join(cfg_dir, "hf")
    write_hf_layout(cfg, sd, hf_dir)
    mA = DeepseekV4ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    mA.config._attn_implementation = "eager"
    sdA = mA.state_dict()
    reload_bad = [k for k in sd if not torch.equal(sdA[k], sd[k])]
    assert not reload_bad, reload_bad
    reload_hf_diff = max_abs(full_logits(mA, ids), logits_hf)
    del mA

    # Layout B.
    assert torch.isfinite(logits_ds).all()
    legacy = legacy_config(cfg)
    ds_dir = os.path.join(cfg_dir, "ds_w4a16")
    write_ds_layout(ds, legacy, ds_dir, sharded=(name == SHARDED_DS_CONFIG))
    sd_back, raw = hf_from_ds_files(cfg, ds_dir)
    deq_bad = [k for k in sd_deq if not torch.equal(sd_back[k].to(sd_deq[k].dtype), sd_deq[k])]
    assert not deq_bad, deq_bad
    model_b2 = copy.deepcopy(model)
    model_b2.load_state_dict({k: v.to(sd_deq[k].dtype) for k, v in sd_back.items()}, strict=True)
    reload_ds_diff = max_abs(full_logits(model_b2, ids), logits_ds)
    del model_b2
    conv_bad, conv_same, conv_rope = check_hf_conversion_mapping(cfg, sd_deq, legacy, os.path.join(tmp_root, name))
    assert not conv_bad, conv_bad[:10]
    assert all(conv_same.values()), (conv_same, conv_rope)
    n_neg = int(sum(int((v < 0).sum()) for k, v in raw.items() if k.endswith(".scales")))
    assert n_neg == qstats["n_negative_scales"] > 0

    np.save(os.path.join(cfg_dir, "input_ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(cfg_dir, "logits_hf.npy"), logits_hf.numpy().astype(np.float32))
    np.save(os.path.join(cfg_dir, "logits_ds_w4a16.npy"), logits_ds.numpy().astype(np.float32))

    n_csa = T // cfg.compress_rates["compressed_sparse_attention"]
    n_hca = T // cfg.compress_rates["heavily_compressed_attention"]
    files = {}
    for root, _, fns in os.walk(cfg_dir):
        for fn in sorted(fns):
            p = os.path.join(root, fn)
            files[os.path.relpath(p, cfg_dir)] = {"bytes": os.path.getsize(p), "sha256": sha256(p)}
    meta = {
        "config_name": name,
        "generator": "tools/golden/make_hf_goldens.py",
        "seed": seed,
        "seq_len": T,
        "vocab_size": cfg.vocab_size,
        "hf_config": json.loads(cfg.to_json_string()),
        "layer_types": cfg.layer_types,
        "mlp_layer_types": cfg.mlp_layer_types,
        "compressed_entries_at_T": {"csa": n_csa, "hca": n_hca},
        # The rope tables HF used (fp32), so the engine can check its YaRN table before anything else.
        "rope_inv_freq": {"main": model.model.rotary_emb.main_inv_freq.tolist(),
                          "compress": model.model.rotary_emb.compress_inv_freq.tolist()},
        "logits_hf": {"shape": list(logits_hf.shape), "max_abs": float(logits_hf.abs().max()),
                      "std": float(logits_hf.std())},
        "logits_ds_w4a16": {"shape": list(logits_ds.shape), "max_abs": float(logits_ds.abs().max()),
                            "std": float(logits_ds.std())},
        "tolerance_hint": "engine fp32 logits must match to 1e-4 * max_abs of the respective file",
        "self_checks": {
            "prefix_vs_full_max_abs_diff": prefix_diff,
            "prefix_lengths": prefix_lens,
            "cached_prefill_decode_vs_full_max_abs_diff": decode_diff,
            "cached_schedule": f"prefill {T // 2 + 3}, 24 single-token steps, rest as one chunk",
            "hf_reload_from_pretrained_logits_max_abs_diff": reload_hf_diff,
            "ds_reload_dequant_weights_exact": True,
            "ds_reload_logits_max_abs_diff": reload_ds_diff,
            "hf_conversion_mapping_loads_ds_names_exact": True,
            "legacy_config_parses_to_same_architecture": conv_same,
            "min_topk_margins": margins,
            "min_topk_margin_required": MIN_TOPK_MARGIN,
            "logits_hf_vs_ds_w4a16_max_abs_diff": max_abs(logits_hf, logits_ds),
            "int4": qstats,
        },
        "max_abs_residual_after_layer": resid,
        "sensitivity_max_abs_logit_delta": sens,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "machine": platform.machine(), "processor": platform.processor(),
                     "torch_threads": torch.get_num_threads()},
        "files": files,
    }
    with open(os.path.join(cfg_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    log(f"[{name}] max|logit| hf {meta['logits_hf']['max_abs']:.4f}, ds {meta['logits_ds_w4a16']['max_abs']:.4f}; "
        f"reload diffs hf {reload_hf_diff:.1e} ds {reload_ds_diff:.1e}; "
        f"{qstats['n_negative_scales']}/{qstats['n_groups']} negative scales; {time.time() - t0:.1f}s")
    return meta


def verify(out_root, names, log):
    """Re-derive the logits of committed fixtures from their files alone (both layouts) and check the sha256s."""
    worst = 0.0
    for name in names:
        d = os.path.join(out_root, name)
        meta = json.load(open(os.path.join(d, "meta.json")))
        for rel, info in meta["files"].items():
            assert sha256(os.path.join(d, rel)) == info["sha256"], f"{name}/{rel}: sha256 differs from meta.json"
        ids = torch.from_numpy(np.load(os.path.join(d, "input_ids.npy")))
        model = DeepseekV4ForCausalLM.from_pretrained(os.path.join(d, "hf"), dtype=torch.float32).eval()
        model.config._attn_implementation = "eager"
        diff_hf = max_abs(full_logits(model, ids), torch.from_numpy(np.load(os.path.join(d, "logits_hf.npy"))))
        sd_b, _ = hf_from_ds_files(model.config, os.path.join(d, "ds_w4a16"))
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd_b.items()}, strict=True)
        diff_ds = max_abs(full_logits(model, ids), torch.from_numpy(np.load(os.path.join(d, "logits_ds_w4a16.npy"))))
        log(f"[{name}] verify: sha256 ok; recomputed-vs-stored max|diff| hf {diff_hf:.2e}, ds_w4a16 {diff_ds:.2e}")
        worst = max(worst, diff_hf, diff_ds)
    assert worst < 1e-4, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="fixtures/hf", help="output root (fixtures/hf)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = most reproducible)")
    ap.add_argument("--verify", action="store_true", help="check existing fixtures under --out instead of writing")
    args = ap.parse_args()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    if args.verify:
        verify(args.out, args.configs.split(","), lambda s: print(s, flush=True))
        return
    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs.split(","):
            generate_one(name, CONFIGS[name], args.out, tmp, lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
