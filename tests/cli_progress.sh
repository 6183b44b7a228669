#!/usr/bin/env bash
# cli_progress.sh: what a run says while it works. A run the estimate
# calls long says so before it starts, with how to shorten it; on a
# terminal every phase (NVRTC, the host compiler, validation) shows its
# progress and the time left from its start (so does fatune compile's);
# colour only on a terminal, never with NO_COLOR set.
#
# usage: FATUNE=build/fatune bash tests/cli_progress.sh
set -u

NAME=cli_progress
TIMEOUT_S=600
. "$(dirname "$0")/cli_lib.sh"
if ! command -v script >/dev/null 2>&1; then
  echo "SKIPPED: no script(1) to give fatune a terminal"
  exit 77
fi

# --- the warning comes before the work: stop the run once it is said -----------
"$FATUNE" --dtype fp32 --dim 64 --seq 4096 --emu-seq 4096 --backend emu --db "$tmp/long.db" \
  >/dev/null 2>"$tmp/long.err" </dev/null &
pid=$!
for _ in $(seq 300); do grep -q 'take long' "$tmp/long.err" && break; sleep 0.1; done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -q '^fatune: this will take long: 72 variants, two launches each at seq_q 4096 seq_k 4096 .* roughly [0-9]* min on the emulator; --emu-seq 256 takes roughly [0-9]* s' \
  "$tmp/long.err" && ! grep -q $'\033' "$tmp/long.err"
check "--emu-seq 4096: warned before it starts, with how to shorten it, no colour off a terminal" $? \
  "$(head -c 600 "$tmp/long.err")"
# --- on a terminal: the phases' progress, and colour -------------------------------
db="$tmp/tty.db"
cmd="'$FATUNE' --dtype fp32 --dim 64 --seq 128 --backend emu --db '$db' --seed 4"
TERM=xterm script -qec "$cmd" /dev/null >"$tmp/tty.log" 2>&1 </dev/null
tr '\r' '\n' <"$tmp/tty.log" >"$tmp/tty.txt"
missing=""
for phase in "compiling with NVRTC" "compiling with the host compiler" "validating"; do
  grep -q "^.*$phase [0-9]*/72, about [0-9]* s left" "$tmp/tty.txt" || missing="$missing '$phase'"
done
[ -z "$missing" ]
check "on a terminal each phase shows done/total and the time left" $? \
  "no time left for:$missing: $(grep -m 5 '/72' "$tmp/tty.txt")"
grep -q "compiling with the host compiler 0/72, time left once one is done" "$tmp/tty.txt"
check "a phase shows at once, before its first item is done" $? \
  "$(grep -m 3 'host compiler' "$tmp/tty.txt")"
# fatune compile, NVRTC alone (the GPU's flow compiles so too, before measuring).
TERM=xterm script -qec "'$FATUNE' compile --dim 64 --dtype bf16 --arch sm_80" /dev/null \
  >"$tmp/cc.log" 2>&1 </dev/null
n=$("$FATUNE" list --dim 64 --dtype bf16 --arch sm_80 | wc -l)
tr '\r' '\n' <"$tmp/cc.log" | grep -q "^.*compiling with NVRTC [0-9]*/$n, about [0-9]* s left"
check "fatune compile on a terminal: done/total and the time left" $? \
  "$(tr '\r' '\n' <"$tmp/cc.log" | grep -m 3 'compiling')"
grep -q $'\033\\[32mok' "$tmp/tty.txt"
check "on a terminal the status is coloured" $? "$(grep -m 2 ' ok' "$tmp/tty.txt")"
TERM=xterm NO_COLOR=1 script -qec "$cmd" /dev/null >"$tmp/nc.log" 2>&1 </dev/null
grep -q ' ok\* ' "$tmp/nc.log" && ! grep -q $'\033\\[3' "$tmp/nc.log"
check "NO_COLOR=1 on a terminal: no colour" $? "$(grep -m 2 'ok' "$tmp/nc.log" | cat -v)"
"$FATUNE" --dtype fp32 --dim 64 --seq 128 --backend emu --db "$db" >"$tmp/pipe.out" \
  2>"$tmp/pipe.err" </dev/null
rc=$?
[ "$rc" -eq 0 ] && grep -q ' ok\* ' "$tmp/pipe.out" && ! grep -q $'\033' "$tmp/pipe.out" "$tmp/pipe.err" &&
  ! grep -q 'take long' "$tmp/pipe.err"
check "in a pipe: no colour, no progress, no warning at the default --emu-seq" $? \
  "exit $rc: $(head -c 300 "$tmp/pipe.err" | cat -v)"

finish
