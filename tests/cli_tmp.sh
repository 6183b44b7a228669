#!/usr/bin/env bash
# cli_tmp.sh: the emulator's fatune-emu-* folders do not outlive fatune.
#  - a main job stopped by SIGTERM or SIGINT while the host compiler works
#    leaves no fatune-emu-* folder (nor the compiler's cc* temporaries) in
#    its $TMPDIR;
#  - a new folder sweeps this user's stale ones (older than an hour, lock
#    free) and keeps one whose lock a live process holds, and young ones.
#  - a $TMPDIR others may write that lacks the sticky bit is refused with
#    one line on stderr, and nothing is made in it.
#
# usage: FATUNE=build/fatune bash tests/cli_tmp.sh
set -u

NAME=cli_tmp
. "$(dirname "$0")/cli_lib.sh"
# The sweep's check holds a lock with flock(1): without it the test cannot
# run whole, and says so rather than pass with a part left out.
if ! command -v flock >/dev/null 2>&1; then
  echo "SKIPPED: the sweep's check needs flock(1) (util-linux)"
  exit 77
fi

export TMPDIR="$tmp/t"
mkdir "$TMPDIR"

py() { python3 "$(dirname "$0")/npy_tool.py" "$@"; }
py write "$tmp/q.npy" f4 1 10 8 && py write "$tmp/k.npy" f4 2 12 8 && py write "$tmp/v.npy" f4 3 12 8
py write "$tmp/q2.npy" f2 1 64 64 && py write "$tmp/k2.npy" f2 2 64 64 && py write "$tmp/v2.npy" f2 3 64 64

# stop_during_compile SIG LABEL ARGS...: start fatune ARGS, wait for its
# folder to hold kernel source (the host compiler's turn: the main job
# compiles with NVRTC first), signal it.
stop_during_compile() {
  local sig=$1 label="SIG$1 during host compilation: $2"
  shift 2
  set -m   # a background job of its own, which does not ignore SIGINT
  "$FATUNE" "$@" >"$tmp/out" 2>"$tmp/err" &
  local pid=$!
  set +m
  local i seen=""
  for ((i = 0; i < 4800; i++)); do
    if compgen -G "$TMPDIR/fatune-emu-*/k*.c" >/dev/null; then seen=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  sleep 0.1
  kill -"$sig" "$pid" 2>/dev/null
  wait "$pid"
  local rc=$?
  local left
  left=$(ls -A "$TMPDIR")
  if [ -z "$seen" ]; then fail "$label" "no fatune-emu-*/k*.c appeared: $(tail -n 3 "$tmp/err")"
  elif [ "$rc" -lt 128 ]; then fail "$label" "exit $rc: it ended before the signal"
  elif [ -n "$left" ]; then fail "$label" "left in TMPDIR: $left"
  else pass "$label: exit $rc, TMPDIR empty"; fi
  rm -rf "${TMPDIR:?}"/*
}
stop_during_compile TERM "the main job" --backend emu --dim 64 --jobs 2 --db "$tmp/tune.db"
stop_during_compile INT "run, fp16" run --backend emu --dtype fp16 --config 'block_m=64' \
  --q "$tmp/q2.npy" --k "$tmp/k2.npy" --v "$tmp/v2.npy" --out "$tmp/o2.npy"

# The sweep. Stale: two hours old, lock free. Live: as old, its lock held.
mkdir "$TMPDIR/fatune-emu-stale1" "$TMPDIR/fatune-emu-live01" "$TMPDIR/fatune-emu-young1" \
      "$TMPDIR/fatune-emu-nolock"
for d in stale1 live01 young1; do
  : >"$TMPDIR/fatune-emu-$d/lock"
  : >"$TMPDIR/fatune-emu-$d/k0.c"
done
: >"$TMPDIR/fatune-emu-nolock/k0.so"
: >"$TMPDIR/fatune-emu-oldobj"
# Its output away from the test's: ctest waits for whatever holds that open.
flock "$TMPDIR/fatune-emu-live01/lock" sleep 120 >/dev/null 2>&1 &
holder=$!
# Until flock holds it (a loaded machine may take longer than any fixed sleep).
for ((i = 0; i < 600; i++)); do
  flock -n "$TMPDIR/fatune-emu-live01/lock" true 2>/dev/null || break
  sleep 0.05
done
touch -d '2 hours ago' "$TMPDIR"/fatune-emu-{stale1,live01,nolock,oldobj}
"${TIMEOUT[@]}" "$FATUNE" run --backend emu --config 'block_m=4' --q "$tmp/q.npy" --k "$tmp/k.npy" \
  --v "$tmp/v.npy" --out "$tmp/o.npy" 2>"$tmp/err" || fail "a run to sweep" "$(cat "$tmp/err")"
[ ! -e "$TMPDIR/fatune-emu-stale1" ] && pass "a stale, unlocked folder is swept" ||
  fail "a stale, unlocked folder is swept" "$(ls -A "$TMPDIR")"
[ ! -e "$TMPDIR/fatune-emu-nolock" ] && [ ! -e "$TMPDIR/fatune-emu-oldobj" ] &&
  pass "a stale folder without a lock file, and a stale object, are swept" ||
  fail "a stale folder without a lock file, and a stale object, are swept" "$(ls -A "$TMPDIR")"
[ -f "$TMPDIR/fatune-emu-live01/k0.c" ] && pass "an old folder whose lock is held is kept" ||
  fail "an old folder whose lock is held is kept" "$(ls -A "$TMPDIR")"
[ -f "$TMPDIR/fatune-emu-young1/k0.c" ] && pass "a young folder is kept" ||
  fail "a young folder is kept" "$(ls -A "$TMPDIR")"
pkill -P "$holder" 2>/dev/null   # flock's sleep, which would outlive it
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

open_tmp="$tmp/open"
mkdir "$open_tmp" && chmod 0777 "$open_tmp"
TMPDIR="$open_tmp" "${TIMEOUT[@]}" "$FATUNE" run --backend emu --config 'block_m=4' \
  --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v.npy" --out "$tmp/o2.npy" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$open_tmp.*no sticky bit" "$tmp/err" &&
  [ -z "$(ls -A "$open_tmp")" ]
check "a 0777 \$TMPDIR is refused in one line" $? "exit $rc: $(cat "$tmp/err"); in it: $(ls -A "$open_tmp")"

finish
