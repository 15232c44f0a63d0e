#!/usr/bin/env bash
# run_h200.sh: what one call on the GPU machine runs (device tool): the CUDA tests, an ncu
# profile of the main kernels, the decode lab sweeps and the W4A16 benchmark with its PyTorch
# peer; logs and results go to $OUT. The binaries are built on the development machine
# (cmake --build build-h200, sm_90) and carried in .carry/bin, with libfmt/libgomp in .carry/lib.
# Usage: bash bench/run_h200.sh COMMIT STEPS   (STEPS: comma list of tests, kernels, model, fbench, serve, longcmp, peer, prof, lab, plab, pattern, l2ab, maxlayers, fp8woa, fp8pre, quick, full, torch)
#   lab: forced decode launches (dense wq_b/wo_b at M = 1, 16, 32; wq_a, w2, w13 at M = 1, 16; the
#        MoE GEMMs at M = 1), every configuration x split-K x ring depth x L2 window.
#   pattern: the MoE layer at M = 1 beside its GEMMs' reads alone (w4a16_bench --moe-pattern).
#   l2ab: weights at L2 normal vs evict-first priority (--weights-l2), two rounds: the MoE layer at
#        M = 1, wq_b and wo_b at M = 1 and 16, and the 20-layer ladder (B = 1, 32 at 4K) with wo_a on
#        cuBLAS (normal, first) and on the weight stream (first, --dense-decode woa,proj).
#   maxlayers: the ladder on the largest synthetic model that fits (--layers max): B = 1, 32 at 4K,
#        and B = 1 at 262K (chunks of 8192).
#   fp8woa: wo_a in the lossless fp8 form (--wo-a fp8): its kernel tests (bit equality with the bf16
#        kernels, the GPU model's fp8-vs-bf16 steps), the dense kernels vs cuBLAS on wo_a (fp8 rows
#        beside bf16), and the 20-layer ladder (B = 1, 32 at 4K) with --wo-a bf16 and fp8, two rounds.
#   fp8pre: where a prefill chunk's time goes with --wo-a fp8 (bf16/fp8, PDL off, smaller chunks,
#        4 and 16 layers; two prefills a run, each with its last-chunk split).
#   quick/full: the benchmark (quick: M = 1, 16, 4096); torch: its PyTorch int4 peer and the table.
set -uo pipefail
# LAYERS: the l2ab and fp8woa ladders' model depth (20; 16 on an 80 GB H100).
COMMIT=${1:-unknown}
STEPS=${2:-tests,full}
OUT=${OUT:-/tmp/dsv4_out}
mkdir -p "$OUT"
BIN=.carry/bin
CUBLAS=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.carry/lib:$(dirname "${CUBLAS:-/x/x}"):${LD_LIBRARY_PATH:-}"
export OMP_NUM_THREADS=$(nproc)
has() { [[ ",$STEPS," == *",$1,"* ]]; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "cublas: $CUBLAS"; uname -r; nproc
} 2>&1 | tee "$OUT/env.txt"

if has tests || has kernels; then
  # tests: every GPU test binary carried; kernels: the forward-pass kernel families only.
  : > "$OUT/test.log"
  for t in $BIN/cuda_*_test $BIN/gpu_*_test; do
    [[ -x $t ]] || continue
    name=$(basename "$t")
    if has kernels && [[ $name == cuda_w4a16_test || $name == cuda_moe_test || $name == gpu_* ]]; then continue; fi
    echo "=== $name" >> "$OUT/test.log"
    timeout ${TEST_TIMEOUT:-300} "$t" --gtest_brief=1 >> "$OUT/test.log" 2>&1; echo "$name rc=$?"
  done
  grep -E "^===|^\[ +(FAILED|PASSED|SKIPPED) +\]" "$OUT/test.log" | tail -60
  grep -hE "Failure|Expected|Which is|summary|differ|unwritten|gpu:|ref:" "$OUT/test.log" | head -60
fi
if has model; then
  # The whole forward pass against the CPU reference (writes a flash-shaped checkpoint to /tmp).
  timeout ${MODEL_TIMEOUT:-240} $BIN/gpu_model_test > "$OUT/gpu_model.log" 2>&1; echo "gpu_model_test rc=$?"
  grep -E "^\[ +(FAILED|PASSED|SKIPPED|OK) +\]|measured|rel|overlap|agree" "$OUT/gpu_model.log" | head -40
