#!/usr/bin/env bash
# cli_test.sh: the command line end to end: make-model -> inspect -> logits (one-shot, chunked,
# bf16, the CSA selections of --selected), inspect's exit code on a damaged checkpoint, and
# bench's --layers check. Usage: cli_test.sh BUILD_DIR
set -euo pipefail
bin="$1/dsv4"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bin" --version
"$bin" make-model --preset tiny --layers 4 --seed 7 --mtp --out "$work/m" > "$work/make.log"
"$bin" inspect --model "$work/m" > "$work/inspect.log"
grep -q "^VALID" "$work/inspect.log"
grep -q "gptq-int4" "$work/inspect.log"
grep -q "MTP block present" "$work/inspect.log"

python3 -c "import numpy as np; np.save('$work/ids.npy', (np.arange(90) * 37 % 1024).astype(np.int64))"
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/full.npy"
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/c1.npy" --chunk 1
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/c7.npy" --chunk 7
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/bf16.npy" --numerics bf16
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/s1.npy" --selected "$work/sel1.npy"
"$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/s7.npy" --selected "$work/sel7.npy" --chunk 7
cmp "$work/full.npy" "$work/s1.npy"
cmp "$work/sel1.npy" "$work/sel7.npy"
python3 - "$work" <<'PY'
import json, sys, numpy as np
w = sys.argv[1]
cfg = json.load(open(f"{w}/m/config.json"))
ratios, topk = cfg["compress_ratios"], cfg["index_topk"]
csa = [i for i, r in enumerate(ratios) if r == 4]
s = np.load(f"{w}/sel1.npy")
assert s.dtype == np.int32 and s.shape == (len(csa), 90, topk), (s.shape, s.dtype)
for t in range(90):
    row = s[0, t][s[0, t] >= 0]
    n_vis = (t + 1) // 4
    assert len(row) == min(topk, n_vis), (t, row)
    assert (np.diff(row) > 0).all() and (row < n_vis).all(), (t, row)
    assert (s[0, t][len(row):] == -1).all()
print("selected ok:", s.shape)
PY
cmp "$work/full.npy" "$work/c1.npy"
cmp "$work/full.npy" "$work/c7.npy"
python3 - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]
a, b = np.load(f"{w}/full.npy"), np.load(f"{w}/bf16.npy")
assert a.shape == (90, 1024) and a.dtype == np.float32, (a.shape, a.dtype)
assert np.isfinite(a).all() and np.isfinite(b).all()
assert np.abs(a - b).mean() < 0.02 * np.abs(a).max(), np.abs(a - b).mean()
print("logits ok:", a.shape, "bf16 mean |diff|", float(np.abs(a - b).mean()))
PY

# The original release's formats (FP8 block + MXFP4 experts) load and run the same way.
"$bin" make-model --preset tiny --layers 3 --format fp8 --seed 2 --out "$work/f8" > /dev/null
"$bin" inspect --model "$work/f8" > "$work/inspect_f8.log"
grep -q "mxfp4" "$work/inspect_f8.log"
grep -q "fp8-block" "$work/inspect_f8.log"
"$bin" logits --model "$work/f8" --token-ids 1,2,3,4,5,6,7,8,9,10,11,12 --out "$work/f8a.npy"
"$bin" logits --model "$work/f8" --token-ids 1,2,3,4,5,6,7,8,9,10,11,12 --out "$work/f8b.npy" --chunk 5
cmp "$work/f8a.npy" "$work/f8b.npy"

