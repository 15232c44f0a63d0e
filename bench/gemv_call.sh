#!/usr/bin/env bash
# gemv_call.sh: the one-row register-streaming GEMV (src/cuda/dense/dense_gemv.cu) in one device
# call: the standalone probe of its parameters on the grouped wo_a against cuBLAS
# (bench/gemv_probe.cu), the dense decode tests with the GEMV forced and automatic (and
# DenseDecode.VsCublas: every dense kernel against cuBLAS on wo_a and the projections, weights
# rotated out of L2), then the 20-layer 4K ladder at B = 1 alternated: the GEMV build with wo_a
# on it (--dense-decode woa,proj), the same build with wo_a on cuBLAS (proj: only the
# projections move to the GEMV), and main's build (tail); then the GEMV build's model test.
# Carry .carry/{pack,gv,tail}.tar.xz: gv = dsv4_gv, cuda_dense_test_gv, gpu_model_test_gv and
# gemv_probe built for sm_90 (-DDSV4_CUDA_ARCHS=90; the probe with nvcc -O3 -arch=sm_90
# bench/gemv_probe.cu -lcublas), stripped; tail as in NOTES.md.
# END (default 500): seconds from the call's start by which the ladders and the model test end.
# Usage (device tool): bash bench/gemv_call.sh
set -u
. bench/device_lib.sh
carry_env gv tail || exit 2
call_dir
DEADLINE=${END:-500}
timeout 60 .carry/bin/gemv_probe > $R/probe.log 2>&1; echo "probe rc=$? ${SECONDS}s"; cat $R/probe.log
timeout 150 .carry/bin/cuda_dense_test_gv --gtest_filter='DenseDecode.GroupedWoA:DenseDecode.CompressedProjections:DenseDecode.EdgeShapes:DenseDecode.EvictFirst*:DenseDecode.VsCublas' \
  > $R/dense_test.log 2>&1; echo "dense test rc=$? ${SECONDS}s"
grep -E "FAILED|PASSED|Failure|gemv|\[ vs .*M=1 " $R/dense_test.log | head -60 | cut -c1-150
for round in 1 2; do
  left 60 && LADDER_BATCH=1 ladder gv_woa$round dsv4_gv --dense-decode woa,proj
  left 60 && LADDER_BATCH=1 ladder gv_proj$round dsv4_gv --dense-decode proj
  left 60 && LADDER_BATCH=1 ladder tail$round dsv4_tail
done
if left 60; then
  timeout $((DEADLINE - SECONDS - 10)) .carry/bin/gpu_model_test_gv > $R/model_test.log 2>&1; echo "model test rc=$? ${SECONDS}s"
  grep -E "FAILED|PASSED" $R/model_test.log | head
fi
(cd $OUT && tar czf gv.tgz r && rm -rf r)
echo "done ${SECONDS}s"
