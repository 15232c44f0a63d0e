. bench/device_lib.sh; carry_env wg tl || exit 2
B=.carry/bin; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 $B/cuda_w4a16_test_wg > $OUT/w4a16_test.log 2>&1; echo "w4a16 test rc=$? ${SECONDS}s"; grep -E "FAILED|PASSED|Failure|error" $OUT/w4a16_test.log | head -20
for r in 1 2; do for b in tl wg; do timeout 60 $B/w4a16_bench_$b --no-moe --ms 1,16 --shapes wo_b,wq_b,wq_a+wkv --out $OUT/ab_${b}_$r.json > $OUT/ab_${b}_$r.log 2>&1; grep -E "^(wo_b|wq_b|wq_a\+wkv) +M=[0-9]+ +d[0-9]" $OUT/ab_${b}_$r.log | sed "s/^/$b.$r /" | cut -c1-150; done; done
timeout 60 $B/w4a16_bench_wg --no-moe --ms 1,16 --shapes wo_b,wq_b --dense-timeline-ms 16 > $OUT/tl_wg.log 2>&1; grep -A4 -i timeline $OUT/tl_wg.log | cut -c1-150 | head -20
timeout 100 $B/cuda_moe_test_wg > $OUT/moe_test.log 2>&1; echo "moe test rc=$? ${SECONDS}s"; tail -3 $OUT/moe_test.log
timeout 90 $B/w4a16_bench_wg --lab --lab-ms 16 --no-moe --no-dense --shapes wo_b,wq_b > $OUT/lab_wg.log 2>&1; python3 bench/lab_top.py $OUT/lab_wg.log 4
echo done ${SECONDS}s
