#!/usr/bin/env python3
"""trace_segments.py: a `dsv4 bench --kernel-trace N` result split into per-layer segments.

The kernel trace (src/gpu/kernel_timeline.h) lists every kernel of the median traced decode step
with its start and end. A kernel's "exposed" time says how far it moved the step's end, but with
programmatic dependent launches a kernel taken out of the chain often hands its exposure to its
neighbours (an earlier launch of the next kernel competes with the one before). What a change to
the chain buys shows better as the time between fixed landmarks of each layer: here the end of
the wq_a|wkv GEMM (the first kernel of a layer's attention), the end of the attention combine and
the indexer's launches on CSA layers. After the segments, a table per kernel (name and grid):
launches, median duration, median and summed exposed time, the 15 largest by summed exposure.
Given several results, each later one is then compared with the first, kernel by kernel (summed
exposure). With --layers, the kernels of the middle CSA layer and the middle SWA/HCA layer are also
listed in launch order (start and end from the layer's first kernel, duration, exposed time), to
see a layer's chain whole. Usage:

  python3 bench/trace_segments.py [--layers] RESULT.json [RESULT2.json ...]
"""
import json
import statistics
import sys


def trace_rows(path):
    with open(path) as f:
        d = json.load(f)
    for run in d.get("runs", []):
        if "kernel_trace" in run:
            return run["kernel_trace"]["rows"], run["kernel_trace"]["median_span_us"]
    raise SystemExit(f"{path}: no kernel_trace (run dsv4 bench with --kernel-trace N)")


def first(rows, lo, hi, needle):
    for j in range(lo, hi):
        if needle in rows[j]["name"]:
            return j
    return None


def layer_spans(rows):
    """(kind, a, b) of every whole layer: rows[a:b] are its kernels, kind "csa" or "swa/hca". A
    layer starts at its wq_a|wkv GEMM: the decode GEMM launch of grid (12, 8, 1) at Flash shapes
    (N = 1536 in 128-column tiles, 8 splits)."""
    starts = [i for i, r in enumerate(rows) if r["grid"] == [12, 8, 1] and "w4a16" in r["name"]]
    for a, b in zip(starts, starts[1:]):
        yield ("csa" if first(rows, a, b, "indexer_split") is not None else "swa/hca"), a, b


def segments(rows):
    seg = {}
    for kind, a, b in layer_spans(rows):
        comb = first(rows, a, b, "attention_combine")
        if comb is None:
            continue
        end = lambda j: rows[j]["end_us"]
        seg.setdefault(f"{kind}: wqkv end -> combine end", []).append(end(comb) - end(a))
        seg.setdefault(f"{kind}: combine end -> next wqkv end", []).append(end(b) - end(comb))
        seg.setdefault(f"{kind}: layer", []).append(end(b) - end(a))
        if kind == "csa":
            prep, split, merge = (first(rows, a, b, n) for n in ("indexer_prepare", "indexer_split", "indexer_merge"))
            if None not in (prep, split, merge):
                seg.setdefault("csa: prep end -> split end", []).append(end(split) - end(prep))
                seg.setdefault("csa: split end -> merge end", []).append(end(merge) - end(split))
                seg.setdefault("csa: merge end -> combine end", []).append(end(comb) - end(merge))
    return seg


def layer_listing(rows):
    """The middle CSA layer's and the middle SWA/HCA layer's kernels in launch order."""
    layers = {"csa": [], "swa/hca": []}
    for kind, a, b in layer_spans(rows):
        layers[kind].append((a, b))
    for kind, spans in layers.items():
        if not spans:
            continue
        a, b = spans[len(spans) // 2]
        t0 = rows[a]["start_us"]
        print(f"  {kind} layer (kernels {a}..{b - 1}), times from its first kernel's start (us):")
        print("    start      end  duration  exposed  kernel (grid)")
        for r in rows[a:b]:
            grid = "x".join(str(x) for x in r["grid"])
            print(f"    {r['start_us'] - t0:6.2f} {r['end_us'] - t0:8.2f} {r['end_us'] - r['start_us']:9.2f}"
                  f" {r['exposed_us']:8.2f}  {r['name'][:60]} ({grid})")


def kernel_table(rows):
    """Per kernel (name cut to 48 characters, grid): launches, median duration, median exposed time
    and summed exposed time (us), largest summed exposure first."""
    kernels = {}
    for r in rows:
        k = kernels.setdefault((r["name"][:48], "x".join(str(x) for x in r["grid"])), ([], []))
        k[0].append(r["end_us"] - r["start_us"])
        k[1].append(r["exposed_us"])
    table = [(name, grid, len(dur), statistics.median(dur), statistics.median(exp), sum(exp))
             for (name, grid), (dur, exp) in kernels.items()]
    return sorted(table, key=lambda t: -t[5])


def main():
    args = sys.argv[1:]
    listing = "--layers" in args
    paths = [a for a in args if a != "--layers"]
    if not paths:
        raise SystemExit(__doc__)
    tables = []
    for path in paths:
        rows, span = trace_rows(path)
        print(f"== {path}: step span {span:.1f} us, {len(rows)} kernels")
        for name, v in sorted(segments(rows).items()):
            print(f"  {name:38s} n {len(v):2d}  median {statistics.median(v):7.2f} us  sum {sum(v):8.1f} us")
        table = kernel_table(rows)
        tables.append((path, span, table))
        print("  kernel                                           grid            n  duration  exposed  exposed sum (us)")
        for name, grid, n, dur, exp, total in table[:15]:
            print(f"  {name:48s} {grid:13s} {n:3d} {dur:9.2f} {exp:8.2f} {total:9.1f}")
        if listing:
            layer_listing(rows)
    if len(tables) > 1:
        # Side by side: every later result against the first, on the first's 15 largest kernels and
        # any kernel whose summed exposure moved by 10 us or more.
        base_path, base_span, base = tables[0]
        for path, span, table in tables[1:]:
            print(f"== {path} against {base_path}: step span {base_span:.1f} -> {span:.1f} us ({span - base_span:+.1f})")
            b = {(t[0], t[1]): t[5] for t in base}
            o = {(t[0], t[1]): t[5] for t in table}
            keys = [(t[0], t[1]) for t in base[:15]]
            keys += [k for k in sorted(set(b) | set(o)) if k not in keys and abs(o.get(k, 0.0) - b.get(k, 0.0)) >= 10.0]
            print("  kernel                                           grid           exposed sum: base     this    delta (us)")
            for k in keys:
                bv, ov = b.get(k, 0.0), o.get(k, 0.0)
                print(f"  {k[0]:48s} {k[1]:13s} {bv:18.1f} {ov:8.1f} {ov - bv:+8.1f}")


if __name__ == "__main__":
    main()
