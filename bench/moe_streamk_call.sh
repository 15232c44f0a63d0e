#!/usr/bin/env bash
# moe_streamk_call.sh: the stream-K gate/up GEMM (src/cuda/w4a16/moe_streamk.cu) on a GPU, in one
# device call: the MoE tests of the checkout (the stream-K test among them; SK_NO_TEST=1 skips
# them), then the MoE layer at M = 1 (and M = 2) with the decode grid (--moe-streamk off) and
# stream-K with several shared partitions (blocks on the shared expert's tiles: 0 = one per block
# tile, 32), alternated, SK_ROUNDS (default 2) rounds, into $OUT/streamk.log (the M = 1 times print
# as "round variant us"); then the M = 1 timelines of off and on (SK_TL, default 0) with every
# block's stamps in $OUT/tl_{off,on}.json.
# Carry .carry/pack.tar.xz and .carry/sk.tar.xz (w4a16_bench_sk, cuda_moe_test_sk: the checkout's).
# Usage (device tool): [SK_SHARED='0 24 28 36'] bash bench/moe_streamk_call.sh
. bench/device_lib.sh; carry_env sk || exit 2
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
if [ -z "${SK_NO_TEST:-}" ]; then
  timeout 240 .carry/bin/cuda_moe_test_sk > $OUT/moe_test.log 2>&1; echo "moe test rc=$? ${SECONDS}s"
  grep -E "^\[  (FAILED|PASSED) |^\[  FAILED" $OUT/moe_test.log | head -20
  grep -E "MoeForwardStreamK" $OUT/moe_test.log | head -5
fi
for r in $(seq 1 "${SK_ROUNDS:-2}"); do
  for v in off ${SK_SHARED:-0 24 28 36}; do
    arg=off
    [ "$v" != off ] && arg="on,$v"
    timeout 40 .carry/bin/w4a16_bench_sk --no-dense --moe-ms 1,2 --moe-streamk $arg --out /tmp/sk.json 2>&1 |
      grep -E "moe +M=[12] +([0-9]|deferred|breakdown)|rror" | sed "s/^/$r $v /" | cut -c1-160 >> $OUT/streamk.log
  done
done
echo "streamk sweep ${SECONDS}s"
grep -E " M=1 +[0-9]" $OUT/streamk.log | awk '{print $1, $2, $5}'
for v in off on,${SK_TL:-0}; do
  timeout 40 .carry/bin/w4a16_bench_sk --no-dense --moe-ms 1 --moe-streamk $v --out $OUT/tl_${v%%,*}.json > $OUT/tl_${v%%,*}.txt 2>&1
  grep -A5 "timeline gate_up" $OUT/tl_${v%%,*}.txt | head -6 | sed "s/^/$v /"
done
