#!/usr/bin/env bash
# Everything the CUDA backend must show on a GPU machine, in one go
# (docs/cuda.md). Two halves, because the GPU machine has CUDA, PyTorch and
# python3 but no network and no gRPC/Protobuf packages:
#
#   bash scripts/gpu_check.sh pack [BUILD_DIR]
#       here (no GPU needed): configures BUILD_DIR (default build-gpu; Ninja
#       when it is installed, or $CMAKE_GENERATOR), builds only the CUDA
#       tests, the two benchmarks and the serving binaries, and gathers them
#       with the shared libraries they need (not the CUDA toolkit's, which the
#       GPU machine has) and stories260K into one archive,
#       .gpu-carry/carry.tar.xz (git-ignored; name .gpu-carry in the device
#       tool's carry list; it must stay under 64 MiB).
#   bash scripts/gpu_check.sh run [STEPS]
#       on the GPU machine, from the repository root with .gpu-carry/ beside
#       it; under 9m20s on one H100 (the machine's start-up comes on top;
#       the default run took 45 s there), every step under its own `timeout`
#       and the whole run under a deadline. STEPS is a comma list (default
#       gpu,tests,serve,recycle,kquant,archs,model,decode,pipeline):
#         gpu       nvidia-smi: the card, driver, memory               15 s
#         tests     the four cuda_*_test suites, concurrently; a skipped
#                   test is a failure (the cases that need 2 GPUs, or
#                   no GPU, or a build without NCCL are filtered out)  120 s
#         serve     specline serve --device cuda --demo-prompt: one
#                   request streamed through 2 GPU stages              45 s
#         recycle   one `specline serve --device cuda` for two rows:   75 s
#                   recycle: --policy recycle equals --policy ar token
#                   for token; prefix: a second request sharing a prompt
#                   prefix reports cached tokens over the OpenAI API;
#                   structured: a JSON-schema completion with logprobs,
#                   ar = recycle, top-1 logprob = the token, penalties
#         kquant    a random Q4_K GGUF (make-random-model) served on cuda 45 s
#         archs     random gemma3, phi3 and qwen3moe GGUFs, each served
#                   on 2 cuda stages                                   60 s
#         model     a 1.1B (TinyLlama-shaped) bf16 GGUF, make-random-model 45 s
#         decode    cuda_bench --model on it: decode tok/s and GB/s against
#                   the measured read bandwidth (and the 3.35 TB/s spec) 60 s
#         pipeline  spec_bench --device cuda:0 on it, 2 stages, oracle
#                   drafter: SPD/PPSD speedups, 0 mismatches required  80 s
#       and, only when named (they do not fit the deadline with the rest):
#         sanitizer compute-sanitizer memcheck over three suites      300 s
#         bench     the full cuda_bench (TinyLlama and 7B shapes)     180 s
#         torch     bench/torch_peer.py, the PyTorch peer             180 s
#       Logs and JSON go to ./gpu-results; gpu-results/summary.json and
#       summary.txt (one table: step | result | s | key figure | log) are also
#       copied to $OUT with everything in $OUT/gpu-results.tgz. Exit status:
#       0 when every row passed.
#       GPU_CHECK_DEADLINE_S (default 560) bounds the whole run; a step that
#       would start with under 5 s left is reported as SKIP.
#       GPU_CHECK_DEVICE=cpu (rehearsal only, on a machine without a GPU):
#       the serve, recycle and kquant steps serve on the CPU instead.
set -euo pipefail
shopt -s extglob
cd "$(dirname "$0")/.."
SELF=$PWD/scripts/gpu_check.sh
CARRY=.gpu-carry      # what travels: one compressed archive (the carry limit is 64 MiB)
STAGE=.gpu-carry-tree # where pack gathers it, and run unpacks it
TARGETS=(cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test
         cuda_bench spec_bench specline specline-stage specline-scheduler specline-gateway)
DEFAULT_STEPS=gpu,tests,serve,recycle,kquant,archs,model,decode,pipeline
# Seconds per step (the `timeout` of its process; the tests step's suites get
# 5 s less, so their rows are written before it is killed). The default steps
# sum to 505 s, + 2 s of kill grace each + 30 s unpack = 553 s, inside the
# 560 s deadline and the device tool's 600 s per command (its start-up is
# not counted there). On an H100 the whole default run took 45 s (2026-11-26):
# the budgets are ceilings for a step that hangs.
declare -A BUDGET=([gpu]=15 [tests]=100 [serve]=45 [recycle]=80 [kquant]=45 [archs]=60 [model]=40
                   [decode]=60 [pipeline]=70 [sanitizer]=300 [bench]=180 [torch]=180)
# The rows each step writes.
declare -A ROWS_OF=([gpu]=gpu
  [tests]="cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test"
  [serve]=serve [recycle]="recycle prefix structured" [kquant]=kquant [archs]="arch-gemma3 arch-phi3 arch-qwen3moe" [model]=model [decode]=decode
  [pipeline]=pipeline [sanitizer]="memcheck" [bench]=bench [torch]=torch)
