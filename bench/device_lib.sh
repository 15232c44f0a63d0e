# device_lib.sh: helpers the device-call scripts source (bench/*_call.sh, fp8tc_ab.sh, prewait_call.sh, trace_pair.sh).
#   carry_env ARCHIVE...  unpacks .carry/pack.tar.xz (shared libraries) into .carry and each
#                         .carry/ARCHIVE.tar.xz (binaries) into .carry/bin, and sets the library
#                         path (the carried libraries, the machine's cuBLAS, the toolkit's).
#   call_dir              sets $R = $OUT/r (the call's output folder, created) and writes the GPU's
#                         name, clocks, memory and driver to $R/env.txt and stdout.
#   left N                whether more than N seconds remain before $DEADLINE (seconds from the
#                         call's start, default 560).
#   gpu_suite SUFFIX KEEP FILTER TIMEOUT  every .carry/bin/{cuda,gpu}_*_test$SUFFIX with
#                         --gtest_filter=FILTER (each under TIMEOUT s, while more than KEEP s
#                         remain): its log in $R/<test>.log, a line per binary in $R/suite.txt.
#   ladder NAME BIN ARG...  the 20-layer synthetic ladder at 4K context (batches $LADDER_BATCH,
#                         default 1,32) of .carry/bin/BIN with ARGs: the graph step lines, prefixed
#                         with NAME, and the JSON in $R/NAME.json (labelled $LADDER_COMMIT, else BIN).
#   pack_results          $R as the one archive $OUT/r.tar.xz (the device tool returns at most 8 files).
carry_env() {
  mkdir -p .carry/bin && tar xJf .carry/pack.tar.xz -C .carry || return 1
  local a
  for a in "$@"; do tar xJf .carry/$a.tar.xz -C .carry/bin || return 1; done
  local c
  c=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' | head -1)
  export LD_LIBRARY_PATH=$PWD/.carry/lib:$(dirname "$c"):/usr/local/cuda/lib64
}

call_dir() {
  R=$OUT/r
  mkdir -p $R
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.memory,memory.total,driver_version --format=csv | tee $R/env.txt
}

left() { [ $((${DEADLINE:-560} - SECONDS)) -gt "$1" ]; }

gpu_suite() {
  local suffix=$1 keep=$2 filter=$3 limit=$4 t n
  for t in .carry/bin/cuda_*_test$suffix .carry/bin/gpu_*_test$suffix; do
    left $keep || break
    n=$(basename $t $suffix)
    timeout $limit $t --gtest_brief=1 --gtest_filter="$filter" > $R/$n.log 2>&1
    echo "$n rc=$? $(grep -E '^\[ +(PASSED|FAILED) +\]' $R/$n.log | tr '\n' ' ') ${SECONDS}s" | tee -a $R/suite.txt
  done
}

ladder() {
  local name=$1 bin=$2 batch=${LADDER_BATCH:-1,32}; shift 2
  timeout 120 .carry/bin/$bin bench --synthetic flash --layers 20 --batch $batch --context 4096 "$@" \
    --commit "${LADDER_COMMIT:-$bin}" \
    --command "$bin bench --synthetic flash --layers 20 --batch $batch --context 4096 $*" --out $R/$name.json 2>&1 |
    grep -E "decode B=.*graph" | sed "s/^/$name: /" | cut -c1-150
}

# pack_results: $R as one archive ($OUT/r.tar.xz; the device tool returns at most 8 files).
pack_results() {
  tar cJf $OUT/r.tar.xz -C $OUT r && rm -rf $R
}
