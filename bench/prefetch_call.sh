#!/usr/bin/env bash
# prefetch_call.sh: the L2 prefetch of each layer's wo_a (GpuModelOptions::l2_prefetch_mb, `dsv4
# bench --l2-prefetch-mb`) in one device call:
#   1. cuda_weight_prefetch_test (arguments; a prefetched read against a read after a flush);
#   2. the 20-layer 4K ladder at B = 1, 2, 4 of the branch's dsv4 at --l2-prefetch-mb 0 and each
#      of BUDGETS (default "16 24 32 40"), of main's dsv4, of the branch at 0 and TRACE_MB with
#      --weights-l2 first, and at TRACE_MB forked at the layer's start, alternated, two rounds;
#   3. the kernel trace of B = 1 at budget 0 and at TRACE_MB (default 24), with per-layer segments
#      (bench/trace_segments.py) and the comparison;
#   4. gpu_model_test's prefetch, graph and load-error cases (the shared model is written first).
# Carry .carry/{pack,pf,main}.tar.xz: pf = the branch's dsv4, cuda_weight_prefetch_test and
# gpu_model_test with the suffix _pf; main = main's dsv4 as dsv4_main; sm_90, stripped. NI=1 also
# carries .carry/ni.tar.xz (dsv4, cuda_ops_test, cuda_indexer_test and cuda_attention_test of
# wip/noinline-rope, suffix _ni): its tests, and its ladder with the prefetch off in each round.
# DEADLINE (default 560): seconds from the call's start. Usage (device tool): bash bench/prefetch_call.sh
set -u
. bench/device_lib.sh
carry_env pf main ${NI:+ni} || exit 2
call_dir
DEADLINE=${DEADLINE:-560}
timeout 60 .carry/bin/cuda_weight_prefetch_test_pf --gtest_brief=1 > $R/cuda_weight_prefetch_test.log 2>&1
echo "cuda_weight_prefetch_test rc=$? ${SECONDS}s"
grep -E "l2 prefetch|Failure|PASSED|FAILED" $R/cuda_weight_prefetch_test.log | head -8
if [ -n "${NI:-}" ]; then
  for t in cuda_ops_test cuda_indexer_test cuda_attention_test; do
    timeout 90 .carry/bin/${t}_ni --gtest_brief=1 --gtest_filter='-*Timing*' > $R/${t}_ni.log 2>&1
    echo "${t}_ni rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/${t}_ni.log | tr '\n' ' ') ${SECONDS}s"
  done
fi
for round in 1 2; do
  for mb in 0 ${BUDGETS:-16 24 32 40}; do
    left 200 && LADDER_BATCH=1,2,4 LADDER_COMMIT=pf ladder pf${mb}_$round dsv4_pf --l2-prefetch-mb $mb
  done
  left 200 && LADDER_BATCH=1,2,4 LADDER_COMMIT=main ladder main_$round dsv4_main
  # NI=1: the branch with rope_pair's sincosf not inlined (smaller small kernels), prefetch off.
  [ -n "${NI:-}" ] && left 200 && LADDER_BATCH=1,2,4 LADDER_COMMIT=ni ladder ni0_$round dsv4_ni --l2-prefetch-mb 0
  # The decode weight streams at L2 evict-first priority (--weights-l2 first) keep more of the
  # prefetched lines: wq_b's stream no longer pushes them out.
  for mb in 0 ${TRACE_MB:-24}; do
    left 200 && LADDER_BATCH=1,2,4 LADDER_COMMIT=pf ladder pf${mb}_first_$round dsv4_pf --l2-prefetch-mb $mb --weights-l2 first
  done
  # Forked at the layer's start: the whole query path's time to land, beside wq_b's stream.
  left 200 && LADDER_BATCH=1,2,4 LADDER_COMMIT=pf ladder pf${TRACE_MB:-24}_layer_$round dsv4_pf \
    --l2-prefetch-mb ${TRACE_MB:-24} --l2-prefetch-from layer
done
for mb in 0 ${TRACE_MB:-24}; do
  left 170 || break
  timeout 100 .carry/bin/dsv4_pf bench --synthetic flash --layers 20 --batch 1 --context 4096 --decode-steps 20 \
    --kernel-trace 5 --l2-prefetch-mb $mb --commit pf --out $R/trace_pf$mb.json 2>&1 | grep -E "decode B=" | cut -c1-150
  python3 bench/trace_segments.py $R/trace_pf$mb.json > $R/segments_pf$mb.txt 2>&1
  sed -n 1,12p $R/segments_pf$mb.txt
done
[ -f $R/trace_pf${TRACE_MB:-24}.json ] &&
  python3 bench/trace_segments.py $R/trace_pf0.json $R/trace_pf${TRACE_MB:-24}.json | sed -n '/ against /,$p' > $R/compare.txt &&
  head -24 $R/compare.txt
if left 60; then
  timeout $((DEADLINE - SECONDS - 15)) .carry/bin/gpu_model_test_pf --gtest_brief=1 \
    --gtest_filter='GpuModel.WeightPrefetchEqualsNone:GpuModel.GraphReplayEqualsEager:GpuModel.LoadErrors' > $R/gpu_model_test.log 2>&1
  echo "gpu_model_test rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/gpu_model_test.log | tr '\n' ' ') ${SECONDS}s"
  grep -h -B2 -A6 "Failure" $R/gpu_model_test.log | head -30
fi
(cd $OUT && tar czf prefetch.tgz r && rm -rf r)
echo "done ${SECONDS}s"
