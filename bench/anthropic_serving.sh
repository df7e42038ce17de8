#!/usr/bin/env bash
# Anthropic's Messages API (/v1/messages) served by specline and by
# llama-server (the peer a CPU user would pick; it serves the same API) on
# the default model, side by side in one run, with each server's OpenAI
# chat API on the same requests beside it (what the Messages translation
# costs): streamed, greedy, 128 output tokens, every request its own prompt
# and story (no prefix reuse on either server, nothing specline's drafter
# saw in an earlier run), at concurrency 1 and 4; the medians of
# --repeats runs (an even number balances the order of the APIs). specline: serve --stages 1 --threads 2; llama-server: -t 2
# -tb 2 -np 4, prompt cache off. Prints the table, writes
# bench/results/anthropic_serving.json. Builds the peer the first time
# (minutes; never in CI).
#
#   bash bench/anthropic_serving.sh [--build build] [--repeats 4] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/anthropic_serving.json
repeats=4
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/http_servers.sh
. "$here/bench/http_servers.sh"
peer_and_default_model
work=$(mktemp -d)
name=$(basename "$model" .gguf)

start_server() {
  local which=$1 port=$2 log=$work/$1.log
  case $which in
    llama-server)
      "$peer/llama-server" -m "$model" -t 2 -tb 2 -np 4 -c 8192 --no-cache-prompt --no-webui \
        --host 127.0.0.1 --port "$port" > "$log" 2>&1 & ;;
    specline)
      "$build/specline" serve --model "$model" --stages 1 --threads 2 --port 0 --http-port "$port" \
        > "$log" 2>&1 & ;;
  esac
  server_pid=$!
  wait_ready "$which" "$port" "$log"
}

rows=$work/rows.jsonl
: > "$rows"
for r in $(seq "$repeats"); do
  for server in llama-server specline; do
    port=$(free_port)
    start_server "$server" "$port"
    # A warm-up of its own prompts first; then the two APIs in turn, the
    # order swapped every repeat (a server's first requests and what
    # specline's drafter has learnt so far favour whichever runs later).
    python3 "$here/bench/anthropic_stream.py" --port "$port" --api chat --concurrency 4 --requests 8 \
      --model "$name" --run 99 > /dev/null
    apis="messages chat"
    [ $((r % 2)) = 0 ] && apis="chat messages"
    run=0
    for c in 1 4; do
      n=$(( c == 1 ? 6 : 12 ))
      for api in $apis; do
        run=$((run + 1))
        res=$(python3 "$here/bench/anthropic_stream.py" --port "$port" --api "$api" --concurrency "$c" \
                --requests "$n" --model "$name" --run "$run")
        echo "{\"repeat\": $r, \"server\": \"$server\", \"api\": \"$api\", \"concurrency\": $c, \"result\": $res}" >> "$rows"
        echo "repeat $r $server $api c=$c $res" >&2
      done
    done
    stop_server
  done
done

python3 - "$rows" "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["server"], r["api"], r["concurrency"]) for r in rows})
med = {}
for k in keys:
    rs = [r["result"] for r in rows if (r["server"], r["api"], r["concurrency"]) == k]
    med[k] = {m: statistics.median(x[m] for x in rs) for m in rs[0]}
print(f"{'server':13} {'api':9} {'conc':>4} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12} {'tok/s':>8} {'tokens':>7}")
for k in keys:
    m = med[k]
    print(f"{k[0]:13} {k[1]:9} {k[2]:>4} {m['ttft_p50_ms']:12.1f} {m['tpot_p50_ms']:12.2f} "
          f"{m['tokens_per_s']:8.1f} {m['mean_tokens']:7.1f}")
ratios = {}
print("\nspecline / llama-server (tok/s; TTFT and TPOT: lower is better)")
for api in ("messages", "chat"):
    for c in (1, 4):
        s, l = med[("specline", api, c)], med[("llama-server", api, c)]
        ratio = {"tokens_per_s": s["tokens_per_s"] / l["tokens_per_s"],
                 "ttft": s["ttft_p50_ms"] / l["ttft_p50_ms"], "tpot": s["tpot_p50_ms"] / l["tpot_p50_ms"]}
        ratios[f"{api}_c{c}"] = ratio
        print(f"  {api:9} c={c}: tok/s {ratio['tokens_per_s']:.2f}x  TTFT {ratio['ttft']:.2f}x  TPOT {ratio['tpot']:.2f}x")
for c in (1, 4):
    m, ch = med[("specline", "messages", c)], med[("specline", "chat", c)]
    ratios[f"specline_messages_over_chat_c{c}"] = m["tokens_per_s"] / ch["tokens_per_s"]
    print(f"specline /v1/messages over its chat API, c={c}: tok/s {m['tokens_per_s'] / ch['tokens_per_s']:.2f}x")
json.dump({"medians": [{"server": k[0], "api": k[1], "concurrency": k[2], **med[k]} for k in keys],
           "ratios": ratios, "runs": rows}, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}")
PY
