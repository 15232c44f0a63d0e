#!/usr/bin/env bash
# gemv4_call.sh: the register GEMV at 1..4 rows (src/cuda/dense/dense_gemv.cu; wo_a and the
# projections of decode batches of 2..4 leave cuBLAS and the older streaming kernels) in one
# device call: every GPU test binary of the branch (timing tests excluded), the dense kernels
# against cuBLAS (DenseDecode.VsCublas, M = 1, 4, 8, 32), then the 20-layer 4K ladder at B = 1, 2,
# 4 of the branch's dsv4 against main's, alternated, two rounds.
# Carry .carry/{pack,gv4,main}.tar.xz: gv4 = the branch's dsv4 and cuda_*_test / gpu_*_test
# binaries with the suffix _gv4; main = main's dsv4 as dsv4_main; built for sm_90
# (-DDSV4_CUDA_ARCHS=90), stripped; pack = the shared libraries (NOTES.md, "Tool notes").
# DEADLINE (default 420): seconds from the call's start; SHORT=1 runs only the dense and model tests.
# Usage (device tool): [SHORT=1] bash bench/gemv4_call.sh
set -u
. bench/device_lib.sh
carry_env gv4 main || exit 2
call_dir
DEADLINE=${DEADLINE:-420}
if [ "${SHORT:-}" = 1 ]; then  # SHORT=1: the dense and model tests alone (a short call)
  for t in cuda_dense_test gpu_model_test; do
    timeout 100 .carry/bin/${t}_gv4 --gtest_brief=1 --gtest_filter='-*Timing*:*VsCublas*:*Timeline*' > $R/$t.log 2>&1
    echo "$t rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$t.log | tr '\n' ' ') ${SECONDS}s" | tee -a $R/suite.txt
  done
else
  gpu_suite _gv4 200 '-*Timing*:*VsCublas*:*Timeline*' 100
fi
grep -h -B2 -A6 "Failure" $R/*_test.log | head -40
left 150 && timeout 60 .carry/bin/cuda_dense_test_gv4 --gtest_filter='DenseDecode.VsCublas' > $R/vs_cublas.log 2>&1
grep -E "^\[ vs +\] +[a-z_]+ +M=(1|4) " $R/vs_cublas.log | cut -c1-110
for round in 1 2; do
  left 45 && LADDER_BATCH=1,2,4 ladder gv4_$round dsv4_gv4
  left 45 && LADDER_BATCH=1,2,4 ladder main_$round dsv4_main
done
(cd $OUT && tar czf gemv4.tgz r && rm -rf r)
echo "done ${SECONDS}s"
