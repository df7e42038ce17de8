#!/usr/bin/env bash
# specline's OpenAI HTTP API side by side with llama-server (the peer a CPU
# user would pick), on the default model, in one run:
#   1. side by side: llama-server (-t 2 -tb 2 -np 16, prompt cache off; the
#      random prompts share no prefix, so specline's prefix cache finds
#      nothing either: bench/prefix_cache_serving.sh measures caching),
#      specline serve --stages 1 --threads 2, and
#      --stages 2 --threads 1 (2 threads in all), each driven by
#      specline-loadtest --api openai (a C++ client that needs ~1% of a core)
#      with the same workload: 64-token prompts, 128 output tokens with
#      ignore_eos, greedy; closed loop at concurrency 1, 4 and 16, then an
#      open-loop sweep of Poisson arrivals;
#   2. tool agreement: NVIDIA's aiperf (PyPI) and specline-loadtest on the
#      very same prompts against one server. aiperf's Python processes need
#      most of a core, which on this 2-core machine slows whatever server
#      shares the cores, so here the server runs with 1 thread pinned to CPU
#      0 and both tools are pinned to CPU 1.
# Writes every tool's raw output under $OPENAI_BENCH_DIR (default
# ~/.cache/specline/openai-bench), prints the tables (specline / llama-server
# ratios, loadtest / aiperf agreement) and writes
# bench/results/openai_serving.json. Builds the peer and installs aiperf into
# ~/.cache/specline/aiperf-venv the first time (minutes; never in CI).
#
#   bash bench/openai_serving.sh [--build build] [--quick] [--out PATH]
#        --quick: concurrency 1 and 4 only, no sweep
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/openai_serving.json
quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
shared=$(cd "$here/.." && pwd)/shared
model=$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf
name=SmolLM2-135M-Instruct.Q4_1
[ -f "$model" ] || { echo "run scripts/setup.sh first (no $model)" >&2; exit 1; }
peer=$(bash "$shared/tools/llama-cpp-peer.sh")
venv=$HOME/.cache/specline/aiperf-venv
if ! "$venv/bin/python" -c "import aiperf, gguf, tokenizers" 2>/dev/null; then
  echo "installing aiperf into $venv (PyPI; a few minutes)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q aiperf==0.13.0 gguf
fi
tokdir=$HOME/.cache/specline/tokenizers/SmolLM2-135M-Instruct
[ -f "$tokdir/tokenizer.json" ] || "$venv/bin/python" "$here/bench/make_hf_tokenizer.py" "$model" "$tokdir" >&2
work=${OPENAI_BENCH_DIR:-$HOME/.cache/specline/openai-bench}
rm -rf "$work/runs"
mkdir -p "$work/runs" "$(dirname "$out")"
loadtest=$build/specline-loadtest
concurrencies=(1 4 16)
[ "$quick" = 1 ] && concurrencies=(1 4)
requests_for() { case $1 in 1) echo 6 ;; 4) echo 12 ;; *) echo 32 ;; esac; }
# shellcheck source=bench/http_servers.sh
. "$here/bench/http_servers.sh"

# Starts server $1 on port $2 and waits until it answers a completion.
start_server() {
  local which=$1 port=$2 log=$work/runs/$1.log
  case $which in
    llama-server)
      "$peer/llama-server" -m "$model" -t 2 -tb 2 -np 16 -c 8192 --no-cache-prompt --no-webui \
        --host 127.0.0.1 --port "$port" > "$log" 2>&1 & ;;
    specline-1stage)
      "$build/specline" serve --model "$model" --stages 1 --threads 2 --port 0 --http-port "$port" \
        > "$log" 2>&1 & ;;
    specline-2stage)
      "$build/specline" serve --model "$model" --stages 2 --threads 1 --port 0 --http-port "$port" \
        > "$log" 2>&1 & ;;
    # Phase 2: one thread on CPU 0, the tools on CPU 1.
    pinned-llama-server)
      taskset -c 0 "$peer/llama-server" -m "$model" -t 1 -tb 1 -np 4 -c 4096 --no-cache-prompt \
        --no-webui --host 127.0.0.1 --port "$port" > "$log" 2>&1 & ;;
    pinned-specline)
      taskset -c 0 "$build/specline" serve --model "$model" --stages 1 --threads 1 --port 0 \
        --http-port "$port" > "$log" 2>&1 & ;;
  esac
  server_pid=$!
  wait_ready "$which" "$port" "$log"
}

