#!/usr/bin/env python3
"""Writes tests/data/tokenizer/parity.jsonl: token ids from HF `tokenizers` (the oracle) for a
curated corpus plus seeded random Unicode fuzz, so the C++ parity test needs no Python.

Each line after the header is {"text": str, "special": bool, "ids": [int]}; "special" says
whether special tokens written in the text are recognised (HF encode_special_tokens = not special).
decode.jsonl (next to --out) holds {"ids": [int], "skip_special": bool, "text": str}: HF decode
of random id sequences, many of them cutting UTF-8 sequences apart.

    python3 scripts/tokenizer/gen_tokenizer_goldens.py \
        --tokenizer third_party/tokenizer/tokenizer.json --out tests/data/tokenizer/parity.jsonl
"""
import argparse
import hashlib
import json
import random
import sys

import tokenizers
from tokenizers import Tokenizer

SPACES = [" ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028",
          "\u0085", "\u1680", "\u2000", "\u2003", "\u200a", "\u202f", "\u205f", "\u180e",
          "\ufeff", "\x0b", "\x0c", "\u2029"]
WORDS = ["int", "x", "hello", "World", "DeepSeek", "über", "café", "naïve", "東京", "你好",
         "ひらがな", "カタカナ", "한국어", "привет", "γειά", "مرحبا", "שלום", "नमस्ते", "ไทย", "123"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙",
          "０１２３４５６７８９", "½¼¾", "²³¹⁴", "ⅠⅡⅢⅫ", "①②③⑳", "〇一二三", "𝟘𝟙𝟚𝟛", "᠐᠑᠒", "߀߁߂"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "1️⃣", "❤️", "🧑🏿‍💻", "🫠", "🤌🏻", "✈︎", "©️",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👩‍❤️‍💋‍👨"]
COMBINING = ["e\u0301", "a\u0308\u0304", "\u0915\u093f", "\u0627\u064e", "\u0e01\u0e34", "o\u0338",
             "\u1100\u1161\u11a8", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334",
             "\u05d1\u05bc", "\u0301", "\u20dd", "a\ufe0f"]
PUNCT = [".bar", "->y", "#tag", "@user", "$var", "'s", "\"quoted\"", "(x)", "[a]", "{b}", "«fr»",
         "“smart”", "¿Qué?", "¡Hola!", "，。！？", "、「」", "...", "--flag", "a.b.c", "x_y", "::std",
         "%d", "&amp;", "~/path", "`code`", "^caret", "|pipe|", "\\n", "/*c*/", "+=", "!=", "<=>",
         "—dash", "…", "‘q’", "'''", "\"\"\"", "?!", ";;", "@@", "€5", "£", "¥100", "°C", "™", "§1"]
CODE = [
    "def f(x):\n    return x + 1\n",
    "    int x;\n\tint y = 0;\r\n",
    "for (int i = 0; i < n; ++i) {\n        sum += a[i];\n    }\n",
    "const f = (a, b) => { return a ?? b; };",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "<div class=\"x\">Hello&nbsp;world</div>\n<!-- comment -->",
    "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | grep -E '^/r(o+)t$'\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "fn main() {\n    println!(\"{}\", 1_000_000u64);\n}\n",
    "x = [i**2 for i in range(10) if i % 2 == 0]\n\n\n\n",
    "    \n    \n\t\t\n",
    "if a:\n  pass\nelif b:\n\tpass\n",
    "a\r\n\r\n\r\n  b\r\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};  // comment\n",
    "  leading and trailing spaces  ",
    "tabs\tin\tthe\tmiddle\t\t\tend\t",
    "   ",
    "\n",
    "\r\n",
    " \n ",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$",
    "URL: https://example.com/path?q=1&r=%20#frag",
    "email@example.org, +1-555-0100, 2024-02-29T12:34:56Z",
    "0x1F 0b1010 1e-9 3.14159 1,000,000 12345678901234567890",
]
MIXED = ["你好world", "Hello世界123", "東京タワーはTokyo Towerです", "日本語とEnglishの混在テキスト",
         "中文，English，日本語。", "한국어와 English", "Привет, мир! Hello!", "αβγ δεζ ABC",
         "كتاب book كتاب", "עברית English", "हिन्दी English", "ภาษาไทยEnglish", "你好 世界 ",
         "漢字かなカナ漢字", "ｆｕｌｌｗｉｄｔｈ　ＴＥＸＴ", "半角ｶﾀｶﾅ", "㐀㐁𠀀𠀁", "鿰鿱鿲", "〜～"]

# Code point ranges for fuzz: common scripts, symbols, and recently assigned blocks.
RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
          (0x590, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f),
          (0x2070, 0x209f), (0x20a0, 0x20cf), (0x2100, 0x214f), (0x2150, 0x218f), (0x2190, 0x23ff),
          (0x2460, 0x24ff), (0x2500, 0x27bf), (0x3000, 0x303f), (0x3040, 0x30ff), (0x3400, 0x4dbf),
          (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xfe00, 0xfe0f), (0xfe30, 0xfe4f), (0xff00, 0xffef),
          (0x1d400, 0x1d7ff), (0x1f300, 0x1faff), (0x1f1e6, 0x1f1ff), (0xe0020, 0xe007f),
          (0x20000, 0x2a6df),
          # Unicode 13-15 additions: Yezidi, Khitan, Vithkuqi, Toto, Kawi, Nag Mundari, emoji.
          (0x10e80, 0x10ebf), (0x18b00, 0x18cff), (0x10570, 0x105bf), (0x1e290, 0x1e2bf),
          (0x11f00, 0x11f5f), (0x1e4d0, 0x1e4ff), (0x1fa70, 0x1faff), (0x31350, 0x323af),
          (0x1, 0x1f), (0x7f, 0x9f)]


def rand_char(rng):
    lo, hi = rng.choice(RANGES)
    cp = rng.randint(lo, hi)
    if 0xd800 <= cp <= 0xdfff:
        cp = 0x20
    return chr(cp)


def fuzz_string(rng, specials):
    parts = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.35:
            parts.append("".join(rand_char(rng) for _ in range(rng.randint(1, 8))))
        elif kind < 0.55:
            parts.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 5))))
        elif kind < 0.70:
            parts.append(rng.choice(WORDS))
        elif kind < 0.78:
            parts.append(rng.choice(PUNCT))
        elif kind < 0.84:
            parts.append(rng.choice(EMOJI + COMBINING))
        elif kind < 0.90:
            parts.append(rng.choice(DIGITS)[: rng.randint(1, 6)])
        elif kind < 0.96:
            tok = rng.choice(specials)
            if rng.random() < 0.3:  # a fragment of a special token
                a = rng.randint(0, len(tok) - 1)
                tok = tok[a: rng.randint(a + 1, len(tok))]
            parts.append(tok)
        else:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
    return "".join(parts)


