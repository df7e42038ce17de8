#!/usr/bin/env bash
# Gemma 3 270M (Q4_K_M GGUF) against llama.cpp on the same file (never in CI):
#   1. greedy agreement: the first 32 tokens of 5 raw prompts (a base model:
#      no chat template) from llama-server's /completion (temperature 0,
#      n_probs 2) and `specline generate --show-ids`; at a first difference,
#      llama.cpp's top-2 logit gap there (bench/peer_greedy.py);
#   2. decode and prefill tok/s at 2 threads: decode_bench against
#      llama-bench (-n 32; -p 128 / 512), as specline / llama.cpp ratios.
# Needs scripts/setup.sh (the model) and the llama.cpp peer
# (../shared/tools/llama-cpp-peer.sh builds it; minutes).
#
#   bash bench/gemma_vs_llamacpp.sh [--build build] [--out bench/results/gemma_vs_llamacpp.json]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/gemma_vs_llamacpp.json
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
shared=$(cd "$here/.." && pwd)/shared
peer=$(bash "$shared/tools/llama-cpp-peer.sh")
model=${SPECLINE_MODEL_CACHE:-$HOME/.cache/specline/models}/gemma-3-270m-q4_k_m.gguf
[ -f "$model" ] || { echo "run scripts/setup.sh first (no $model)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== greedy agreement (32 tokens, 5 prompts)" >&2
/usr/bin/python3 "$here/bench/peer_greedy.py" --specline "$build/specline" --peer "$peer" \
  --files "$model" --tokens 32 --json "$work/greedy.json" >&2

peer_tps() { "$peer/llama-bench" "$@" -r 3 -o json 2>/dev/null |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'; }
ours() { "$build/bench/decode_bench" "$@" --repeats 3 --json "$work/ours.json" >/dev/null 2>&1
  cat "$work/ours.json"; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['results'][0]['$1'])"; }

echo "== speed at 2 threads" >&2
p_dec=$(peer_tps -m "$model" -t 2 -p 0 -n 32)
s_dec=$(ours --model "$model" --threads 2 --tokens 32 --depth 0 | field decode_tokens_per_s)
echo "decode: llama.cpp $p_dec tok/s, specline $s_dec tok/s" >&2
rows=()
for n in 128 512; do
  p_pre=$(peer_tps -m "$model" -t 2 -p "$n" -n 0)
  s_pre=$(ours --model "$model" --threads 2 --tokens 8 --depth "$n" | field prefill_tokens_per_s)
  echo "prefill $n: llama.cpp $p_pre tok/s, specline $s_pre tok/s" >&2
  rows+=("{\"prompt\":$n,\"peer\":$p_pre,\"specline\":$s_pre}")
done
/usr/bin/python3 - "$work/greedy.json" "$out" "$p_dec" "$s_dec" "$(IFS=,; echo "${rows[*]}")" <<'PY'
import json, platform, sys, time
greedy, out, p_dec, s_dec, pre = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
prefill = json.loads("[" + pre + "]")
r = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
     "threads": 2, "greedy": json.load(open(greedy)),
     "decode": {"peer": p_dec, "specline": s_dec, "ratio": s_dec / p_dec},
     "prefill": [dict(p, ratio=p["specline"] / p["peer"]) for p in prefill]}
json.dump(r, open(out, "w"), indent=1)
print(f"decode specline/llama.cpp = {s_dec / p_dec:.2f} ({s_dec:.1f} / {p_dec:.1f} tok/s)")
for p in r["prefill"]:
    print(f"prefill {p['prompt']}: specline/llama.cpp = {p['ratio']:.2f} "
          f"({p['specline']:.1f} / {p['peer']:.1f} tok/s)")
PY
