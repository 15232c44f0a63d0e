#!/usr/bin/env bash
# any_gpu_call.sh: one device call that does the most useful thing for whichever GPU started:
#   - an H200 (the issues' acceptance machine): verify_default_call.sh (the touched tests, issue 3's
#     and issue 6's lines, then every other GPU test while time is left), DEADLINE seconds;
#   - anything else (an H100): GpuModel.WeightPrefetchEqualsNone, then one traced 20-layer 4K
#     ladder at batch 1 (`--kernel-trace 5`) split by bench/trace_segments.py --layers (the middle
#     CSA and SWA/HCA layers' kernels in launch order), ~90 s.
# Carry .carry/{pack,SUFFIX}.tar.xz as verify_default_call.sh says. Usage (device tool, no kind or
# either kind): SUFFIX=m41 COMMIT=d8304c7 [DEADLINE=540] bash bench/any_gpu_call.sh
set -u
. bench/device_lib.sh
S=${SUFFIX:?SUFFIX=name of the carried archive}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  SUFFIX=$S COMMIT=${COMMIT:-main} DEADLINE=${DEADLINE:-540} bash bench/verify_default_call.sh 2>&1 | tail -70
  exit
fi
carry_env $S || exit 2
call_dir
.carry/bin/gpu_model_test_$S --gtest_filter='GpuModel.WeightPrefetchEqualsNone' > $R/gpu_model_test_prefetch.log 2>&1
tail -3 $R/gpu_model_test_prefetch.log
timeout 150 .carry/bin/dsv4_$S bench --synthetic flash --layers 20 --batch 1 --context 4096 --kernel-trace 5 \
  --commit "${COMMIT:-main}" --command "dsv4 bench --synthetic flash --layers 20 --batch 1 --context 4096 --kernel-trace 5" \
  --out $R/trace_b1.json > $R/trace_b1.log 2>&1
grep -E "decode B=" $R/trace_b1.log | cut -c1-160
python3 bench/trace_segments.py --layers $R/trace_b1.json > $R/segments_b1.txt
tail -80 $R/segments_b1.txt
