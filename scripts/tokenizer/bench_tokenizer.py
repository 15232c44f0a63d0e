#!/usr/bin/env python3
"""Encoding throughput: dsv4_tokenizer (C++) against HF `tokenizers` (Python binding, one thread)
on the same ~10 MB mixed-language text, in the same run. Generates the text (seeded), times HF,
runs build*/tests/tokenizer/tokenizer_bench, checks both produced the same ids, prints a summary
and, with --results, writes a markdown report (date, machine, git commit, command, numbers).

    python3 scripts/tokenizer/bench_tokenizer.py --tokenizer third_party/tokenizer/tokenizer.json \
        --bench build/tests/tokenizer/tokenizer_bench --results bench/results/tokenizer_encode.md
"""
import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import time

# HF must not use more than one thread (its Rust core reads these at import time).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def make_text(vocab, target_bytes, seed):
    """Paragraphs of English, Chinese, Japanese, Russian, code, numbers and emoji, drawn from the
    tokenizer's own vocabulary so every language appears with realistic words."""
    rng = random.Random(seed)
    decoded = []
    table = {}
    n = 0
    for b in list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)):
        table[chr(b)] = b
    for b in range(256):
        if b not in table.values():
            table[chr(256 + n)] = b
            n += 1
    for tok in vocab:
        try:
            decoded.append(bytes(table[c] for c in tok).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            pass
    english = [t for t in decoded if t.startswith(" ") and t[1:].isascii() and t[1:].isalpha()]
    chinese = [t for t in decoded if t and all("\u4e00" <= c <= "\u9fff" for c in t)]
    japanese = [t for t in decoded if t and all("\u3040" <= c <= "\u30ff" for c in t)]
    russian = [t for t in decoded if t.strip() and all("\u0400" <= c <= "\u04ff" for c in t.strip())]
    code_lines = ["def {0}(x, y=None):", "    return {0}(x) + len(y or [])", "for i in range(10):",
                  "    if i % 2 == 0:", "        print(f\"{{i}}: {0}\")", "int {0} = 0;", "}}", "{{",
                  "\tconst auto& {0} = items[i];", "// TODO: {0}", "  \"{0}\": [1, 2, 3],", "return {0};"]
    emoji = ["😀", "👍🏽", "🎉", "❤️", "🚀", "👨‍👩‍👧"]
    out = []
    size = 0
    while size < target_bytes:
        kind = rng.random()
        if kind < 0.35:
            words = [rng.choice(english) for _ in range(rng.randint(20, 80))]
            para = ("".join(words)).strip().capitalize() + ". "
        elif kind < 0.60:
            para = "".join(rng.choice(chinese) for _ in range(rng.randint(20, 80))) + "。"
        elif kind < 0.68:
            para = "".join(rng.choice(japanese) for _ in range(rng.randint(10, 40))) + "。"
        elif kind < 0.75:
            para = "".join(rng.choice(russian) for _ in range(rng.randint(10, 40))).strip() + "."
        elif kind < 0.92:
            name = rng.choice(english).strip().lower()
            para = "\n".join(rng.choice(code_lines).format(name) for _ in range(rng.randint(3, 12)))
        else:
            para = " ".join(f"{rng.randint(0, 10 ** 6)}{rng.choice(emoji)}" for _ in range(rng.randint(3, 10)))
        para += "\n\n" if rng.random() < 0.5 else "\n"
        out.append(para)
        size += len(para.encode("utf-8"))
    return "".join(out)


def fnv1a(ids):
    h = 1469598103934665603
    for i in ids:
        h ^= i
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--bench", required=True, help="path to the tokenizer_bench binary")
    ap.add_argument("--text-out", default="/tmp/dsv4_tokenizer_bench.txt")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--results", help="write a markdown report here")
    args = ap.parse_args()

    hf = Tokenizer.from_file(args.tokenizer)
    vocab = json.load(open(args.tokenizer, encoding="utf-8"))["model"]["vocab"]
    text = make_text(vocab, int(args.mb * 1e6), args.seed)
    with open(args.text_out, "w", encoding="utf-8") as f:
        f.write(text)
    n_bytes = len(text.encode("utf-8"))

    best = best_cpu = 1e30
    for _ in range(args.repeat):
        t, c = time.perf_counter(), time.process_time()
        ids = hf.encode(text).ids
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    hf_mbps = n_bytes / 1e6 / best
    hf_cpu_mbps = n_bytes / 1e6 / best_cpu

    ours = json.loads(subprocess.check_output(
        [args.bench, "--tokenizer", args.tokenizer, "--text", args.text_out, "--repeat", str(args.repeat)]))
    same = ours["tokens"] == len(ids) and ours["ids_fnv1a"] == fnv1a(ids)
    ratio = ours["mb_per_s"] / hf_mbps
    cpu_ratio = ours["cpu_mb_per_s"] / hf_cpu_mbps
    summary = (f"text: {n_bytes} bytes, {len(ids)} tokens (seed {args.seed}), encoded as one string, best of {args.repeat}\n"
               f"HF tokenizers {tokenizers.__version__} (Python, 1 thread): {best:.3f} s wall ({hf_mbps:.2f} MB/s), "
               f"{best_cpu:.3f} s CPU ({hf_cpu_mbps:.2f} MB/s)\n"
               f"dsv4_tokenizer (C++, 1 thread): {ours['encode_s']:.3f} s wall ({ours['mb_per_s']:.2f} MB/s), "
               f"{ours['encode_cpu_s']:.3f} s CPU ({ours['cpu_mb_per_s']:.2f} MB/s); tokenizer load {ours['load_s']:.2f} s\n"
               f"speed ours/HF: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU; identical ids: {same}")
    print(summary)
    if args.results:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
        cpu = platform.processor() or platform.machine()
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        with open(args.results, "w", encoding="utf-8") as f:
            f.write("# Tokenizer encode throughput: dsv4_tokenizer vs HF tokenizers\n\n")
            f.write(f"- date: {datetime.date.today().isoformat()}\n")
            f.write(f"- machine: {cpu}, {os.cpu_count()} logical CPUs, {platform.platform()}\n")
            f.write(f"- load average at the end of the run (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())}"
                    " (other jobs share the machine; both tokenizers ran under the same load)\n")
            f.write(f"- git commit: {commit}\n")
            f.write(f"- command: `python3 {' '.join(sys.argv)}`\n")
            f.write("- build: CMake Release, g++ 12; HF from the PyPI wheel\n")
            f.write("\n```\n" + summary + "\n```\n")
    if not same:
        sys.exit("ids differ between HF and dsv4_tokenizer")


if __name__ == "__main__":
    main()
