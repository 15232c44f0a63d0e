#!/usr/bin/env bash
# gemv_verify_call.sh: branch wip/gemv (wo_a's one-row calls and the one-row projections on the
# register-streaming GEMV, "woa,proj" the default) through every GPU test binary, then the
# 20-layer 4K ladder (B = 1, 32) of its dsv4 against main's (tail), alternated, two rounds.
# Carry .carry/{pack,gv2,tail}.tar.xz: gv2 = the branch's dsv4 and cuda_*_test / gpu_*_test
# binaries with the suffix _gv, built for sm_90 (-DDSV4_CUDA_ARCHS=90), stripped.
# DEADLINE (default 400): seconds from the call's start. Usage (device tool): bash bench/gemv_verify_call.sh
set -u
. bench/device_lib.sh
carry_env gv2 tail || exit 2
call_dir
DEADLINE=${DEADLINE:-400}
gpu_suite _gv 120 '-*Timing*:*VsCublas*:*Timeline*' 100
grep -h -A3 "FAILED\|Failure" $R/*_test.log | head -30
for round in 1 2; do
  left 45 && ladder gv$round dsv4_gv
  left 45 && ladder tail$round dsv4_tail
done
(cd $OUT && tar czf verify.tgz r && rm -rf r)
echo "done ${SECONDS}s"
