#!/usr/bin/env bash
# rank_merge_call.sh: the indexer merge's rank path measured (branch wip/rank-merge). At batch 1
# and 4K context a CSA layer's merge (one block sorting ~1029 candidates) is exposed ~12.5 us and
# the splits sort their lists first; the rank path spreads the row over 16 blocks that count, for
# each key, the keys above it (its place in the output) and skips the splits' sorts.
# Steps: the indexer test (selections against the CPU reference on both merge paths, the timing
# with the rank and one-block merges), the GPU model test, three alternated rounds of the
# 20-layer 4K ladder at batches 1, 2, 4, 32 (main d8304c7 = dsv4_m41 against dsv4_rk), then one
# traced ladder with the layer listing.
# Carry .carry/{pack,m41,rk}.tar.xz (rk: dsv4_rk, cuda_indexer_test_rk, gpu_model_test_rk of the
# branch, sm_90, stripped). ROUNDS (default 3) and TRACE (default 1) shorten it; MODEL=0 skips
# the model test. Usage (device tool, H100 or H200): [ROUNDS=2 TRACE=0 MODEL=0] bash bench/rank_merge_call.sh
set -u
. bench/device_lib.sh
carry_env m41 rk || exit 2
call_dir
timeout 200 .carry/bin/cuda_indexer_test_rk > $R/cuda_indexer_test_rk.log 2>&1
echo "cuda_indexer_test_rk rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/cuda_indexer_test_rk.log | tr '\n' ' ') ${SECONDS}s"
grep -E "^\[topk timing\]|FAILED|Failure" $R/cuda_indexer_test_rk.log | head -30
if [ "${MODEL:-1}" = 1 ]; then
  timeout 300 .carry/bin/gpu_model_test_rk --gtest_brief=1 > $R/gpu_model_test_rk.log 2>&1
  echo "gpu_model_test_rk rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/gpu_model_test_rk.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "FAILED|Failure" $R/gpu_model_test_rk.log | head -10
fi
export LADDER_BATCH=1,2,4,32
for round in $(seq 1 ${ROUNDS:-3}); do
  LADDER_COMMIT=d8304c7 ladder main_$round dsv4_m41
  LADDER_COMMIT=rank-merge ladder rk_$round dsv4_rk
done
[ "${TRACE:-1}" = 1 ] || { echo "done ${SECONDS}s"; exit 0; }
timeout 150 .carry/bin/dsv4_rk bench --synthetic flash --layers 20 --batch 1 --context 4096 \
  --kernel-trace 5 --commit rank-merge --out $R/trace_rk.json > $R/trace_rk.log 2>&1
python3 bench/trace_segments.py --layers $R/trace_rk.json > $R/segments_rk.txt
head -25 $R/segments_rk.txt; grep -A24 "csa layer" $R/segments_rk.txt
echo "done ${SECONDS}s"
