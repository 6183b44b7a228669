#!/usr/bin/env bash
# cli_keys.sh: what is recorded is found again under what was asked. The
# emulator runs a shorter sequence than asked; its trials are recorded
# under both, so show and best find them at the length asked and say what
# ran. The target architecture is part of the key: another arch measures
# again. A second identical run shows the recorded figures, marked, with
# the seed they were measured with.
#
# usage: FATUNE=build/fatune bash tests/cli_keys.sh
set -u

NAME=cli_keys
TIMEOUT_S=600
. "$(dirname "$0")/cli_lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: no python3"
  exit 77
fi

db="$tmp/keys.db"
# 2 KB of shared memory: a few dozen variants, not the whole space.
job=(--dtype fp32 --dim 8 --seq 4096 --batch 1 --heads 1 --backend emu --emu-seq 32 --smem 2048 --db "$db")
"${TIMEOUT[@]}" "$FATUNE" "${job[@]}" --arch sm_90 --seed 5 >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
check "the main job at seq 4096 on the emulator (it runs 32)" "$rc" "exit $rc: $(tail -c 300 "$tmp/a.err")"
n=$(grep -c ' ok ' "$tmp/a.out")

"$FATUNE" show --seq 4096 --db "$db" >"$tmp/show.out" 2>"$tmp/show.err"
rows=$(grep -c ' sm_90 .*fp32 d8 q32 k32 b1 h1 for q4096 k4096 ' "$tmp/show.out")
[ "$n" -gt 0 ] && [ "$rows" -eq "$n" ]
check "show --seq 4096 finds the $n trials, run at q32 for q4096, on sm_90" $? \
  "$rows rows: $(head -n 3 "$tmp/show.out") $(cat "$tmp/show.err")"
"$FATUNE" show --seq 32 --db "$db" >"$tmp/show32.out" 2>"$tmp/show32.err"
grep -q 'no trials match' "$tmp/show32.err"
check "show --seq 32 finds none: nobody asked for 32" $? "$(head -n 3 "$tmp/show32.out")"
"$FATUNE" best --dim 8 --seq 4096 --dtype fp32 --db "$db" >"$tmp/best.out" 2>"$tmp/best.err"
rc=$?
[ "$rc" -eq 0 ] && ! grep -q 'no exact entry' "$tmp/best.err" &&
  grep -q '^ran  *run at seq_q 32 seq_k 32 for the requested seq_q 4096 seq_k 4096' "$tmp/best.out" &&
  grep -q '^arch  *sm_90' "$tmp/best.out"
check "best --seq 4096: the exact entry, saying it ran at 32 on sm_90" $? \
  "exit $rc: $(cat "$tmp/best.err" "$tmp/best.out" | head -c 400)"

# The same command again, no seed given: nothing measured, the recorded
# figures shown as recorded with their seed.
"${TIMEOUT[@]}" "$FATUNE" "${job[@]}" --arch sm_90 >"$tmp/b.out" 2>"$tmp/b.err"
rc=$?
stars=$(grep -c ' ok\* ' "$tmp/b.out")
[ "$rc" -eq 0 ] && [ "$stars" -eq "$n" ] && ! grep -q ' ok\* .* - *- *- ' "$tmp/b.out" &&
  grep -q '^\* recorded by an earlier run .*inputs seed 5' "$tmp/b.out" &&
  grep -q "$n recorded before" "$tmp/b.out"
check "a repeat run shows the $n recorded figures, marked ok*, with seed 5" $? \
  "exit $rc, $stars starred: $(grep -m 3 'ok' "$tmp/b.out") $(tail -n 3 "$tmp/b.out")"
"${TIMEOUT[@]}" "$FATUNE" "${job[@]}" --arch sm_90 --json >"$tmp/c.json" 2>"$tmp/c.err"
python3 - "$tmp/c.json" "$n" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ok = [r for r in rows if r["status"] == "ok"]
assert len(ok) == int(sys.argv[2]), len(ok)
for r in rows:
    assert r["recorded"] is True and r["seed"] == 5, r
