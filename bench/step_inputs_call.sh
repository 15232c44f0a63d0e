#!/usr/bin/env bash
# step_inputs_call.sh: two decode-chain changes measured against main (795d915 = dsv4_m43):
#   qe (branch wip/hca-emit-q): HCA layers' query heads normed and rotated in the compressor's emit
#      launch, one launch fewer between wq_b and attention;
#   si (branch wip/step-inputs-early, on top of qe): the row bookkeeping of the emit, attention
#      split and combine, qkv_norm_finish and the indexer's prep before the PDL wait.
# Steps: the si kernel and model tests (and qe's new compressor test), three alternated rounds of
# the 20-layer 4K ladder at batches 1, 2, 4, one at batch 32, a traced si step with the layer
# listing; everything in $OUT/r.tar.xz.
# Carry .carry/{pack,m43,qe,si}.tar.xz. Usage (device tool, H100 or H200): bash bench/step_inputs_call.sh
set -u
. bench/device_lib.sh
carry_env m43 qe si || exit 2
call_dir
for t in cuda_compressor_test cuda_attention_test cuda_ops_test cuda_indexer_test gpu_model_test; do
  timeout 150 .carry/bin/${t}_si --gtest_brief=1 > $R/${t}_si.log 2>&1
  echo "${t}_si rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/${t}_si.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "^\[  FAILED" $R/${t}_si.log | head -5
done
timeout 60 .carry/bin/cuda_compressor_test_qe --gtest_filter='*HcaEmit*' > $R/cuda_compressor_test_qe.log 2>&1
echo "cuda_compressor_test_qe rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/cuda_compressor_test_qe.log | tr '\n' ' ')"
export LADDER_BATCH=1,2,4
for round in $(seq 1 ${ROUNDS:-3}); do
  LADDER_COMMIT=795d915 ladder main_$round dsv4_m43
  LADDER_COMMIT=hca-emit-q ladder qe_$round dsv4_qe
  LADDER_COMMIT=step-inputs-early ladder si_$round dsv4_si
done
export LADDER_BATCH=32
LADDER_COMMIT=795d915 ladder main_32 dsv4_m43
LADDER_COMMIT=step-inputs-early ladder si_32 dsv4_si
for v in m43 si; do
  timeout 150 .carry/bin/dsv4_$v bench --synthetic flash --layers 20 --batch 1 --context 4096 \
    --kernel-trace 5 --commit $v --out $R/trace_$v.json > $R/trace_$v.log 2>&1
  python3 bench/trace_segments.py --layers $R/trace_$v.json > $R/segments_$v.txt
  echo "== $v"; head -10 $R/segments_$v.txt
done
grep -A24 "swa/hca layer" $R/segments_si.txt
pack_results
echo "done ${SECONDS}s"
