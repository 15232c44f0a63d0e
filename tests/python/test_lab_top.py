"""test_lab_top.py: bench/lab_top.py on a hand-made `w4a16_bench --lab` log: per shape and M the
fastest launches come first, in time order, the planner's choice (marked *) follows when it is not
among them, and MoE lab rows and other lines are ignored. Usage: python3 tests/python/test_lab_top.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import REPO, check  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "bench"))
import lab_top  # noqa: E402


def lab(shape, m, cfg, splits, us, chosen=False):
    return (f"lab {shape:<6} M={m:<3} {cfg:<8} x1 S={splits:<2} st=3 pdl=1 cl=0 smem= 99328 bps=2 blocks=128 "
            f"{us:8.2f} us   1900 GB/s{' *' if chosen else ''}\n")


def main():
    log = ["GPU NVIDIA H200 (132 SMs)\n",
           lab("wo_b", 1, "d16n256", 8, 8.94, chosen=True), lab("wo_b", 1, "d16n128", 4, 8.80),
           lab("wo_b", 1, "d16n64", 4, 9.80), lab("wo_b", 1, "d16n64", 8, 8.85),
           lab("wo_b", 16, "d16n256", 8, 12.5, chosen=True), lab("wo_b", 16, "d16n128", 4, 13.0),
           "lab moe M=1   rows=4  up d16n128  S=1 st=2 down d16n64   S=1 st=2    40.00 us\n"]
    out = lab_top.top(log, 2)
    check(len(out) == 5, f"2 + the chosen for M = 1, 2 for M = 16: {out}")
    check("d16n128" in out[0] and "8.80" in out[0] and "8.85" in out[1], f"fastest first: {out[:2]}")
    check(out[2].endswith("*") and "8.94" in out[2], f"the chosen launch follows: {out[2]}")
    check("M=16" in out[3] and out[3].endswith("*") and "13.00" in out[4], f"M = 16 in time order: {out[3:]}")
    check(not any("moe" in line for line in out), "MoE lab rows are not dense launches")
    print("test_lab_top: all passed")


if __name__ == "__main__":
    main()