H100_READ_GBS=3350  # H100 SXM5 HBM3, nominal
DEVICE=${GPU_CHECK_DEVICE:-cuda}

pack() {
  local build=${1:-build-gpu}
  local t0=$SECONDS
  if [ ! -f "$build/CMakeCache.txt" ] && [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
    export CMAKE_GENERATOR=Ninja
  fi
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${TARGETS[@]}"
  local t_build=$((SECONDS - t0))
  chmod -R u+w "$STAGE" 2>/dev/null || true
  rm -rf "$STAGE" "$CARRY"
  mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/models" "$CARRY"
  for t in "${TARGETS[@]}"; do
    local f
    f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "gpu_check: $t was not built" >&2; exit 1; }
    # Benchmarks find the serving binaries one folder up, as in a build tree.
    local dest=$STAGE/bin
    [[ $f == */bench/* ]] && dest=$STAGE/bin/bench && mkdir -p "$dest"
    cp "$f" "$dest/"
    strip --strip-debug "$dest/$t"
  done
  # Shared libraries outside glibc and the CUDA driver/toolkit (those the GPU
  # machine has, and its own versions must be used).
  for b in "$STAGE"/bin/* "$STAGE"/bin/bench/*; do
    [ -f "$b" ] || continue
    ldd "$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcublas[^/]*|libcudart|libnccl|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
  strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null || true
  local shared=${SPECLINE_SHARED_MODELS:-../shared/models}
  [ -d "$shared/stories260K" ] || { echo "gpu_check: $shared/stories260K is missing" >&2; exit 1; }
  cp -r "$shared/stories260K" "$STAGE/models/"
  chmod -R u+w "$STAGE/models"
  tar -C "$STAGE" -cf - . | xz -T0 -6 > "$CARRY/carry.tar.xz"
  # .gitignore lists both folders (nothing is written to .git: in a worktree
  # that would be the main checkout's).
  for d in "$CARRY" "$STAGE"; do
    git check-ignore -q "$d" || echo "gpu_check: warning: $d is not git-ignored" >&2
  done
  local bytes
  bytes=$(stat -c %s "$CARRY/carry.tar.xz")
  du -sh "$STAGE" "$CARRY"
  echo "gpu_check pack: $CARRY/carry.tar.xz is $((bytes / 1024 / 1024)) MiB ($bytes bytes);" \
       "build ${t_build} s, total $((SECONDS - t0)) s"
  if ((bytes >= 64 * 1024 * 1024)); then
    echo "gpu_check: the archive is over the 64 MiB carry limit" >&2
    exit 1
  fi
}

# Where the GPU machine keeps cuBLAS and NCCL: the toolkit, or the pip wheels
# that came with PyTorch.
cuda_library_path() {
  local dirs=/usr/local/cuda/lib64
  local site
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
  if [ -n "$site" ]; then
    for d in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do
      [ -d "$d" ] && dirs="$dirs:$d"
    done
  fi
  echo "$dirs"
}

# --- rows: one line each in $ROWS: name, result, key figure, log, seconds ---------

# Seconds since the epoch (steps run in processes of their own, so not $SECONDS).
now() { printf '%(%s)T\n' -1; }

# row NAME PASS|FAIL|TIMEOUT|SKIP FIGURE [LOG]
row() {
  local t=$(($(now) - ${STEP_T0:-$(now)})) fig=${3//$'\t'/ }
  fig=${fig%%+([; ])}
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$fig" "${4:-}" "$t" >> "$ROWS"
}
has_row() { cut -f1 "$ROWS" | grep -qx "$1"; }

# Runs step NAME as its own process under `timeout`; rows it did not write
# become TIMEOUT or FAIL.
run_step() {
  local name=$1 budget=${BUDGET[$1]}
  local left=$((DEADLINE - $(now)))
  if ((left < 5)); then
    for r in ${ROWS_OF[$name]}; do
      STEP_T0=$(now) row "$r" SKIP "not started: the run's ${DEADLINE_S} s deadline is near"
    done
    return
  fi
  ((budget > left)) && budget=$left
  local t0
  t0=$(now)
  STEP_T0=$t0 STEP_BUDGET=$budget timeout -k 2 "$budget" bash "$SELF" _step "$name" \
    > "$RESULTS/step-$name.log" 2>&1
  local rc=$?
  for r in ${ROWS_OF[$name]}; do
    has_row "$r" && continue
    if ((rc == 124 || rc == 137)); then
      STEP_T0=$t0 row "$r" TIMEOUT "killed after ${budget} s" "step-$name.log"
    else
      STEP_T0=$t0 row "$r" FAIL "no result (step exit $rc)" "step-$name.log"
    fi
  done
  echo "gpu_check: $name: $(($(now) - t0)) s of $budget" >&2
}

# "exit N", or what a `timeout` exit status means.
status_of() {
  case $1 in
    124|137) echo "timed out (killed by its timeout)" ;;
    *) echo "exit $1" ;;
  esac
}

# Seconds left in this step, less a margin for writing its rows (at least 1).
left() {
  local l=$((STEP_BUDGET - ($(now) - STEP_T0) - ${1:-3}))
  echo $((l < 1 ? 1 : l))
}

# A number from a JSON file: jget FILE PYTHON-EXPRESSION-ON-j
jget() {
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

# --- the steps (each runs as `gpu_check.sh _step NAME` under its timeout) ----------

step_gpu() {
  if ! command -v nvidia-smi >/dev/null; then
    row gpu FAIL "nvidia-smi not found: no NVIDIA driver on this machine" ""
    return
  fi
  if ! nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
       > "$RESULTS/gpu.txt" 2>&1; then
    row gpu FAIL "nvidia-smi: $(head -1 "$RESULTS/gpu.txt")" gpu.txt
    return
  fi
  nvidia-smi -L >> "$RESULTS/gpu.txt" 2>&1 || true
  local n
  n=$(grep -c '^GPU ' "$RESULTS/gpu.txt" || true)
  echo "$n" > "$RESULTS/gpu_count"
  row gpu PASS "$n x $(head -1 "$RESULTS/gpu.txt")" gpu.txt
}

gpu_count() { cat "$RESULTS/gpu_count" 2>/dev/null || echo 0; }

step_tests() {
  local per=$(($(left 5)))
  local gpus
  gpus=$(gpu_count)
  # Not applicable here, so filtered out rather than counted as skips:
  # the no-NCCL and no-device cases, and the 2-rank cases on one GPU.
  local na="NcclTransport.WithoutNcclIsUnimplemented"
  ((gpus >= 1)) && na="$na:NcclTransport.WithoutDeviceIsUnavailable"
  ((gpus < 2)) && na="$na:Modes/NcclLinkTest.*/two_gpu"
  local t
  for t in cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test; do
    local filter=()
    [ "$t" = cuda_nccl_transport_test ] && filter=(--gtest_filter="-$na")
    ( timeout -k 2 "$per" "$t" --gtest_color=no "${filter[@]}" > "$RESULTS/$t.log" 2>&1
      echo $? > "$RESULTS/$t.rc" ) &
  done
  wait
  for t in cuda_kernels_test cuda_attention_test cuda_runtime_test cuda_nccl_transport_test; do
    local log=$RESULTS/$t.log rc passed failed skipped
    rc=$(cat "$RESULTS/$t.rc" 2>/dev/null || echo 1)
    passed=$(grep -cE '^\[ +OK \] .* \([0-9]+ ms\)$' "$log" || true)
    failed=$(grep -cE '^\[ +FAILED +\] .* \([0-9]+ ms\)$' "$log" || true)
    skipped=$(grep -cE '^\[ +SKIPPED +\] .* \([0-9]+ ms\)$' "$log" || true)
    local fig="$passed passed, $failed failed, $skipped skipped"
    [ "$t" = cuda_nccl_transport_test ] && fig="$fig (not applicable, filtered: $na)"
    local first
    first=$(grep -m1 -E '^\[ +(FAILED|SKIPPED) +\] .* \([0-9]+ ms\)$|no CUDA device|CUDA error' "$log" || true)
    [ -n "$first" ] && fig="$fig; first: ${first:0:120}"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      row "$t" TIMEOUT "killed after $per s; $fig" "$t.log"
    elif [ "$rc" = 0 ] && ((failed == 0 && skipped == 0 && passed > 0)); then
      row "$t" PASS "$fig" "$t.log"
    else
      row "$t" FAIL "$(status_of "$rc"); $fig" "$t.log"
    fi
  done
}

# "64 tokens (finish: length); TTFT 3.1 ms, TPOT 1.20 ms, ..., 833.3 tok/s decode"
# -> "64 tokens, TTFT 3.1 ms, 833.3 tok/s"
stream_figure() {
  sed -nE 's/.* ([0-9]+) tokens \(finish: ([^)]*)\); TTFT ([0-9.]+) ms, TPOT ([0-9.]+) ms.*, ([0-9.]+) tok\/s decode.*/\1 tokens (\2), TTFT \3 ms, TPOT \4 ms, \5 tok\/s/p' "$1" | tail -1
}
stream_tokens() { sed -nE 's/.* ([0-9]+) tokens \(finish: .*/\1/p' "$1" | tail -1; }

# serve --demo-prompt on MODEL with STAGES; row NAME passes on TOKENS tokens.
demo_serve() {
  local name=$1 log=$2 tokens=$3
  shift 3
  local t
  t=$(left 4)
  timeout -k 2 "$t" specline serve "$@" --device "$DEVICE" --port 0 --startup-timeout-s $((t > 20 ? t - 10 : 10)) \
    --demo-prompt "Once upon a time" --max-tokens "$tokens" --ignore-eos > "$RESULTS/$log" 2>&1
  local rc=$? got fig
  got=$(stream_tokens "$RESULTS/$log")
  fig=$(stream_figure "$RESULTS/$log")
  if ((rc == 0)) && [ "${got:-0}" = "$tokens" ]; then
    row "$name" PASS "$fig" "$log"
  else
    row "$name" FAIL "$(status_of "$rc"); ${fig:-no stream}; $(grep -m1 -iE 'error|fail|no usable' "$RESULTS/$log" | cut -c1-160)" "$log"
  fi
}

step_serve() {
  local m=$MODELS/stories260K
  demo_serve serve serve.log 64 --model "$m/stories260K.bin" --tokenizer "$m/tok512.bin" --stages 2
}

# SIGTERM (the launcher drains and stops its children), SIGKILL after 5 s.
stop_server() {
  kill -TERM "$1" 2>/dev/null || return 0
  local i
  for i in $(seq 50); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null
}

step_recycle() {
  local m=$MODELS/stories260K pf=$RESULTS/serve-http.ports.json
  rm -f "$pf"
  # Drafting on every step (--spec-policy always), so recycle's drafts are
  # verified whatever the scheduler would decide.
  specline serve --model "$m/stories260K.bin" --tokenizer "$m/tok512.bin" --stages 2 --device "$DEVICE" \
    --port 0 --port-file "$pf" --spec-policy always --startup-timeout-s 40 --drain-timeout-ms 2000 \
    > "$RESULTS/serve-http.log" 2>&1 &
  local spid=$!
  trap 'stop_server '"$spid" EXIT
  local grpc="" http="" metrics=""
  while (($(now) - STEP_T0 < 45)); do
    if [ -s "$pf" ]; then
      grpc=$(jget "$pf" 'j["gateway"]["grpc"]') && http=$(jget "$pf" 'j["gateway"]["http"]') &&
        metrics=$(jget "$pf" 'j["scheduler"]["metrics"]') && break
    fi
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.3
  done
  if [ -z "$grpc" ] || [ -z "$http" ]; then
    local why
    why=$(grep -m1 -iE 'error|fail|no usable' "$RESULTS/serve-http.log" | cut -c1-160)
    row recycle FAIL "the server did not start: ${why:-no port file}" serve-http.log
    row prefix FAIL "the server did not start: ${why:-no port file}" serve-http.log
    return
  fi

  # recycle: greedy, 128 tokens past EOS, two prompts; ids must be equal.
  local ok=1 figs=() i=0 p
  for p in "Once upon a time" "Lily and Ben went to the park. They saw a big dog."; do
    i=$((i + 1))
    for pol in ar recycle; do
      timeout -k 2 "$(left 20)" specline client --addr "127.0.0.1:$grpc" --prompt "$p" --max-tokens 128 \
        --ignore-eos --temperature 0 --policy "$pol" --print-token-ids \
        > "$RESULTS/recycle-$i-$pol.out" 2> "$RESULTS/recycle-$i-$pol.err" || ok=0
    done
    local a r
    a=$(sed -n 's/^token ids: //p' "$RESULTS/recycle-$i-ar.err")
    r=$(sed -n 's/^token ids: //p' "$RESULTS/recycle-$i-recycle.err")
    local n_a n_r same
    n_a=$(tr ',' '\n' <<< "$a" | grep -c . || true)
    n_r=$(tr ',' '\n' <<< "$r" | grep -c . || true)
    same=$(python3 -c 'import sys; a, r = sys.argv[1].split(","), sys.argv[2].split(",")
n = next((k for k in range(min(len(a), len(r))) if a[k] != r[k]), min(len(a), len(r)))
print(n)' "$a" "$r")
    [ -n "$a" ] && [ "$a" = "$r" ] && ((n_a == 128)) || ok=0
    local drafts tpv
    drafts=$(grep -m1 -oE '[0-9]+/[0-9]+ drafts accepted' "$RESULTS/recycle-$i-recycle.err")
    tpv=$(grep -m1 -oE '[0-9.]+ tokens per verification' "$RESULTS/recycle-$i-recycle.err")
    [ -n "$drafts" ] || { ok=0; drafts="no drafts"; }
    [ -n "$tpv" ] && drafts="$drafts, ${tpv/tokens per verification/tokens\/verification}"
    figs+=("p$i: $same/$n_a ids equal (recycle: $n_r), $drafts")
  done
  local fig
  fig=$(printf '%s; ' "${figs[@]}")
  fig=${fig%; }
  if ((ok)); then row recycle PASS "$fig" "recycle-*.err"; else row recycle FAIL "$fig" "recycle-*.err"; fi

  # prefix: two completions over the OpenAI API sharing a long prompt prefix.
  timeout -k 2 "$(left 8)" python3 - "$http" "$metrics" > "$RESULTS/prefix.json" 2> "$RESULTS/prefix.log" <<'PY'
import json, sys, urllib.request
http, metrics = sys.argv[1], sys.argv[2]
# Not how the recycle step's prompts or replies start, so nothing of it is
# cached before the first request.
prefix = ("In a small house by the sea lived an old fisherman and his grey cat. Every morning "
          "they walked to the harbour, and every evening they came back with a basket of fish. "
          "One windy day the boat would not move, and the cat looked at the fisherman and said, ") * 2
def ask(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)
out = {"first": ask(prefix + "\"I like this ball.\""), "second": ask(prefix + "\"Mom, look at me!\"")}
for k in ("first", "second"):
    u = out[k]["usage"]
    out[k + "_cached"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    out[k + "_prompt_tokens"] = u["prompt_tokens"]
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
    out["scheduler_metrics"] = {l.split()[0]: float(l.split()[1]) for l in text.splitlines()
                                if l.startswith("specline_prefix_cache_")}
except Exception as e:
    out["scheduler_metrics_error"] = str(e)
print(json.dumps(out, indent=2))
PY
  local rc=$? c1 c2 p2 hits
  c1=$(jget "$RESULTS/prefix.json" 'j["first_cached"]')
  c2=$(jget "$RESULTS/prefix.json" 'j["second_cached"]')
  p2=$(jget "$RESULTS/prefix.json" 'j["second_prompt_tokens"]')
  hits=$(jget "$RESULTS/prefix.json" 'int(j["scheduler_metrics"]["specline_prefix_cache_hits_total"])')
  fig="2nd request: ${c2:-?} of ${p2:-?} prompt tokens cached (1st: ${c1:-?}); scheduler hits_total ${hits:-?}"
  if ((rc == 0)) && [ -n "$c2" ] && ((c2 >= 16 && c2 < p2)); then
    row prefix PASS "$fig" prefix.json
  else
    row prefix FAIL "$(status_of "$rc"); $fig; $(tail -1 "$RESULTS/prefix.log" | cut -c1-120)" prefix.log
  fi

  # structured: a JSON-schema completion with logprobs on ar and recycle
  # (greedy: equal text; the grammar's mask over logits shipped from the GPU
  # head), top-1 logprob = the chosen token, and a penalised, biased request.
  timeout -k 2 "$(left 5)" python3 - "$http" > "$RESULTS/structured.json" 2> "$RESULTS/structured.log" <<'PY'
import json, sys, urllib.request
http = sys.argv[1]
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
          "mood": {"enum": ["happy", "sad", "sleepy"]}}, "required": ["name", "mood"],
          "additionalProperties": False}
def ask(extra):
    body = dict({"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0}, **extra)
    req = urllib.request.Request(f"http://127.0.0.1:{http}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["choices"][0]
out = {}
for pol in ("ar", "recycle"):
    c = ask({"policy": pol, "logprobs": 2,
             "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})
    lp = c["logprobs"]
    top1 = all(max(alts, key=alts.get) == tok for tok, alts in zip(lp["tokens"], lp["top_logprobs"]))
    out[pol] = {"text": c["text"], "finish": c["finish_reason"], "top1_is_token": top1,
                "tokens": lp["tokens"], "top": lp["top_logprobs"]}
text = out["ar"]["text"]
out["same_text"] = text == out["recycle"]["text"]
# bf16 GEMMs of 1 row (ar) and of k rows (recycle's verification) differ in
# the last bits: where the grammar leaves near-equal choices (whitespace
# spellings) greedy may split at a tie. Accepted only as a tie: at the first
# difference, recycle's token is within 0.05 nats of ar's in ar's own row.
a, r = out["ar"]["tokens"], out["recycle"]["tokens"]
first = next((i for i in range(min(len(a), len(r))) if a[i] != r[i]), None)
out["first_difference"] = first
if first is not None:
    alts = out["ar"]["top"][first]
    gap = alts[a[first]] - alts.get(r[first], float("-inf"))
    out["gap_nats"] = gap
    out["same_text"] = gap < 0.05
for pol in ("ar", "recycle"):
    out[pol]["tokens"] = len(out[pol]["tokens"])
    del out[pol]["top"]
out["valid"] = out["ar"]["finish"] != "stop" or set(json.loads(text)) == {"name", "mood"}
pen = ask({"presence_penalty": 1.5, "frequency_penalty": 0.5, "logit_bias": {"13": -100}, "max_tokens": 32})
out["penalised_tokens"] = len(pen["text"]) > 0
out["ok"] = out["same_text"] and out["valid"] and out["ar"]["top1_is_token"] and \
    out["recycle"]["top1_is_token"] and out["penalised_tokens"]
print(json.dumps(out, indent=2))
PY
  rc=$?
  local ok_s
  ok_s=$(jget "$RESULTS/structured.json" 'j["ok"]')
  fig="json schema ar = recycle: $(jget "$RESULTS/structured.json" 'j["same_text"]') (first difference $(jget "$RESULTS/structured.json" 'j["first_difference"]'), gap $(jget "$RESULTS/structured.json" 'round(j.get("gap_nats", 0), 4)')), valid: $(jget "$RESULTS/structured.json" 'j["valid"]'), top-1 logprob = token: $(jget "$RESULTS/structured.json" 'j["ar"]["top1_is_token"]')"
  if ((rc == 0)) && [ "$ok_s" = True ]; then
    row structured PASS "$fig" structured.json
  else
    row structured FAIL "$(status_of "$rc"); $fig; $(tail -1 "$RESULTS/structured.log" | cut -c1-120)" structured.log
  fi
}

step_kquant() {
  local f=$WORK/random-q4k.gguf t0=$SECONDS
  # K-quants need rows of a multiple of 256; the vocabulary (512 pieces) and
  # its tokenizer come from stories260K.gguf.
  timeout -k 2 20 specline make-random-model --out "$f" --format gguf --dtype Q4_K --dim 512 \
    --hidden-dim 1536 --layers 4 --heads 8 --kv-heads 4 --seq-len 1024 \
    --vocab-from "$MODELS/stories260K/stories260K.gguf" > "$RESULTS/kquant-make.log" 2>&1
  local rc=$?
  if ((rc != 0)); then
    row kquant FAIL "make-random-model --dtype Q4_K: $(status_of "$rc"); $(tail -1 "$RESULTS/kquant-make.log" | cut -c1-120)" kquant-make.log
    return
  fi
  echo "made $f ($(stat -c %s "$f") bytes) in $((SECONDS - t0)) s" >> "$RESULTS/kquant-make.log"
  demo_serve kquant kquant.log 32 --model "$f" --stages 1
}

# Issue 27's archs served end to end on 2 CUDA stages: a random Gemma 3 (a
# window of 16 that the 32 tokens cross, 5 local : 1 global layers, q/k norm,
# GeGLU, post-norms), Phi-4-mini-like Phi-3 (partial rotary, LongRoPE's long
# factors) and Qwen3-MoE (8 experts, top 2), each with stories260K's vocabulary.
step_archs() {
  local voc=$MODELS/stories260K/stories260K.gguf arch f extra
  for arch in gemma3 phi3 qwen3moe; do
    f=$WORK/random-$arch.gguf
    case $arch in
      gemma3) extra=(--layers 6 --sliding-window 16) ;;
      phi3) extra=(--layers 4 --rope-dim 48 --longrope-original 512) ;;
      qwen3moe) extra=(--layers 4 --experts 8 --experts-used 2 --expert-hidden-dim 256) ;;
    esac
    if ! timeout -k 2 20 specline make-random-model --out "$f" --format gguf --arch "$arch" --dim 512 \
        --hidden-dim 1024 --heads 8 --kv-heads 4 --seq-len 1024 --vocab-from "$voc" "${extra[@]}" \
        > "$RESULTS/arch-$arch-make.log" 2>&1; then
      row "arch-$arch" FAIL "make-random-model --arch $arch: $(tail -1 "$RESULTS/arch-$arch-make.log" | cut -c1-120)" "arch-$arch-make.log"
      continue
    fi
    demo_serve "arch-$arch" "arch-$arch.log" 32 --model "$f" --stages 2
  done
}

TINY_SHAPE=(--dim 2048 --hidden-dim 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000 --seq-len 4096)
MODEL_1B=random-tinyllama-bf16.gguf

step_model() {
  local f=$WORK/$MODEL_1B t0
  t0=$(date +%s.%N)
  rm -f "$f"
  timeout -k 2 "$(left 3)" specline make-random-model --out "$f" --format gguf --dtype BF16 \
    "${TINY_SHAPE[@]}" > "$RESULTS/model.log" 2>&1
  local rc=$?
  if ((rc == 0)); then
    local secs gb
    secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    gb=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\") / 1e9:.2f}')")
    row model PASS "TinyLlama shape (1.1B params), $gb GB bf16 GGUF in $secs s" model.log
  else
    rm -f "$f"
    row model FAIL "make-random-model: $(status_of "$rc"); $(tail -1 "$RESULTS/model.log" | cut -c1-120)" model.log
  fi
}

need_model() {
  [ -s "$WORK/$MODEL_1B" ] && return 0
  row "$1" FAIL "no $MODEL_1B (the model step failed or did not run)" model.log
  return 1
}

step_decode() {
  need_model decode || return
  local j=$RESULTS/decode.json
  timeout -k 2 "$(left 3)" cuda_bench --shapes none --model "$WORK/$MODEL_1B" --sections decode \
    --decode-tokens 128 --prompt 16 --prefill 512 --repeats 3 --json "$j" > "$RESULTS/decode.log" 2>&1
  local rc=$?
  local fig
  fig=$(jget "$j" '"{:.0f} tok/s ({:.3f} ms/token, graphs), {:.0f} GB/s = {:.0%} of read {:.0f} GB/s measured, {:.0%} of '"$H100_READ_GBS"' nominal; copy {:.0f} GB/s; load {:.1f} s".format(
    j["models"][0]["decode_graphs"]["tokens_per_s"], j["models"][0]["decode_graphs"]["ms_per_token"],
    j["models"][0]["decode_graphs"]["GBs"], j["models"][0]["decode_graphs"]["of_read_bw"], j["read_GBs"],
    j["models"][0]["decode_graphs"]["GBs"] / '"$H100_READ_GBS"', j["copy_GBs"], j["models"][0]["load_s"])')
  if ((rc == 0)) && [ -n "$fig" ]; then
    row decode PASS "$fig" decode.log
  else
    row decode FAIL "$(status_of "$rc"); $(tail -1 "$RESULTS/decode.log" | cut -c1-160)" decode.log
  fi
}

step_pipeline() {
  need_model pipeline || return
  local j=$RESULTS/pipeline-n2.json
  timeout -k 2 "$(left 3)" spec_bench --device cuda:0 --model "$WORK/$MODEL_1B" --stages 2 \
    --alphas 0,0.8,1 --max-tokens 64 --repeats 2 --no-auto --json "$j" > "$RESULTS/pipeline-n2.log" 2>&1
  local rc=$?
  local fig
  fig=$(jget "$j" '"; ".join("{} a={:g}: {:.2f}x (theory {:.2f}, L\x27acc {:.2f})".format(r["policy"], r["alpha"], r["speedup"], r["theory"], r["equivalent_acceptance_length"]) for r in j["results"] if r["alpha"] == 1) + "; mismatches {}".format(j["mismatches"])')
  if ((rc == 0)) && [ -n "$fig" ]; then
    row pipeline PASS "n=2: $fig" pipeline-n2.log
  else
    # The deployment's own logs, when spec_bench names them.
    local d
    d=$(grep -m1 -oE '/tmp/specline-spec-bench-[A-Za-z0-9]+' "$RESULTS/pipeline-n2.log")
    [ -n "$d" ] && cp "$d/processes.log" "$RESULTS/pipeline-processes.log" 2>/dev/null
    row pipeline FAIL "$(status_of "$rc"); ${fig:-$(tail -1 "$RESULTS/pipeline-n2.log" | cut -c1-160)}" pipeline-n2.log
  fi
}

step_sanitizer() {
  # memcheck over a representative subset (the full suites under the
  # sanitizer take tens of minutes).
  local results=() ok=1 spec
  for spec in "cuda_kernels_test:*" "cuda_attention_test:*" \
              "cuda_runtime_test:*llama_gqa_bf16*:*qwen3*bf16*:*GraphReplay*:*DeviceHandOff*:*BadBatches*"; do
    local t=${spec%%:*} only=${spec#*:}
    timeout -k 2 $(($(left 5) / 2)) compute-sanitizer --tool memcheck --error-exitcode 9 "$t" \
      --gtest_filter="$only" > "$RESULTS/memcheck-$t.log" 2>&1 || ok=0
    results+=("$t: $(grep -E 'ERROR SUMMARY' "$RESULTS/memcheck-$t.log" | tail -1 | sed 's/=* *//')")
  done
  local fig
  fig=$(printf '%s; ' "${results[@]}")
  fig=${fig%; }
  if ((ok)); then row memcheck PASS "$fig" "memcheck-*.log"; else row memcheck FAIL "$fig" "memcheck-*.log"; fi
}

step_bench() {
  timeout -k 2 "$(left 3)" cuda_bench --json "$RESULTS/cuda_bench.json" > "$RESULTS/cuda_bench.log" 2>&1
  local rc=$?
  if ((rc == 0)); then row bench PASS "$(head -1 "$RESULTS/cuda_bench.log")" cuda_bench.log
  else row bench FAIL "$(status_of "$rc"); $(tail -1 "$RESULTS/cuda_bench.log" | cut -c1-160)" cuda_bench.log; fi
}

step_torch() {
  timeout -k 2 "$(left 3)" python3 bench/torch_peer.py --compile --json "$RESULTS/torch_peer.json" \
    > "$RESULTS/torch_peer.log" 2>&1
  local rc=$?
  if ((rc == 0)); then row torch PASS "$(tail -1 "$RESULTS/torch_peer.log" | cut -c1-160)" torch_peer.log
  else row torch FAIL "$(status_of "$rc"); $(tail -1 "$RESULTS/torch_peer.log" | cut -c1-160)" torch_peer.log; fi
}

# --- run ---------------------------------------------------------------------------------

summarize() {
  python3 - "$ROWS" "$RESULTS" "$2" "$DEADLINE_S" "$1" <<'PY'
import json, os, sys
rows_path, results, seconds, deadline, steps = sys.argv[1:6]
rows = []
for line in open(rows_path):
    name, result, figure, log, secs = line.rstrip("\n").split("\t")
    rows.append({"step": name, "result": result, "key_figure": figure, "log": log, "seconds": int(secs)})
gpu = open(os.path.join(results, "gpu.txt")).readline().strip() if os.path.exists(
    os.path.join(results, "gpu.txt")) else ""
summary = {"gpu": gpu, "steps": steps, "seconds": int(seconds), "deadline_s": int(deadline),
           "passed": all(r["result"] == "PASS" for r in rows), "rows": rows}
json.dump(summary, open(os.path.join(results, "summary.json"), "w"), indent=2)
w = [max(len(h), *(len(str(r[k])) for r in rows)) for h, k in
     (("step", "step"), ("result", "result"), ("s", "seconds"))]
lines = [f"gpu_check: {gpu or 'no GPU'}; {int(seconds)} s of {deadline}; "
         f"{sum(r['result'] == 'PASS' for r in rows)}/{len(rows)} passed"]
head = f"{'step':<{w[0]}} | {'result':<{w[1]}} | {'s':>{w[2]}} | key figure | log (gpu-results/)"
lines += [head, "-" * len(head)]
for r in rows:
    lines.append(f"{r['step']:<{w[0]}} | {r['result']:<{w[1]}} | {r['seconds']:>{w[2]}} | "
                 f"{r['key_figure']} | {r['log']}")
open(os.path.join(results, "summary.txt"), "w").write("\n".join(lines) + "\n")
PY
}

run() {
  set +e
  local steps=${1:-$DEFAULT_STEPS}
  export DEADLINE_S=${GPU_CHECK_DEADLINE_S:-560}
  export DEADLINE=$(($(now) + DEADLINE_S))
  local t_run
  t_run=$(now)
  export RESULTS=$PWD/gpu-results
  export WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
  export ROWS=$RESULTS/rows.tsv
  rm -rf "$RESULTS"
  mkdir -p "$RESULTS" "$WORK"
  : > "$ROWS"
  date -u +%FT%TZ > "$RESULTS/started"
  # Unpack (a row of its own: it counts against the 10 minutes too).
  STEP_T0=$(now)
  if [ -f "$CARRY/carry.tar.xz" ]; then
    chmod -R u+w "$STAGE" 2>/dev/null
    rm -rf "$STAGE" && mkdir -p "$STAGE"
    if timeout -k 2 30 bash -c "xz -dc '$CARRY/carry.tar.xz' | tar -C '$STAGE' -xf -" \
         > "$RESULTS/unpack.log" 2>&1; then
      row unpack PASS "$(du -sh "$STAGE" | cut -f1) from $(du -h "$CARRY/carry.tar.xz" | cut -f1)" unpack.log
    else
      row unpack FAIL "$(tail -1 "$RESULTS/unpack.log")" unpack.log
    fi
  elif [ -d "$STAGE/bin" ]; then
    row unpack PASS "no archive; using $STAGE as packed" ""
  else
    row unpack FAIL "nothing packed: run 'pack' first" ""
  fi
  local cuda_libs
  cuda_libs=$(cuda_library_path)
  export LD_LIBRARY_PATH="$PWD/$STAGE/lib:$cuda_libs:${LD_LIBRARY_PATH:-}"
  export SPECLINE_SHARED_MODELS=$PWD/$STAGE/models MODELS=$PWD/$STAGE/models
  export PATH="$PWD/$STAGE/bin:$PWD/$STAGE/bin/bench:$PATH"
  # decode and pipeline need the model step's file.
  if [[ ,$steps, =~ ,(decode|pipeline), ]] && [[ ! ,$steps, == *,model,* ]] && [ ! -s "$WORK/$MODEL_1B" ]; then
    steps="model,$steps"
  fi
  if [ -d "$STAGE/bin" ]; then
    local seen=, list s
    IFS=, read -ra list <<< "$steps"
    for s in "${list[@]}"; do
      [ "$s" = prefix ] && s=recycle
      [[ $seen == *,$s,* ]] && continue
      seen="$seen$s,"
      if [ -z "${BUDGET[$s]:-}" ]; then
        STEP_T0=$(now) row "$s" FAIL "unknown step (known: ${!BUDGET[*]})" ""
        continue
      fi
      run_step "$s"
    done
  fi
  summarize "$steps" $(($(now) - t_run))
  if [ -n "${OUT:-}" ]; then
    tar -C "$RESULTS" -czf "$OUT/gpu-results.tgz" .
    cp "$RESULTS/summary.json" "$RESULTS/summary.txt" "$OUT/"
  fi
  echo
  cat "$RESULTS/summary.txt"
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] else 1)' \
    "$RESULTS/summary.json"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  _step) set +e; "step_$2" ;;
  *) sed -n '2,48p' "$0"; exit 2 ;;
esac
