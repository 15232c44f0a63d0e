#!/usr/bin/env bash
# pending_ab.sh: the A/B measurements that decide the branches waiting for a GPU, in one device
# call, in order of what each decides; every step runs only while DEADLINE seconds (from the
# start) leave it room, so a short call still returns the first answers:
#   1. weights at L2 evict-first priority (--weights-l2 first; branch wip/evict-first-default
#      makes it the default): the MoE layer at M = 1, wq_b and wo_b at M = 1 and 16, the ladder
#      (B = 1 and 32 at 4K) at normal and first priority;
#   2. topk-small2 (branch wip/topk-small2): its ladder at B = 1 beside (1)'s normal one, the
#      indexer's TopkTiming on both, the branch's indexer tests;
#   3. the fp8 wo_a prefill question (NOTES.md): 4 layers, bf16 / fp8 / fp8 without PDL, two
#      prefills each; (1) and (2) are then run a second time; then the full depth with fp8;
#   4. ncu on the fp8 and bf16 streaming kernels at M = 1.
# After (1) and (2)'s first round: the ops, dense and MoE kernel tests of this main.
# With .carry/nbprev.tar.xz (a previous main's dsv4 and cuda_dense_test as dsv4_prev and
# cuda_dense_test_prev), that main's ladder and dense kernel timings come after (1) and (2).
# Usage (device tool, carry .carry/{pack,nb,nbtopk}.tar.xz): DEADLINE=555 bash bench/pending_ab.sh COMMIT
#   nb.tar.xz: main's dsv4, w4a16_bench, cuda_*_test, gpu_*_test (NOTES.md has the build and pack
#   commands); nbtopk.tar.xz: the branch's dsv4 and cuda_indexer_test as dsv4_topk and
#   cuda_indexer_test_topk.
set -u
COMMIT=$1; DEADLINE=${DEADLINE:-560}
B=.carry/bin
mkdir -p .carry/bin && tar xJf .carry/pack.tar.xz -C .carry && tar xJf .carry/nb.tar.xz -C .carry/bin && tar xJf .carry/nbtopk.tar.xz -C .carry/bin
[ -f .carry/nbprev.tar.xz ] && tar xJf .carry/nbprev.tar.xz -C .carry/bin
C=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' | head -1)
export LD_LIBRARY_PATH=$PWD/.carry/lib:$(dirname $C):/usr/local/cuda/lib64
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=20; [ "$MEM" -lt 100000 ] && L=16
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/env.txt; echo "layers $L"
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
ladder() {  # name binary batches contexts extra-args...
  local name=$1 bin=$2 bs=$3 ctx=$4; shift 4
  timeout 150 $B/$bin bench --synthetic flash --layers $L --batch $bs --context $ctx "$@" --commit "$COMMIT" \
    --command "$bin bench --synthetic flash --layers $L --batch $bs --context $ctx $*" --out $OUT/$name.json 2>&1 |
    grep -E "decode B=|prefill" | sed "s/^/$name: /" | cut -c1-190
}
round() {
  local r=$1
  for l2 in normal first; do
    left 60 || break
    $B/w4a16_bench --no-dense --moe-ms 1 --weights-l2 $l2 --commit "$COMMIT" --out $OUT/l2_moe_${l2}_$r.json 2>&1 |
      grep -E "^moe .*M=1 " | sed "s/^/r$r $l2: /" | cut -c1-170
    $B/w4a16_bench --no-moe --ms 1,16 --shapes wq_b,wo_b --weights-l2 $l2 --commit "$COMMIT" \
      --out $OUT/l2_dense_${l2}_$r.json 2>&1 | grep -E "^(wq_b|wo_b) " | sed "s/^/r$r $l2: /" | cut -c1-170
  done
  left 100 && ladder lad_normal_$r dsv4 1,32 4096 --weights-l2 normal
  left 100 && ladder lad_first_$r dsv4 1,32 4096 --weights-l2 first
  left 70 && ladder lad_topk_$r dsv4_topk 1 4096 --weights-l2 normal
}
round 1
if left 100; then  # this main's kernel tests where its last changes reach (ops, dense stream, MoE router/combine)
  for t in cuda_ops_test cuda_dense_test cuda_moe_test; do
    timeout 45 $B/$t --gtest_brief=1 --gtest_filter='-*Timing*:*VsCublas*:*Fp8PrefillCopyVsCublas*' > $OUT/$t.log 2>&1
    echo "$t rc=$? $(grep -cE '^\[ +FAILED +\] [A-Z]' $OUT/$t.log) failed"; grep -E "^\[ +(FAILED|PASSED) +\]" $OUT/$t.log | head -6
  done
fi
if [ -x $B/dsv4_prev ] && left 90; then  # the previous main (PREV) against this one: ladder and dense kernels
  ladder lad_prev_1 dsv4_prev 1,32 4096 --weights-l2 normal
  for t in cuda_dense_test_prev cuda_dense_test; do
    timeout 40 $B/$t --gtest_filter='*VsCublas*' 2>&1 | grep -E "^\[ vs.* M=1 " | sed "s/^/$t: /" | cut -c1-170 | head -16
  done
fi
if left 60; then
  timeout 40 $B/cuda_indexer_test --gtest_filter='*TopkTiming*' 2>&1 | grep -vE "^\[ (RUN|  +OK) " | grep -E "keys|us" | sed 's/^/base: /' | head -12
  timeout 60 $B/cuda_indexer_test_topk 2>&1 | grep -vE "^\[ (RUN|  +OK) " | grep -vE "SKIPPED" | grep -E "keys|us|FAILED|PASSED|Failure" | sed 's/^/topk: /' | head -20
fi
for a in "bf16" "fp8" "fp8 --pdl off"; do
  left 50 || break
  n=fp8pre_${a// /_}
  timeout 60 $B/dsv4 bench --synthetic flash --layers 4 --wo-a $a --batch 1 --context 4096,4096 --decode-steps 4 \
    --commit "$COMMIT" --command "dsv4 bench --synthetic flash --layers 4 --wo-a $a --batch 1 --context 4096,4096 --decode-steps 4" \
    --out $OUT/$n.json > $OUT/$n.log 2>&1
  python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['runs']:
    if r['kind'] == 'prefill':
        print(sys.argv[2], 'prefill %.3f s' % r['seconds'], {k: round(v, 2) for k, v in r['last_chunk_ms'].items() if v > 0.05})" $OUT/$n.json "$a" 2>&1 | cut -c1-220
done
round 2
left 80 && ladder fp8_full_layers dsv4 1 4096,4096 --wo-a fp8
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for b in 1 0; do
  left 40 || break
  timeout $((DEADLINE - SECONDS - 10)) $NCU --clock-control none --kernel-name-base demangled --kernel-name "regex:dense_stream_kernel<.int.1, .bool.1, .bool.$b>" \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section Occupancy $B/cuda_dense_test --gtest_filter='*Fp8WeightsGiveTheBf16Bits*' > $OUT/ncu_stream_fp8_$b.txt 2>&1
  echo "ncu fp8=$b rc=$?"
  grep -E "Duration|DRAM Throughput|Issue Slots|Issued Ipc|No Eligible|Active Warps|Registers Per|Achieved Occ|Grid Size" $OUT/ncu_stream_fp8_$b.txt | head -12
done
echo "done at $SECONDS s"
# The device tool returns a handful of files: everything, packed in one that sorts first.
(cd $OUT && tar czf 0_all.tgz --exclude 0_all.tgz .)
