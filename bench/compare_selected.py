#!/usr/bin/env python3
"""compare_selected.py: the indexer's selected compressed entries on two devices, row by row (both
int32 .npy [n_csa_layers, T, topk] from `dsv4 logits --selected`, ascending, -1 padded): per CSA
layer the share of the reference's entries the other side also chose (overall and on rows that
had to choose, i.e. more visible entries than top-k), rows with identical sets, rows whose counts
differ. Usage: compare_selected.py GPU.npy CPU.npy RATIO OUT.json"""
import json
import sys

import numpy as np


def main():
    g, c = np.load(sys.argv[1]), np.load(sys.argv[2])
    ratio = int(sys.argv[3])
    assert g.shape == c.shape, (g.shape, c.shape)
    n_layers, T, topk = c.shape
    out = {"rows": T, "topk": topk, "ratio": ratio, "layers": []}
    for i in range(n_layers):
        common = total = common_choose = total_choose = identical = count_diff = 0
        worst = (1.0, -1)
        for t in range(T):
            a, b = g[i, t], c[i, t]
            a, b = a[a >= 0], b[b >= 0]
            if len(a) != len(b):
                count_diff += 1
            k = len(np.intersect1d(a, b, assume_unique=True))
            common += k
            total += len(b)
            identical += int(k == len(b) == len(a))
            if (t + 1) // ratio > topk:
                common_choose += k
                total_choose += len(b)
                if len(b) and k / len(b) < worst[0]:
                    worst = (k / len(b), t)
        out["layers"].append({
            "overlap": common / max(total, 1), "overlap_rows_that_choose": common_choose / max(total_choose, 1),
            "identical_rows": identical / T, "rows_with_count_mismatch": count_diff,
            "worst_row_overlap": worst[0], "worst_row": worst[1]})
    print(json.dumps(out, indent=1))
    with open(sys.argv[4], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
