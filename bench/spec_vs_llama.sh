#!/usr/bin/env bash
# specline's speculation against llama-server's n-gram speculation (issue
# 29's proof), side by side on the same GGUF file (the default model), the
# same threads and the same prompts; never in CI. Measures, per prompt class
# of bench/prompts/spec_classes.jsonl (grounded: the reply copies the
# input; open: it does not):
#   - median decode tokens/s of greedy streamed chat over the OpenAI API
#     ((completion tokens - 1) / (last content chunk - first), client clock);
#   - each method against its own server's plain decoding (specline `ar` at
#     the same stage count; llama-server without --spec-type), and
#     specline's best against llama-server's best;
#   - how many replies equal that plain reply (greedy: lossless keeps all);
#   - accepted / drafted drafts and tokens per verification (specline: its
#     scheduler's /metrics deltas per request; llama-server: its timings).
# Servers run one at a time: llama-server (-t 2) plain and with each n-gram
# --spec-type (a type that fails to start is reported as skipped), then
# specline serve at each stage count (1: --threads 2; 2: --threads 1 each).
# Every server answers `rounds` x every prompt; within a round its
# configurations (specline's policies) take turns per prompt.
# bench/spec_vs_llama.py drives the requests and writes the table and
# bench/results/spec_vs_llama.json.
#
#   bash bench/spec_vs_llama.sh [--build build] [--stages '1 2'] [--rounds 3]
#     [--max-tokens 192] [--limit-prompts N (per class; 0 = all)]
#     [--llama-types 'plain ngram-mod ngram-simple ngram-map-k ngram-map-k4v ngram-cache']
#     [--specline-configs 'ar;recycle'] [--serve-args '...'] [--prompts PATH] [--out PATH]
#     [--chat-template FILE (both servers; for a GGUF without one, e.g. Gemma 3 270M)]
# --specline-configs and --serve-args apply to every stage count of the
# run; left out, 1 stage runs 'ar;recycle' and 2 stages 'ar;recycle;spd'
# with --spd-drafter recycle. `default` as a config sends no policy (the
# server's --default-policy). --stages '' or --llama-types '' leaves that
# server out. Run it on a quiet machine (docs/benchmarks.md, issue 29).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/spec_vs_llama.json
prompts=$here/bench/prompts/spec_classes.jsonl
stages_list="1 2"
rounds=3
max_tokens=192
limit=0
llama_types="plain ngram-mod ngram-simple ngram-map-k ngram-map-k4v ngram-cache"
configs=""
serve_args=""
template=()
llama_template=()
serve_args_set=0
command="bash bench/spec_vs_llama.sh $*"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --stages) stages_list=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --limit-prompts) limit=$2; shift 2 ;;
    --llama-types) llama_types=$2; shift 2 ;;
    --specline-configs) configs=$2; shift 2 ;;
    --serve-args) serve_args=$2; serve_args_set=1; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --chat-template) template=(--chat-template "$2"); llama_template=(--chat-template-file "$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$here/bench/http_servers.sh"
peer_and_default_model
[ -x "$build/specline" ] || { echo "no $build/specline (build it, or pass --build)" >&2; exit 1; }
work=$(mktemp -d)
mkdir -p "$(dirname "$out")"
drive=(/usr/bin/python3 "$here/bench/spec_vs_llama.py")
common=(--prompts "$prompts" --limit-prompts "$limit" --rounds "$rounds" --max-tokens "$max_tokens")
runs=()

for type in $llama_types; do
  spec=()
  [ "$type" = plain ] || spec=(--spec-type "$type")
  port=$(free_port)
  log=$work/llama-$type.log
  "$peer/llama-server" -m "$model" -t 2 -tb 2 -np 1 --port "$port" --no-warmup "${spec[@]}" "${llama_template[@]}" > "$log" 2>&1 &
  server_pid=$!
  if ! try_ready "llama-server $type" "$port" "$log"; then
    reason=$( (grep -m1 -i 'error\|fail\|invalid' "$log" || tail -1 "$log") | cut -c1-160)
    /usr/bin/python3 -c 'import json,sys; json.dump({"server": "llama-server", "stages": None, "config": sys.argv[1],
      "skipped": "did not start: " + sys.argv[2]}, open(sys.argv[3], "w"))' "$type" "$reason" "$work/llama-$type.json"
    runs+=("$work/llama-$type.json")
    continue
  fi
  "${drive[@]}" run --server llama-server --label "llama-server $type" --port "$port" --configs "$type" \
    "${common[@]}" --json "$work/llama-$type.json"
  runs+=("$work/llama-$type.json")
  stop_server
done

for stages in $stages_list; do
  threads=$((2 / stages)); [ "$threads" -ge 1 ] || threads=1
  if [ -n "$configs" ]; then c=$configs; elif [ "$stages" -gt 1 ]; then c="ar;recycle;spd"; else c="ar;recycle"; fi
  if [ "$serve_args_set" = 1 ]; then a=$serve_args; elif [[ $c == *spd* ]]; then a="--spd-drafter recycle"; else a=""; fi
  port=$(free_port)
  log=$work/specline-$stages.log
  # shellcheck disable=SC2086  # the extra flags split into words
  "$build/specline" serve --model "$model" --stages "$stages" --threads "$threads" --http-port "$port" --port 0 \
    --port-file "$work/ports-$stages.json" "${template[@]}" $a > "$log" 2>&1 &
  server_pid=$!
  wait_ready "specline $stages stages" "$port" "$log"
  "${drive[@]}" run --server specline --label "specline $stages stages" --stages "$stages" --port "$port" \
    --port-file "$work/ports-$stages.json" --configs "$c" "${common[@]}" --json "$work/specline-$stages.json"
  runs+=("$work/specline-$stages.json")
  stop_server
done

settings=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' \
  rounds "$rounds" max_tokens "$max_tokens" limit_prompts_per_class "$limit" prompts "$prompts" \
  llama_server_flags "-t 2 -tb 2 -np 1 --no-warmup" serve_args "${serve_args:-default}")
"${drive[@]}" report "${runs[@]}" --out "$out" --command "$command" --model "$model" \
  --llama-cpp "$("$peer/llama-server" --version 2>&1 | grep -m1 version || true)" --build "$build" \
  --settings "$settings"
echo "logs and per-server JSON in $work" >&2
