# cli_lib.sh: what the command-line test scripts share. Source it with
# NAME set to the script's name; FATUNE names the binary under test.
# Gives $tmp (removed at exit), $TIMEOUT (a command prefix), the counters
# and pass/fail/check/finish.

FATUNE=${FATUNE:-build/fatune}
if [ ! -x "$FATUNE" ]; then
  echo "$NAME: FATUNE='$FATUNE' is not an executable" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fatune-$NAME.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Keep any database or cache the command might touch away from the user's.
export XDG_CACHE_HOME="$tmp/cache"
export XDG_CONFIG_HOME="$tmp/config" FATUNE_KEY=""

TIMEOUT=()
if command -v timeout >/dev/null 2>&1; then TIMEOUT=(timeout "${TIMEOUT_S:-60}"); fi

passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'ok    %s\n' "$1"; }
fail() { failed=$((failed + 1)); printf 'FAIL  %s: %s\n' "$1" "$2"; }
# check NAME STATUS DETAIL: passes when STATUS (captured before, as rc=$?) is 0.
check() { if [ "$2" -eq 0 ]; then pass "$1"; else fail "$1" "$3"; fi; }

# The closing line ctest and CI read, and the exit status.
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
