#!/usr/bin/env bash
# cli_tmpfull.sh: a $TMPDIR with no room is the environment's failure, not
# the variant's. The main job on the emulator with $TMPDIR on a full tmpfs
# shows the variant env_error with the reason, records no trial, and exits
# non-zero; the same command with room measures and records it.
# A tmpfs needs mount(2): the script runs in a mount namespace of its own
# (unshare, as root or in a user namespace), else it is SKIPPED.
#
# usage: FATUNE=build/fatune bash tests/cli_tmpfull.sh
set -u

NAME=cli_tmpfull
if [ -z "${CLI_TMPFULL_NS:-}" ]; then
  for how in -m -rm; do
    if unshare "$how" true 2>/dev/null; then
      CLI_TMPFULL_NS=1 exec unshare "$how" bash "$0" "$@"
    fi
  done
  echo "SKIPPED: no mount namespace (unshare -m or -rm) for a small tmpfs"
  exit 77
fi
. "$(dirname "$0")/cli_lib.sh"

mkdir "$tmp/full"
if ! mount -t tmpfs -o size=64k tmpfs "$tmp/full" 2>"$tmp/mount.err"; then
  echo "SKIPPED: cannot mount a tmpfs: $(cat "$tmp/mount.err")"
  exit 77
fi
trap 'umount "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT

export FATUNE_DB="$tmp/t.db"
v=$("$FATUNE" list --dim 64 --dtype fp32 | head -n 1 | cut -d' ' -f1)
args=(--backend emu --dim 64 --seq 32 --emu-seq 32 --dtype fp32 --variant "$v" --json)
# trials: the statuses the database holds.
trials() {
  "$FATUNE" export --format json --db "$FATUNE_DB" |
    python3 -c 'import json, sys; print(" ".join(r["status"] for r in json.load(sys.stdin)))'
}

TMPDIR="$tmp/full" "${TIMEOUT[@]}" "$FATUNE" "${args[@]}" >"$tmp/full.out" 2>"$tmp/full.err"
rc=$?
got=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print(r["status"], r["message"])' "$tmp/full.out" 2>&1)
[ "$rc" -ne 0 ] && grep -q "^env_error .*No space left on device" <<<"$got" &&
  grep -q "1 env_error (the environment failed, not the variant" "$tmp/full.err"
check "a full \$TMPDIR: env_error, with the reason" $? "exit $rc: $got; $(tail -n 2 "$tmp/full.err")"
got=$(trials)
[ -z "$got" ]
check "a full \$TMPDIR: no trial recorded" $? "recorded: $got"

"${TIMEOUT[@]}" "$FATUNE" "${args[@]}" >"$tmp/room.out" 2>"$tmp/room.err"
rc=$?
got=$(trials)
[ "$rc" -eq 0 ] && [ "$got" = ok ]
check "with room again: the variant is measured and recorded" $? "exit $rc, recorded '$got': $(tail -n 2 "$tmp/room.err")"
finish
