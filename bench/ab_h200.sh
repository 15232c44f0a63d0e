#!/usr/bin/env bash
# ab_h200.sh: an A/B of two builds of the forward pass in one call on the GPU machine (device
# tool): the new build's GPU tests, then the decode ladder of both builds alternated ROUNDS times
# (same machine, clocks and thermal state, so that differences of ~0.5% mean something), then one
# kernel trace of each and its per-layer segments (bench/trace_segments.py).
# The binaries are built on the development machine for sm_90 and carried in .carry/bin:
#   dsv4_base, dsv4_new (required), and any <test>_new listed in AB_TESTS;
# their shared libraries in .carry/lib (see bench/results/NOTES.md, "Tool notes").
# Usage: bash bench/ab_h200.sh LABEL [ROUNDS]
#   AB_ARGS   the ladder (default: --layers 20 --batch 1,32 --context 4096)
#   AB_TESTS  comma list of test binaries to run first, without the _new suffix (e.g.
#             cuda_indexer_test,gpu_model_test)
#   AB_TRACE  0 to skip the traces
# Output in $OUT: ab_LABEL.log (every ladder line, round by round, and the summary), the JSON of
# every run, trace_{base,new}.json and their segment tables.
set -uo pipefail
LABEL=${1:?usage: ab_h200.sh LABEL [ROUNDS]}
ROUNDS=${2:-3}
OUT=${OUT:-/tmp/dsv4_out}
BIN=.carry/bin
ARGS=${AB_ARGS:---layers 20 --batch 1,32 --context 4096}
LOG="$OUT/ab_$LABEL.log"
mkdir -p "$OUT"
for v in base new; do
  [[ -x $BIN/dsv4_$v ]] || { echo "ab_h200.sh: $BIN/dsv4_$v is missing" >&2; exit 2; }
done
{
  echo "# A/B $LABEL: dsv4_base vs dsv4_new, $ROUNDS rounds of: dsv4 bench --synthetic flash $ARGS"
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.memory,driver_version --format=csv
} > "$LOG"

IFS=',' read -ra tests <<< "${AB_TESTS:-}"
for t in "${tests[@]}"; do
  [[ -n $t ]] || continue
  echo "=== test $t" >> "$LOG"
  timeout ${AB_TEST_TIMEOUT:-300} "$BIN/${t}_new" --gtest_brief=1 >> "$LOG" 2>&1
  echo "$t rc=$?" | tee -a "$LOG"
done

for r in $(seq 1 "$ROUNDS"); do
  for v in base new; do
    echo "=== ${v}_$r" >> "$LOG"
    timeout ${AB_RUN_TIMEOUT:-200} "$BIN/dsv4_$v" bench --synthetic flash $ARGS --commit "$LABEL-$v" \
      --command "bash bench/ab_h200.sh $LABEL $ROUNDS; AB_ARGS='$ARGS'" --out "$OUT/ab_${LABEL}_${v}_$r.json" 2>&1 |
      grep -E "decode B=|prefill|roofline" >> "$LOG"
  done
done

if [[ ${AB_TRACE:-1} != 0 ]]; then
  for v in base new; do
    echo "=== trace_$v" >> "$LOG"
    timeout ${AB_RUN_TIMEOUT:-200} "$BIN/dsv4_$v" bench --synthetic flash --layers 20 --batch 1 --context 4096 \
      --decode-steps 20 --kernel-trace 5 --out "$OUT/trace_${LABEL}_$v.json" 2>&1 | grep -E "decode B=|kernel trace" >> "$LOG"
    python3 bench/trace_segments.py "$OUT/trace_${LABEL}_$v.json" >> "$LOG" 2>&1
  done
fi

# Summary: the graph step of every run per variant and batch (ms), and the medians.
python3 - "$LOG" <<'EOF' | tee -a "$LOG"
import re, statistics, sys
runs = {}
variant = None
for line in open(sys.argv[1]):
    m = re.match(r"=== (base|new)_\d+", line)
    if m:
        variant = m.group(1)
        continue
    if line.startswith("==="):
        variant = None
    m = re.search(r"decode B=(\d+)\s+ctx (\d+)\s+graph: ([0-9.]+) ms/step", line)
    if m and variant:
        runs.setdefault((int(m.group(1)), int(m.group(2))), {}).setdefault(variant, []).append(float(m.group(3)))
print("# summary (graph step, ms)")
for key in sorted(runs):
    b, n = runs[key].get("base", []), runs[key].get("new", [])
    line = f"B={key[0]} ctx {key[1]}: base {' '.join(f'{x:.3f}' for x in b)} | new {' '.join(f'{x:.3f}' for x in n)}"
    if b and n:
        mb, mn = statistics.median(b), statistics.median(n)
        line += f" | medians {mb:.3f} -> {mn:.3f} ({100 * (mn - mb) / mb:+.1f}%)"
    print(line)
EOF
