#!/usr/bin/env bash
# specline's CPU engine side by side with llama.cpp (the peer a CPU user
# would pick), on the same GGUF files and thread counts, in one run:
#   1. decode tok/s for every file at 1 and 2 threads (llama-bench -n 32
#      against decode_bench --tokens 32), interleaved, ROUNDS rounds each;
#   2. on the default model at 2 threads: prefill of 128 / 1024 / 4096
#      tokens and decode at depth 0 / 1024 / 4096 (llama-bench -p and -d
#      against decode_bench --depth);
#   3. the verification curve on the default model at 2 threads: one call of
#      m = 1, 2, 4, 8, 16 rows after 64 tokens (llama-bench -p m -n 0 -d 64
#      against verify_curve_bench), as time per call and its ratio to m = 1;
#   4. the machine's streaming-read bandwidth at 1 and 2 threads (the
#      ceiling for decode), from matmul_bench.
# Prints a table of specline / llama.cpp ratios and writes JSON. Builds the
# peer with ../shared/tools/llama-cpp-peer.sh (minutes; never in CI).
#
#   bash bench/peer_decode.sh [--build build] [--out bench/results/peer_decode.json]
#        [--rounds 2] [--quick]      (--quick: decode rows only, 1 round)
#        [--baseline DIR]            (decode rows also with DIR/bench/decode_bench,
#                                     e.g. a build of the previous commit, run right
#                                     after the current one: a before/after column)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/peer_decode.json
rounds=2
quick=0
baseline=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --quick) quick=1; rounds=1; shift ;;
    --baseline) baseline=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
shared=$(cd "$here/.." && pwd)/shared
peer=$(bash "$shared/tools/llama-cpp-peer.sh")
work=${PEER_DECODE_DIR:-$HOME/.cache/specline/peer-decode}
mkdir -p "$work" "$(dirname "$out")"
default_model=$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$default_model" ] || { echo "run scripts/setup.sh first (no $default_model)" >&2; exit 1; }

# The files: a random stories110M-shaped F32 model with the Llama 2
# vocabulary (llama.cpp refuses a GGUF without one), its llama-quantize
# outputs, and the default model as shipped and requantized to Q4_K_M.
f32=$work/stories110m-random-F32.gguf
if [ ! -f "$f32" ]; then
  "$build/specline" make-random-model --out "$f32" --dtype F32 --dim 768 --hidden-dim 2048 \
    --layers 12 --heads 12 --vocab 32000 --seed 1 \
    --vocab-from "$shared/models/llama2-tokenizer/ggml-vocab-llama-spm.gguf" >&2
fi
files=("$f32")
for t in F16 Q8_0 Q4_0 Q4_K_M; do
  q=$work/stories110m-random-$t.gguf
  [ -f "$q" ] || "$peer/llama-quantize" "$f32" "$q" "$t" >/dev/null 2>&1
  files+=("$q")
done
smol_k=$work/SmolLM2-135M-Instruct.Q4_K_M.gguf
[ -f "$smol_k" ] || "$peer/llama-quantize" --allow-requantize "$default_model" "$smol_k" Q4_K_M \
  >/dev/null 2>&1
files+=("$default_model" "$smol_k")

results=$work/rows.jsonl
: > "$results"
# llama-bench's mean tok/s of its only test (one -p or -n value per call).
peer_tps() { "$peer/llama-bench" "$@" -r 3 -o json 2>/dev/null |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'; }
ours() { "$build/bench/decode_bench" "$@" --repeats 3 --json "$work/ours.json" >/dev/null 2>&1
  cat "$work/ours.json"; }
base() { "$baseline/bench/decode_bench" "$@" --repeats 3 --json "$work/base.json" >/dev/null 2>&1
  cat "$work/base.json"; }
row() { echo "{\"kind\":\"$1\",\"file\":\"$(basename "$2")\",\"threads\":$3,\"size\":$4,\"round\":$5,\"peer\":$6,\"specline\":$7}" >> "$results"; }

for r in $(seq 1 "$rounds"); do
  for f in "${files[@]}"; do
    for t in 1 2; do
      p=$(peer_tps -m "$f" -t "$t" -p 0 -n 32)
      s=$(ours --model "$f" --threads "$t" --tokens 32 --depth 0 |
          /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["decode_tokens_per_s"])')
      row decode "$f" "$t" 0 "$r" "$p" "$s"
      echo "decode $(basename "$f") t=$t: llama.cpp $p, specline $s" >&2
      if [ -n "$baseline" ]; then
        b=$(base --model "$f" --threads "$t" --tokens 32 --depth 0 |
            /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["decode_tokens_per_s"])')
        row decode_baseline "$f" "$t" 0 "$r" "$p" "$b"
        echo "  baseline specline $b" >&2
      fi
    done
  done
  [ "$quick" = 1 ] && continue
  for n in 128 1024 4096; do
    p=$(peer_tps -m "$default_model" -t 2 -p "$n" -n 0)
    p_d=$(peer_tps -m "$default_model" -t 2 -p 0 -n 32 -d "$n")
    j=$(ours --model "$default_model" --threads 2 --tokens 32 --depth "$n")
    s=$(echo "$j" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["prefill_tokens_per_s"])')
    s_d=$(echo "$j" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["decode_tokens_per_s"])')
    row prefill "$default_model" 2 "$n" "$r" "$p" "$s"
    row decode_at_depth "$default_model" 2 "$n" "$r" "$p_d" "$s_d"
    echo "depth/prefill $n: prefill $p vs $s, decode $p_d vs $s_d" >&2
  done
done

if [ "$quick" = 0 ]; then
  "$build/bench/verify_curve_bench" --model "$default_model" --threads 2 --depth 64 \
    --json "$work/verify_curve.json" >&2
  for m in 1 2 4 8 16; do
    p=$(peer_tps -m "$default_model" -t 2 -p "$m" -n 0 -d 64)
    s=$(/usr/bin/python3 -c "import json; r=[x for x in json.load(open('$work/verify_curve.json'))['results'] if x['rows']==$m][0]; print($m*1000/r['ms_per_call'])")
    row verify_rows "$default_model" 2 "$m" 1 "$p" "$s"   # rows/s: m / time per call
  done
fi

"$build/bench/matmul_bench" --quick --threads 2 --json "$work/matmul.json" >/dev/null
/usr/bin/python3 "$here/bench/peer_decode_report.py" "$results" "$work/matmul.json" "$out" "$peer"