fi
if has fbench; then
  # The forward-pass ladder on synthetic weights (FBENCH_ARGS: layers, batches, contexts).
  CMD="bash bench/run_h200.sh $COMMIT $STEPS"
  timeout ${FBENCH_TIMEOUT:-200} $BIN/dsv4 bench --synthetic flash ${FBENCH_ARGS:---layers 20 --batch 1,32 --context 4096} \
    --commit "$COMMIT" --command "$CMD; FBENCH_ARGS='${FBENCH_ARGS:-}'" --out "$OUT/forward_bench.json" > "$OUT/fbench.log" 2>&1
  echo "dsv4 bench rc=$?"; cat "$OUT/fbench.log" | cut -c1-200 | tail -40
  if [[ -n ${FBENCH_B_ARGS:-} ]]; then
    # A/B: the same ladder with FBENCH_B_ARGS added (e.g. --pdl off).
    timeout ${FBENCH_TIMEOUT:-200} $BIN/dsv4 bench --synthetic flash ${FBENCH_ARGS:---layers 20 --batch 1,32 --context 4096} \
      $FBENCH_B_ARGS --commit "$COMMIT" --command "$CMD; FBENCH_ARGS='${FBENCH_ARGS:-}' + '$FBENCH_B_ARGS'" \
      --out "$OUT/forward_bench_b.json" > "$OUT/fbench_b.log" 2>&1
    echo "dsv4 bench (B: $FBENCH_B_ARGS) rc=$?"; cat "$OUT/fbench_b.log" | cut -c1-200 | tail -40
  fi
fi
if has serve; then
  # The OpenAI server on the CUDA runner (python wheels for the openai client carried in .whl).
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  $BIN/dsv4 make-model --preset flash-shaped --layers 2 --layer-types csa,hca \
    --tokenizer third_party/tokenizer/tokenizer.json --out /tmp/serve_model > /dev/null || echo "make-model failed"
  PYTHONUNBUFFERED=1 timeout ${SERVE_TIMEOUT:-240} python3 tests/python/test_serve_cuda.py --bin $BIN/dsv4 \
    --serve-args "--device cuda --model /tmp/serve_model" > "$OUT/serve_cuda.log" 2>&1
  echo "test_serve_cuda rc=$?"; grep -vE "^\s*$" "$OUT/serve_cuda.log" | head -40 | cut -c1-200
  rm -rf /tmp/serve_model
fi
if has longcmp; then
  # GPU vs CPU logits and CSA selections over a LONGCMP_T-token prompt on a CSA + HCA model (vocab 4096).
  T=${LONGCMP_T:-8192}
  $BIN/dsv4 make-model --preset flash-shaped --layers 2 --layer-types csa,hca --vocab 4096 --seed 5 \
    --out /tmp/cmp_model > /dev/null || echo "make-model failed"
  python3 -c "import numpy as np; np.save('/tmp/ids.npy', np.random.default_rng(1).integers(0, 4096, $T).astype(np.int32))"
  $BIN/dsv4 logits --model /tmp/cmp_model --token-ids /tmp/ids.npy --numerics bf16 --device cuda --chunk 2048 \
    --out /tmp/gpu.npy --selected /tmp/gpu_sel.npy 2>&1 | tail -1
  timeout ${LONGCMP_TIMEOUT:-300} $BIN/dsv4 logits --model /tmp/cmp_model --token-ids /tmp/ids.npy --numerics bf16 \
    --device cpu --chunk ${LONGCMP_CPU_CHUNK:-16384} --out /tmp/cpu.npy --selected /tmp/cpu_sel.npy 2>&1 | tail -1
  python3 bench/compare_logits.py /tmp/gpu.npy /tmp/cpu.npy "$OUT/longcmp_$T.json"
  python3 bench/compare_selected.py /tmp/gpu_sel.npy /tmp/cpu_sel.npy 4 "$OUT/longcmp_selected_$T.json"
fi
if has peer; then
  # transformers' DeepseekV4ForCausalLM (bf16) and dsv4 on the same flash-shaped layers, batch 1.
  PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-240} python3 bench/hf_peer.py --layers ${PEER_LAYERS:-csa,hca} \
    --prompt 512 --new 32 --out "$OUT/hf_peer.json" > "$OUT/hf_peer.log" 2>&1; echo "hf_peer rc=$?"; tail -15 "$OUT/hf_peer.log"
  timeout 120 $BIN/dsv4 bench --synthetic flash --layer-types ${PEER_LAYERS:-csa,hca} --batch 1 --context 512 \
    --decode-steps 32 --commit "$COMMIT" --command "bash bench/run_h200.sh $COMMIT $STEPS (peer)" \
    --out "$OUT/dsv4_peer_point.json" 2>&1 | tail -8
fi
if has prof; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  timeout 240 "$NCU" --clock-control none --kernel-name regex:"w4a16_|moe_route|copy_kernel" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section Occupancy --section LaunchStats \
    $BIN/w4a16_bench --profile --out /tmp/prof.json > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E "w4a16_|moe_route|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy|No Eligible" "$OUT/ncu.txt" | head -60
