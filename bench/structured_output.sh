#!/usr/bin/env bash
# Structured output's cost and speculation's gain, specline beside
# llama-server on the same GGUF file (the default model) and prompts, never
# in CI:
#   - TPOT of greedy JSON-schema output against unconstrained output of the
#     same length (ignore_eos), each server against itself;
#   - constrained output with speculation (recycle: forced tokens as free
#     drafts plus the recycling matrix's guesses) against constrained AR;
#   - llama-server's constrained TPOT (its GBNF sampler) beside ours.
# One server at a time, 2 threads each; bench/structured_output.py drives
# the requests (streamed; TPOT = (last token - first token) / (tokens - 1),
# measured by the client the same way for both) and writes the table and
# bench/results/structured_output.json. The grammar's own costs (mask per
# token, compile time of a 50-field schema) are bench/grammar_bench's.
#
#   bash bench/structured_output.sh [--build build] [--repeats 5] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/structured_output.json
repeats=5
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$here/bench/http_servers.sh"
peer_and_default_model
work=$(mktemp -d)
mkdir -p "$(dirname "$out")"

port=$(free_port)
"$build/specline" serve --model "$model" --stages 1 --threads 2 --http-port "$port" --port 0 \
  > "$work/specline.log" 2>&1 &
server_pid=$!
wait_ready specline "$port" "$work/specline.log"
/usr/bin/python3 "$here/bench/structured_output.py" --server specline --port "$port" \
  --repeats "$repeats" --json "$work/specline.json"
stop_server

port=$(free_port)
"$peer/llama-server" -m "$model" -t 2 -tb 2 -np 1 --port "$port" --no-warmup \
  > "$work/peer.log" 2>&1 &
server_pid=$!
wait_ready llama-server "$port" "$work/peer.log"
/usr/bin/python3 "$here/bench/structured_output.py" --server llama-server --port "$port" \
  --repeats "$repeats" --json "$work/peer.json"
stop_server

/usr/bin/python3 "$here/bench/structured_output.py" --report "$work/specline.json" "$work/peer.json" \
  --model "$model" --out "$out"