def curated(specials):
    texts = []
    texts += ["", "a", " ", "  ", "hello world", "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"]
    for sp in SPACES:
        for n in (1, 2, 3, 5):
            run = sp * n
            texts += [run, "x" + run + "y", run + "word", "word" + run, "a." + run + "b", "1" + run + "2",
                      "你" + run + "好"]
    for a in SPACES[:8]:
        for b in SPACES[:8]:
            texts.append("if" + a + b + "x" + b + a)
    for w1 in WORDS:
        for w2 in WORDS[::3]:
            texts += [w1 + w2, w1 + " " + w2, w1 + "  " + w2, w1 + "\n" + w2]
    for d in DIGITS:
        texts += [d, "v" + d, d + "x", " " + d, d[:1] * 7, "a" + d[:2] + "b" + d[2:]]
    texts += EMOJI + COMBINING + PUNCT + CODE + MIXED
    for e in EMOJI:
        texts += ["hi" + e + "there", e + e, " " + e + " "]
    for c in COMBINING:
        texts += ["x" + c + "y", c + " " + c, "1" + c]
    for p in PUNCT:
        texts += ["word" + p, " " + p + "word", p + "\n", "你" + p]
    texts += [" " * 100, "\t" * 50, "\n" * 40, "\r\n" * 30, "a" * 300, "ab" * 400, "😀" * 50,
              "x" + " " * 1000 + "y", "0" * 100, "你" * 200, "." * 120, "-" * 80 + "\n"]
    return texts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fuzz", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=20240501)
    args = ap.parse_args()

    tok_plain = Tokenizer.from_file(args.tokenizer)
    tok_plain.encode_special_tokens = True
    tok_special = Tokenizer.from_file(args.tokenizer)
    with open(args.tokenizer, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    data = json.load(open(args.tokenizer, encoding="utf-8"))
    specials = [t["content"] for t in data["added_tokens"]]

    cases = []  # (text, special)
    for t in curated(specials):
        cases.append((t, True))
        cases.append((t, False))
    # Every added token next to text, recognised; in groups, not recognised.
    for i, s in enumerate(specials):
        cases.append((["a", " ", "你", "\n", "1", ".", ""][i % 7] + s + ["b", " x", "好", "\n\n", "", "!"][i % 6], True))
    for i in range(0, len(specials), 10):
        cases.append((" ".join(specials[i:i + 10]) + "x", False))
    cases += [(s, True) for s in ["<｜User｜><｜User｜>", "<｜User", "｜User｜>", "<<｜User｜>>", "<think></think>",
                                  "<｜begin▁of▁sentence｜<｜end▁of▁sentence｜>", "<｜DSML｜tool_calls>",
                                  "</｜DSML｜invoke>", "<thinkx>", "<<think>>", "</think>\n\n"]]
    rng = random.Random(args.seed)
    for _ in range(args.fuzz):
        cases.append((fuzz_string(rng, specials), rng.random() < 0.5))
    # A few long mixed texts.
    for _ in range(20):
        cases.append(("".join(fuzz_string(rng, specials) for _ in range(30)), rng.random() < 0.5))

    seen = set()
    n = 0
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(json.dumps({"tokenizer_sha256": sha, "tokenizers_version": tokenizers.__version__,
                              "seed": args.seed, "fuzz": args.fuzz}, ensure_ascii=False) + "\n")
        for text, special in cases:
            if (text, special) in seen:
                continue
            seen.add((text, special))
            tok = tok_special if special else tok_plain
            ids = tok.encode(text).ids
            if tok.decode(ids, skip_special_tokens=False) != text:
                sys.exit(f"HF round trip fails on {text!r}")
            out.write(json.dumps({"text": text, "special": special, "ids": ids}, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} cases to {args.out}")

    # Decode goldens: random ids, biased towards single-byte tokens that split UTF-8 sequences.
    vocab_size = tok_special.get_vocab_size(with_added_tokens=True)
    byte_tokens = sorted(i for t, i in tok_special.get_vocab(with_added_tokens=False).items() if len(t) == 1)
    decode_path = args.out.rsplit("/", 1)[0] + "/decode.jsonl"
    with open(decode_path, "w", encoding="utf-8") as out:
        for k in range(400):
            ids = [rng.choice(byte_tokens) if rng.random() < 0.6 else rng.randrange(vocab_size)
                   for _ in range(rng.randint(1, 12))]
            skip = k % 2 == 1
            text = tok_special.decode(ids, skip_special_tokens=skip)
            out.write(json.dumps({"ids": ids, "skip_special": skip, "text": text}, ensure_ascii=False) + "\n")
    print(f"wrote 400 decode cases to {decode_path}")


if __name__ == "__main__":
    main()