fi
if has lab; then
  $BIN/w4a16_bench --lab --no-dense --moe-ms 1 ${LAB_ARGS:-} --out "$OUT/lab.json" --commit "$COMMIT" > "$OUT/lab.log" 2>&1
  echo "lab rc=$?"; grep -E "^lab .* \*$|^moe |breakdown" "$OUT/lab.log" | head -40
  # the fastest launches per shape and M
  python3 -c "
import re, sys
best = {}
for l in open(sys.argv[1]):
    m = re.match(r'lab (\S+)\s+M=(\d+)\s.*?([0-9.]+) us', l)
    if m and (m.group(1, 2) not in best or float(m.group(3)) < best[m.group(1, 2)][0]):
        best[m.group(1, 2)] = (float(m.group(3)), l.rstrip())
for k in sorted(best): print('best', best[k][1])
" "$OUT/lab.log"
fi
if has plab; then
  # The prefill lab: every tiled configuration (m64, m128, and on SM90 wg128, wg256) forced per
  # shape at PLAB_MS rows, against cuBLAS BF16 in the same run.
  $BIN/w4a16_bench --no-moe --no-dense --prefill-lab ${PLAB_MS:-256,1024,4096} --commit "$COMMIT" \
    --command "bash bench/run_h200.sh $COMMIT $STEPS; PLAB_MS='${PLAB_MS:-}'" --out "$OUT/w4a16_prefill_lab.json" \
    > "$OUT/plab.log" 2>&1
  echo "plab rc=$?"; grep -E "^plab" "$OUT/plab.log" | cut -c1-130
fi
if has pattern; then
  # The MoE GEMMs' reads alone (testing::tile_stream_read) beside the layer itself, at M = 1.
  $BIN/w4a16_bench --no-dense --moe-ms 1 --moe-pattern --out "$OUT/pattern.json" --commit "$COMMIT" \
    --command "bash bench/run_h200.sh $COMMIT $STEPS" > "$OUT/pattern.log" 2>&1
  echo "pattern rc=$?"; grep -E "^moe .*(M=1 |pattern)" "$OUT/pattern.log" | head -12
fi
if has l2ab; then
  : > "$OUT/l2ab.log"
  for r in 1 2; do
    for l2 in normal first; do
      echo "=== round $r, weights L2 $l2" >> "$OUT/l2ab.log"
      $BIN/w4a16_bench --no-dense --moe-ms 1 --weights-l2 $l2 --commit "$COMMIT" --out "$OUT/l2ab_moe_${l2}_$r.json" 2>&1 |
        grep -E "^GPU|^moe .*M=1 " >> "$OUT/l2ab.log"
      $BIN/w4a16_bench --no-moe --ms 1,16 --shapes wq_b,wo_b --weights-l2 $l2 --commit "$COMMIT" \
        --out "$OUT/l2ab_dense_${l2}_$r.json" 2>&1 | grep -E "^(wq_b|wo_b) " >> "$OUT/l2ab.log"
    done
    for v in "normal proj" "first proj" "first woa,proj"; do
      set -- $v
      echo "=== round $r, ladder: --weights-l2 $1 --dense-decode $2" >> "$OUT/l2ab.log"
      timeout 200 $BIN/dsv4 bench --synthetic flash --layers ${LAYERS:-20} --batch 1,32 --context 4096 --weights-l2 $1 \
        --dense-decode $2 --commit "$COMMIT" --command "bash bench/run_h200.sh $COMMIT $STEPS" \
        --out "$OUT/l2ab_fwd_${1}_${2/,/_}_$r.json" 2>&1 | grep -E "decode B=" >> "$OUT/l2ab.log"
    done
  done
  # Summary: each row's times per variant over the rounds (us for kernels, ms for steps).
  python3 - "$OUT/l2ab.log" <<'PY' >> "$OUT/l2ab.log"
import re, sys
rows = {}
variant = None
for line in open(sys.argv[1]):
    m = re.match(r"=== round \d+, (weights L2 \S+|ladder: .*)", line)
    if m:
        variant = m.group(1).strip()
        continue
    m = re.match(r"(moe|wq_b|wo_b)\s+M=(\d+)\s+(?:\S+\s+S=\d+\s+)?([0-9.]+) us", line)
    if m and variant:
        rows.setdefault((f"{m.group(1)} M={m.group(2)}", variant), []).append(float(m.group(3)))
    m = re.search(r"decode B=(\d+)\s+ctx (\d+)\s+graph: ([0-9.]+) ms/step", line)
    if m and variant:
        rows.setdefault((f"step B={m.group(1)} ctx {m.group(2)}", variant), []).append(float(m.group(3)))
print("# l2ab summary: row | variant | times over the rounds")
for (row, v) in sorted(rows):
    print(f"{row:22s} | {v:45s} | {' '.join(f'{x:.3f}' for x in rows[(row, v)])}")
