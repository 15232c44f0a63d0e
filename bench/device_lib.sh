# device_lib.sh: helpers the device-call scripts source (bench/*_call.sh, fp8tc_ab.sh).
#   carry_env ARCHIVE...  unpacks .carry/pack.tar.xz (shared libraries) into .carry and each
#                         .carry/ARCHIVE.tar.xz (binaries) into .carry/bin, and sets the library
#                         path (the carried libraries, the machine's cuBLAS, the toolkit's).
#   ladder NAME BIN ARG...  the 20-layer synthetic ladder at B = 1 and 32, 4K context, of
#                         .carry/bin/BIN with ARGs: the graph step lines, prefixed with NAME, and the
#                         JSON in $R/NAME.json ($R: the call's output folder; $LADDER_COMMIT labels it).
carry_env() {
  mkdir -p .carry/bin && tar xJf .carry/pack.tar.xz -C .carry || return 1
  local a
  for a in "$@"; do tar xJf .carry/$a.tar.xz -C .carry/bin || return 1; done
  local c
  c=$(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.13' | head -1)
  export LD_LIBRARY_PATH=$PWD/.carry/lib:$(dirname "$c"):/usr/local/cuda/lib64
}

ladder() {
  local name=$1 bin=$2; shift 2
  timeout 120 .carry/bin/$bin bench --synthetic flash --layers 20 --batch 1,32 --context 4096 "$@" \
    --commit "${LADDER_COMMIT:-unknown}" \
    --command "$bin bench --synthetic flash --layers 20 --batch 1,32 --context 4096 $*" --out $R/$name.json 2>&1 |
    grep -E "decode B=.*graph" | sed "s/^/$name: /" | cut -c1-150
}
