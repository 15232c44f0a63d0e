#!/usr/bin/env python3
"""lab_top.py: the fastest launches of a `w4a16_bench --lab` log per shape and M, and the one the
planner chose (marked * in the log), so a device call can print a lab's verdict in a few lines.
Usage: python3 bench/lab_top.py LOG [N]   (N fastest per shape and M, default 3)"""
import collections
import re
import sys


def top(lines, n):
    by_key = collections.OrderedDict()
    for line in lines:
        if not line.startswith("lab ") or line.startswith("lab moe"):
            continue
        m = re.search(r"([\d.]+) us", line)
        if m is None:
            continue
        key = tuple(line.split()[1:3])  # shape, M=
        by_key.setdefault(key, []).append((float(m.group(1)), line.rstrip()))
    out = []
    for rows in by_key.values():
        rows.sort(key=lambda r: r[0])
        out += [r[1] for r in rows[:n]]
        out += [r[1] for r in rows[n:] if r[1].endswith("*")]  # the chosen launch, if not among them
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        print("\n".join(top(f, int(sys.argv[2]) if len(sys.argv) > 2 else 3)))
