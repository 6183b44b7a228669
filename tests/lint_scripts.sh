#!/usr/bin/env bash
# lint_scripts.sh: the test scripts' checks must be able to fail.
#
# In `check "ran: $(head out)" $? ...` the command substitution in the
# message runs before `$?` is expanded, so `$?` is the substitution's
# status, 0, and the check passes whatever the command did. The status
# must be taken first: `rc=$?` on the line after the command, then `$rc`.
#
# Flagged: a simple command (a logical line split at ; & | outside quotes
# and substitutions, continuation lines joined) with a `$(` before a `$?`.
# Arithmetic `$((...))` sets no status and single quotes expand nothing:
# neither is counted.
#
# usage: bash tests/lint_scripts.sh [FILE...]
#   no FILE: a self-test on planted lines, then every tests/*.sh
set -u

# lint FILE...: print FILE:LINE: TEXT for each offending command; exit 1 if any.
lint() {
  awk '
    function segments(s,    i, c, n, sq, dq, depth, stk, seg, out) {
      n = 0; sq = 0; dq = 0; depth = 0; seg = ""
      for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (sq) { if (c == "\047") { sq = 0; seg = seg c } else seg = seg "_"; continue }
        if (c == "\\") { seg = seg c substr(s, i + 1, 1); i++; continue }
        if (c == "\047" && !dq) { sq = 1; seg = seg c; continue }
        if (c == "\"") { dq = !dq; seg = seg c; continue }
        if (c == "(" && (!dq || substr(s, i - 1, 1) == "$")) {
          stk[++depth] = dq; dq = 0; seg = seg c; continue
        }
        if (c == ")" && !dq && depth > 0) { dq = stk[depth--]; seg = seg c; continue }
        if (!dq && depth == 0 && (c == ";" || c == "&" || c == "|")) {
          out[++n] = seg; seg = ""; continue
        }
        seg = seg c
      }
      out[++n] = seg
      bad = 0
      for (i = 1; i <= n; i++) if (offends(out[i])) bad = 1
      return bad
    }
    function offends(seg,    p, pre) {
      p = index(seg, "$?")
      if (!p) return 0
      pre = substr(seg, 1, p - 1)
      gsub(/\$\(\(/, "", pre)
      return index(pre, "$(") > 0
    }
    FNR == 1 { logical = ""; start = 0 }
    {
      line = $0
      if (logical == "") {
        start = FNR
        if (line ~ /^[ \t]*#/) next
      }
      if (line ~ /(^|[^\\])(\\\\)*\\$/) { logical = logical substr(line, 1, length(line) - 1) " "; next }
      logical = logical line
      if (segments(logical)) { printf "%s:%d: %s\n", FILENAME, start, logical; found = 1 }
      logical = ""
    }
    END { exit found ? 1 : 0 }
  ' "$@"
}

self_test() {
  local t rc=0 out
  t=$(mktemp -d "${TMPDIR:-/tmp}/lint_scripts.XXXXXX") || return 1
  # Each line must be flagged.
  cat >"$t/bad.sh" <<'EOF'
check "x $(echo y)" $? z
grep -q a f; check "ran: $(head -c 9 f)" $? "$(cat f)"
check "a; $(echo y)" $? z
pass "$(echo y) then" "$?"
check "x $(echo y)" \
  $? z
EOF
  # No line may be flagged.
  cat >"$t/good.sh" <<'EOF'
check "x" $? "$(echo y)"
rc=$?
check "x $(echo y)" $rc z
x=$(echo y); check "x" $? z
check "two is $((1 + 1))" $? z
# check "a comment $(echo y)" $? z
check 'no $(substitution) in single quotes' $? z
[ "$(echo y)" = y ] && check "ok" $? z
if [ $? -eq 0 ]; then pass "$(echo y)"; fi
EOF
  out=$(lint "$t/bad.sh")
  if [ "$(printf '%s\n' "$out" | grep -c .)" -ne 5 ]; then
    echo "FAIL  self-test: the 5 planted lines, flagged:"; printf '%s\n' "$out"; rc=1
  else
    echo "ok    self-test: all 5 planted lines flagged"
    printf '%s\n' "$out" | sed 's/^/        /'
  fi
  if ! out=$(lint "$t/good.sh"); then
    echo "FAIL  self-test: correct lines flagged:"; printf '%s\n' "$out"; rc=1
  else
    echo "ok    self-test: no correct line flagged"
  fi
  rm -rf "$t"
  return $rc
}

if [ $# -gt 0 ]; then
  lint "$@"
  exit
fi
self_test
st=$?
# This file's own planted lines are in the self-test's here-documents.
scripts=()
for f in "$(dirname "$0")"/*.sh; do
  [ "$(basename "$f")" = lint_scripts.sh ] || scripts+=("$f")
done
if out=$(lint "${scripts[@]}"); then
  echo "ok    tests/*.sh: no check reads the status of a substitution"
else
  echo "FAIL  tests/*.sh: \$? read after a command substitution:"; printf '%s\n' "$out"; st=1
fi
exit $st
