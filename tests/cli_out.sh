#!/usr/bin/env bash
# cli_out.sh: fatune run writes --out and --lse only to a new file or over
# a regular file, through a temporary that mkstemp makes next to it: a
# symbolic link planted at the temporary's old, predictable name is never
# followed, and a destination that is a FIFO, a directory, a device or a
# symbolic link is refused with one line and exit 2, left as it was.
#
# usage: FATUNE=build/fatune bash tests/cli_out.sh
set -u

NAME=cli_out
. "$(dirname "$0")/cli_lib.sh"

if ! command -v python3 >/dev/null 2>&1; then
  echo "$NAME: SKIPPED (needs python3 to write the inputs)"
  exit 77
fi
py() { python3 "$(dirname "$0")/npy_tool.py" "$@"; }
py write "$tmp/q.npy" f4 1 10 8 && py write "$tmp/k.npy" f4 2 12 8 && py write "$tmp/v.npy" f4 3 12 8
IN=(run --backend emu --config 'block_m=4' --q "$tmp/q.npy" --k "$tmp/k.npy" --v "$tmp/v.npy")

is_npy() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(head -c 6 "$1" | tail -c 5)" = "NUMPY" ]; }

# refused LABEL NEEDLE ARGS...: exit 2, one line naming the destination.
refused() {
  local label=$1 needle=$2
  shift 2
  "${TIMEOUT[@]}" "$FATUNE" "${IN[@]}" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$? first
  first=$(head -n 1 "$tmp/err")
  if [ "$rc" -ne 2 ]; then fail "$label" "exit $rc, want 2: $(head -c 300 "$tmp/err")"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || [[ "$first" != "fatune: "*"$needle"* ]]; then
    fail "$label" "want one line naming '$needle': $(head -c 300 "$tmp/err")"
  else pass "$(printf '%-44s %s' "$label" "$first")"; fi
}

# A plain run: both files written, readable by the umask.
umask 022
if "${TIMEOUT[@]}" "$FATUNE" "${IN[@]}" --out "$tmp/o.npy" --lse "$tmp/l.npy" 2>"$tmp/err" &&
   is_npy "$tmp/o.npy" && is_npy "$tmp/l.npy" && [ "$(stat -c %a "$tmp/o.npy")" = 644 ]; then
  pass "run writes --out and --lse (mode 644 under umask 022)"
else
  fail "run writes --out and --lse" "$(head -c 300 "$tmp/err"; ls -l "$tmp")"
fi

# A symbolic link planted at the old temporary name, PATH.tmp.PID: the
# subshell's pid is the one fatune runs with, through exec (so no timeout
# wrapper here: it would run fatune as its child, under another pid).
printf 'keep' >"$tmp/victim"
(
  ln -s "$tmp/victim" "$tmp/o2.npy.tmp.$BASHPID"
  exec "$FATUNE" "${IN[@]}" --out "$tmp/o2.npy" 2>"$tmp/err"
)
rc=$?
if [ "$rc" -eq 0 ] && is_npy "$tmp/o2.npy" && [ "$(cat "$tmp/victim")" = keep ]; then
  pass "a symbolic link at PATH.tmp.PID is not followed"
else
  fail "a symbolic link at PATH.tmp.PID is not followed" \
    "exit $rc, victim now '$(head -c 20 "$tmp/victim" | od -An -c | head -n 1)'"
fi
ls "$tmp" | grep -q 'o2\.npy\.tmp\.[A-Za-z0-9]\{6\}$' && fail "no temporary left" "$(ls "$tmp")" ||
  pass "no mkstemp temporary is left"

# Destinations that are not regular files.
mkfifo "$tmp/fifo"
refused "--out a FIFO" "is a FIFO" --out "$tmp/fifo"
[ -p "$tmp/fifo" ] && pass "the FIFO is still a FIFO" || fail "the FIFO is still a FIFO" "replaced"
refused "--lse a FIFO" "is a FIFO" --out "$tmp/o3.npy" --lse "$tmp/fifo"
[ -p "$tmp/fifo" ] && [ ! -e "$tmp/o3.npy" ] && pass "--lse refused before anything is written" ||
  fail "--lse refused before anything is written" "$(ls -l "$tmp")"
mkdir "$tmp/adir"
refused "--out a directory" "is a directory" --out "$tmp/adir"
[ -d "$tmp/adir" ] && pass "the directory is still a directory" || fail "the directory" "replaced"
ln -s "$tmp/victim" "$tmp/link.npy"
refused "--out a symbolic link to a file" "symbolic link" --out "$tmp/link.npy"
[ -L "$tmp/link.npy" ] && [ "$(cat "$tmp/victim")" = keep ] &&
  pass "the link and the file it names are unchanged" ||
  fail "the link and the file it names are unchanged" "$(ls -l "$tmp")"

# A character device: a private copy of /dev/null where mknod is allowed,
# and the real one only once the private one was refused.
if mknod "$tmp/null" c 1 3 2>/dev/null; then
  refused "--out a character device" "is a device" --out "$tmp/null"
  if [ -c "$tmp/null" ]; then
    pass "the private device is still a device"
    refused "--out /dev/null" "is a device" --out /dev/null
    [ -c /dev/null ] && pass "/dev/null is still a character device" ||
      fail "/dev/null is still a character device" "$(ls -l /dev/null)"
  else
    fail "the private device is still a device" "replaced; /dev/null not tried"
  fi
else
  echo "note: mknod not permitted here; the device cases are left out"
fi

finish
