#!/usr/bin/env bash
# Builds (via setup.sh) and runs the whole test suite, then the model-file
# fuzz test under AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${SPECLINE_BUILD_DIR:-build}
# Formats.WriteSamplesForPythonCheck writes the model-writer samples here
# (emptied first: nothing stale can pass for them); checked below.
WRITER_SAMPLES="$(cd "$BUILD_DIR" && pwd)/writer-samples"
rm -rf "$WRITER_SAMPLES"
SPECLINE_WRITER_SAMPLES="$WRITER_SAMPLES" ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"

# Training recipes (Python): model parity with the goldens, head export
# loaded by the C++ binary, seconds-long training runs.
TRAIN_PY=$(bash training/setup.sh | tail -1)
SPECLINE_BIN="$BUILD_DIR/specline" "$TRAIN_PY" -m unittest discover -s training/tests

# The model writers against independent readers (the gguf and safetensors
# packages, numpy; training/setup.sh's Python has them): fails on a mismatch
# or a missing sample.
"$TRAIN_PY" scripts/reference/check_writers.py "$WRITER_SAMPLES"

# Loaders must survive arbitrary bytes: run the fuzz test with ASan + UBSan.
ASAN_DIR=${BUILD_DIR}-asan
cmake -S . -B "$ASAN_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSPECLINE_SANITIZE=address,undefined -DSPECLINE_BUILD_BENCH=OFF -DSPECLINE_ENABLE_CUDA=OFF >/dev/null
cmake --build "$ASAN_DIR" -j"$(nproc)" --target loader_fuzz_test
UBSAN_OPTIONS=halt_on_error=1 "$ASAN_DIR/tests/loader_fuzz_test"
