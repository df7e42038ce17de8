#!/usr/bin/env bash
# Past one pipeline (issue 39): the multi-turn chat replay
# (bench/multiturn_chat.py: N conversations of M turns over K shared system
# prompts, each turn resending the history, greedy, streamed with usage)
# against, one after another in one run, on the same machine's cores:
#   1x               specline serve --stages 1 --threads C          (one pipeline)
#   2x-round_robin   specline serve --replicas 2 --router round_robin
#   2x-cache_aware   specline serve --replicas 2 --router cache_aware
#   2x-kv_aware      specline serve --replicas 2 --router kv_aware (routes on
#                    the KV events each replica publishes; add it to --servers)
#                    (each replica --threads C/2: the cores are shared out,
#                    so two replicas are not twice the compute)
#   2x-P-2routers    the two replicas (--router none) behind two vllm-routers
#                    with policy P, requests alternating between them, as a
#                    router Deployment with 2 replicas behind its Service
#                    spreads them (P = kv_aware: the replicas publish their
#                    KV events, which both routers index)
#   llama-server     (--with-llama) llama-server -t C -np 4, the single-server
#                    peer, and 2x-llama-cache_aware: two llama-servers
#                    (-t C/2) behind the same vllm-router
# Prints TTFT p50/p99, tokens/s and the prefix-cache hit rate (cached prompt
# tokens / prompt tokens, from each reply's usage) per server and the ratios
# against 1x; writes bench/results/replicas_serving.json; raw per-request
# records go to $REPLICAS_BENCH_DIR (default ~/.cache/specline/replicas-bench).
#
#   bash bench/replicas_serving.sh [--build build] [--conversations 16] [--turns 4]
#        [--system-prompts 4] [--concurrency 4] [--max-tokens 32] [--threads 2]
#        [--servers 1x,2x-round_robin,2x-cache_aware] [--with-llama] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/replicas_serving.json
conversations=16 turns=4 system_prompts=4 concurrency=4 max_tokens=32
threads=$(nproc)
servers=1x,2x-round_robin,2x-cache_aware
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --conversations) conversations=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --system-prompts) system_prompts=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --with-llama) servers=$servers,llama-server,2x-llama-cache_aware; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
half=$(( threads / 2 > 0 ? threads / 2 : 1 ))
model=${SPECLINE_BENCH_MODEL:-${SPECLINE_MODEL_CACHE:-$HOME/.cache/specline/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "no model $model (run scripts/setup.sh first)" >&2; exit 1; }
router=${SPECLINE_VLLM_ROUTER:-$HOME/.cache/specline/router-venv/bin/vllm-router}
work=${REPLICAS_BENCH_DIR:-$HOME/.cache/specline/replicas-bench}
rm -rf "$work/runs"
mkdir -p "$work/runs" "$(dirname "$out")"
# shellcheck source=bench/http_servers.sh
. "$here/bench/http_servers.sh"
peer=""
case ,$servers, in *,llama-server,*|*,2x-llama-*) peer=$(bash "$here/../shared/tools/llama-cpp-peer.sh") ;; esac

# 2x-llama-*: two llama-servers and vllm-router, stopped together.
extra_pids=()
stop_extra() {
  for p in "${extra_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  extra_pids=()
}
trap 'stop_server; stop_extra' EXIT

# Starts server $1 on HTTP port $2 and waits until it answers a completion.
start_server() {
  local which=$1 port=$2 log=$work/runs/$1.log
  case $which in
    1x)
      "$build/specline" serve --model "$model" --stages 1 --threads "$threads" --port 0 \
        --http-port "$port" > "$log" 2>&1 & ;;
    2x-*-2routers)
      local policy=${which#2x-} pf=$work/runs/$which.ports.json kv=()
      policy=${policy%-2routers}
      [ "$policy" = kv_aware ] && kv=(--kv-events-config \
        '{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*"}')
      rm -f "$pf"
      "$build/specline" serve --model "$model" --stages 1 --replicas 2 --threads "$half" \
        --router none --port 0 --port-file "$pf" "${kv[@]}" > "$log" 2>&1 &
      server_pid=$!
      for _ in $(seq 240); do [ -s "$pf" ] && break; sleep 0.5; done
      local urls
      urls=$(python3 -c 'import json,sys; print(" ".join("http://127.0.0.1:%d" % r["gateway"]["http"] for r in json.load(open(sys.argv[1]))["replicas"]))' "$pf")
      second_port=$(free_port)
      for p in "$port" "$second_port"; do
        # shellcheck disable=SC2086
        "$router" --host 127.0.0.1 --port "$p" --policy "$policy" --worker-urls $urls \
          --prometheus-port "$(free_port)" --log-level warning >> "$work/runs/$which-routers.log" 2>&1 &
        extra_pids+=($!)
      done
      wait_ready "$which" "$second_port" "$log"
      wait_ready "$which" "$port" "$log"
      return ;;
    2x-*)
      if [ "${which#2x-llama-}" != "$which" ]; then
        local urls=() p
        for i in 0 1; do
          p=$(free_port)
          "$peer/llama-server" -m "$model" -t "$half" -tb "$half" -np 2 -c 8192 --no-webui \
            --host 127.0.0.1 --port "$p" > "$work/runs/$which-replica$i.log" 2>&1 &
          extra_pids+=($!)
          urls+=("http://127.0.0.1:$p")
        done
        "$router" --host 127.0.0.1 --port "$port" --policy "${which#2x-llama-}" \
          --worker-urls "${urls[@]}" --log-level warning > "$log" 2>&1 &
      else
        "$build/specline" serve --model "$model" --stages 1 --replicas 2 --threads "$half" \
          --router "${which#2x-}" --port 0 --http-port "$port" > "$log" 2>&1 &
      fi ;;
    llama-server)
      "$peer/llama-server" -m "$model" -t "$threads" -tb "$threads" -np 4 -c 8192 --no-webui \
        --host 127.0.0.1 --port "$port" > "$log" 2>&1 & ;;
    *) echo "unknown server $which" >&2; exit 2 ;;
  esac
  server_pid=$!
  wait_ready "$which" "$port" "$log"
}

runs=()
IFS=, read -r -a server_list <<< "$servers"
for server in "${server_list[@]}"; do
  port=$(free_port)
  second_port=""
  echo "== $server on :$port" >&2
  start_server "$server" "$port"
  url=http://127.0.0.1:$port
  [ -n "$second_port" ] && url=$url,http://127.0.0.1:$second_port
  python3 "$here/bench/multiturn_chat.py" run --url "$url" --label "$server" \
    --out "$work/runs/$server.json" --conversations "$conversations" --turns "$turns" \
    --system-prompts "$system_prompts" --concurrency "$concurrency" --max-tokens "$max_tokens" \
    --note "threads $threads in all"
  runs+=("$work/runs/$server.json")
  stop_server
  stop_extra
done

python3 "$here/bench/multiturn_chat.py" report --out "$out" "${runs[@]}"