# 1. Side by side, specline-loadtest on every server.
for server in llama-server specline-1stage specline-2stage; do
  port=$(free_port)
  echo "== $server on :$port" >&2
  start_server "$server" "$port"
  # Warm-up: a few requests nobody measures.
  "$loadtest" --api openai --addr "127.0.0.1:$port" --model "$name" --concurrency 1 --requests 2 \
    --input-len 64 --output-len 32 > /dev/null 2>&1 || true
  for c in "${concurrencies[@]}"; do
    "$loadtest" --api openai --addr "127.0.0.1:$port" --model "$name" --concurrency "$c" \
      --requests "$(requests_for "$c")" --input-len 64 --output-len 128 --temperature 0 \
      --json "$work/runs/$server-loadtest-c$c.json" > "$work/runs/$server-loadtest-c$c.log" 2>&1 \
      || true  # 3: some requests failed; the report says so
    echo "   concurrency $c done" >&2
  done
  if [ "$quick" = 0 ]; then
    "$loadtest" --api openai --addr "127.0.0.1:$port" --model "$name" --sweep 0.5,1,2 --duration 20 \
      --input-len 64 --output-len 128 --temperature 0 --json "$work/runs/$server-loadtest-sweep.json" \
      > "$work/runs/$server-loadtest-sweep.log" 2>&1 || true
    echo "   sweep done" >&2
  fi
  stop_server
done

# 2. Tool agreement: aiperf, then specline-loadtest with aiperf's prompts.
for server in pinned-llama-server pinned-specline; do
  port=$(free_port)
  echo "== $server on :$port" >&2
  start_server "$server" "$port"
  taskset -c 1 "$loadtest" --api openai --addr "127.0.0.1:$port" --model "$name" --concurrency 1 \
    --requests 2 --input-len 64 --output-len 32 > /dev/null 2>&1 || true
  for c in 1 4; do
    n=$(requests_for "$c")
    dir=$work/runs/$server-aiperf-c$c
    taskset -c 1 "$venv/bin/aiperf" profile --model "$name" --url "http://127.0.0.1:$port" \
      --endpoint-type completions --streaming --tokenizer "$tokdir" \
      --concurrency "$c" --request-count "$n" --random-seed 1 \
      --prompt-input-tokens-mean 64 --prompt-input-tokens-stddev 0 \
      --prompt-output-tokens-mean 128 --prompt-output-tokens-stddev 0 \
      --extra-inputs ignore_eos:true --extra-inputs temperature:0 --use-legacy-max-tokens \
      --use-server-token-count --output-artifact-dir "$dir" --no-auto-plot > "$dir.log" 2>&1 || true
    # The very prompts aiperf sent, for specline-loadtest.
    python3 - "$dir/inputs.json" "$dir/prompts.jsonl" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))["data"]
with open(sys.argv[2], "w") as f:
    for entry in data:
        for p in entry["payloads"]:
            f.write(json.dumps({"prompt": p["prompt"], "max_tokens": p["max_tokens"], "ignore_eos": True}) + "\n")
PY
    taskset -c 1 "$loadtest" --api openai --addr "127.0.0.1:$port" --model "$name" \
      --prompts "$dir/prompts.jsonl" --concurrency "$c" --requests "$n" --temperature 0 \
      --json "$work/runs/$server-loadtest-c$c.json" > "$work/runs/$server-loadtest-c$c.log" 2>&1 || true
    echo "   concurrency $c done" >&2
  done
  stop_server
done

/usr/bin/python3 "$here/bench/openai_serving_report.py" "$work/runs" "$out"
