#!/usr/bin/env bash
# trace_pair.sh: the kernel trace (dsv4 bench --kernel-trace) of two builds' 20-layer B = 1 step at
# 4K, both with the extra ARGS, their per-layer segments and per-kernel tables
# (bench/trace_segments.py), and NEW's kernels against BASE's (compare.txt).
# Carry .carry/{pack,BASE,NEW}.tar.xz holding dsv4_BASE and dsv4_NEW. Output in $OUT/all.tgz.
# Usage (device tool): bash bench/trace_pair.sh BASE NEW [ARGS...]   (e.g. --wo-a fp8)
set -u
BASE=${1:?usage: trace_pair.sh BASE NEW [ARGS...]}
NEW=${2:?usage: trace_pair.sh BASE NEW [ARGS...]}
shift 2
. bench/device_lib.sh
carry_env "$BASE" "$NEW" || exit 2
call_dir
for v in $BASE $NEW; do
  timeout 150 .carry/bin/dsv4_$v bench --synthetic flash --layers 20 --batch 1 --context 4096 --decode-steps 20 \
    --kernel-trace 5 "$@" --commit "$v" --command "dsv4_$v bench --synthetic flash --layers 20 --batch 1 --context 4096 --decode-steps 20 --kernel-trace 5 $*" \
    --out $R/trace_$v.json 2>&1 | grep -E "decode B=|kernel trace" | sed "s/^/$v: /"
  python3 bench/trace_segments.py $R/trace_$v.json > $R/segments_$v.txt 2>&1
  tail -16 $R/segments_$v.txt
done
python3 bench/trace_segments.py $R/trace_$BASE.json $R/trace_$NEW.json | sed -n '/ against /,$p' | tee $R/compare.txt
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
