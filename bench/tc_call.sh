#!/usr/bin/env bash
# tc_call.sh: a build of the tensor-core decode kernel (dense_tc.cu) against the base in one device
# call: its dense, model (and, where carried, Blas) tests without the timings, the dense timings
# (cuda_dense_test VsCublas), then the 20-layer ladder at B = 1 and 32, alternated twice: bf16 (the
# default) of the base and of this build, --wo-a fp8 of the first TMA build and of this build.
# Carry .carry/{pack,next_new,tc,SUFFIX}.tar.xz: dsv4_new (base), dsv4_tc (first TMA build,
# fp8tc_h200_tma), and this build's dsv4_SUFFIX, cuda_dense_test_SUFFIX, gpu_model_test_SUFFIX
# (optional gpu_blas_test_SUFFIX). Output in $OUT/all.tgz.
# Usage (device tool): DEADLINE=560 bash bench/tc_call.sh SUFFIX   (tc4_h100/: tc4, tc5_h100/: tc5)
set -u
S=${1:?usage: tc_call.sh SUFFIX}
DEADLINE=${DEADLINE:-560}
B=.carry/bin
. bench/device_lib.sh
carry_env next_new tc $S || exit 2
call_dir
LADDER_COMMIT=$S
for t in cuda_dense_test gpu_blas_test gpu_model_test; do
  [ -x $B/${t}_$S ] || continue
  timeout 150 $B/${t}_$S --gtest_brief=1 --gtest_filter='-*VsCublas*:*Timing*:*PrefillCopyVsCublas*' > $R/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$t.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "^\[  FAILED  \]|Failure" $R/$t.log | head -6
done
timeout 100 $B/cuda_dense_test_$S --gtest_filter='*VsCublas*' > $R/vs_$S.log 2>&1
grep -E "^\[ vs .*M=(1|8) " $R/vs_$S.log | cut -c1-105
for r in 1 2; do
  left 80 && ladder base_bf16_$r dsv4_new
  left 80 && ladder ${S}_bf16_$r dsv4_$S
  left 80 && ladder tc_fp8_$r dsv4_tc --wo-a fp8
  left 80 && ladder ${S}_fp8_$r dsv4_$S --wo-a fp8
done
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
