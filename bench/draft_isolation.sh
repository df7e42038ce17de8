#!/usr/bin/env bash
# Issue 38's timing channel, before and after, side by side in one run: does
# bob decode faster when he asks questions alice asked before him? Two fresh
# `specline serve --stages 1` on the default model with the default policy
# (recycle under auto), greedy chat, 128 tokens, 4 open prompts each:
#   shared: no token file, so every client is one cache scope: the drafter's
#           memory of recent requests is shared, as it was for principals
#           before issue 38;
#   scoped: --auth-token-file with alice and bob: each principal's own scope.
# bench/draft_isolation.py drives each server and prints the table; results
# in bench/results/draft_isolation.json. Never in CI; timings are noisy on a
# shared machine, so it reports ratios measured on one server.
#
#   bash bench/draft_isolation.sh [--build build] [--configs 'shared scoped']
#     [--max-tokens 128] [--rounds 1] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/draft_isolation.json
prompts=$here/bench/prompts/spec_classes.jsonl
configs="shared scoped"
max_tokens=128
rounds=1
command="bash bench/draft_isolation.sh $*"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$here/bench/http_servers.sh"
model=${SPECLINE_BENCH_MODEL:-${SPECLINE_MODEL_CACHE:-$HOME/.cache/specline/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "no model $model (run scripts/setup.sh first)" >&2; exit 1; }
[ -x "$build/specline" ] || { echo "no $build/specline (build it, or pass --build)" >&2; exit 1; }
work=$(mktemp -d)
mkdir -p "$(dirname "$out")"
printf 'alice tok-alice\nbob tok-bob\n' > "$work/tokens"
cells=()
for round in $(seq 1 "$rounds"); do
for config in $configs; do
  auth=() py_auth=()
  if [ "$config" = scoped ]; then auth=(--auth-token-file "$work/tokens"); py_auth=(--auth); fi
  port=$(free_port)
  log=$work/serve-$config-$round.log
  "$build/specline" serve --model "$model" --stages 1 --threads 2 --http-port "$port" --port 0 \
    --port-file "$work/ports-$config-$round.json" "${auth[@]}" > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 240); do
    kill -0 "$server_pid" 2>/dev/null || { echo "serve exited; see $log" >&2; exit 1; }
    [ -s "$work/ports-$config-$round.json" ] && curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break
    sleep 0.5
  done
  metrics=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["scheduler"]["metrics"])' \
    "$work/ports-$config-$round.json")
  /usr/bin/python3 "$here/bench/draft_isolation.py" run --port "$port" --metrics-port "$metrics" \
    --config "$config" "${py_auth[@]}" --prompts "$prompts" --max-tokens "$max_tokens" \
    --json "$work/cell-$config-$round.json"
  cells+=("$work/cell-$config-$round.json")
  stop_server
done
done
/usr/bin/python3 "$here/bench/draft_isolation.py" report "${cells[@]}" --out "$out" \
  --command "$command" --model "$model"
echo "logs and cells in $work" >&2
