#!/usr/bin/env bash
# kernel_sizes.sh: the machine-code size of every CUDA kernel of a build, largest first. Code that
# one warp runs once per call costs its instruction fetch (the MoE router's unrolled selection
# tail: ~40 KB, 5-8 us per decode layer on the H200, bench/results/NOTES.md "MoE decode
# timeline"), so this is where to look for such tails. Recompiles each CUDA object of the build
# to a cubin for one architecture (default sm_90) in a temporary folder; the build is untouched.
# Usage: bash bench/kernel_sizes.sh BUILD_DIR [ARCH] [N]   (a ninja build dir; N rows, default 40)
set -euo pipefail
BUILD=${1:?usage: bash bench/kernel_sizes.sh BUILD_DIR [ARCH] [N]}
ARCH=${2:-90}
N=${3:-40}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$BUILD"
for obj in $(ninja -t targets all | grep -oE '^[^:]*\.cu\.o' | sort -u); do
  cmd=$(ninja -t commands "$obj" | tail -1)
  # One architecture, cubin out: drop every -gencode/--generate-code and ask for sm_$ARCH.
  cmd=$(echo "$cmd" | sed -E "s/ (--generate-code|-gencode)[= ][^ ]+//g; s| -o [^ ]+| -o $TMP/k.cubin|; s/ -c / -cubin -arch=sm_$ARCH /")
  # Files built only for the architecture-specific target (the wgmma kernel: sm_90a) get that.
  eval "$cmd" > /dev/null 2>&1 || eval "${cmd/-arch=sm_$ARCH /-arch=sm_${ARCH}a }" > /dev/null 2>&1 ||
    { echo "skipped (does not build for sm_$ARCH or sm_${ARCH}a): $obj" >&2; continue; }
  readelf -S -W "$TMP/k.cubin" 2>/dev/null | grep -oE '\] \.text\.[^ ]+ +PROGBITS +[0-9a-f]+ +[0-9a-f]+ +[0-9a-f]+' |
    awk '{print $2, $6}' | while read -r name size; do
      echo "$((16#$size)) $(echo "${name#.text.}" | c++filt | cut -c1-150)"
    done || true  # a file without kernels
done | sort -rn | head -n "$N" | awk '{printf "%8.1f KB  %s\n", $1 / 1024, substr($0, index($0, " ") + 1)}'
