"""test_trace_segments.py: bench/trace_segments.py on a hand-made kernel trace of three layers (an
SWA layer, a CSA layer, then the start of a third): the segments between the landmarks (wq_a|wkv
end, the indexer's launches, the attention combine) come out as the rows say, the per-kernel table
groups launches by name and grid, two results compare kernel by kernel, and a result without a
trace is refused with a message, and --layers lists the middle layer of each kind in launch order.
Usage: python3 tests/python/test_trace_segments.py"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import REPO, check  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "bench"))
import trace_segments  # noqa: E402


def row(name, end, grid=(1, 1, 1)):
    return {"name": name, "start_us": end - 1.0, "end_us": end, "grid": list(grid), "exposed_us": 0.0}


def main():
    wqkv = "w4a16_decode_kernel<1, 2, 4, false>"
    rows = [row("mix_finish_kernel", 1.0), row(wqkv, 10.0, (12, 8, 1)),  # layer 0 (SWA)
            row("q_norm_rope_kernel", 14.0), row("attention_combine_kernel", 30.0),
            row("moe_route_kernel<1, 1>", 60.0), row(wqkv, 110.0, (12, 8, 1)),  # layer 1 (CSA)
            row("indexer_prepare_q_kernel", 120.0), row("indexer_split_kernel", 129.0),
            row("indexer_merge_kernel", 141.0), row("attention_combine_kernel", 150.0),
            row(wqkv, 230.0, (12, 8, 1))]  # layer 2 starts
    seg = trace_segments.segments(rows)
    check(seg["swa/hca: wqkv end -> combine end"] == [20.0], seg)
    check(seg["swa/hca: combine end -> next wqkv end"] == [80.0], seg)
    check(seg["swa/hca: layer"] == [100.0], seg)
    check(seg["csa: wqkv end -> combine end"] == [40.0], seg)
    check(seg["csa: prep end -> split end"] == [9.0], seg)
    check(seg["csa: split end -> merge end"] == [12.0], seg)
    check(seg["csa: merge end -> combine end"] == [9.0], seg)
    check(seg["csa: layer"] == [120.0], seg)
    for r in rows:
        r["exposed_us"] = 2.0 if r["grid"] == [12, 8, 1] else 1.0
    table = trace_segments.kernel_table(rows)
    check(table[0][:3] == (wqkv, "12x8x1", 3) and table[0][5] == 6.0, table)
    check({t[0]: t[2] for t in table}["attention_combine_kernel"] == 2, table)
    script = os.path.join(REPO, "bench", "trace_segments.py")
    with tempfile.TemporaryDirectory() as d:
        good, bad = os.path.join(d, "good.json"), os.path.join(d, "bad.json")
        with open(good, "w") as f:
            json.dump({"runs": [{"batch": 1}, {"kernel_trace": {"rows": rows, "median_span_us": 230.0}}]}, f)
        with open(bad, "w") as f:
            json.dump({"runs": [{"batch": 1}]}, f)
        p = subprocess.run([sys.executable, script, good], capture_output=True, text=True)
        check(p.returncode == 0 and "csa: split end -> merge end" in p.stdout and "12.00" in p.stdout, p)
        slower = [dict(r) for r in rows]
        slower[3]["exposed_us"] += 12.5  # the first attention combine
        other = os.path.join(d, "other.json")
        with open(other, "w") as f:
            json.dump({"runs": [{"kernel_trace": {"rows": slower, "median_span_us": 242.5}}]}, f)
        p = subprocess.run([sys.executable, script, good, other], capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if "attention_combine_kernel" in x and "+12.5" in x]
        check(p.returncode == 0 and "230.0 -> 242.5 us (+12.5)" in p.stdout and len(line) == 1, p.stdout)
        # --layers: each kind's middle layer (one of each here), times from its first kernel's start.
        p = subprocess.run([sys.executable, script, "--layers", good], capture_output=True, text=True)
        out = p.stdout.splitlines()
        csa = out.index("  csa layer (kernels 5..9), times from its first kernel's start (us):")
        swa = out.index("  swa/hca layer (kernels 1..4), times from its first kernel's start (us):")
        check(p.returncode == 0 and "indexer_merge_kernel (1x1x1)" in out[csa + 5], p.stdout)
        check(out[csa + 2].split()[:4] == ["0.00", "1.00", "1.00", "2.00"], out[csa + 2])
        check(out[csa + 6].split()[:3] == ["40.00", "41.00", "1.00"] and "attention_combine" in out[csa + 6], out)
        check(out[swa + 3].split()[:2] == ["4.00", "5.00"] and "q_norm_rope_kernel" in out[swa + 3], out)
        p = subprocess.run([sys.executable, script, good], capture_output=True, text=True)
        check("layer (kernels" not in p.stdout, p.stdout)
        p = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
        check(p.returncode != 0 and "no kernel_trace" in p.stderr, p)
    print("test_trace_segments: all passed")


if __name__ == "__main__":
    main()
