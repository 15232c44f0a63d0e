#!/usr/bin/env bash
# fp8tc_call.sh: one device call for the fp8 wo_a tensor-core kernel (dense_tc.cu): its dense
# tests and timings (cuda_dense_test: Fp8* and VsCublas), the model's fp8 test, then the 20-layer
# ladder with --wo-a fp8 of the base build and of this one, alternated, and this one's bf16 ladder.
# Carry .carry/{pack,next_new,tc}.tar.xz: the base's dsv4_new; this build's dsv4_tc,
# cuda_dense_test_tc, cuda_w4a16_test_tc and gpu_model_test_tc. With ncu: one profile of the kernel. Output packed into $OUT/all.tgz.
# Usage (device tool): DEADLINE=560 bash bench/fp8tc_call.sh
set -u
DEADLINE=${DEADLINE:-560}
B=.carry/bin
. bench/device_lib.sh
carry_env next_new tc || exit 2
call_dir
LADDER_COMMIT=fp8tc
timeout 150 $B/cuda_dense_test_tc --gtest_filter='*Fp8*:*VsCublas*:*GroupedWoA*:*RejectsUnsupported*' > $R/dense.log 2>&1
echo "dense rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/dense.log | tr '\n' ' ')"
grep -E "^\[ vs .*wo_a" $R/dense.log | cut -c1-130
grep -E "Failure|FAILED|max\|d\|/tol=[1-9]" $R/dense.log | head -20
timeout 100 $B/cuda_w4a16_test_tc --gtest_brief=1 --gtest_filter='-*Timing*' > $R/w4a16.log 2>&1
echo "w4a16 rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/w4a16.log | tr '\n' ' ')"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && left 300; then
  timeout 90 $NCU --clock-control none --kernel-name dense_fp8_tc_kernel --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    $B/cuda_dense_test_tc --gtest_filter='*Fp8TensorCoreKernel*' > $R/ncu_tc.txt 2>&1
  echo "ncu rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots|Issued Ipc|No Eligible|Active Warps|Registers Per|Achieved Occ|Grid Size|Dynamic Shared|Stall" $R/ncu_tc.txt | head -20
fi
timeout 150 $B/gpu_model_test_tc --gtest_filter='*Fp8*' > $R/model.log 2>&1
echo "model rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/model.log | tr '\n' ' ')"
grep -E "Failure|rel|top" $R/model.log | head -10
for r in 1 2; do
  left 120 && ladder base_fp8_$r dsv4_new --wo-a fp8
  left 120 && ladder tc_fp8_$r dsv4_tc --wo-a fp8
done
left 100 && ladder tc_bf16 dsv4_tc
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
