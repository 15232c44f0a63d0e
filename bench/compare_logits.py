#!/usr/bin/env python3
"""compare_logits.py: GPU logits against the CPU reference's, row by row (both fp32 .npy [T, vocab]
from `dsv4 logits`): relative L2 error per row, top-1 agreement (and the CPU's margin where they
differ). Prints a summary and writes it as JSON. Usage: compare_logits.py GPU.npy CPU.npy OUT.json"""
import json
import sys

import numpy as np


def main():
    g = np.load(sys.argv[1]).astype(np.float64)
    c = np.load(sys.argv[2]).astype(np.float64)
    assert g.shape == c.shape, (g.shape, c.shape)
    rel = np.linalg.norm(g - c, axis=1) / np.maximum(np.linalg.norm(c, axis=1), 1e-30)
    tg, tc = g.argmax(1), c.argmax(1)
    flips = np.nonzero(tg != tc)[0]
    rms = np.sqrt((c ** 2).mean(1))
    margins = [float((c[i, tc[i]] - c[i, tg[i]]) / rms[i]) for i in flips]
    T = g.shape[0]
    quarters = {f"rows {a}-{b - 1}": float(rel[a:b].max()) for a, b in
                [(0, T // 4), (T // 4, T // 2), (T // 2, 3 * T // 4), (3 * T // 4, T)]}
    out = {"rows": T, "vocab": g.shape[1], "max_rel_err": float(rel.max()), "mean_rel_err": float(rel.mean()),
           "p99_rel_err": float(np.percentile(rel, 99)), "top1_agree": float(1 - len(flips) / T),
           "flip_margins_over_rms": margins[:20], "max_rel_err_by_quarter": quarters}
    print(json.dumps(out, indent=1))
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