PY
  cut -c1-160 "$OUT/l2ab.log" | tail -60
fi
if has maxlayers; then
  CMD="bash bench/run_h200.sh $COMMIT $STEPS"
  timeout 300 $BIN/dsv4 bench --synthetic flash --layers max --batch 1,32 --context 4096 --commit "$COMMIT" \
    --command "$CMD" --out "$OUT/forward_max_4k.json" > "$OUT/maxlayers.log" 2>&1
  echo "maxlayers 4K rc=$?"
  timeout 300 $BIN/dsv4 bench --synthetic flash --layers max --batch 1 --context 262144 --chunk 8192 --commit "$COMMIT" \
    --command "$CMD" --out "$OUT/forward_max_262k.json" >> "$OUT/maxlayers.log" 2>&1
  echo "maxlayers 262K rc=$?"; grep -E "^bench:|decode B=|prefill" "$OUT/maxlayers.log" | cut -c1-200
fi
if has fp8woa; then
  CMD="bash bench/run_h200.sh $COMMIT $STEPS"
  {
    $BIN/cuda_dense_test --gtest_filter='*Fp8*:*RejectsUnsupported*:*VsCublas*' --gtest_brief=1
    echo "cuda_dense_test rc=$?"
    timeout 400 $BIN/gpu_model_test --gtest_filter='*Fp8WoA*' --gtest_brief=1
    echo "gpu_model_test rc=$?"
  } > "$OUT/fp8woa_tests.log" 2>&1
  grep -E "rc=|FAILED|\[ vs .*wo_a" "$OUT/fp8woa_tests.log" | cut -c1-160
  : > "$OUT/fp8woa.log"
  for r in 1 2; do
    for f in bf16 fp8; do
      echo "=== round $r, --wo-a $f" >> "$OUT/fp8woa.log"
      timeout 300 $BIN/dsv4 bench --synthetic flash --layers ${LAYERS:-20} --batch 1,32 --context 4096 --wo-a $f \
        --commit "$COMMIT" --command "$CMD" --out "$OUT/fp8woa_fwd_${f}_$r.json" 2>&1 |
        grep -E "^bench: synthetic|device bytes|decode B=" >> "$OUT/fp8woa.log"
    done
  done
  cut -c1-200 "$OUT/fp8woa.log"
fi
if has fp8pre; then
  # Where a prefill chunk's time goes with wo_a in the fp8 form: the 16-layer H100 run spent
  # ~6 ms a layer in the dense_linear window against ~0.4 ms of kernels (NOTES.md). Bf16 and fp8,
  # PDL on and off, smaller chunks, 4 and 16 layers; each run prefills twice (the second shows
  # whether the cost is a first-use one), and the last chunk of each prefill is split.
  : > "$OUT/fp8pre.log"
  i=0
  for args in "--layers 4 --wo-a bf16" "--layers 4 --wo-a fp8" "--layers 4 --wo-a fp8 --pdl off" \
      "--layers 4 --wo-a bf16 --pdl off" "--layers 4 --wo-a fp8 --chunk 1024" "--layers 16 --wo-a fp8" \
      "--layers 16 --wo-a bf16"; do
    i=$((i + 1))
    timeout 120 $BIN/dsv4 bench --synthetic flash $args --batch 1 --context 4096,4096 --decode-steps 4 \
      --commit "$COMMIT" --command "bash bench/run_h200.sh $COMMIT $STEPS ($args)" --out "$OUT/fp8pre_$i.json" > "$OUT/fp8pre_$i.log" 2>&1
    echo "[$args] rc=$?" >> "$OUT/fp8pre.log"
    python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['runs']:
    if r['kind'] == 'prefill':
        print('  prefill %.3f s; last chunk ms' % r['seconds'], {k: round(v, 2) for k, v in r['last_chunk_ms'].items()})" \
      "$OUT/fp8pre_$i.json" >> "$OUT/fp8pre.log" 2>&1
  done
  cat "$OUT/fp8pre.log"
fi
if has quick || has full; then
  Q=""; has quick && Q="--quick"
  CMD="bash bench/run_h200.sh $COMMIT $STEPS"
  $BIN/w4a16_bench --out "$OUT/bench_cpp.json" --commit "$COMMIT" --command "$CMD" $Q > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"; cat "$OUT/bench.log" | cut -c1-150
  if has torch; then
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/w4a16_torch_peer.py --cpp "$OUT/bench_cpp.json" --out "$OUT/w4a16_h200.json" \
      --md "$OUT/w4a16_h200.md" --command "$CMD" $Q > "$OUT/torch_peer.log" 2>&1; echo "torch peer rc=$?"
  fi
fi
