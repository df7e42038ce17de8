#!/usr/bin/env bash
# One command from a text corpus to wall-clock figures for trained heads on a
# model larger than stories260K:
#   1. train a Llama-shaped base model on the corpus (train_base.py),
#   2. train its heads at n = 2 stages: PPSD norm and layer heads at
#      E = LAYERS / 2, and an SPD module (n = 2, L_s = 1),
#   3. the C++ engine's acceptance with each head (eval_heads.py, from BOS),
#   4. the wall-clock speedup over autoregressive decoding (bench/head_bench).
#
#   PYTHON=python3 bash training/larger_model.sh  # CPU scale: ~45 min on 2 cores with torch 2.x
#   DIM=512 LAYERS=16 STEPS=20000 MAX_CORPUS_BYTES=60000000 HEAD_STEPS=3000 \
#       bash training/larger_model.sh             # a GPU's worth
#
# Settings (environment): CORPUS (glob; default the Python standard
# library's sources), TOKENIZER (llama2.c tokenizer.bin), DIM, LAYERS,
# STEPS, MAX_CORPUS_BYTES, HEAD_STEPS, SPD_STEPS, OUT (default
# ~/.cache/specline/code-base; a finished step is not redone), BUILD (a
# build with specline, the serving binaries and bench/head_bench), THREADS.
# Every step's log and JSON go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

PYV=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
CORPUS=${CORPUS:-/usr/lib/python${PYV}/**/*.py}
TOKENIZER=${TOKENIZER:-../shared/models/stories260K/tok512.bin}
DIM=${DIM:-192}
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-1500}
MAX_CORPUS_BYTES=${MAX_CORPUS_BYTES:-6000000}
HEAD_STEPS=${HEAD_STEPS:-1000}
SPD_STEPS=${SPD_STEPS:-500}
OUT=${OUT:-$HOME/.cache/specline/code-base}
BUILD=${BUILD:-build}
THREADS=${THREADS:-$(nproc)}
E=$((LAYERS / 2))

PY=$(bash training/setup.sh | tail -1)
for b in specline specline-stage specline-scheduler bench/head_bench; do
  [ -x "$BUILD/$b" ] || { echo "no $BUILD/$b: build first (bash scripts/setup.sh)" >&2; exit 1; }
done
mkdir -p "$OUT/heads"
step() { echo "== $1 ($(date -u +%H:%M:%S))"; }

if [ ! -f "$OUT/model.bin" ]; then
  step "base model: dim $DIM, $LAYERS layers, $STEPS steps on $CORPUS"
  "$PY" training/train_base.py --corpus "$CORPUS" --max-corpus-bytes "$MAX_CORPUS_BYTES" \
    --tokenizer "$TOKENIZER" --dim "$DIM" --layers "$LAYERS" --steps "$STEPS" \
    --threads "$THREADS" --out "$OUT/model.bin" 2>&1 | tee "$OUT/train_base.log"
fi
M=$OUT/model.bin

for method in ppsd-norm ppsd-layer; do
  if [ ! -f "$OUT/heads/$method-e$E/head.json" ]; then
    step "$method head at E = $E"
    "$PY" training/train_ppsd.py --model "$M" --method "$method" --exit-layer "$E" \
      --steps "$HEAD_STEPS" --threads "$THREADS" --out "$OUT/heads/$method-e$E" \
      --json "$OUT/heads/$method-e$E.train.json" 2>&1 | tee "$OUT/heads/$method-e$E.log"
  fi
done
if [ ! -f "$OUT/heads/spd-n2-l1/head.json" ]; then
  step "SPD module n = 2, L_s = 1"
  "$PY" training/train_spd.py --model "$M" --n-stages 2 --spd-layers 1 --steps "$SPD_STEPS" \
    --threads "$THREADS" --out "$OUT/heads/spd-n2-l1" \
    --json "$OUT/heads/spd-n2-l1.train.json" 2>&1 | tee "$OUT/heads/spd-n2-l1.log"
fi

HEADS=("$OUT/heads/ppsd-norm-e$E" "$OUT/heads/ppsd-layer-e$E" "$OUT/heads/spd-n2-l1")
step "C++ acceptance (eval_heads.py, 24 sequences from BOS)"
for h in "${HEADS[@]}"; do
  "$PY" training/eval_heads.py --bin-dir "$BUILD" --model "$M" --head "$h" --stages 2 \
    --bos-samples 24 --spec-policy always --json "$h.eval.json"
done
step "wall clock (bench/head_bench)"
HB=()
for h in "${HEADS[@]}"; do HB+=(--head "$h"); done
"$BUILD/bench/head_bench" --model "$M" "${HB[@]}" --stages 2 --requests 16 \
  --json "$OUT/head_bench.json"
