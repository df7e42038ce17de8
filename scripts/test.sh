#!/usr/bin/env bash
# Builds (via setup.sh) and runs the whole test suite, then the model-file
# fuzz test under AddressSanitizer, then the serving path's suites under
# AddressSanitizer and ThreadSanitizer.
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

# The serving path under sanitizers (docs/testing.md "Sanitizers").
# ASan + UBSan: the engine, restart and gateway-input suites, the OpenAI
# request mapping, and the fault-injection and HTTP API suites with every
# process of the deployment built with ASan.
SERVING_BINARIES=(specline specline-stage specline-scheduler specline-gateway)
ASAN_SUITES=(scheduler_restart_test scheduler_engine_test gateway_input_test gateway_openai_test
  serving_fault_test serving_http_test kv_cache_test scheduler_prefix_cache_test)
cmake --build "$ASAN_DIR" -j"$(nproc)" --target "${SERVING_BINARIES[@]}" "${ASAN_SUITES[@]}"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir "$ASAN_DIR" --output-on-failure -j"$(nproc)" \
  -R '^(EngineRestart|EngineTest|Stages/EngineStagesTest|RequestParser|Utf8|Principals|ClusterSecret|ServingFault|OpenAiRequest|OpenAiResponse|ServingHttp|PagedKvCache|PagedKvCachePrefix|PrefixCacheAccounting|Policies/PrefixCacheEquality)\.'
# TSan: the engine's threads (driver, receiver, health, stage runners),
# restarts, the transport, the training-free drafter's matrix (learnt by
# the receiver while the driver drafts from it), and prefix caching. gRPC, Abseil and Protobuf are not instrumented:
# tests/tsan.supp says why their frames are suppressed.
TSAN_DIR=${BUILD_DIR}-tsan
TSAN_SUITES=(scheduler_restart_test scheduler_engine_test transport_test
  drafters_concurrency_test scheduler_recycle_test scheduler_prefix_cache_test)
cmake -S . -B "$TSAN_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSPECLINE_SANITIZE=thread -DSPECLINE_BUILD_BENCH=OFF -DSPECLINE_ENABLE_CUDA=OFF >/dev/null
cmake --build "$TSAN_DIR" -j"$(nproc)" --target "${TSAN_SUITES[@]}"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir "$TSAN_DIR" --output-on-failure -j"$(nproc)" \
  -R '^(EngineRestart|EngineTest|Stages/EngineStagesTest|Transport|Tcp|Inproc|DataPlaneAuth|Frame|DraftersConcurrency|Policies/TrainingFreeGreedy|TrainingFree|PrefixCacheAccounting|Policies/PrefixCacheEquality)'
