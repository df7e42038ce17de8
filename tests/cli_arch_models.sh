#!/usr/bin/env bash
# `specline make-random-model --arch phi3|qwen3moe|mixtral|olmoe` in GGUF and
# Hugging Face form, read back by `specline info`: the arch-specific config
# survives the round trip through the command line tools.
#   usage: cli_arch_models.sh path/to/specline
set -euo pipefail
specline=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(--dim 64 --hidden-dim 96 --layers 2 --heads 4 --kv-heads 2 --vocab 96 --seq-len 128)
check() {  # file, expected substring of `info`
  local out
  out=$("$specline" info --model "$1")
  if [[ "$out" != *"$2"* ]]; then
    echo "FAIL: info of $1 lacks '$2':" >&2
    echo "$out" >&2
    exit 1
  fi
}
for fmt in gguf hf; do
  "$specline" make-random-model --format $fmt --out "$tmp/phi3.$fmt" "${shape[@]}" --arch phi3 \
    --rope-dim 12 --longrope-original 32 --tied 2>/dev/null
  check "$tmp/phi3.$fmt" "rope dims 12, longrope (original 32, long factors"
  check "$tmp/phi3.$fmt" "tied embeddings"
  "$specline" make-random-model --format $fmt --out "$tmp/qwen3moe.$fmt" "${shape[@]}" \
    --arch qwen3moe --experts 6 --experts-used 3 --expert-hidden-dim 32 2>/dev/null
  check "$tmp/qwen3moe.$fmt" "arch qwen3moe"
  check "$tmp/qwen3moe.$fmt" "q/k norm, 6 experts of 32, top 3 renormalised"
  "$specline" make-random-model --format $fmt --out "$tmp/mixtral.$fmt" "${shape[@]}" \
    --arch mixtral --experts 4 2>/dev/null
  check "$tmp/mixtral.$fmt" "4 experts of 96, top 2 renormalised"
  "$specline" make-random-model --format $fmt --out "$tmp/olmoe.$fmt" "${shape[@]}" \
    --arch olmoe --experts 4 2>/dev/null
  check "$tmp/olmoe.$fmt" "q/k norm (whole projection), 4 experts of 96, top 2"
done
check "$tmp/mixtral.gguf" "arch llama"   # Mixtral is GGUF "llama" with experts
check "$tmp/mixtral.hf" "arch mixtral"
# An arch without experts refuses expert-only shapes it cannot hold.
if "$specline" make-random-model --out "$tmp/bad.gguf" "${shape[@]}" --arch olmoe --experts 4 \
     --experts-used 5 2>/dev/null; then
  echo "FAIL: 5 of 4 experts accepted" >&2
  exit 1
fi
echo "ok"
