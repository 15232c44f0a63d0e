#!/usr/bin/env bash
# w4a16_builds_call.sh: the same W4A16 timings from several builds in one device call, the builds
# alternated ROUNDS times so that a drift of the GPU falls on all of them alike (for a bisect: which
# commit moved a kernel's time). Each round runs every build's `w4a16_bench ARGS`; the summary
# prints the rows of each build and round side by side.
# Carry .carry/pack.tar.xz and the archives named in PACKS (default: every BUILD's), holding
# w4a16_bench_BUILD for each BUILD. Output in $OUT/all.tgz.
# Usage (device tool): ROUNDS=2 W4A16_ARGS='--no-moe --ms 1,16 --shapes wo_b,wq_b' \
#   PACKS='m26 wob' bash bench/w4a16_builds_call.sh m26 b680 b586 b60f
set -u
(($# >= 1)) || { echo "usage: w4a16_builds_call.sh BUILD..." >&2; exit 2; }
ROUNDS=${ROUNDS:-2}
ARGS=${W4A16_ARGS:---no-moe --ms 1,16 --shapes wo_b,wq_b}
DEADLINE=${DEADLINE:-560}
. bench/device_lib.sh
# shellcheck disable=SC2086  # PACKS is a word list
carry_env ${PACKS:-"$@"} || exit 2
call_dir
for r in $(seq 1 "$ROUNDS"); do
  for b in "$@"; do
    left 40 || break 2
    # shellcheck disable=SC2086  # ARGS is a word list
    timeout 120 .carry/bin/w4a16_bench_$b $ARGS --out $R/${b}_$r.json > $R/${b}_$r.log 2>&1
    echo "$b round $r rc=$? ${SECONDS}s"
  done
done
for b in "$@"; do
  for r in $(seq 1 "$ROUNDS"); do
    [ -f $R/${b}_$r.log ] && grep -E "copy|wq_b|wo_b|MoE|moe" $R/${b}_$r.log | sed "s/^/$b.$r /" | cut -c1-150
  done
done
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
