#!/usr/bin/env bash
# Speculation under concurrent load (issue 29): the default policy (recycle)
# against plain decoding (ar) with 1, 4 and 8 streams sharing the batch, on
# the default model. Each cell is a fresh `specline serve --default-policy
# CONFIG` (nothing remembered from another cell) answering every prompt of
# bench/prompts/spec_classes.jsonl once; rounds alternate the order of the
# configurations. bench/spec_concurrency.py drives and reports; results in
# bench/results/spec_concurrency.json. Never in CI; run it on a quiet machine.
#
#   bash bench/spec_concurrency.sh [--build build] [--streams '1 4 8'] [--stages 1]
#     [--rounds 2] [--max-tokens 128] [--configs 'ar recycle'] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/spec_concurrency.json
prompts=$here/bench/prompts/spec_classes.jsonl
streams_list="1 4 8"
stages=1
rounds=2
max_tokens=128
configs="ar recycle"
command="bash bench/spec_concurrency.sh $*"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --streams) streams_list=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$here/bench/http_servers.sh"
peer_and_default_model
[ -x "$build/specline" ] || { echo "no $build/specline (build it, or pass --build)" >&2; exit 1; }
work=$(mktemp -d)
mkdir -p "$(dirname "$out")"
threads=$((2 / stages)); [ "$threads" -ge 1 ] || threads=1
cells=()
for round in $(seq 1 "$rounds"); do
  order=$configs
  [ $((round % 2)) = 0 ] && order=$(echo "$configs" | tr ' ' '\n' | tac | tr '\n' ' ')
  for streams in $streams_list; do
    for config in $order; do
      port=$(free_port)
      log=$work/serve-$config-$streams-$round.log
      "$build/specline" serve --model "$model" --stages "$stages" --threads "$threads" --http-port "$port" \
        --port 0 --default-policy "$config" > "$log" 2>&1 &
      server_pid=$!
      wait_ready "specline $config" "$port" "$log"
      /usr/bin/python3 "$here/bench/spec_concurrency.py" run --port "$port" --config "$config" \
        --streams "$streams" --stages "$stages" --prompts "$prompts" --max-tokens "$max_tokens" \
        --json "$work/cell-$config-$streams-$round.json"
      cells+=("$work/cell-$config-$streams-$round.json")
      stop_server
    done
  done
done
/usr/bin/python3 "$here/bench/spec_concurrency.py" report "${cells[@]}" --out "$out" \
  --command "$command" --model "$model"
echo "logs and cells in $work" >&2
