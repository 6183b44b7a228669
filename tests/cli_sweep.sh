#!/usr/bin/env bash
# cli_sweep.sh: the main job over a sweep of keys. --dim 64,128 --seq
# 256:1024:x2 --dtype fp16 tunes 6 keys (one variant each, by --config, at
# the emulator's smallest size, to stay quick) and show lists them; a rerun
# measures nothing; --shard 1/3, 2/3 and 3/3 cover the same 6 keys exactly
# once; --causal both doubles a key; fatune merge takes the three shards at once and says what each
# brought, and a merge of overlapping databases adds no key twice; merge
# checks a variant against each trial's own target (a wg variant's sm_90a
# trial is taken). Lists and shards that make no sense are one line and
# exit 2.
#
# usage: FATUNE=build/fatune bash tests/cli_sweep.sh
set -u

NAME=cli_sweep
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"
if ! command -v sqlite3 >/dev/null 2>&1; then
  echo "SKIPPED: no sqlite3 shell"
  exit 77
fi

sweep=(--dim 64,128 --seq 256:1024:x2 --dtype fp16 --backend emu --arch sm_80 --emu-seq 32
       --config block_m=64 --seed 3)
keys() {   # DB: its keys, one a line, sorted
  sqlite3 -readonly -separator ' ' "$1" \
    'SELECT dtype, dim, req_seq_q, req_seq_k FROM trials ORDER BY dim, req_seq_q'
}
want=$(for d in 64 128; do for s in 256 512 1024; do echo "fp16 $d $s $s"; done; done)

"${TIMEOUT[@]}" "$FATUNE" "${sweep[@]}" --db "$tmp/all.db" >"$tmp/all.out" 2>"$tmp/all.err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(keys "$tmp/all.db")" = "$want" ] &&
  grep -q '^fatune: sweep: 6 keys, 0 failed' "$tmp/all.err"
check "the sweep tunes the 6 keys" $? "exit $rc: $(keys "$tmp/all.db") $(tail -n 3 "$tmp/all.err")"
"$FATUNE" show --db "$tmp/all.db" >"$tmp/show.out" 2>&1
[ "$(grep -c 'fp16 d.* for q' "$tmp/show.out")" -eq 6 ]
check "show lists the 6" $? "$(cat "$tmp/show.out")"

"${TIMEOUT[@]}" "$FATUNE" "${sweep[@]}" --db "$tmp/all.db" >"$tmp/again.out" 2>"$tmp/again.err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(grep -c ' 1 recorded before' "$tmp/again.out")" -eq 6 ]
check "a rerun measures none of them again" $? "exit $rc: $(grep 'variants:' "$tmp/again.out")"

for i in 1 2 3; do
  "${TIMEOUT[@]}" "$FATUNE" "${sweep[@]}" --shard "$i/3" --db "$tmp/s$i.db" \
    >"$tmp/s$i.out" 2>"$tmp/s$i.err"
  rc=$?
  check "shard $i/3 runs" "$rc" "exit $rc: $(tail -n 3 "$tmp/s$i.err")"
done
union=$(for i in 1 2 3; do keys "$tmp/s$i.db"; done | sort -k2,2n -k3,3n)
[ "$union" = "$want" ]
check "the 3 shards cover the 6 keys exactly once" $? "$union"
for i in 1 2 3; do
  [ "$(keys "$tmp/s$i.db" | grep -c .)" -eq 2 ]
  check "shard $i/3 has 2 of the 6 (balanced)" $? "$(keys "$tmp/s$i.db")"
done
"${TIMEOUT[@]}" "$FATUNE" "${sweep[@]}" --shard 2/3 --db "$tmp/s2b.db" >/dev/null 2>&1
[ "$(keys "$tmp/s2b.db")" = "$(keys "$tmp/s2.db")" ]
check "a shard is the same keys on every run" $? "$(keys "$tmp/s2b.db")"

"$FATUNE" merge "$tmp/s1.db" "$tmp/s2.db" "$tmp/s3.db" --db "$tmp/m.db" >"$tmp/m.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ "$(keys "$tmp/m.db")" = "$want" ] &&
  [ "$(grep -c '^trials:   2 added, 0 replaced' "$tmp/m.out")" -eq 3 ] &&
  grep -q '^all 3: 6 trials added, 0 replaced, 0 skipped, 0 refused' "$tmp/m.out"
check "merge of the 3 shards: 2 keys each, 6 in all" $? "exit $rc: $(cat "$tmp/m.out")"
# Overlap: the whole sweep again over the shards' merge. Every key is
# there already; the later measurement of each is kept, none twice.
"$FATUNE" merge "$tmp/all.db" --db "$tmp/m.db" >"$tmp/m2.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ "$(keys "$tmp/m.db")" = "$want" ] &&
  [ "$(sqlite3 -readonly "$tmp/m.db" 'PRAGMA integrity_check')" = ok ]
check "merging an overlapping database adds no key twice" $? "exit $rc: $(cat "$tmp/m2.out")"

