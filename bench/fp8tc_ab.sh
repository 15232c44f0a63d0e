#!/usr/bin/env bash
# fp8tc_ab.sh: two builds of the fp8 tensor-core kernel (dense_tc.cu) against each other and
# the base in one device call: the newer one's fp8 dense and model tests, both one's wo_a timings
# (cuda_dense_test VsCublas), an ncu profile of the newer kernel, and the 20-layer B = 1 and 32
# ladder with --wo-a fp8 of base, older and newer build alternated twice.
# Carry .carry/{pack,next_new,tc,tc3}.tar.xz: dsv4_new (base); dsv4_tc, cuda_dense_test_tc (older);
# dsv4_tc3, cuda_dense_test_tc3, gpu_model_test_tc3 (newer). Output packed into $OUT/all.tgz.
# Usage (device tool): DEADLINE=560 bash bench/fp8tc_ab.sh
set -u
DEADLINE=${DEADLINE:-560}
B=.carry/bin
. bench/device_lib.sh
carry_env next_new tc tc3 || exit 2
call_dir
LADDER_COMMIT=fp8tc
timeout 120 $B/cuda_dense_test_tc3 --gtest_filter='*Fp8*:*GroupedWoA*:*RejectsUnsupported*:*EdgeShapes*' > $R/dense_tc3.log 2>&1
echo "dense tc3 rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/dense_tc3.log | tr '\n' ' ')"
grep -E "Failure" -A3 $R/dense_tc3.log | head -12
n=0
for v in tc tc3 tc tc3; do
  n=$((n + 1))
  timeout 100 $B/cuda_dense_test_$v --gtest_filter='*VsCublas*' > $R/vs_${v}_$n.log 2>&1
  grep -E "^\[ vs .*M=(1|8) .*(fp8 tc|fp8 stream|cublas|dense  |dense tc)" $R/vs_${v}_$n.log | sed "s/^/$v: /" | cut -c1-105
done
timeout 150 $B/gpu_model_test_tc3 --gtest_filter='*Fp8*' > $R/model_tc3.log 2>&1
echo "model tc3 rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/model_tc3.log | tr '\n' ' ')"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && left 300; then
  timeout 90 $NCU --clock-control none --kernel-name regex:"dense_(fp8_)?tc_kernel" --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    $B/cuda_dense_test_tc3 --gtest_filter='*Fp8TensorCoreKernel*' > $R/ncu_tc3.txt 2>&1
  echo "ncu rc=$?"
  grep -E "Duration|DRAM Throughput|Issued Warp|No Eligible|Registers Per|Warp Cycles Per Issued|stalled" $R/ncu_tc3.txt | head -12
fi
for r in 1 2; do
  for v in new tc tc3; do left 80 && ladder ${v}_fp8_$r dsv4_$v --wo-a fp8; done
done
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
