#!/usr/bin/env bash
# h200_measure_call.sh: the H200 measurements that issues 3 and 6 still wait for, in one device
# call (needs_h200: the largest flash-shaped model fits only there), in order of what each decides:
#   1. wo_b / wq_b at M = 1, 16 and the MoE layer at M = 1, 4a2b616 (new) and cf3e5d3 (tail:
#      wo_b's split-K sum straight to bf16) alternated, two rounds: wo_b's 50% line;
#   2. the dense decode timeline of wo_b and wq_b at M = 1, 16 (w4a16_bench_tl, 948a1db);
#   3. `dsv4 bench --synthetic flash --layers max` at 4K (B = 1, 32) and 262K (B = 1, 8192-token
#      prefill chunks) with e3a6fe1's dsv4 (head; its kernels are cf3e5d3's);
#   4. the decode lab with the new tail (wo_b, wq_b, wq_a+wkv, wq_a at M = 1, 16), while time is left.
# Carry .carry/{pack,next_new,tail,head,tl}.tar.xz (NOTES.md, "Thirty-first session", says what each holds),
# and with TESTS=1 .carry/t.tar.xz (the W4A16 kernel test of the checkout, run first).
# END (default 380): seconds from the start by which the 262K ladder must end; each ladder runs only
# if 60 s remain before END (END=60: steps 1 and 2 alone), the lab only if 50 s remain, ending by END + 40.
# AB_ROUNDS (default 2): rounds of step 1; HEAD_COMMIT (default e3a6fe1): the commit dsv4_head was built from.
# Usage (device tool, kind nvidia-h200, needs_h200): [END=380] bash bench/h200_measure_call.sh
END=${END:-380}
. bench/device_lib.sh; carry_env next_new tail head tl ${TESTS:+t} || exit 2
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
if [ -n "${TESTS:-}" ]; then  # TESTS=1: .carry/t.tar.xz holds cuda_w4a16_test_main (the checkout's)
  timeout 60 .carry/bin/cuda_w4a16_test_main > $OUT/w4a16_test.log 2>&1; echo "w4a16 test rc=$? ${SECONDS}s"
  grep -E "FAILED|PASSED" $OUT/w4a16_test.log | head
fi
ROUNDS=${AB_ROUNDS:-2} DEADLINE=100 W4A16_ARGS='--ms 1,16 --shapes wo_b,wq_b --moe-ms 1' PACKS=tail OUT=$OUT/ab bash bench/w4a16_builds_call.sh new tail > $OUT/ab.txt 2>&1
grep -E "^(new|tail)\.[0-9] (wo_b|wq_b|moe +M=1 +[0-9d]|GPU)" $OUT/ab.txt | cut -c1-140
(cd $OUT && tar czf ab_all.tgz ab && rm -rf ab)
timeout 60 .carry/bin/w4a16_bench_tl --no-moe --ms 1,16 --shapes wo_b,wq_b --dense-timeline-ms 1,16 --out /tmp/tl.json > $OUT/tl.log 2>&1; echo "timeline rc=$? ${SECONDS}s"; grep -A5 timeline $OUT/tl.log | cut -c1-160
M=$OUT/max; mkdir -p $M
# max_ladder NAME LIMIT ARGS...: `dsv4 bench --synthetic flash --layers max ARGS` with dsv4_head, if
# 60 s remain before END; JSON in $M/forward_NAME.json, log in $M/NAME.log.
max_ladder() {
  local name=$1 limit=$2; shift 2
  [ $SECONDS -lt $((END-60)) ] && timeout $limit .carry/bin/dsv4_head bench --synthetic flash --layers max "$@" \
    --commit ${HEAD_COMMIT:-e3a6fe1} --command "dsv4 bench --synthetic flash --layers max $*" --out $M/forward_$name.json > $M/$name.log 2>&1
  echo "$name rc=$? ${SECONDS}s"; grep -E "^bench:|decode B=|prefill" $M/$name.log 2>/dev/null | cut -c1-200
}
max_ladder max_4k 130 --batch 1,32 --context 4096
max_ladder max_262k $((END-SECONDS)) --batch 1 --context 262144 --chunk 8192
(cd $OUT && tar czf max.tgz max && rm -rf max)
if [ $SECONDS -lt $((END-50)) ]; then
  timeout $((END+40-SECONDS)) .carry/bin/w4a16_bench_tail --lab --lab-ms 1,16 --no-moe --no-dense --shapes wo_b,wq_b,wq_a+wkv,wq_a > $OUT/lab_tail.log 2>&1; echo "lab rc=$? ${SECONDS}s"
  python3 bench/lab_top.py $OUT/lab_tail.log 3
fi
echo "done ${SECONDS}s"
