#!/usr/bin/env bash
# moe_force_sweep.sh: the MoE layer at M = 1 with forced GEMM launches (w4a16_bench --moe-force),
# each after a run of the heuristic's, MOE_ROUNDS (default 2) rounds, into $OUT/moe_force.log; the
# M = 1 times print as "round launch us". The default list spreads gate/up's bytes evenly over the
# SMs: the heuristic's 224 gate/up blocks of 256 KB (d16n128, one split) put two blocks on 92 of 132
# SMs and one on 40, so the phase ends when the doubly loaded SMs do; with S splits the most loaded
# SM streams ceil(224 S / 132) x 256 KB / S (S = 4: 448 KB instead of 512). Measured on an H100:
# every such launch is slower (bench/results/moe_balance_h100).
# Needs .carry/bin/w4a16_bench_$BIN (default tail) and the library path (device_lib.sh carry_env).
# Usage (device tool): . bench/device_lib.sh; carry_env tail; [MOE_FORCES='1,4,2,1,1,2 ...'] bash bench/moe_force_sweep.sh
FORCES=${MOE_FORCES:-"1,4,2,1,1,2 1,7,2,1,1,2 1,8,2,1,1,2 2,7,2,1,1,2 2,8,2,1,1,2 0,2,2,1,1,2 1,4,3,1,1,2 1,4,2,1,4,2 1,4,2,2,7,2"}
BIN=.carry/bin/w4a16_bench_${BIN:-tail}
for r in $(seq 1 "${MOE_ROUNDS:-2}"); do
  for f in heuristic $FORCES; do
    force=()
    [ "$f" != heuristic ] && force=(--moe-force "$f")
    timeout 30 $BIN --no-dense --moe-ms 1 "${force[@]}" --out /tmp/moe_force.json 2>&1 |
      grep -E "moe +M=1 +([0-9]|deferred|breakdown)" | sed "s/^/$r $f /" | cut -c1-150 >> "$OUT/moe_force.log"
  done
done
echo "moe force sweep ${SECONDS}s"
grep -E " M=1 +[0-9]" "$OUT/moe_force.log" | awk '{print $1, $2, $5}'
