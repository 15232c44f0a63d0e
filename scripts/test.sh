#!/usr/bin/env bash
# test.sh: runs every test that can run on this machine: the ctest suite of build/ (GPU tests skip
# without a GPU), then the loader and CPU-reference tests again under ASan + UBSan (build-san/).
# `./scripts/test.sh --quick` skips the sanitizer pass (for iterating; CI runs everything).
set -euo pipefail
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake --build build
# Tests run in parallel and several use OpenMP: idle OpenMP threads must sleep, not spin.
OMP_WAIT_POLICY=passive ctest --test-dir build --output-on-failure -j "$JOBS"

if [[ $quick == 0 ]]; then
  cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_SANITIZE=ON -DDSV4_CUDA=OFF
  cmake --build build-san --target dsv4_san_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 OMP_WAIT_POLICY=passive \
    ctest --test-dir build-san --output-on-failure -j "$JOBS" -L san
fi

for t in tests/python/test_*.py; do
  [[ -e "$t" ]] || continue
  echo "python: $t"
  python3 "$t"
done
echo "test: all passed"
