#!/usr/bin/env bash
# Fair admission (issue 26): one principal floods the scheduler's queue with
# long requests while another sends short ones at a low rate; what the
# interactive principal waits for its first token, with the waiting queue
# first come, first served (--admission fifo) and round robin across
# principals (--admission fair), one server after the other in one run:
#   specline serve --stages 1 --threads 2 --kv-capacity-tokens KV --prefix-cache off
#     --auth-token-file (flood, interactive) --admission fifo|fair
#   flood:        specline-loadtest --concurrency C --input-len 256 --output-len 64
#   interactive:  specline-loadtest --rate R --input-len 16 --output-len 8
# both for --duration seconds (the interactive run starts once the flood has
# filled the queue). KV capacity is what makes requests wait: it is set so
# that only a few long requests run at once (3 of 20 blocks in 64) and the
# rest queue; prefix caching is off so each request needs its whole worst
# case (the synthetic prompts share no prefix anyway). Prints the
# interactive principal's TTFT p50/p99 (and the flood's throughput) per
# mode, writes bench/results/fair_admission_serving.json; raw loadtest
# reports go to $FAIR_BENCH_DIR (default ~/.cache/specline/fair-bench).
#
#   bash bench/fair_admission_serving.sh [--build build] [--duration 40]
#        [--flood-concurrency 12] [--rate 0.5] [--kv-capacity-tokens 1024]
#        [--modes fifo,fair] [--model PATH] [--out PATH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
out=$here/bench/results/fair_admission_serving.json
duration=40 flood_concurrency=12 rate=0.5 kv=1024 modes=fifo,fair
model=$HOME/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --flood-concurrency) flood_concurrency=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --kv-capacity-tokens) kv=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[ -f "$model" ] || { echo "run scripts/setup.sh first (no $model)" >&2; exit 1; }
work=${FAIR_BENCH_DIR:-$HOME/.cache/specline/fair-bench}
rm -rf "$work/runs"
mkdir -p "$work/runs" "$(dirname "$out")"
printf 'flood tok-flood-%s\ninteractive tok-interactive-%s\n' "$RANDOM$RANDOM" "$RANDOM$RANDOM" \
  > "$work/tokens"
awk '$1 == "flood" {print $2}' "$work/tokens" > "$work/flood.token"
awk '$1 == "interactive" {print $2}' "$work/tokens" > "$work/interactive.token"

server_pid="" flood_pid=""
stop_all() {
  for pid in $flood_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pid="" flood_pid=""
}
trap stop_all EXIT

IFS=, read -r -a mode_list <<< "$modes"
for mode in "${mode_list[@]}"; do
  echo "== --admission $mode" >&2
  ports=$work/runs/$mode.ports.json
  rm -f "$ports"
  "$build/specline" serve --model "$model" --stages 1 --threads 2 --port 0 --http-port -1 \
    --kv-capacity-tokens "$kv" --prefix-cache off --auth-token-file "$work/tokens" --admission "$mode" \
    --max-concurrent-streams 1024 --port-file "$ports" > "$work/runs/$mode.serve.log" 2>&1 &
  server_pid=$!
  # `specline serve` writes its port file once every process is healthy.
  for _ in $(seq 600); do
    [ -s "$ports" ] && break
    kill -0 "$server_pid" 2>/dev/null || { tail -5 "$work/runs/$mode.serve.log" >&2; exit 1; }
    sleep 0.2
  done
  [ -s "$ports" ] || { echo "the server did not come up" >&2; exit 1; }
  addr=127.0.0.1:$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gateway"]["grpc"])' "$ports")
  # The flood runs a little longer than the interactive run, so the queue is
  # full from its first request to its last.
  "$build/specline-loadtest" --addr "$addr" --token "$work/flood.token" \
    --concurrency "$flood_concurrency" --duration $((duration + 10)) \
    --input-len 256 --output-len 64 \
    --json "$work/runs/$mode.flood.json" > "$work/runs/$mode.flood.log" 2>&1 &
  flood_pid=$!
  sleep 5  # the flood fills the KV and the queue
  "$build/specline-loadtest" --addr "$addr" --token "$work/interactive.token" \
    --rate "$rate" --duration "$duration" --input-len 16 --output-len 8 --workload-seed 26 \
    --json "$work/runs/$mode.interactive.json" \
    > "$work/runs/$mode.interactive.log" 2>&1
  wait "$flood_pid" || true
  flood_pid=""
  stop_all
done

/usr/bin/python3 - "$out" "$work/runs" "$modes" "$duration" "$flood_concurrency" "$rate" "$kv" "$model" <<'EOF'
import json, os, platform, sys, time
out, runs, modes, duration, conc, rate, kv, model = sys.argv[1:]
result = {"bench": "fair_admission_serving", "model": os.path.basename(model),
          "machine": f"{os.cpu_count()} cores, {platform.machine()}",
          "date": time.strftime("%Y-%m-%d"),
          "config": {"duration_s": int(duration), "flood_concurrency": int(conc),
                     "flood": {"input_len": 256, "output_len": 64},
                     "interactive": {"rate": float(rate), "input_len": 16, "output_len": 8},
                     "kv_capacity_tokens": int(kv), "stages": 1, "threads": 2},
          "modes": {}}
for mode in modes.split(","):
    def summary(who):
        with open(os.path.join(runs, f"{mode}.{who}.json")) as f:
            return json.load(f)["runs"][0]["summary"]
    i, fl = summary("interactive"), summary("flood")
    result["modes"][mode] = {
        "interactive": {"sent": i["sent"], "completed": i["completed"], "failed": i["failed"],
                        "ttft_ms_p50": i["ttft_ms"]["p50"], "ttft_ms_p99": i["ttft_ms"]["p99"],
                        "e2e_ms_p50": i["e2e_ms"]["p50"]},
        "flood": {"completed": fl["completed"], "failed": fl["failed"],
                  "ttft_ms_p50": fl["ttft_ms"]["p50"],
                  "output_tokens_per_s": fl["output_token_throughput"]}}
print(f"{'admission':<10} {'inter. sent':>11} {'inter. ok':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}"
      f" {'flood ok':>9} {'flood TTFT p50 ms':>18} {'flood tok/s':>12}")
for mode, r in result["modes"].items():
    i, fl = r["interactive"], r["flood"]
    print(f"{mode:<10} {i['sent']:>11} {i['completed']:>9} {i['ttft_ms_p50']:>12.0f} {i['ttft_ms_p99']:>12.0f}"
          f" {fl['completed']:>9} {fl['ttft_ms_p50']:>18.0f} {fl['output_tokens_per_s']:>12.1f}")
m = result["modes"]
if "fifo" in m and "fair" in m and m["fair"]["interactive"]["ttft_ms_p50"] > 0:
    ratio = m["fifo"]["interactive"]["ttft_ms_p50"] / m["fair"]["interactive"]["ttft_ms_p50"]
    result["interactive_ttft_p50_fifo_over_fair"] = ratio
    print(f"interactive TTFT p50: fifo / fair = {ratio:.1f}x")
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(f"wrote {out}")
EOF