for r in ok:
    assert r["global_bytes_read"] > 0 and r["max_abs_err"] is not None, r
PY
check "--json of a repeat run: status as recorded, recorded true, seed 5, the counters" $? \
  "$(head -c 300 "$tmp/c.json")"

# Another target: measured again, not taken from sm_90's rows.
"${TIMEOUT[@]}" "$FATUNE" "${job[@]}" --arch sm_80 >"$tmp/d.out" 2>"$tmp/d.err"
rc=$?
[ "$rc" -eq 0 ] && grep -q ' 0 recorded before' "$tmp/d.out" && ! grep -q ' ok\* ' "$tmp/d.out"
check "--arch sm_80 after sm_90: measured, none taken as recorded" $? \
  "exit $rc: $(tail -n 3 "$tmp/d.out")"
"$FATUNE" show --seq 4096 --db "$db" >"$tmp/show2.out" 2>&1
a90=$(grep -c ' sm_90 ' "$tmp/show2.out") a80=$(grep -c ' sm_80 ' "$tmp/show2.out")
[ "$a90" -eq "$n" ] && [ "$a80" -eq "$n" ]
check "show lists both targets' trials ($a90 sm_90, $a80 sm_80)" $? "$(head -n 3 "$tmp/show2.out")"

# The backward pass under GQA: keyed by its ratio. The emulator runs two
# K/V heads of the group; best finds the trials under --gqa 2 alone.
gdb="$tmp/gqa.db"
"${TIMEOUT[@]}" "$FATUNE" --op bwd --gqa 2 --dtype fp32 --dim 8 --seq 64 --batch 1 --heads 4 \
  --backend emu --emu-seq 32 --smem 4096 --arch sm_90 --db "$gdb" >"$tmp/g.out" 2>"$tmp/g.err"
rc=$?
[ "$rc" -eq 0 ] && grep -q 'heads 4 (2 K/V heads, 2 query heads each).*the emulator runs .* heads 4' \
  "$tmp/g.err" && grep -q ' ok ' "$tmp/g.out"
check "the main job --op bwd --gqa 2: two K/V heads of two query heads each" $? \
  "exit $rc: $(head -c 400 "$tmp/g.err") $(tail -n 2 "$tmp/g.out")"
"$FATUNE" best --op bwd --gqa 2 --dim 8 --seq 64 --dtype fp32 --db "$gdb" >"$tmp/gb.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q '^key  *gqa 2$' "$tmp/gb.out" && grep -q '^variant  *simtbwd-' "$tmp/gb.out"
check "best --op bwd --gqa 2 finds the trials, keyed gqa 2" $? "exit $rc: $(cat "$tmp/gb.out")"
for g in 1 4; do
  "$FATUNE" best --op bwd --gqa $g --dim 8 --seq 64 --dtype fp32 --db "$gdb" >"$tmp/gn.out" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "nothing recorded for bwd fp32 dim 8$([ $g -gt 1 ] && echo " gqa $g")" \
    "$tmp/gn.out"
  check "best --op bwd --gqa $g finds none: tuned under GQA 2" $? "exit $rc: $(cat "$tmp/gn.out")"
done
"$FATUNE" show --op bwd --gqa 2 --db "$gdb" >"$tmp/gs.out" 2>&1
grep -q ' g2 ' "$tmp/gs.out"
check "show --op bwd --gqa 2 lists them (g2)" $? "$(head -n 3 "$tmp/gs.out")"
"$FATUNE" --op fwd --gqa 2 --dim 8 --seq 64 --backend emu --db "$gdb" >"$tmp/gf.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "gqa is --op decode's, --op bwd's" "$tmp/gf.out"
check "--gqa with the forward pass refused, in one line" $? "exit $rc: $(cat "$tmp/gf.out")"
"$FATUNE" explore --op bwd --gqa 2 --dim 8 --seq 64 --dtype fp32 >"$tmp/ge.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/ge.out")" -eq 1 ] && grep -q "explore's problems are its own" "$tmp/ge.out"
check "--gqa with explore --op bwd refused, in one line" $? "exit $rc: $(cat "$tmp/ge.out")"

finish
