#!/usr/bin/env bash
# cli_parse.sh: the command line a kernel engineer expects. --flag=value,
# options before the command, dtype names in any case and their aliases,
# the nearest flag, command or value suggested for a typo, each command's
# own help (fatune CMD --help, fatune help CMD) with its flags and an
# example, fatune help, fatune version and --version.
#
# usage: FATUNE=build/fatune bash tests/cli_parse.sh
set -u

NAME=cli_parse
. "$(dirname "$0")/cli_lib.sh"

run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
}

# --- forms of the same request give the same answer -----------------------------
run plain list --dim 32 --dtype fp32 --arch sm_80
run eq list --dim=32 --dtype=fp32 --arch=sm_80
[ "$rc" -eq 0 ] && [ -s "$tmp/eq.out" ] && cmp -s "$tmp/plain.out" "$tmp/eq.out"
check "list --dim=32 --dtype=fp32 lists what --dim 32 --dtype fp32 does" $? \
  "exit $rc: $(head -c 200 "$tmp/eq.err")"
run before --arch sm_80 --dtype fp32 list --dim 32
[ "$rc" -eq 0 ] && cmp -s "$tmp/plain.out" "$tmp/before.out"
check "options before the command: fatune --arch sm_80 ... list" $? \
  "exit $rc: $(head -c 200 "$tmp/before.err")"
for alias in FP16 half Float16 f16; do
  run "a$alias" list --dim 32 --dtype "$alias" --arch sm_80
  [ "$rc" -eq 0 ] && [ -s "$tmp/a$alias.out" ] && ! grep -qv '^tc-f16-' "$tmp/a$alias.out"
  check "--dtype $alias is fp16" $? "exit $rc: $(head -c 200 "$tmp/a$alias.err")"
done
run abf list --dim 32 --dtype BFloat16 --arch sm_80
[ "$rc" -eq 0 ] && ! grep -qv '^tc-bf16-' "$tmp/abf.out"
check "--dtype BFloat16 is bf16" $? "exit $rc: $(head -c 200 "$tmp/abf.err")"

# --- the op: fwd is what fatune did before --op; bwd has simtbwd and tcbwd; decode simtdec
run opfwd list --dim 32 --dtype fp32 --arch sm_80 --op fwd
[ "$rc" -eq 0 ] && [ -s "$tmp/opfwd.out" ] && cmp -s "$tmp/plain.out" "$tmp/opfwd.out"
check "list --op fwd lists what list does" $? "exit $rc: $(head -c 200 "$tmp/opfwd.err")"
run opdecode list --dim 32 --dtype fp32 --arch sm_80 --op decode
[ "$rc" -eq 0 ] && [ -s "$tmp/opdecode.out" ] && ! grep -qv "^simtdec-f32-d32-" "$tmp/opdecode.out"
check "list --op decode lists simtdec's variants alone" $? \
  "exit $rc: $(head -c 200 "$tmp/opdecode.err")"
run opbwd list --dim 32 --dtype fp32 --arch sm_80 --op bwd
[ "$rc" -eq 0 ] && [ -s "$tmp/opbwd.out" ] && ! grep -qv "^simtbwd-" "$tmp/opbwd.out"
check "list --op bwd lists simtbwd's variants alone" $? "exit $rc: $(head -c 200 "$tmp/opbwd.err")"
run opbwd16 list --dim 32 --dtype fp16 --arch sm_80 --op bwd
[ "$rc" -eq 0 ] && [ -s "$tmp/opbwd16.out" ] && ! grep -qv "^tcbwd-f16-" "$tmp/opbwd16.out"
check "list --op bwd --dtype fp16 lists tcbwd's variants alone" $? \
  "exit $rc: $(head -c 200 "$tmp/opbwd16.err")"

run opbad list --dim 32 --op backward
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/opbad.err")" -eq 1 ] &&
  grep -q "unknown op 'backward' (fwd, bwd or decode" "$tmp/opbad.err"
check "list --op backward: one line naming the ops, exit 2" $? \
  "exit $rc: $(head -c 200 "$tmp/opbad.err")"
