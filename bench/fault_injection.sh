#!/usr/bin/env bash
# The fault-injection suite at length: every fault of tests/serving_fault_test.cc
# (kill / SIGSTOP each role under 8 streams) repeated ROUNDS times (default 5),
# printing the per-fault table and writing it as JSON.
#   bash bench/fault_injection.sh [ROUNDS] [OUT.json]
# Needs a build (scripts/setup.sh). About 40 s per round on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
OUT=${2:-bench/results/fault_injection_$(date +%F).json}
BIN=${SPECLINE_BUILD_DIR:-build}/tests/serving_fault_test
[ -x "$BIN" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
SPECLINE_FAULT_ROUNDS=$ROUNDS SPECLINE_FAULT_REPORT=$OUT "$BIN" | grep -E '^fault|^\[  (PASSED|FAILED)'
echo "wrote $OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"\n{r['rounds']} rounds x {r['streams']} streams per fault\n")
print("| fault | tried | succeeded | failed fast (UNAVAILABLE) | hung | restarted | next request after (max) |")
print("|---|---|---|---|---|---|---|")
for f in r["faults"]:
    print(f"| {f['fault']} | {f['tried']} | {f['succeeded']} | {f['failed_fast']} | {f['hung']} | "
          f"{f['restarted']} | {f['max_recovery_s']:.2f} s |")
PY
