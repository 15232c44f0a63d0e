#!/usr/bin/env bash
# run_h200.sh: what one call on the GPU machine runs (device tool): the CUDA tests, then the W4A16
# benchmark and its PyTorch peer, writing logs and results to $OUT. The binaries are built on the
# development machine (cmake --build build-h200) and carried in .carry/bin with libfmt in .carry/lib.
# Usage: bash bench/run_h200.sh COMMIT [tests|quick|full|bench]
set -uo pipefail
COMMIT=${1:-unknown}
MODE=${2:-full}
OUT=${OUT:-/tmp/dsv4_out}
mkdir -p "$OUT"
BIN=.carry/bin
CUBLAS=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.carry/lib:$(dirname "${CUBLAS:-/x/x}"):${LD_LIBRARY_PATH:-}"
export OMP_NUM_THREADS=$(nproc)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "cublas: $CUBLAS"; uname -r; nproc
} 2>&1 | tee "$OUT/env.txt"

if [[ $MODE == tests || $MODE == quick || $MODE == full ]]; then
  $BIN/cuda_w4a16_test --gtest_brief=1 > "$OUT/w4a16_test.log" 2>&1; echo "w4a16 tests rc=$?"
  $BIN/cuda_moe_test --gtest_brief=1 > "$OUT/moe_test.log" 2>&1; echo "moe tests rc=$?"
  grep -E "^\[ +(FAILED|OK|PASSED|SKIPPED) +\]|tests ran|FAILED TEST" "$OUT/w4a16_test.log" "$OUT/moe_test.log" | tail -30
  grep -hE "Failure|Expected|Which is|summary|differ|unwritten|gpu:|ref:" "$OUT/w4a16_test.log" "$OUT/moe_test.log" | head -40
fi
if [[ $MODE == quick || $MODE == full || $MODE == bench ]]; then
  Q=""; [[ $MODE == quick ]] && Q="--quick"
  CMD="bash bench/run_h200.sh $COMMIT $MODE"
  $BIN/w4a16_bench --out "$OUT/bench_cpp.json" --commit "$COMMIT" --command "$CMD" $Q 2>&1 | tee "$OUT/bench.log" | tail -100
  PYTHONUNBUFFERED=1 python3 bench/w4a16_torch_peer.py --cpp "$OUT/bench_cpp.json" --out "$OUT/w4a16_h200.json" \
    --md "$OUT/w4a16_h200.md" --command "$CMD" $Q > "$OUT/torch_peer.log" 2>&1; echo "torch peer rc=$?"; tail -5 "$OUT/torch_peer.log"
fi
