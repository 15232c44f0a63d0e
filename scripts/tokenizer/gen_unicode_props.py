#!/usr/bin/env python3
"""Writes tests/data/tokenizer/unicode_props.json: for each regex the DeepSeek pre-tokenizer
relies on, the code points HF `tokenizers` (Oniguruma) matches, as [lo, hi] ranges. The C++ test
unicode_props_test checks our PCRE2 translation (src/tokenizer/onig_compat.cpp) on every code point.

    python3 scripts/tokenizer/gen_unicode_props.py --out tests/data/tokenizer/unicode_props.json
"""
import argparse
import json

import tokenizers
from tokenizers import Regex, pre_tokenizers

PATTERNS = [r"\p{N}", r"\p{L}", r"\p{M}", r"\p{P}", r"\p{S}", r"\s", r"\S",
            "[^\r\n\\p{L}\\p{P}\\p{S}]", r"[\p{L}\p{M}]", r"[\p{P}\p{S}]"]


def matched_code_points(pattern):
    # "removed" drops every match, so the code points left in the pieces are the non-matching ones.
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    matched = []
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        kept = set()
        for piece, _ in split.pre_tokenize_str("".join(map(chr, chunk))):
            kept.update(map(ord, piece))
        matched += [c for c in chunk if c not in kept]
    return matched


def to_ranges(cps):
    ranges = []
    for c in cps:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    data = {"tokenizers_version": tokenizers.__version__,
            "patterns": [{"pattern": p, "ranges": to_ranges(matched_code_points(p))} for p in PATTERNS]}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
