# cli_lib.sh: what the command-line test scripts share. Source it with
# NAME set to the script's name; FATUNE names the binary under test.
# Gives $tmp (removed at exit), $TIMEOUT (a command prefix), the counters
# and pass/fail/check/run/refused/finish.

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

# run NAME ARGS...: fatune ARGS, its stdout and stderr into $tmp/NAME.out
# and .err, its status into rc. Scripts that need another define their own.
run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
}

# refused NAME PATTERN ARGS...: exit 2 and one line on stderr holding PATTERN.
refused() {
  local name=$1 pattern=$2
  shift 2
  run "$name" "$@"
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/$name.err")" -eq 1 ] && grep -q -- "$pattern" "$tmp/$name.err"
  check "refused in one line: $*" $? "exit $rc: $(cat "$tmp/$name.err")"
}

# banner FILE ARGS...: the main job's first lines, its stderr up to the
# "fatune: problem" line, into FILE; the job is stopped as soon as it has
# said them (the banner comes before any work).
banner() {
  local file=$1
  shift
  "$FATUNE" "$@" 2>"$file" >/dev/null </dev/null &
  local pid=$!
  for _ in $(seq 100); do grep -q '^fatune: problem' "$file" && break; sleep 0.1; done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# The closing line ctest and CI read, and the exit status.
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
