#!/usr/bin/env bash
# Everything the CUDA backend must show on a GPU machine, in one go
# (docs/cuda.md). Two halves, because the GPU machine has CUDA and PyTorch
# but no gRPC/Protobuf development packages:
#
#   bash scripts/gpu_check.sh pack [BUILD_DIR]
#       here (no GPU needed): builds the CUDA tests, benchmarks and serving
#       binaries, and gathers them with the shared libraries they need (not
#       the CUDA toolkit's, which the GPU machine has) and the small test
#       model into one archive, .gpu-carry/carry.tar.xz (git-ignored; name
#       .gpu-carry in the device tool's carry list);
#   bash scripts/gpu_check.sh run [STEPS]
#       on the GPU machine, from the repository root with .gpu-carry/ beside
#       it: STEPS is a comma list of tests, sanitizer, bench, serve, pipeline,
#       torch (default: tests,sanitizer,bench,serve,pipeline). Logs and JSON go
#       to ./gpu-results (and gpu-results.tgz under $OUT when the device
#       tool runs it); a summary table is printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry      # what travels: one compressed archive (the carry limit is 64 MiB)
STAGE=.gpu-carry-tree # where pack gathers it, and run unpacks it

pack() {
  local build=${1:-build-gpu}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  local targets=(cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test
                 cuda_bench spec_bench transport_bench specline specline-stage specline-scheduler
                 specline-gateway)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
  rm -rf "$STAGE" "$CARRY"
  mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/models" "$CARRY"
  for t in "${targets[@]}"; do
    local f
    f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "gpu_check: $t was not built" >&2; exit 1; }
    # Benchmarks find the serving binaries one folder up, as in a build tree.
    local dest=$STAGE/bin
    [[ $f == */bench/* ]] && dest=$STAGE/bin/bench && mkdir -p "$dest"
    cp "$f" "$dest/"
    strip --strip-debug "$dest/$t"
  done
  # Shared libraries outside glibc and the CUDA driver/toolkit (those the GPU
  # machine has, and its own versions must be used).
  for b in "$STAGE"/bin/* "$STAGE"/bin/bench/*; do
    [ -f "$b" ] || continue
    ldd "$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcublas[^/]*|libcudart|libnccl|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
  strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null || true
  local shared=${SPECLINE_SHARED_MODELS:-../shared/models}
  if [ -d "$shared/stories260K" ]; then
    cp -r "$shared/stories260K" "$STAGE/models/"
  fi
  tar -C "$STAGE" -cf - . | xz -T0 -6 > "$CARRY/carry.tar.xz"
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  for d in "$CARRY" "$STAGE"; do
    grep -qx "/$d/" "$exclude" 2>/dev/null || echo "/$d/" >> "$exclude"
  done
  du -sh "$STAGE" "$CARRY"
}

# Where the GPU machine keeps cuBLAS and NCCL: the toolkit, or the pip wheels
# that came with PyTorch.
cuda_library_path() {
  local dirs=/usr/local/cuda/lib64
  local site
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
  if [ -n "$site" ]; then
    for d in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do
      [ -d "$d" ] && dirs="$dirs:$d"
    done
  fi
  echo "$dirs"
}

run() {
  local steps=${1:-tests,sanitizer,bench,serve,pipeline}
  # Logs and JSON go to gpu-results/, packed into one archive under $OUT
  # (the device tool brings back at most 8 files).
  local out=gpu-results
  rm -rf "$out"
  mkdir -p "$out"
  if [ -f "$CARRY/carry.tar.xz" ]; then
    rm -rf "$STAGE" && mkdir -p "$STAGE" && xz -dc "$CARRY/carry.tar.xz" | tar -C "$STAGE" -xf -
  fi
  [ -d "$STAGE/bin" ] || { echo "gpu_check: nothing packed; run 'pack' first" >&2; exit 1; }
  export LD_LIBRARY_PATH="$PWD/$STAGE/lib:$(cuda_library_path):${LD_LIBRARY_PATH:-}"
  export SPECLINE_SHARED_MODELS="$PWD/$STAGE/models"
  export PATH="$PWD/$STAGE/bin:$PWD/$STAGE/bin/bench:$PATH"
  local summary="$out/summary.txt"
  : > "$summary"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
  date -u +%FT%TZ >> "$out/gpu.txt"

  if [[ $steps == *tests* ]]; then
    for t in cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test; do
      if "$t" --gtest_brief=1 > "$out/$t.log" 2>&1; then r=pass; else r=FAIL; fi
      echo "test $t: $r ($(grep -cE '^\[  (FAILED|SKIPPED) ' "$out/$t.log" || true) failed/skipped lines)" | tee -a "$summary"
    done
  fi
  if [[ $steps == *sanitizer* ]]; then
    # memcheck over a representative subset (the full suites under the
    # sanitizer take tens of minutes).
    for spec in "cuda_kernels_test:*" "cuda_attention_test:*" \
                "cuda_runtime_test:*llama_gqa_bf16*:*qwen3*bf16*:*GraphReplay*:*DeviceHandOff*:*BadBatches*"; do
      local t=${spec%%:*} filter=${spec#*:}
      if timeout "${SANITIZER_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 "$t" --gtest_filter="$filter" \
           > "$out/memcheck-$t.log" 2>&1; then r=clean; else r="ERRORS (exit $?)"; fi
      echo "memcheck $t [$filter]: $r; $(grep -E 'ERROR SUMMARY' "$out/memcheck-$t.log" | tail -1)" | tee -a "$summary"
    done
  fi
  if [[ $steps == *bench* ]]; then
    cuda_bench --json "$out/cuda_bench.json" 2>&1 | tee "$out/cuda_bench.log" | tail -8 >> "$summary" || true
  fi
  if [[ $steps == *serve* ]]; then
    # The whole stack on the GPU: 2 stage processes + scheduler head on cuda.
    local m=$STAGE/models/stories260K
    timeout 90 specline serve --model "$m/stories260K.bin" --tokenizer "$m/tok512.bin" \
      --stages 2 --device cuda --port 0 --demo-prompt "Once upon a time" --max-tokens 64 \
      > "$out/serve.log" 2>&1 && r=ok || r="FAILED ($?)"
    echo "serve --device cuda: $r; $(tail -1 "$out/serve.log")" | tee -a "$summary"
  fi
  if [[ $steps == *pipeline* ]]; then
    # n stage processes on the one GPU (each its own context and stream) with
    # the oracle drafter; per-stage and per-hop times come from cuda_bench.
    for n in ${PIPELINE_STAGES:-2 4}; do
      timeout 200 spec_bench --device cuda:0 --shape tinyllama --stages "$n" --alphas 0,0.5,0.8,1 \
        --max-tokens 96 --repeats 2 --no-auto --json "$out/pipeline-n$n.json" \
        > "$out/pipeline-n$n.log" 2>&1 || true
      grep -E '^(SPD|PPSD|pol|mismatches)' "$out/pipeline-n$n.log" | sed "s/^/n=$n /" >> "$summary"
    done
  fi
  if [[ $steps == *torch* ]]; then
    python3 bench/torch_peer.py --compile --json "$out/torch_peer.json" > "$out/torch_peer.log" 2>&1 || true
    tail -10 "$out/torch_peer.log" >> "$summary"
  fi
  if [ -n "${OUT:-}" ]; then tar -C "$out" -czf "$OUT/gpu-results.tgz" .; fi
  echo "==== summary"
  cat "$summary"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
