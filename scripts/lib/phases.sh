# Time bookkeeping for scripts/test.sh: each phase's start, wall time, CPU
# time (user + sys of everything it ran) and outcome, printed as one table
# when the script exits, passed or failed, so a slow or broken CI run says
# where its time went, and a build's CPU seconds (what more cores or a busier
# machine do not change) can be compared between runs.
#   phase NAME CMD...      runs CMD in the foreground
#   phase_bg NAME CMD...   runs CMD in the background (log: $PHASE_DIR/NAME.log);
#                          phase_wait NAME waits for it and fails as it failed
PHASE_T0=$SECONDS
PHASE_DIR=$(mktemp -d)
PHASE_CURRENT=""

_phase_record() {  # NAME START END STATUS [CPU]
  printf '%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" "${5:-}" >> "$PHASE_DIR/table"
}

# Writes to FILE the CPU seconds of this shell and its waited-for children,
# from `times` ("0m1.5s 0m0.2s" for the shell, then its children), which
# must run in this shell itself: in a pipe or $(...) it would count a fresh
# subshell's.
_phase_cpu() {
  times > "$1.times"
  tr ' ' '\n' < "$1.times" | awk -F'[ms]' '{ t += $1 * 60 + $2 } END { printf "%.0f", t }' > "$1"
}

# The command runs in a subshell of its own, whose `times` count only what
# it ran: a background phase that ends meanwhile is not charged to it.
phase() {
  local name=$1 start=$((SECONDS - PHASE_T0)) rc=0
  shift
  PHASE_CURRENT="$name|$start"
  echo "==== phase $name (at $((start / 60))m$((start % 60))s)"
  ( "$@"; rc=$?; _phase_cpu "$PHASE_DIR/$name.cpu"; exit $rc ) || rc=$?
  PHASE_CURRENT=""
  _phase_record "$name" "$start" "$((SECONDS - PHASE_T0))" "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")" \
    "$(cat "$PHASE_DIR/$name.cpu" 2>/dev/null)"
  return $rc
}

phase_bg() {
  local name=$1
  shift
  echo "==== phase $name (background at $(((SECONDS - PHASE_T0) / 60))m; log $PHASE_DIR/$name.log)"
  echo $((SECONDS - PHASE_T0)) > "$PHASE_DIR/$name.start"
  ( trap - EXIT; phase "$name" "$@" ) > "$PHASE_DIR/$name.log" 2>&1 &
  echo $! > "$PHASE_DIR/$name.pid"
}

phase_wait() {
  local name=$1 rc=0
  wait "$(cat "$PHASE_DIR/$name.pid")" || rc=$?
  if [ $rc != 0 ]; then
    echo "==== background phase $name failed ($rc); the end of its log:"
    tail -n 80 "$PHASE_DIR/$name.log"
  fi
  return $rc
}

# Ends a background phase that is still running, with everything it started
# (a failed foreground phase must not leave a sanitizer build running on).
_phase_kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    _phase_kill_tree "$child"
  done
  kill "$1" 2>/dev/null || true
}

phase_table() {
  local now=$((SECONDS - PHASE_T0)) pidfile
  for pidfile in "$PHASE_DIR"/*.pid; do
    [ -f "$pidfile" ] || continue
    if kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      _phase_kill_tree "$(cat "$pidfile")"
      _phase_record "$(basename "$pidfile" .pid)" "$(cat "${pidfile%.pid}.start")" "$now" "stopped (the run failed)"
    fi
  done
  [ -n "$PHASE_CURRENT" ] && _phase_record "${PHASE_CURRENT%%|*}" "${PHASE_CURRENT#*|}" "$now" "interrupted"
  echo
  echo "==== phase times (phases marked & ran in the background, overlapping the"
  echo "     ones beside them; cpu: user + sys seconds of what the phase ran)"
  printf '%-28s %9s %9s %7s  %s\n' phase start wall cpu result
  sort -t'|' -k2,2n "$PHASE_DIR/table" 2>/dev/null | while IFS='|' read -r name start end status cpu; do
    local bg=""
    [ -f "$PHASE_DIR/$name.pid" ] && bg=" &"
    printf '%-28s %6dm%02ds %6dm%02ds %6ss  %s\n' "$name$bg" $((start / 60)) $((start % 60)) \
      $(((end - start) / 60)) $(((end - start) % 60)) "${cpu:--}" "$status"
  done
  printf '%-28s %9s %6dm%02ds\n' total "" $((now / 60)) $((now % 60))
}
trap phase_table EXIT