run opgen gen --op bwd --config block_m=64 --dtype fp32
[ "$rc" -eq 0 ] && grep -q "^/\* fatune simtbwd-f32-d64-m64n32w4-dqpass " "$tmp/opgen.out"
check "gen --op bwd prints a backward kernel" $? "exit $rc: $(head -c 200 "$tmp/opgen.err")"
run opexport export --op bwd --format csv
[ "$rc" -eq 2 ] && grep -q "does not apply" "$tmp/opexport.err"
check "export takes no --op" $? "exit $rc: $(head -c 200 "$tmp/opexport.err")"
run opvariant compile --arch sm_80 --variant "$(head -n 1 "$tmp/plain.out" | cut -d ' ' -f 1)" --op bwd
[ "$rc" -eq 2 ] && grep -q "computes op fwd, not bwd" "$tmp/opvariant.err"
check "compile --variant (a fwd one) --op bwd is refused" $? \
  "exit $rc: $(head -c 200 "$tmp/opvariant.err")"
run opcompile compile --dim 32 --dtype fp32 --arch sm_80 --op decode --config splits=4
[ "$rc" -eq 0 ] && grep -q "^simtdec-f32-d32-r1n64w4-s4 .* ok" "$tmp/opcompile.out"
check "compile --op decode --config splits=4: a decoding kernel" $? \
  "exit $rc: $(head -c 200 "$tmp/opcompile.out" "$tmp/opcompile.err")"

# --- typos: one line, exit 2, the nearest name ------------------------------------
bad() {
  local want=$1
  shift
  run bad "$@"
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -qF -- "$want" "$tmp/bad.err"
  check "fatune $*: says '$want'" $? "exit $rc: $(head -c 300 "$tmp/bad.err")"
}
bad "unknown option '--dtpye'; did you mean --dtype?" --dtpye fp16 --dim 64
bad "unknown option '--dmi'; did you mean --dim?" list --dmi 64
bad "unknown command 'lsit'; did you mean list?" lsit --dim 64
bad "unknown dtype 'fp61' (fp32, fp64, fp16, bf16 or e4m3; did you mean fp64?)" list --dtype fp61
bad "unknown backend 'emy' (auto, emu or cuda; did you mean emu?)" --backend emy
bad "unknown space 'ful' (default or full; did you mean full?)" list --space ful
bad "unknown option '--zzzzzz' (see fatune --help)" list --zzzzzz
bad "option --dim needs a value" list --dim
bad "option --device does not apply to 'fatune list' (see fatune help list)" list --device x
bad "unexpected argument 'a.db' (see fatune help show)" show a.db
bad "no command 'lst' to help with; did you mean list?" help lst

# --- help -----------------------------------------------------------------------------
run rh run --help
[ "$rc" -eq 0 ] && grep -q '^usage: fatune run ' "$tmp/rh.out" && grep -q -- '--q Q.npy' "$tmp/rh.out" &&
  grep -q '^example:' "$tmp/rh.out" && grep -q '^  fatune run ' "$tmp/rh.out" &&
  ! grep -q -- '--sweep\|--retune\|^usage: fatune list' "$tmp/rh.out"
check "fatune run --help: run's synopsis, its flags only, an example" $? "$(head -n 5 "$tmp/rh.out")"
run hr help run
[ "$rc" -eq 0 ] && cmp -s "$tmp/rh.out" "$tmp/hr.out"
check "fatune help run is fatune run --help" $? "exit $rc"
for c in list gen compile best show export merge explore report; do
  run "h$c" help "$c"
  [ "$rc" -eq 0 ] && grep -q "^usage: fatune $c" "$tmp/h$c.out" && grep -q "^  fatune $c" "$tmp/h$c.out"
  check "fatune help $c: synopsis and example" $? "exit $rc: $(head -n 2 "$tmp/h$c.out")"
done
run h help
run hh --help
[ "$rc" -eq 0 ] && cmp -s "$tmp/h.out" "$tmp/hh.out" && grep -q '^  explore ' "$tmp/h.out" &&
  grep -q -- '--emu-seq N' "$tmp/h.out"
check "fatune help and fatune --help: every command and flag" $? "exit $rc"
run v version
run vv --version
[ "$rc" -eq 0 ] && grep -q '^fatune [0-9]' "$tmp/v.out" && cmp -s "$tmp/v.out" "$tmp/vv.out"
check "fatune version and --version" $? "$(cat "$tmp/v.out")"

finish
