#!/usr/bin/env bash
# Phi-3 and the mixture-of-experts archs against llama.cpp on the same GGUF
# files (outside ctest; builds nothing but the random files):
#   - random-weight Q8_0 (ARCH_BENCH_DTYPE) models of phi3 (Phi-4-mini-like: partial rotary
#     0.75, LongRoPE, tied), qwen3moe, mixtral (GGUF "llama" with experts)
#     and olmoe, SmolLM2-135M's shape (dim 576, 8 layers, 9/3 heads), with
#     SmolLM2's vocabulary copied in so llama.cpp loads them;
#   - greedy agreement: 32 tokens from 5 prompts (bench/peer_greedy.py: where
#     the two first differ, and llama.cpp's top-2 logit gap there);
#   - prefill (128 tokens) and decode (32 tokens after them) tok/s at 2
#     threads: decode_bench --depth 128 against llama-bench -p 128 / -n 32
#     -d 128, as specline / llama.cpp ratios.
#
#   bash bench/arch_vs_llamacpp.sh [--build build] [--out bench/results/arch_vs_llamacpp.json]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/arch_vs_llamacpp.json
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
peer=${LLAMA_CPP_BIN:-$HOME/.cache/specline/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin}
[ -x "$peer/llama-bench" ] || peer=$(bash "$here/../shared/tools/llama-cpp-peer.sh")
vocab=$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$vocab" ] || { echo "run scripts/setup.sh first (no $vocab)" >&2; exit 1; }
work=${ARCH_BENCH_DIR:-$HOME/.cache/specline/arch-bench}
mkdir -p "$work" "$(dirname "$out")"

dtype=${ARCH_BENCH_DTYPE:-Q8_0}
layers=${ARCH_BENCH_LAYERS:-8}
common=(--dim 576 --layers "$layers" --heads 9 --seq-len 4096 --dtype "$dtype" --seed 7
        --vocab-from "$vocab")
# llama.cpp's olmoe graph sizes k_norm as n_embd: multi-head attention only
# (as OLMoE itself); the others take GQA 9/3.
declare -A extra=(
  [phi3]="--kv-heads 3 --arch phi3 --hidden-dim 1536 --rope-dim 48 --longrope-original 4096 --tied"
  [qwen3moe]="--kv-heads 3 --arch qwen3moe --hidden-dim 1536 --experts 8 --experts-used 2 --expert-hidden-dim 512"
  [mixtral]="--kv-heads 3 --arch mixtral --experts 8 --experts-used 2 --expert-hidden-dim 768"
  [olmoe]="--kv-heads 9 --arch olmoe --experts 8 --experts-used 2 --expert-hidden-dim 768"
)
files=()
for arch in phi3 qwen3moe mixtral olmoe; do
  f=$work/$arch-random-$dtype-L$layers.gguf
  # shellcheck disable=SC2086
  [ -f "$f" ] || "$build/specline" make-random-model --out "$f" "${common[@]}" ${extra[$arch]} >&2
  files+=("$f")
done

/usr/bin/python3 "$here/bench/peer_greedy.py" --specline "$build/specline" --peer "$peer" \
  --files "${files[@]}" --json "$work/greedy.json"

peer_tps() { "$peer/llama-bench" "$@" -t 2 -r 3 -o json 2>/dev/null |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'; }
rows=()
printf '%-28s %12s %12s %7s %12s %12s %7s\n' file "prefill ours" "prefill peer" ratio \
  "decode ours" "decode peer" ratio
for f in "${files[@]}"; do
  "$build/bench/decode_bench" --model "$f" --threads 2 --tokens 32 --depth 128 --repeats 3 \
    --json "$work/ours.json" >/dev/null 2>&1
  read -r op od < <(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"])' "$work/ours.json")
  pp=$(peer_tps -m "$f" -p 128 -n 0)
  pd=$(peer_tps -m "$f" -p 0 -n 32 -d 128)
  printf '%-28s %12.1f %12.1f %7.2f %12.1f %12.1f %7.2f\n' "$(basename "$f")" "$op" "$pp" \
    "$(echo "$op / $pp" | bc -l)" "$od" "$pd" "$(echo "$od / $pd" | bc -l)"
  rows+=("{\"file\":\"$(basename "$f")\",\"threads\":2,\"prefill_tokens\":128,\"decode_tokens\":32,\"specline_prefill_tps\":$op,\"peer_prefill_tps\":$pp,\"specline_decode_tps\":$od,\"peer_decode_tps\":$pd}")
done
/usr/bin/python3 - "$out" "$work/greedy.json" "${rows[@]}" <<'PY'
import json, sys, time, platform
out, greedy = sys.argv[1], json.load(open(sys.argv[2]))
speed = [json.loads(r) for r in sys.argv[3:]]
json.dump({"bench": "arch_vs_llamacpp", "date": time.strftime("%Y-%m-%d"),
           "machine": platform.processor() or platform.machine(),
           "greedy": greedy["rows"], "speed": speed}, open(out, "w"), indent=1)
print("wrote", out)
PY
