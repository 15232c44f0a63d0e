#!/usr/bin/env python3
"""w4a16_torch_peer.py: PyTorch's int4 GEMM (torch.ops.aten._weight_int4pack_mm, group 128, the
tinygemm kernel) on the same shapes and batch sizes as bench/w4a16_bench, timed the same way
(CUDA graph of L calls rotating over weight sets > 3x L2, median of replays / L). With --cpp it
merges its numbers into the C++ benchmark's JSON and writes the combined JSON and a markdown table.

Run on the GPU machine: python3 bench/w4a16_torch_peer.py --cpp bench.json --out merged.json --md table.md
"""
import argparse
import json
import math
import statistics
import sys

import torch

SHAPES = [("wq_a", 1024, 4096), ("wq_b", 32768, 1024), ("wkv", 512, 4096), ("wo_b", 4096, 8192),
          ("idx_wq_b", 8192, 1024), ("w1_w3", 2048, 4096), ("w2", 4096, 2048), ("wq_a+wkv", 1536, 4096),
          ("w13_gateup", 4096, 4096)]
MS = [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096]
GROUP = 128


def time_graph(calls, body, reps=15):
    """Median microseconds per call of body(i), i = 0..calls-1, captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(min(calls, 3)):  # warm up outside the graph (lazy init)
            body(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            body(i)
    for _ in range(2):
        g.replay()
    times = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / calls)
    return statistics.median(times)


def make_set(n, k, gen):
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda", generator=gen)
    w_uint8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)  # high nibble = even k (torch's convention)
    packed = torch.ops.aten._convert_weight_to_int4pack(w_uint8, 8)
    scales = (torch.rand(k // GROUP, n, device="cuda", generator=gen) * 0.02 + 0.01)
    zeros = torch.randn(k // GROUP, n, device="cuda", generator=gen) * 0.01
    sz = torch.stack([scales, zeros], dim=2).to(torch.bfloat16).contiguous()
    return q, packed, sz


def check_peer(n, k, gen):
    """Relative error of the peer against its own dequantized weights: proves the call is set up right."""
    q, packed, sz = make_set(n, k, gen)
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    y = torch.ops.aten._weight_int4pack_mm(x, packed, GROUP, sz).float()
    s = sz[..., 0].float().repeat_interleave(GROUP, dim=0)  # [K, N]
    z = sz[..., 1].float().repeat_interleave(GROUP, dim=0)
    w = (q.t().float() - 8) * s + z  # [K, N]
    ref = x.float() @ w
    return float((y - ref).norm() / ref.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpp", help="JSON written by w4a16_bench to merge into")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", help="markdown table to write (with --cpp)")
    ap.add_argument("--command", default="", help="the exact command of the run, recorded in the output")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    ms = [1, 16, 4096] if args.quick else MS
    rows = []
    for name, n, k in SHAPES:
        rel = check_peer(n, k, gen)
        bytes_w = n * k // 2 + (k // GROUP) * n * 4
        sets = max(2, min(256, math.ceil(3 * l2 / bytes_w)))
        ws = [make_set(n, k, gen)[1:] for _ in range(sets)]
        xmax = torch.randn(max(ms), k, device="cuda", dtype=torch.bfloat16, generator=gen)
        for m in ms:
            x = xmax[:m]
            calls = sets * max(1, 40 // sets) if m <= 64 else sets
            out = [None]

            def body(i, x=x):
                p, sz = ws[i % sets]
                out[0] = torch.ops.aten._weight_int4pack_mm(x, p, GROUP, sz)

            us = time_graph(calls, body)
            flops = 2.0 * m * n * k
            rows.append({"shape": name, "n": n, "k": k, "m": m, "torch_int4_us": us,
                         "torch_int4_tflops": flops / (us * 1e-6) / 1e12, "torch_check_rel_err": rel})
            print(f"{name:10s} M={m:<5d} torch int4 {us:9.2f} us  (peer check rel err {rel:.1e})", flush=True)
        del ws
        torch.cuda.empty_cache()

    result = {"torch": torch.__version__, "gpu": props.name, "command": args.command, "rows": rows}
    if args.cpp:
        with open(args.cpp) as f:
            merged = json.load(f)
        by_key = {(r["shape"], r["m"]): r for r in rows}
        for r in merged["dense"]:
            t = by_key.get((r["shape"], r["m"]))
            if t:
                r.update({kk: v for kk, v in t.items() if kk.startswith("torch")})
        merged["torch_version"] = torch.__version__
        merged["command"] = args.command or merged.get("command", "")
        result = merged
        if args.md:
            write_markdown(merged, args.md)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.out)


def write_markdown(j, path):
    cb = j["copy_gbs"]
    lines = [f"# W4A16 benchmark: {j['gpu']}", "",
             f"commit `{j['commit']}`, {j['date']}, CUDA runtime {j['cuda_runtime']}, torch {j.get('torch_version', '?')}",
             f"command: `{j['command']}`", "",
             f"Measured copy bandwidth (read + write of a 1 GiB device copy): **{cb:.0f} GB/s**.", "",
             f"Method: {j['method']}.", "",
             "## Dense W4A16 GEMM", "",
             "| shape | N x K | M | cfg | splits | us | weight+act GB/s | % copy BW | TFLOP/s | cuBLAS BF16 us | torch int4 us | vs cuBLAS | vs torch |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in j["dense"]:
        t = r.get("torch_int4_us")
        lines.append(
            f"| {r['shape']} | {r['n']}x{r['k']} | {r['m']} | {r['config']} | {r['splits']} | {r['us']:.2f} | "
            f"{r['gbs']:.0f} | {r['pct_copy_bw']:.1f} | {r['tflops']:.1f} | {r['cublas_bf16_us']:.2f} | "
            f"{t:.2f} | {r['cublas_bf16_us'] / r['us']:.2f}x | {t / r['us']:.2f}x |" if t else
            f"| {r['shape']} | {r['n']}x{r['k']} | {r['m']} | {r['config']} | {r['splits']} | {r['us']:.2f} | "
            f"{r['gbs']:.0f} | {r['pct_copy_bw']:.1f} | {r['tflops']:.1f} | {r['cublas_bf16_us']:.2f} | - | "
            f"{r['cublas_bf16_us'] / r['us']:.2f}x | - |")
    lines += ["", "## Fused MoE layer (router + 6 routed of 256 + shared expert)", "",
              "| M | us | GB/s (bytes it must read) | % copy BW | TFLOP/s | cuBLAS BF16 expert GEMMs: rows | us | TFLOP/s | MoE / cuBLAS FLOP rate |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in j["moe"]:
        lines.append(f"| {r['m']} | {r['us']:.2f} | {r['gbs']:.0f} | {r['pct_copy_bw']:.1f} | {r['tflops']:.1f} | "
                     f"{r['cublas_expert_rows']} | {r['cublas_expert_us']:.2f} | {r['cublas_expert_tflops']:.1f} | "
                     f"{r['tflops'] / r['cublas_expert_tflops']:.2f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