"$FATUNE" merge "$tmp/s1.db" "$tmp/none.db" --db "$tmp/m3.db" >"$tmp/m3.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] && [ ! -e "$tmp/m3.db" ] && grep -q none.db "$tmp/m3.out"
check "a missing database among several: exit 1, nothing created" $? "exit $rc: $(cat "$tmp/m3.out")"

"${TIMEOUT[@]}" "$FATUNE" --causal both --dim 32 --seq 128 --dtype fp16 --backend emu --arch sm_80 \
  --emu-seq 32 --config block_m=64 --db "$tmp/c.db" >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
got=$(sqlite3 -readonly "$tmp/c.db" 'SELECT causal FROM trials ORDER BY causal' | tr '\n' ' ')
[ "$rc" -eq 0 ] && [ "$got" = "0 1 " ]
check "--causal both tunes the key without and with the mask" $? "exit $rc: '$got'"

# Merge checks a variant against each trial's own target: the Hopper family
# wg fits sm_90a only, so its rows must merge, and a row claiming another
# target must not. A row without a target (recorded before fatune kept
# them) is taken when the config fits any target the space knows.
"${TIMEOUT[@]}" "$FATUNE" --arch sm_90a --dtype bf16 --dim 64 --seq 128 --backend emu \
  --config family=wg --db "$tmp/wg.db" >"$tmp/wg.out" 2>&1
rc=$?
check "a wg tune on sm_90a records its trial" "$rc" "$(tail -n 3 "$tmp/wg.out")"
"$FATUNE" merge "$tmp/wg.db" --db "$tmp/wgm.db" >"$tmp/wgm.out" 2>&1
rc=$?
got=$(sqlite3 -readonly "$tmp/wgm.db" 'SELECT arch FROM trials' 2>&1)
[ "$rc" -eq 0 ] && [ "$got" = sm_90a ] && grep -q '^trials:   1 added' "$tmp/wgm.out" &&
  ! grep -q refused "$tmp/wgm.out"
check "merge takes a wg variant's sm_90a trial" $? "exit $rc, arches '$got': $(cat "$tmp/wgm.out")"
cp "$tmp/wg.db" "$tmp/wg80.db" && sqlite3 "$tmp/wg80.db" "UPDATE trials SET arch = 'sm_80'"
"$FATUNE" merge "$tmp/wg80.db" --db "$tmp/wg80m.db" >"$tmp/wg80m.out" 2>&1
rc=$?
got=$(sqlite3 -readonly "$tmp/wg80m.db" 'SELECT count(*) FROM trials' 2>&1)
[ "$rc" -eq 0 ] && [ "$got" = 0 ] &&
  grep -q 'merge: 1 trial refused.*trial 1: .*sm_80' "$tmp/wg80m.out"
check "merge refuses a wg trial that claims sm_80" $? "exit $rc, $got trials: $(cat "$tmp/wg80m.out")"
cp "$tmp/wg.db" "$tmp/wg0.db" && sqlite3 "$tmp/wg0.db" "UPDATE trials SET arch = ''"
"$FATUNE" merge "$tmp/wg0.db" --db "$tmp/wg0m.db" >"$tmp/wg0m.out" 2>&1
rc=$?
got=$(sqlite3 -readonly "$tmp/wg0m.db" 'SELECT count(*) FROM trials' 2>&1)
[ "$rc" -eq 0 ] && [ "$got" = 1 ] && ! grep -q refused "$tmp/wg0m.out"
check "merge takes a wg trial without a target" $? "exit $rc, $got trials: $(cat "$tmp/wg0m.out")"

bad() {   # WANT ARGS...: exit 2 and a line matching WANT
  local want=$1
  shift
  "$FATUNE" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -q -- "$want" "$tmp/bad.err"
  check "fatune $*: $want" $? "exit $rc: $(cat "$tmp/bad.err")"
}
bad "lists 64 twice" --dim 64,64 --backend emu
bad "not '1024:256:x2'" --seq 1024:256:x2 --backend emu
bad "not '256:1024:x1'" --seq 256:1024:x1 --backend emu
bad "not '256:'" --seq 256: --backend emu
bad "not 'x'" --dim 64,x --backend emu
bad "lists fp16 twice" --dtype fp16,half --backend emu
bad "unknown dtype 'fp7'" --dtype fp16,fp7 --backend emu
bad "I/N with 1 <= I <= N" --shard 4/3 --backend emu
bad "I/N with 1 <= I <= N" --shard 0/3 --backend emu
bad "lists are for the main job" list --dim 64,128
bad "lists are for the main job" best --dim 64 --seq 256,512
bad "--json takes one key" --dim 64,128 --json --backend emu
bad "--seq-k takes one --seq" --seq 256,512 --seq-k 128 --backend emu
bad "does not apply" show --shard 1/2
bad "--causal takes no value, or =both" --causal=yes --backend emu
bad "lists are for the main job" show --causal both
finish
