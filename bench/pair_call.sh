#!/usr/bin/env bash
# pair_call.sh: a build of the decode kernels against a base build in one device call: the new
# build's dense and model tests (without the timings), the tensor-core kernel's timeline (TMA and
# cp.async slots), cuda_dense_test VsCublas of both builds, the 20-layer ladder at B = 1 and 32
# (--wo-a fp8 twice, alternated; then bf16), and the W4A16 wq_b / wo_b / MoE decode timings.
# Carry .carry/{pack,BASE,NEW}.tar.xz holding dsv4_BASE, cuda_dense_test_BASE and dsv4_NEW,
# cuda_dense_test_NEW, gpu_model_test_NEW, w4a16_bench_NEW. Output in $OUT/all.tgz.
# Usage (device tool): DEADLINE=560 bash bench/pair_call.sh BASE NEW   (PAIR_W4A16=0: no W4A16 timings)
set -u
BASE=${1:?usage: pair_call.sh BASE NEW}
NEW=${2:?usage: pair_call.sh BASE NEW}
DEADLINE=${DEADLINE:-560}
B=.carry/bin
. bench/device_lib.sh
carry_env "$BASE" "$NEW" || exit 2
call_dir
for t in cuda_dense_test gpu_model_test; do
  timeout 150 $B/${t}_$NEW --gtest_brief=1 --gtest_filter='-*VsCublas*:*Timing*:*PrefillCopyVsCublas*:*Timeline*' \
    > $R/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$t.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "^\[  FAILED  \]|Failure" $R/$t.log | head -6
done
timeout 60 $B/cuda_dense_test_$NEW --gtest_filter='*Timeline*' > $R/timeline.log 2>&1
grep -E '^\[ tc|FAILED|Failure' $R/timeline.log | cut -c1-300
for s in $BASE $NEW; do
  timeout 100 $B/cuda_dense_test_$s --gtest_filter='*VsCublas*' > $R/vs_$s.log 2>&1
  grep -E "^\[ vs .*M=1 .*(tc|stream|cublas)" $R/vs_$s.log | sed "s/^/$s /" | cut -c1-110
done
LADDER_COMMIT=$NEW
for r in 1 2; do
  left 80 && ladder ${BASE}_fp8_$r dsv4_$BASE --wo-a fp8
  left 80 && ladder ${NEW}_fp8_$r dsv4_$NEW --wo-a fp8
done
left 80 && ladder ${BASE}_bf16 dsv4_$BASE
left 80 && ladder ${NEW}_bf16 dsv4_$NEW
if [ "${PAIR_W4A16:-1}" = 1 ] && left 60; then
  timeout 120 $B/w4a16_bench_$NEW --ms 1,16 --shapes wq_b,wo_b --moe-ms 1 --out $R/w4a16.json > $R/w4a16.log 2>&1
  grep -E "wq_b|wo_b|copy|moe|MoE" $R/w4a16.log | head -24 | cut -c1-140
fi
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
