#!/usr/bin/env bash
# verify_default_call.sh: main's build after a default changed, in one device call: the tests that
# the change touches first, then issue 3's and issue 6's lines, then every other GPU test binary
# while time is left:
#   1. gpu_model_test (whole) and cuda_weight_prefetch_test;
#   2. w4a16_bench: wo_b / wq_b at M = 1, 16 and the MoE layer at M = 1;
#   3. `dsv4 bench --synthetic flash --layers max` at 4K (B = 1, 32), then 262K (B = 1, 8192-token
#      prefill chunks) if 150 s remain;
#   4. the other cuda_* / gpu_* test binaries (timings, cuBLAS comparisons and timelines filtered out).
# Carry .carry/{pack,SUFFIX}.tar.xz: every test binary, dsv4 and w4a16_bench of the build, with the
# suffix _SUFFIX (sm_90, stripped). COMMIT labels the JSON. DEADLINE (default 540): seconds from the
# call's start. Usage (device tool): SUFFIX=m39 COMMIT=abc1234 bash bench/verify_default_call.sh
set -u
. bench/device_lib.sh
S=${SUFFIX:?SUFFIX=name of the carried archive}
carry_env $S || exit 2
call_dir
DEADLINE=${DEADLINE:-540}
for t in gpu_model_test cuda_weight_prefetch_test; do
  timeout 240 .carry/bin/${t}_$S --gtest_brief=1 > $R/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$t.log | tr '\n' ' ') ${SECONDS}s"
  grep -h -E "l2 prefetch|Failure" $R/$t.log | head -6
done
left 120 && timeout 90 .carry/bin/w4a16_bench_$S --ms 1,16 --shapes wo_b,wq_b --moe-ms 1 --commit "${COMMIT:-main}" \
  --out $R/w4a16.json > $R/w4a16.log 2>&1 && grep -E "copy|wq_b|wo_b|MoE|moe" $R/w4a16.log | cut -c1-150
max_ladder() {
  local name=$1 limit=$2; shift 2
  timeout $limit .carry/bin/dsv4_$S bench --synthetic flash --layers max "$@" --commit "${COMMIT:-main}" \
    --command "dsv4 bench --synthetic flash --layers max $*" --out $R/$name.json > $R/$name.log 2>&1
  echo "$name rc=$? ${SECONDS}s"; grep -E "^bench:|decode B=|prefill" $R/$name.log | cut -c1-200
}
left 150 && max_ladder max_4k 140 --batch 1,32 --context 4096
left 150 && max_ladder max_262k $((DEADLINE - SECONDS - 60)) --batch 1 --context 262144 --chunk 8192
rm -f .carry/bin/gpu_model_test_$S .carry/bin/cuda_weight_prefetch_test_$S
gpu_suite _$S 20 '-*Timing*:*VsCublas*:*Timeline*' 100
(cd $OUT && tar czf verify.tgz r && rm -rf r)
echo "done ${SECONDS}s"
