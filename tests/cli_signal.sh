#!/usr/bin/env bash
# cli_signal.sh: SIGTERM, SIGINT or SIGHUP stop fatune at once, even while
# NVRTC compiles on other threads (its own handlers once hung fatune in
# exit there): the process ends within seconds, killed by that signal, and
# leaves no fatune-emu-* folder in its $TMPDIR. Rounds at varied delays
# after NVRTC's first compile has begun (its builtins library is loaded):
#  - fatune compile, the default space, on two threads;
#  - the main job on the emulator (NVRTC, then the host compiler).
# A signal while the host compiler works is cli_tmp's. While NVRTC
# compiles, every thread but the one that waits for the signals blocks them
# (Linux shows the waiting one unblocked while it waits).
#
# usage: FATUNE=build/fatune bash tests/cli_signal.sh
set -u

NAME=cli_signal
. "$(dirname "$0")/cli_lib.sh"
if [ ! -r /proc/self/maps ]; then
  echo "SKIPPED: needs /proc/PID/maps to see when NVRTC has started"
  exit 77
fi

export TMPDIR="$tmp/t"
mkdir "$TMPDIR"

# masks PID: how many of its threads block SIGTERM, and how many do not.
masks() {
  local bit=$((1 << ($(kill -l TERM) - 1))) blocked=0 open=0 t m
  for t in /proc/"$1"/task/*/status; do
    m=$(awk '/^SigBlk:/ { print $2 }' "$t" 2>/dev/null) || continue
    [ -n "$m" ] || continue
    if (( 16#$m & bit )); then blocked=$((blocked + 1)); else open=$((open + 1)); fi
  done
  echo "$blocked $open"
}

# stop SIG DELAY LABEL ARGS...: start fatune ARGS, wait for NVRTC's first
# compile, DELAY seconds more, signal it; it must end within 10 s. With
# MASKS=1, first the threads' masks.
stop() {
  local sig=$1 delay=$2 label="SIG$1 $2 s into NVRTC: $3"
  shift 3
  set -m   # a background job of its own, which does not ignore SIGINT
  "$FATUNE" "$@" >"$tmp/out" 2>"$tmp/err" &
  local pid=$!
  set +m
  local i seen="" gone=""
  for ((i = 0; i < 600; i++)); do
    if grep -q 'libnvrtc-builtins' "/proc/$pid/maps" 2>/dev/null; then seen=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ "${MASKS:-0}" = 1 ] && [ -n "$seen" ]; then
    local blocked open
    read -r blocked open < <(masks "$pid")
    [ "$blocked" -ge 2 ] && [ "$open" -le 1 ]
    check "while NVRTC compiles, every thread but one blocks SIGTERM" $? \
      "$blocked threads block it, $open do not"
  fi
  sleep "$delay"
  kill -"$sig" "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || { gone=1; break; }
    sleep 0.1
  done
  [ -n "$gone" ] || kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null   # bash's own line on how the job ended
  local rc=$? want=$((128 + $(kill -l "$sig")))
  local left
  left=$(ls -A "$TMPDIR")
  if [ -z "$seen" ]; then fail "$label" "NVRTC never started: exit $rc: $(tail -n 3 "$tmp/err")"
  elif [ -z "$gone" ]; then fail "$label" "still running 10 s after the signal (hung)"
  elif [ "$rc" -ne "$want" ]; then fail "$label" "exit $rc, want $want: $(tail -n 3 "$tmp/err")"
  elif [ -n "$left" ]; then fail "$label" "left in TMPDIR: $left"
  else pass "$label: exit $rc, TMPDIR empty"; fi
  rm -rf "${TMPDIR:?}"/*
}

compile=(compile --dim 128 --dtype bf16 --arch sm_90 --jobs 2)
MASKS=1 stop TERM 0 "fatune compile" "${compile[@]}"
stop TERM 0.3 "fatune compile" "${compile[@]}"
stop TERM 0.8 "fatune compile" "${compile[@]}"
stop INT 0.1 "fatune compile" "${compile[@]}"
stop HUP 0.5 "fatune compile" "${compile[@]}"
main=(--backend emu --dtype fp32 --dim 64 --seq 128 --jobs 2 --db "$tmp/tune.db")
stop TERM 0.2 "the main job on the emulator" "${main[@]}"
stop INT 1.5 "the main job on the emulator" "${main[@]}"

finish
