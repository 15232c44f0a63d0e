#!/usr/bin/env bash
# h200_main_call.sh: issue 3's and issue 6's H200 lines for main's build in one device call
# (needs_h200: the largest flash-shaped model fits only there; on an H100 it runs as far as the
# memory allows, --layers max sizing the model to it):
#   1. w4a16_bench: wo_b / wq_b at M = 1, 16 and the MoE layer at M = 1, two rounds;
#   2. `dsv4 bench --synthetic flash --layers max` at 4K (B = 1, 32), then 262K (B = 1, 8192-token
#      prefill chunks) while time is left.
# Carry .carry/{pack,main}.tar.xz: main = main's dsv4_main and w4a16_bench_main, built for sm_90
# (-DDSV4_CUDA_ARCHS=90), stripped. COMMIT: the commit they were built from (for the JSON).
# END (default 560): seconds from the call's start by which the 262K ladder must end (it runs only
# if 120 s remain). Usage (device tool): COMMIT=abc1234 bash bench/h200_main_call.sh
set -u
. bench/device_lib.sh
carry_env main || exit 2
call_dir
DEADLINE=${END:-560}
for r in 1 2; do
  left 200 || break
  timeout 90 .carry/bin/w4a16_bench_main --ms 1,16 --shapes wo_b,wq_b --moe-ms 1 --out $R/w4a16_$r.json > $R/w4a16_$r.log 2>&1
  echo "w4a16 round $r rc=$? ${SECONDS}s"
  grep -E "copy|wq_b|wo_b|MoE|moe" $R/w4a16_$r.log | cut -c1-150
done
# max_ladder NAME LIMIT ARGS...: the largest synthetic flash model's ladder; JSON in $R/NAME.json.
max_ladder() {
  local name=$1 limit=$2; shift 2
  timeout $limit .carry/bin/dsv4_main bench --synthetic flash --layers max "$@" --commit "${COMMIT:-main}" \
    --command "dsv4 bench --synthetic flash --layers max $*" --out $R/$name.json > $R/$name.log 2>&1
  echo "$name rc=$? ${SECONDS}s"; grep -E "^bench:|decode B=|prefill" $R/$name.log | cut -c1-200
}
left 150 && max_ladder max_4k 140 --batch 1,32 --context 4096
left 120 && max_ladder max_262k $((DEADLINE - SECONDS)) --batch 1 --context 262144 --chunk 8192
(cd $OUT && tar czf main.tgz r && rm -rf r)
echo "done ${SECONDS}s"
