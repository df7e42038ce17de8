#!/usr/bin/env bash
# Automatic prefix caching on a multi-turn chat workload (issue 18): the same
# replay (bench/multiturn_chat.py: N conversations of M turns sharing one
# long system prompt, each turn resending the history, greedy, streamed with
# usage) against, one after another in one run:
#   llama-server         -t 2 -tb 2 -np 4 -c 8192, its prompt cache on (its
#                        default: the peer a CPU user would compare with)
#   specline-off         specline serve --stages 1 --threads 2 --prefix-cache off
#   specline-on          the same with --prefix-cache on
#   specline-2stage-off, specline-2stage-on   --stages 2 --threads 1 (--with-2stage)
# Each server gets one unmeasured warm-up request. Prints TTFT p50/p99 (all
# turns and turns >= 2), tokens/s and cached tokens per request per server,
# the ratios specline-on / llama-server and specline-on / specline-off, and
# writes bench/results/prefix_cache_serving.json; raw per-request records go
# to $PREFIX_BENCH_DIR (default ~/.cache/specline/prefix-bench).
#
#   bash bench/prefix_cache_serving.sh [--build build] [--conversations 8] [--turns 4]
#        [--concurrency 2] [--max-tokens 32] [--quick] [--with-2stage]
#        [--servers llama-server,specline-off,specline-on] [--out PATH]
#        --quick: 4 conversations x 3 turns
#
# SPECLINE_NO_PREFIX_FLAG=1 omits --prefix-cache from specline's command line,
# for builds from before the cache (which refuse the flag): specline-off and
# specline-on are then the same server, and the report says so.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/prefix_cache_serving.json
conversations=8 turns=4 concurrency=2 max_tokens=32
servers=llama-server,specline-off,specline-on
with_2stage=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --conversations) conversations=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --quick) conversations=4 turns=3; shift ;;
    --servers) servers=$2; shift 2 ;;
    --with-2stage) with_2stage=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$with_2stage" = 1 ] && servers=$servers,specline-2stage-off,specline-2stage-on
build=$(cd "$build" && pwd)
shared=$(cd "$here/.." && pwd)/shared
model=$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$model" ] || { echo "run scripts/setup.sh first (no $model)" >&2; exit 1; }
work=${PREFIX_BENCH_DIR:-$HOME/.cache/specline/prefix-bench}
rm -rf "$work/runs"
mkdir -p "$work/runs" "$(dirname "$out")"
# shellcheck source=bench/http_servers.sh
. "$here/bench/http_servers.sh"
peer=""
case ,$servers, in *,llama-server,*) peer=$(bash "$shared/tools/llama-cpp-peer.sh") ;; esac

# --prefix-cache MODE, unless SPECLINE_NO_PREFIX_FLAG=1 (see the header).
prefix_flag() {
  [ "${SPECLINE_NO_PREFIX_FLAG:-0}" = 1 ] || echo "--prefix-cache $1"
}

# Starts server $1 on HTTP port $2 and waits until it answers a completion.
start_server() {
  local which=$1 port=$2 log=$work/runs/$1.log
  case $which in
    llama-server)
      "$peer/llama-server" -m "$model" -t 2 -tb 2 -np 4 -c 8192 --no-webui \
        --host 127.0.0.1 --port "$port" > "$log" 2>&1 & ;;
    specline-off|specline-on)
      # shellcheck disable=SC2046  # the flag is two words or none
      "$build/specline" serve --model "$model" --stages 1 --threads 2 --port 0 --http-port "$port" \
        $(prefix_flag "${which#specline-}") > "$log" 2>&1 & ;;
    specline-2stage-off|specline-2stage-on)
      # shellcheck disable=SC2046
      "$build/specline" serve --model "$model" --stages 2 --threads 1 --port 0 --http-port "$port" \
        $(prefix_flag "${which#specline-2stage-}") > "$log" 2>&1 & ;;
    *) echo "unknown server $which" >&2; exit 2 ;;
  esac
  server_pid=$!
  wait_ready "$which" "$port" "$log"
}

runs=()
IFS=, read -r -a server_list <<< "$servers"
for server in "${server_list[@]}"; do
  port=$(free_port)
  echo "== $server on :$port" >&2
  start_server "$server" "$port"
  note=""
  if [ "${SPECLINE_NO_PREFIX_FLAG:-0}" = 1 ] && [ "$server" != llama-server ]; then
    note="SPECLINE_NO_PREFIX_FLAG=1: --prefix-cache not passed (server default)"
  fi
  python3 "$here/bench/multiturn_chat.py" run --url "http://127.0.0.1:$port" --label "$server" \
    --out "$work/runs/$server.json" --conversations "$conversations" --turns "$turns" \
    --concurrency "$concurrency" --max-tokens "$max_tokens" --note "$note"
  runs+=("$work/runs/$server.json")
  stop_server
done

python3 "$here/bench/multiturn_chat.py" report --out "$out" "${runs[@]}"
