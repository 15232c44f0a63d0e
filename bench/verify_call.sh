#!/usr/bin/env bash
# verify_call.sh: one device call that checks main on a GPU and times it against a base build:
#   1. every GPU test binary of main (cuda_*_test, gpu_*_test), timing tests excluded;
#   2. the issue-6 decode rows (MoE at M = 1; wq_b and wo_b at M = 1, 16), base and main
#      alternated, two rounds;
#   3. the 20-layer ladder (B = 1, 32 at 4K), base and main alternated (bench/ab_h200.sh).
# With SERVE=1, between 1 and 2: the OpenAI server on the CUDA runner (tests/python/test_serve_cuda.py
# on a 2-layer flash-shaped model), which needs .whl (the openai client's wheels) and
# third_party/tokenizer carried as well.
# Every step runs only while DEADLINE seconds (from the start) leave it room. All output is packed
# into $OUT/all.tgz (the device tool returns only a few files).
# Carry .carry/{pack,next_new,next_base}.tar.xz: main's binaries with the suffix _new (dsv4_new,
# w4a16_bench_new, <test>_new), the base's dsv4_base and w4a16_bench_base; NOTES.md, "Tool notes".
# Usage (device tool): DEADLINE=560 bash bench/verify_call.sh LABEL
set -u
LABEL=${1:?usage: verify_call.sh LABEL}; DEADLINE=${DEADLINE:-560}
B=.carry/bin
. bench/device_lib.sh
carry_env next_new next_base || exit 2
call_dir
gpu_suite _new 300 '-*Timing*:*VsCublas*' 120
if [ "${SERVE:-0}" = 1 ] && left 200; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
  $B/dsv4_new make-model --preset flash-shaped --layers 2 --layer-types csa,hca \
    --tokenizer third_party/tokenizer/tokenizer.json --out /tmp/serve_model > /dev/null || echo "make-model failed"
  PYTHONUNBUFFERED=1 timeout 180 python3 tests/python/test_serve_cuda.py --bin $B/dsv4_new \
    --serve-args "--device cuda --model /tmp/serve_model" > $R/serve_cuda.log 2>&1
  echo "test_serve_cuda rc=$? ${SECONDS}s" | tee -a $R/suite.txt
  grep -E "^(ok|FAIL)|rc=|Error|error" $R/serve_cuda.log | head -20
  rm -rf /tmp/serve_model
fi
for r in 1 2; do
  for v in base new; do
    left 120 || break
    $B/w4a16_bench_$v --no-dense --moe-ms 1 --commit "$LABEL-$v" --out $R/moe_${v}_$r.json > $R/moe_${v}_$r.log 2>&1
    $B/w4a16_bench_$v --no-moe --ms 1,16 --shapes wq_b,wo_b --commit "$LABEL-$v" --out $R/dense_${v}_$r.json > $R/dense_${v}_$r.log 2>&1
    echo "== $v $r"; grep -hE "^moe .*M=1 |^(wq_b|wo_b) " $R/moe_${v}_$r.log $R/dense_${v}_$r.log | cut -c1-160
  done
done
left 150 && OUT=$R AB_TRACE=0 bash bench/ab_h200.sh $LABEL 2 | tail -8
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
