#!/usr/bin/env bash
# tc5_call.sh: as tc4_call.sh, for the build whose bf16 weights take the tensor-core kernel only
# where its grid fills the GPU (dense_tc_fills_gpu): the dense and model tests, the dense timings
# (VsCublas), then the 20-layer ladder at B = 1 and 32 alternated: bf16 (the default) base vs this
# build, and --wo-a fp8 of the first TMA build vs this one.
# Carry .carry/{pack,next_new,tc,tc5}.tar.xz: dsv4_new (base), dsv4_tc (fp8 TMA build), and this
# build's dsv4_tc5, cuda_dense_test_tc5, gpu_model_test_tc5. Output in $OUT/all.tgz.
# Usage (device tool): DEADLINE=560 bash bench/tc5_call.sh
set -u
DEADLINE=${DEADLINE:-560}
B=.carry/bin
mkdir -p $B && tar xJf .carry/pack.tar.xz -C .carry
for t in next_new tc tc5; do tar xJf .carry/$t.tar.xz -C $B; done
C=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' | head -1)
export LD_LIBRARY_PATH=$PWD/.carry/lib:$(dirname $C):/usr/local/cuda/lib64
R=$OUT/r; mkdir -p $R
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.memory,memory.total --format=csv | tee $R/env.txt
for t in cuda_dense_test gpu_model_test; do
  timeout 150 $B/${t}_tc5 --gtest_brief=1 --gtest_filter='-*VsCublas*:*Timing*:*PrefillCopyVsCublas*' > $R/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$t.log | tr '\n' ' ') ${SECONDS}s"
  grep -E "^\[  FAILED  \]|Failure" $R/$t.log | head -6
done
timeout 100 $B/cuda_dense_test_tc5 --gtest_filter='*VsCublas*' > $R/vs_tc5.log 2>&1
grep -E "^\[ vs .*M=(1|8) " $R/vs_tc5.log | cut -c1-105
lad() {  # name binary extra-args
  local name=$1 bin=$2; shift 2
  timeout 120 $B/$bin bench --synthetic flash --layers 20 --batch 1,32 --context 4096 "$@" --commit tc5 \
    --command "$bin bench --synthetic flash --layers 20 --batch 1,32 --context 4096 $*" --out $R/$name.json 2>&1 |
    grep -E "decode B=.*graph" | sed "s/^/$name: /" | cut -c1-150
}
for r in 1 2; do
  left 80 && lad base_bf16_$r dsv4_new
  left 80 && lad tc5_bf16_$r dsv4_tc5
  left 80 && lad tc_fp8_$r dsv4_tc --wo-a fp8
  left 80 && lad tc5_fp8_$r dsv4_tc5 --wo-a fp8
done
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
