#!/usr/bin/env bash
# prewait_call.sh: dense_tc.cu's ring slots requested before the PDL wait (kPreWaitSlots), four
# builds (VARIANTS, default p3x p3 p4 p5 = 8, 1, 2, 0 slots) in one call: the kernel trace of the
# 20-layer B = 1 step at 4K with --wo-a fp8 (bench/trace_segments.py tables: the wo_a kernel and
# the attention combine before it; compare.txt: every build's kernels against the first's), the kernel's timeline and VsCublas rows where cuda_dense_test_VARIANT
# is carried, then the untraced step of each, alternated twice, and bf16.
# The variants were builds of uncommitted working trees (kPreWaitSlots, then a cap on the ring depth:
# bench/results/tc_prewait_h100/ and tc_stages_h100/ say which). Carry .carry/{pack,VARIANT...}.tar.xz
# holding dsv4_VARIANT (and optionally cuda_dense_test_VARIANT). Output in $OUT/all.tgz.
# Usage (device tool): bash bench/prewait_call.sh
set -u
V=${VARIANTS:-p3x p3 p4 p5}
. bench/device_lib.sh
carry_env $V || exit 2
call_dir
LADDER_BATCH=1  # the B = 1 step only
for v in $V; do
  timeout 100 .carry/bin/dsv4_$v bench --synthetic flash --layers 20 --batch 1 --context 4096 --decode-steps 20 \
    --kernel-trace 5 --wo-a fp8 --out $R/trace_$v.json > /dev/null 2>&1
  python3 bench/trace_segments.py $R/trace_$v.json > $R/seg_$v.txt 2>&1
  echo "$v: $(grep -E 'span' $R/seg_$v.txt | cut -c1-80)"
  grep -E 'dense_tc|attention_combine' $R/seg_$v.txt
done
for v in $V; do
  [ -x .carry/bin/cuda_dense_test_$v ] || continue
  .carry/bin/cuda_dense_test_$v --gtest_filter='*Timeline*:*VsCublas:*TensorCoreKernel*' > $R/dense_$v.log 2>&1
  grep -E '^\[ tc .*M=1 tma|^\[ vs .*M=1 .*(fp8 tc  |dense tc  )|OK|FAILED' $R/dense_$v.log | sed "s/^/$v /" | cut -c1-240
done
first=${V%% *}
python3 bench/trace_segments.py $R/trace_$first.json $(for v in $V; do [ $v = $first ] || echo $R/trace_$v.json; done) |
  sed -n '/ against /,$p' > $R/compare.txt 2>&1
grep -E ' against |dense_tc|attention_combine|qkv_norm' $R/compare.txt
for r in 1 2; do for v in $V; do ladder ${v}_fp8_$r dsv4_$v --wo-a fp8; done; done
for v in $V; do ladder ${v}_bf16 dsv4_$v; done
tar czf $OUT/all.tgz -C $OUT r
echo "done ${SECONDS}s"
