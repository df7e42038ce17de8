#!/usr/bin/env bash
# Draft heads for the default model, SmolLM2-135M-Instruct (30 layers, dim
# 576, vocab 49152; the Q4_1 GGUF scripts/setup.sh puts in
# ~/.cache/specline/models), for n in {2, 3, 5, 6} stages: a PPSD layer head
# at E = 30 / n and an SPD module (L_s = 1) per n, then the C++ engine's
# acceptance with each (eval_heads.py). The heads are not committed: each
# carries its own 49152 x 576 LM head (57 MB in BF16); this command makes
# them.
#
#   bash training/smollm2_heads.sh                     # a GPU: minutes
#   STEPS=2 TRAIN_SEQUENCES=4 EVAL_SEQUENCES=2 LENGTH=16 BATCH=2 NS="2" EVAL=0 \
#       bash training/smollm2_heads.sh                 # a smoke run on a CPU
#
# Settings (environment): MODEL, OUT (default ~/.cache/specline/smollm2-heads;
# a head that exists is not retrained), NS (stage counts), STEPS,
# TRAIN_SEQUENCES, EVAL_SEQUENCES, LENGTH, BATCH, DEVICE (default: cuda when
# PyTorch sees one), EVAL (0: skip eval_heads), BUILD (with specline and the
# serving binaries), PYTHON (a Python with torch; training/setup.sh).
# On 2 CPU cores the default settings take hours (the teacher is a 135 M
# model over 49 K-token distributions); on one H100, minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-$HOME/.cache/specline/smollm2-heads}
NS=${NS:-2 3 5 6}
STEPS=${STEPS:-1000}
TRAIN_SEQUENCES=${TRAIN_SEQUENCES:-512}
EVAL_SEQUENCES=${EVAL_SEQUENCES:-64}
LENGTH=${LENGTH:-128}
BATCH=${BATCH:-16}
EVAL=${EVAL:-1}
BUILD=${BUILD:-build}
[ -f "$MODEL" ] || { echo "no $MODEL: run bash scripts/setup.sh (it fetches the default model)" >&2; exit 1; }
PY=$(bash training/setup.sh | tail -1)
DEV=()
[ -n "${DEVICE:-}" ] && DEV=(--device "$DEVICE")
COMMON=(--model "$MODEL" --steps "$STEPS" --train-sequences "$TRAIN_SEQUENCES"
        --eval-sequences "$EVAL_SEQUENCES" --length "$LENGTH" --batch "$BATCH" --dtype BF16 "${DEV[@]}")
LAYERS=30
mkdir -p "$OUT"

for n in $NS; do
  E=$((LAYERS / n))
  ppsd=$OUT/ppsd-layer-e$E spd=$OUT/spd-n$n-l1
  if [ ! -f "$ppsd/head.json" ]; then
    echo "== PPSD layer head, E = $E (n = $n) ($(date -u +%H:%M:%S))"
    "$PY" training/train_ppsd.py "${COMMON[@]}" --method ppsd-layer --exit-layer "$E" \
      --out "$ppsd" --json "$ppsd.train.json" 2>&1 | tee "$ppsd.log"
  fi
  if [ ! -f "$spd/head.json" ]; then
    echo "== SPD module, n = $n, L_s = 1 ($(date -u +%H:%M:%S))"
    "$PY" training/train_spd.py "${COMMON[@]}" --n-stages "$n" --spd-layers 1 \
      --out "$spd" --json "$spd.train.json" 2>&1 | tee "$spd.log"
  fi
  if [ -x "$BUILD/specline" ]; then  # the C++ loader accepts them for this model
    for h in "$ppsd" "$spd"; do "$BUILD/specline" info --model "$MODEL" --head "$h" | tail -1; done
  fi
  if [ "$EVAL" = 1 ]; then
    for h in "$ppsd" "$spd"; do
      "$PY" training/eval_heads.py --bin-dir "$BUILD" --model "$MODEL" --head "$h" --stages "$n" \
        --bos-samples 24 --spec-policy always --json "$h.eval.json"
    done
  fi
done
