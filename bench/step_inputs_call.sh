#!/usr/bin/env bash
# step_inputs_call.sh: three stacked decode-chain changes measured against main (795d915 = dsv4_m43):
#   qe (branch wip/hca-emit-q): HCA layers' query heads normed and rotated in the compressor's emit
#      launch, one launch fewer between wq_b and attention;
#   si (wip/step-inputs-early, on qe): the row bookkeeping of the emit, attention split and
#      combine, qkv_norm_finish, q_norm_rope and the indexer's prep, split and merge before the PDL
#      wait;
#   pf (wip/kv-prefetch, on si): the attention split's first window tile and the indexer split's
#      first key tiles asked into L2 before the wait.
# Steps: the GPU tests of the changed kernels (pf's attention, indexer and model tests, si's
# compressor and ops tests, qe's new compressor test), ROUNDS (default 2) alternated rounds of the
# 20-layer 4K ladder at batches 1, 2, 4, one round at batch 32 (main, pf), traced batch-1 steps of
# main and pf with the layer listings; everything in $OUT/r.tar.xz.
# Carry .carry/{pack,m43,qe,si,pf}.tar.xz (built here for sm_90, stripped; gitignored).
# Usage (device tool, H100 or H200): bash bench/step_inputs_call.sh
set -u
. bench/device_lib.sh
carry_env m43 qe si pf || exit 2
call_dir
run_test() {  # BIN [FILTER]
  timeout 150 .carry/bin/$1 --gtest_brief=1 --gtest_filter="${2:-*}" > $R/$1.log 2>&1
  echo "$1 rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$1.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "^\[  FAILED" $R/$1.log | head -5
}
run_test cuda_compressor_test_qe '*HcaEmit*'
for t in cuda_compressor_test_si cuda_ops_test_si cuda_attention_test_pf cuda_indexer_test_pf gpu_model_test_pf; do
  run_test $t
done
export LADDER_BATCH=1,2,4
for round in $(seq 1 ${ROUNDS:-2}); do
  LADDER_COMMIT=795d915 ladder main_$round dsv4_m43
  LADDER_COMMIT=hca-emit-q ladder qe_$round dsv4_qe
  LADDER_COMMIT=step-inputs-early ladder si_$round dsv4_si
  LADDER_COMMIT=kv-prefetch ladder pf_$round dsv4_pf
done
export LADDER_BATCH=32
LADDER_COMMIT=795d915 ladder main_32 dsv4_m43
LADDER_COMMIT=kv-prefetch ladder pf_32 dsv4_pf
for v in m43 pf; do
  timeout 150 .carry/bin/dsv4_$v bench --synthetic flash --layers 20 --batch 1 --context 4096 \
    --kernel-trace 5 --commit $v --out $R/trace_$v.json > $R/trace_$v.log 2>&1
  python3 bench/trace_segments.py --layers $R/trace_$v.json > $R/segments_$v.txt
  echo "== $v"; head -10 $R/segments_$v.txt
done
grep -A24 "swa/hca layer" $R/segments_pf.txt
pack_results
echo "done ${SECONDS}s"
