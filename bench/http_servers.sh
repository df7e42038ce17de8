# Sourced by the benches that start HTTP servers one after another
# (openai_serving.sh, prefix_cache_serving.sh, structured_output.sh,
# spec_vs_llama.sh): a free port, the server in $server_pid stopped (also on
# exit), and waiting until a server answers.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

server_pid=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
trap stop_server EXIT

# Waits until server $1 ($server_pid, log $3) answers a completion on port
# $2; returns 1 (the server stopped) if it dies or does not come up within
# 2 minutes, for benches that go on without a server that fails to start.
try_ready() {
  local which=$1 port=$2 log=$3
  for _ in $(seq 240); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "$which exited; see $log:" >&2; tail -5 "$log" >&2; stop_server; return 1
    fi
    if curl -sf -o /dev/null "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
         -d '{"prompt": "Hi", "max_tokens": 2}'; then
      return 0
    fi
    sleep 0.5
  done
  echo "$which did not come up; see $log" >&2
  stop_server
  return 1
}

# The same, exiting the bench instead.
wait_ready() { try_ready "$@" || exit 1; }

# Sets $peer (the llama.cpp peer's bin directory, built once by
# ../shared/tools/llama-cpp-peer.sh) and $model (the default model's GGUF),
# or exits naming the missing step. $here is the repository root.
peer_and_default_model() {
  peer=$(bash "$(cd "$here/.." && pwd)/shared/tools/llama-cpp-peer.sh")
  # SPECLINE_BENCH_MODEL names another GGUF (e.g. Gemma 3 270M, which
  # setup.sh also fetches) for the benches that take the default model.
  model=${SPECLINE_BENCH_MODEL:-${SPECLINE_MODEL_CACHE:-$HOME/.cache/specline/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
  [ -f "$model" ] || { echo "no model $model (run scripts/setup.sh first)" >&2; exit 1; }
}
