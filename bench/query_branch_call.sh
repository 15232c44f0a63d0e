#!/usr/bin/env bash
# query_branch_call.sh: GpuModelOptions::query_branch measured (branch wip/query-branch). In decode
# batches of 1..4 a CSA layer runs wq_b, the compressor projections and emits, the indexer's wq_b,
# prep, scores and merge on one stream; the query branch runs the compress launches on the side
# stream from the layer's start and, on CSA layers, wq_b and the heads' norm + RoPE there after the
# q norm (csa-late: the compress launches forked after wqkv), so the indexer chain starts after the q norm.
# Steps: the equality tests, three alternated rounds of the 20-layer 4K ladder at batches 1, 2, 4
# (main 4787da7 = dsv4_rk against dsv4_qb --query-branch csa and csa-late), then traced ladders of both
# modes with the layer listing.
# Carry .carry/{pack,rk,qb}.tar.xz (qb: dsv4_qb and gpu_model_test_qb of the branch, sm_90,
# stripped). ROUNDS (default 3) and TRACE (default 1) shorten it.
# Usage (device tool, H100 or H200): [ROUNDS=2 TRACE=0] bash bench/query_branch_call.sh
set -u
. bench/device_lib.sh
carry_env rk qb || exit 2
call_dir
timeout 200 .carry/bin/gpu_model_test_qb --gtest_filter='GpuModel.QueryBranch*:GpuModel.CompressorBranch*' \
  > $R/gpu_model_test_qb.log 2>&1
echo "gpu_model_test_qb rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/gpu_model_test_qb.log | tr '\n' ' ') ${SECONDS}s"
grep -E "Failure|FAILED" $R/gpu_model_test_qb.log | head -5
export LADDER_BATCH=1,2,4
for round in $(seq 1 ${ROUNDS:-3}); do
  LADDER_COMMIT=4787da7 ladder main_$round dsv4_rk
  LADDER_COMMIT=query-branch ladder csa_$round dsv4_qb --query-branch csa
  LADDER_COMMIT=query-branch ladder late_$round dsv4_qb --query-branch csa-late
done
[ "${TRACE:-1}" = 1 ] || { echo "done ${SECONDS}s"; exit 0; }
for mode in csa csa-late; do
  timeout 150 .carry/bin/dsv4_qb bench --synthetic flash --layers 20 --batch 1 --context 4096 --query-branch $mode \
    --kernel-trace 5 --commit query-branch --out $R/trace_$mode.json > $R/trace_$mode.log 2>&1
  python3 bench/trace_segments.py --layers $R/trace_$mode.json > $R/segments_$mode.txt
  echo "== $mode"; head -10 $R/segments_$mode.txt; grep -A24 "csa layer" $R/segments_$mode.txt
done
echo "done ${SECONDS}s"