# Bad inputs are answers, not crashes.
if "$bin" logits --model "$work/m" --token-ids "$work/ids.npy" --out "$work/x.npy" --numerics fp16 2> "$work/err"; then exit 1; fi
grep -q "numerics must be fp32 or bf16" "$work/err"
python3 -c "import numpy as np; np.save('$work/bad.npy', np.array([5, 4096], dtype=np.int32))"
if "$bin" logits --model "$work/m" --token-ids "$work/bad.npy" --out "$work/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "outside the vocabulary" "$work/err"
# A list with a space inside an entry used to read as its first id only; a list with a negative id
# was taken for a file name ("cannot open '0,-1'").
if "$bin" logits --model "$work/m" --token-ids "1 2" --out "$work/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "'1 2' is not one id" "$work/err"
if "$bin" logits --model "$work/m" --token-ids "0,-1" --out "$work/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "neither a list of non-negative integers" "$work/err"
"$bin" logits --model "$work/m" --token-ids " 1 , 2 " --out "$work/x.npy"
python3 -c "import numpy as np; assert np.load('$work/x.npy').shape == (2, 1024)"
# A malformed tokenizer.json is an answer naming the field (a wrong-typed field used to throw out
# of nlohmann's value() and abort), and its path is named once.
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
json.dump({"decoder": {"type": "ByteLevel"}, "post_processor": "x", "model": {"type": "BPE"}}, open(f"{w}/bad_tok.json", "w"))
PY
if "$bin" generate --model "$work/m" --tokenizer "$work/bad_tok.json" --prompt hi 2> "$work/err"; then exit 1; fi
grep -q 'post_processor "x" is not supported' "$work/err"
[[ $(grep -o "bad_tok.json" "$work/err" | wc -l) == 1 ]]
# Sizes that do not fit in memory are answers, not std::bad_alloc aborts (ulimit -v makes the
# allocation fail on any machine): a huge make-model vocabulary, and a [T, vocab] logits output.
if (ulimit -v 4000000; "$bin" make-model --vocab 100000000 --layers 1 --out "$work/huge") 2> "$work/err"; then exit 1; fi
grep -q "not enough memory to build a shard" "$work/err"
"$bin" make-model --vocab 65536 --layers 1 --out "$work/v64k" > /dev/null
python3 -c "import numpy as np; np.save('$work/long.npy', np.zeros(65537, dtype=np.int32)); np.save('$work/64k.npy', np.zeros(65536, dtype=np.int32))"
if "$bin" logits --model "$work/v64k" --token-ids "$work/long.npy" --out "$work/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "more than the model's max_position_embeddings = 65536" "$work/err"
if (ulimit -v 8000000; "$bin" logits --model "$work/v64k" --token-ids "$work/64k.npy" --out "$work/x.npy") 2> "$work/err"; then exit 1; fi
grep -q "cannot allocate the \[65536, 65536\] fp32 output" "$work/err"
truncate -s 100 "$work/m/model-00003-of-00006.safetensors"
if "$bin" inspect --model "$work/m" > "$work/inspect2.log"; then exit 1; fi
grep -q "^INVALID" "$work/inspect2.log"
# bench (CUDA builds): a malformed --layers is refused before anything touches a GPU.
if "$bin" bench --help > /dev/null 2>&1; then
  if "$bin" bench --synthetic flash --layers 2x 2> "$work/err"; then exit 1; fi
  grep -q "takes a count in 1..43 or 'max', found '2x'" "$work/err"
  # The ladder's numbers and the result path, checked before anything is built (--chunk 0 looped
  # forever; an unwritable --out was reported as written).
  if "$bin" bench --synthetic flash --chunk 0 2> "$work/err"; then exit 1; fi
  grep -q "chunk must be >= 1" "$work/err"
  if "$bin" bench --synthetic flash --batch 0,4 2> "$work/err"; then exit 1; fi
  grep -q "batch sizes must be in 1..8192, found 0" "$work/err"
  if "$bin" bench --synthetic flash --out "$work/no/such/dir/x.json" 2> "$work/err"; then exit 1; fi
  grep -q "cannot write" "$work/err"
  if "$bin" bench --synthetic flash --wo-a fp4 2> "$work/err"; then exit 1; fi
  grep -q "fp4 not in {bf16,fp8}" "$work/err"
fi
# make-model --wo-a-from-fp8 writes wo_a as BF16 (the W4A16 export's dtype) that inspect accepts.
"$bin" make-model --preset tiny --layers 1 --wo-a-from-fp8 --seed 3 --out "$work/woa8" > /dev/null
"$bin" inspect --model "$work/woa8" | grep -q "^VALID"
# Bad settings are refused before any work: a tokenizer that is not one (it was copied in after
# every shard), absurd layer counts (100000 tiny layers filled the disk), negative chunks, an
# output path that cannot be written (found only after the forward pass), thread counts libgomp
# cannot start (a crash), a port past 65535 (bound modulo 2^16).
if "$bin" make-model --preset tiny --layers 1 --seed 1 --tokenizer /etc/hostname --out "$work/badtok" 2> "$work/err"; then exit 1; fi
grep -q "is not a tokenizer.json" "$work/err"
test ! -e "$work/badtok"
if "$bin" make-model --preset tiny --layers 100000 --seed 1 --out "$work/many" 2> "$work/err"; then exit 1; fi
grep -q "layers must be in 1..64, found 100000" "$work/err"
if "$bin" logits --model "$work/m" --token-ids 1,2 --chunk -1 --out "$work/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "chunk must be >= 1" "$work/err"
if "$bin" logits --model "$work/m" --token-ids 1,2 --out "$work/no/such/dir/x.npy" 2> "$work/err"; then exit 1; fi
grep -q "cannot write" "$work/err"
tok="$(dirname "$0")/../../third_party/tokenizer/tokenizer.json"
if [[ -f "$tok" ]]; then
  if "$bin" generate --model "$work/m" --tokenizer "$tok" --token-ids 1,2 --cpu-threads 100000 2> "$work/err"; then exit 1; fi
  grep -q "cpu-threads must be in 0.." "$work/err"
  if "$bin" generate --model "$work/m" --tokenizer "$tok" --token-ids 1,2 --max-num-batched-tokens 0 2> "$work/err"; then
    exit 1
  fi
  grep -q "max-num-batched-tokens (0) must be >=" "$work/err"
fi
if timeout 20 "$bin" serve --demo --port 70000 2> "$work/err"; then exit 1; fi
grep -q "port must be in 0..65535" "$work/err"
# An error right after the listener starts used to leave the process accepting forever (the
# listener was not yet running when it was stopped); each of these must end at once.
for i in 1 2 3; do
  rc=0
  timeout 20 "$bin" serve --model "$work/no-such-model" --port 0 2> "$work/err" || rc=$?
  test "$rc" -eq 1
done
echo "cli_test: ok"
