#!/usr/bin/env bash
# cli_commands.sh: the fatune commands do what they say, with no GPU needed:
# list (plain, --json, --space full), gen (by name and by config,
# deterministic), compile (table and --json), --help, --version, run
# on .npy tensors checked against naive attention computed in Python, and
# the database commands (the main job over a whole space: cli_tune.sh).
#
# usage: FATUNE=build/fatune bash tests/cli_commands.sh
set -u

NAME=cli_commands
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"
HAVE_PY=0
if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' 2>/dev/null; then HAVE_PY=1; fi
# check NAME CONDITION-STATUS WHY: records one result from the last test's status.

# run NAME ARGS...: runs fatune, stdout to $tmp/NAME.out, stderr to .err,
# status to $rc. A crash or a hang is a failure on its own.
run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
  if [ "$rc" -ge 124 ]; then
    fail "fatune $*" "exit $rc (crash or timeout); stderr: $(head -c 300 "$tmp/$name.err")"
  fi
}
t_start=$SECONDS

# --- help and version --------------------------------------------------------
run help --help
check "--help exits 0" "$rc" "exit $rc"
missing=""
for w in list gen compile; do grep -q "$w" "$tmp/help.out" || missing="$missing $w"; done
[ -z "$missing" ]; check "--help mentions list, gen, compile" $? "missing:$missing"
run version --version
[ "$rc" -eq 0 ] && [ -s "$tmp/version.out" ]
check "--version exits 0 and prints a version" $? "exit $rc, '$(head -c 200 "$tmp/version.out")'"

# --- list --------------------------------------------------------------------
run list list --dtype fp32 --dim 64
check "list --dim 64 exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/list.err")"
n_list=$(grep -c . "$tmp/list.out")
bad_lines=$(grep -v '^simt-[^ ]* .*block_m=[0-9][0-9]* .*norm=[a-z]' "$tmp/list.out" | head -3)
[ "$n_list" -gt 0 ] && [ -z "$bad_lines" ]
check "list --dim 64: $n_list lines, each 'simt-NAME ... block_m=.. norm=..'" $? \
  "${n_list} lines; bad: $bad_lines"
bad_lines=$(awk '{ for (i = 2; i <= NF; i++) if ($i !~ /^[a-z_]+=[^=]+$/) { print; next } }' \
  "$tmp/list.out" | head -3)
[ -z "$bad_lines" ]; check "list --dim 64: every field after the name is key=value" $? "$bad_lines"
dup=$(cut -d' ' -f1 "$tmp/list.out" | sort | uniq -d | head -3)
[ -z "$dup" ]; check "list --dim 64: names are unique" $? "duplicates: $dup"
! grep -v -q ' dim=64 ' "$tmp/list.out"
check "list --dim 64: every line has dim=64" $? "$(grep -v ' dim=64 ' "$tmp/list.out" | head -1)"

run listjson list --dtype fp32 --dim 64 --json
check "list --dim 64 --json exits 0" "$rc" "exit $rc"
if [ "$HAVE_PY" -eq 1 ]; then
  # Each object has the name, and the same key=value pairs as the plain line.
  why=$(python3 - "$tmp/listjson.out" "$tmp/list.out" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
plain = [l.split() for l in open(sys.argv[2]) if l.strip()]
assert isinstance(d, list), "not a JSON array"
assert len(d) == len(plain), "%d objects, %d plain lines" % (len(d), len(plain))
for obj, fields in zip(d, plain):
    assert isinstance(obj, dict), "element is not an object"
    assert obj.get("name") == fields[0], "name %r vs %r" % (obj.get("name"), fields[0])
    cfg = obj.get("config", obj)  # a "config" object, or the keys inline
    if isinstance(cfg, str):
        cfg = dict(kv.split("=", 1) for kv in cfg.split(","))
    for kv in fields[1:]:
        k, v = kv.split("=", 1)
        if k == "hash" and "hash" in obj:
            assert obj["hash"] == v, "%s hash %r vs %r" % (fields[0], obj["hash"], v)
            continue
        assert k in cfg, "%s: key %s missing in JSON" % (fields[0], k)
        assert str(cfg[k]) == v, "%s: %s=%r in JSON, %s in the plain list" % (fields[0], k, cfg[k], v)
EOF
  )
  [ -z "$why" ]
  check "list --json: valid JSON, same count ($n_list) and name/config as the plain list" $? "$why"
else
  n_json=$(grep -c '"name": *"simt-' "$tmp/listjson.out")
  head -c 1 "$tmp/listjson.out" | grep -q '\[' && tail -c 3 "$tmp/listjson.out" | grep -q '\]' &&
    [ "$n_json" -eq "$n_list" ] && grep -q '"block_m"' "$tmp/listjson.out"
  check "list --json (no python3: structural check), $n_json names" $? \
    "$n_json names vs $n_list plain lines"
fi

run listfull list --dtype fp32 --dim 64 --space full
n_full=$(grep -c . "$tmp/listfull.out")
[ "$rc" -eq 0 ] && [ "$n_full" -gt "$n_list" ]
check "list --space full: $n_full lines > $n_list (default)" $? "exit $rc, $n_full lines"

# --- gen ---------------------------------------------------------------------
first=$(head -n 1 "$tmp/list.out" | cut -d' ' -f1)
entry=${first//-/_}
run gen1 gen --variant "$first"
check "gen --variant $first exits 0" "$rc" "exit $rc: $(head -c 300 "$tmp/gen1.err")"
grep -q "FA_KERNEL($entry," "$tmp/gen1.out" && grep -q 'extern "C"' "$tmp/gen1.out" &&
  grep -q '__global__' "$tmp/gen1.out"
check "gen: source has FA_KERNEL($entry, ...) and extern \"C\" __global__" $? \
  "$(grep -n 'FA_KERNEL\|extern' "$tmp/gen1.out" | head -3)"
run gen2 gen --variant "$first"
cmp -s "$tmp/gen1.out" "$tmp/gen2.out"
check "gen --variant twice: byte-identical" $? "outputs differ"
[ ! -s "$tmp/gen1.err" ]; check "gen: nothing on stderr" $? "$(head -c 300 "$tmp/gen1.err")"

run genc gen --config 'block_m=3,block_n=3,warps=1,norm=eager' --dtype fp32 --dim 4
check "gen --config 'block_m=3,block_n=3,warps=1,norm=eager' --dim 4 exits 0" "$rc" \
  "exit $rc: $(head -c 300 "$tmp/genc.err")"
grep -q 'FA_KERNEL(simt_f32_d4_m3n3w1_eager[a-z0-9_]*,' "$tmp/genc.out"
check "gen --config: kernel is simt_f32_d4_m3n3w1_eager..." $? \
  "$(grep -n 'FA_KERNEL(' "$tmp/genc.out" | tail -1)"

# --- compile -----------------------------------------------------------------
run listd4 list --dtype fp32 --dim 4 --arch sm_80
n_d4=$(grep -c . "$tmp/listd4.out")
run cjson compile --dtype fp32 --dim 4 --arch sm_80 --json
check "compile --dim 4 --arch sm_80 --json exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/cjson.err")"
if [ "$HAVE_PY" -eq 1 ]; then
  why=$(python3 - "$tmp/cjson.out" "$tmp/listd4.out" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
names = [l.split()[0] for l in open(sys.argv[2]) if l.strip()]
assert isinstance(d, list), "not a JSON array"
assert len(d) == len(names), "%d objects, %d variants listed" % (len(d), len(names))
assert sorted(o.get("name") for o in d) == sorted(names), "names differ from the list"
for o in d:
    for k in ("name", "ok", "registers", "spill_bytes", "smem_bytes", "compile_ms", "error"):
        assert k in o, "%s: no key %s" % (o.get("name"), k)
    assert o["ok"] is True, "%s: ok=%r error=%r" % (o["name"], o["ok"], o["error"])
    assert isinstance(o["registers"], int) and 0 < o["registers"] <= 255, "%s: registers %r" % (o["name"], o["registers"])
    assert isinstance(o["spill_bytes"], int) and o["spill_bytes"] >= 0, o["name"]
    assert isinstance(o["smem_bytes"], int) and o["smem_bytes"] >= 0, o["name"]
    assert isinstance(o["compile_ms"], (int, float)) and o["compile_ms"] > 0, o["name"]
    assert o["error"] in (None, ""), "%s: ok but error %r" % (o["name"], o["error"])
EOF
  )
  [ -z "$why" ]
  check "compile --json: $n_d4 objects, all ok, registers/spill_bytes/smem_bytes/compile_ms/error" $? "$why"
else
  n_ok=$(grep -c '"ok": *true' "$tmp/cjson.out")
  [ "$n_ok" -eq "$n_d4" ] && ! grep -q '"ok": *false' "$tmp/cjson.out" &&
    grep -q '"registers"' "$tmp/cjson.out" && grep -q '"spill_bytes"' "$tmp/cjson.out" &&
    grep -q '"smem_bytes"' "$tmp/cjson.out" && grep -q '"compile_ms"' "$tmp/cjson.out" &&
    grep -q '"error"' "$tmp/cjson.out"
  check "compile --json (no python3: structural check)" $? "$n_ok ok of $n_d4"
fi

run ctab compile --dtype fp32 --dim 4 --arch sm_80
check "compile --dim 4 --arch sm_80 exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/ctab.err")"
summary=$(grep '^sm_80: ' "$tmp/ctab.out" | tail -1)
[[ "$summary" == *"$n_d4 variants"* && "$summary" == *" ok"* && "$summary" == *" 0 failed"* ]]
check "compile table summary: '$summary'" $? "want '$n_d4 variants ... ok ... 0 failed'"
rows=$(grep -c '^simt-f32-d4-.* ok$' "$tmp/ctab.out")
[ "$rows" -eq "$n_d4" ] && grep -q '^compile ms' "$tmp/ctab.out"
check "compile table: $rows rows ending in ok, and a 'compile ms' line" $? "$rows rows of $n_d4"

# --- run: one variant on .npy tensors ----------------------------------------
if [ "$HAVE_PY" -eq 1 ]; then
  tool="python3 $(dirname "$0")/npy_tool.py"
  $tool write "$tmp/q2.npy" f4 1 20 8 && $tool write "$tmp/k2.npy" f2 2 30 8 &&
    $tool write "$tmp/v2.npy" f8 3 30 8
  run run2d run --config 'block_m=8,block_n=8,warps=1,norm=eager' --dtype fp32 --causal --q "$tmp/q2.npy" \
    --k "$tmp/k2.npy" --v "$tmp/v2.npy" --out "$tmp/o2.npy" --lse "$tmp/l2.npy" --backend emu
  check "run (N, D) tensors, K/V longer than Q, f16/f64 inputs, causal: exit 0" "$rc" \
    "exit $rc: $(tail -c 300 "$tmp/run2d.err")"
  out=$($tool check "$tmp/q2.npy" "$tmp/k2.npy" "$tmp/v2.npy" "$tmp/o2.npy" "$tmp/l2.npy" --causal)
  err=${out#max_err }; err=${err%% *}; lerr=${out##* }
  python3 -c "import sys; sys.exit(0 if float('$err') < 1e-5 and float('$lerr') < 1e-5 else 1)" 2>/dev/null
  check "run (N, D): output and lse match naive attention: $out" $? "$out"

  for t in q k v; do $tool write "$tmp/${t}4.npy" f8 7 2 3 17 5; done
  run run4d run --config 'block_m=4,block_n=8,warps=1,split=split_q,par=kv_outer' --dtype fp64 \
    --scale 0.3 --q "$tmp/q4.npy" --k "$tmp/k4.npy" --v "$tmp/v4.npy" --out "$tmp/o4.npy" \
    --schedule random
  check "run (B, H, N, D) fp64 kv_outer with --scale: exit 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/run4d.err")"
  out=$($tool check "$tmp/q4.npy" "$tmp/k4.npy" "$tmp/v4.npy" "$tmp/o4.npy" --scale 0.3 --fp64)
  err=${out#max_err }; err=${err%% *}
  python3 -c "import sys; sys.exit(0 if float('$err') < 1e-12 else 1)" 2>/dev/null
  check "run (B, H, N, D) fp64: float64 output matches naive attention: $out" $? "$out"

  # The backward pass: the forward pass run first, then from run's own O and lse.
  $tool write "$tmp/dob.npy" f8 11 2 3 17 5 && $tool write "$tmp/kb.npy" f8 12 2 3 23 5 &&
    $tool write "$tmp/vb.npy" f8 13 2 3 23 5
  run runbwd run --op bwd --config 'block_m=8,block_n=16,warps=2' --dtype fp64 --causal \
    --q "$tmp/q4.npy" --k "$tmp/kb.npy" --v "$tmp/vb.npy" --do "$tmp/dob.npy" \
    --dq "$tmp/dq.npy" --dk "$tmp/dk.npy" --dv "$tmp/dv.npy" --schedule reverse
  check "run --op bwd (B, H, N, D) fp64 causal, K/V longer: exit 0" "$rc" \
    "exit $rc: $(tail -c 300 "$tmp/runbwd.err")"
  grep -q "ran the forward pass with simt-f64" "$tmp/runbwd.err"
  check "run --op bwd without --o and --lse runs the forward pass first" $? \
    "$(tail -c 300 "$tmp/runbwd.err")"
  out=$($tool grad "$tmp/q4.npy" "$tmp/kb.npy" "$tmp/vb.npy" "$tmp/dob.npy" "$tmp/dq.npy" \
    "$tmp/dk.npy" "$tmp/dv.npy" --causal)
  python3 -c "import sys; e=[float(x) for x in '$out'.split()[1::2]]; sys.exit(0 if len(e) == 3 and max(e) < 1e-12 else 1)" 2>/dev/null
  check "run --op bwd: dQ, dK, dV match naive attention's gradients: $out" $? "$out"
  run runfwd32 run --config 'block_m=8' --q "$tmp/q2.npy" --k "$tmp/k2.npy" --v "$tmp/v2.npy" \
    --dtype fp32 --out "$tmp/o32.npy" --lse "$tmp/l32.npy"
  $tool write "$tmp/do2.npy" f4 14 20 8
  run runbwd2 run --op bwd --config 'block_m=16' --dtype fp32 --q "$tmp/q2.npy" \
    --k "$tmp/k2.npy" --v "$tmp/v2.npy" --do "$tmp/do2.npy" --o "$tmp/o32.npy" --lse "$tmp/l32.npy" \
    --dq "$tmp/dq2.npy" --dk "$tmp/dk2.npy" --dv "$tmp/dv2.npy"
  out=$($tool grad "$tmp/q2.npy" "$tmp/k2.npy" "$tmp/v2.npy" "$tmp/do2.npy" "$tmp/dq2.npy" \
    "$tmp/dk2.npy" "$tmp/dv2.npy")
  [ "$rc" -eq 0 ] && ! grep -q "forward pass with" "$tmp/runbwd2.err" &&
    python3 -c "import sys; e=[float(x) for x in '$out'.split()[1::2]]; sys.exit(0 if len(e) == 3 and max(e) < 1e-4 else 1)" 2>/dev/null
  check "run --op bwd with --o and --lse (N, D) fp32 from mixed inputs: $out" $? \
    "exit $rc: $(tail -c 300 "$tmp/runbwd2.err") $out"
  run runbwdlse run --op bwd --config 'block_m=16' --dtype fp32 --q "$tmp/q2.npy" \
    --k "$tmp/k2.npy" --v "$tmp/v2.npy" --do "$tmp/do2.npy" --o "$tmp/o32.npy" --lse "$tmp/o32.npy" \
    --dq "$tmp/dq3.npy" --dk "$tmp/dk3.npy" --dv "$tmp/dv3.npy"
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/runbwdlse.err")" -eq 1 ] &&
    grep -q "o32.npy: shape (20, 8): the logsumexp of q (20, 8) is (20,)" "$tmp/runbwdlse.err" &&
    [ ! -e "$tmp/dq3.npy" ]
  check "run --op bwd with an O for its lse: one line, exit 2, nothing written" $? \
    "exit $rc: $(cat "$tmp/runbwdlse.err")"
fi

# --- database commands ---
# Readers never create a database; merge creates its target (and missing
# directories, mode 700); a file that is not fatune's is refused and left
# byte for byte as it was. Trials put in with Python's sqlite3 check what
# best, show and export print.
dbd="$tmp/dbcmd"
mkdir -p "$dbd"
one_line() { [ "$(wc -l <"$1")" -eq 1 ] && grep -q '^fatune: ' "$1"; }
run dbmissing best --dim 64 --seq 128 --db "$dbd/missing.db"
[ "$rc" -eq 1 ] && [ ! -s "$tmp/dbmissing.out" ] && one_line "$tmp/dbmissing.err" &&
  grep -q 'no database at' "$tmp/dbmissing.err" && [ ! -e "$dbd/missing.db" ]
check "best on a missing database: exit 1, one line, nothing created" $? \
  "exit $rc: $(head -c 300 "$tmp/dbmissing.err")"
run dbshowmissing show --db "$dbd/missing.db"
[ "$rc" -eq 1 ] && one_line "$tmp/dbshowmissing.err" && [ ! -e "$dbd/missing.db" ]
check "show on a missing database: exit 1, one line" $? "exit $rc: $(head -c 300 "$tmp/dbshowmissing.err")"

: >"$dbd/empty.db"
main="$dbd/new/sub/main.db"
run dbmerge0 merge "$dbd/empty.db" --db "$main"
[ "$rc" -eq 0 ] && [ -f "$main" ] && grep -q '^trials: *0 added' "$tmp/dbmerge0.out" &&
  [ "$(stat -c %a "$dbd/new")" = 700 ] && [ "$(stat -c %a "$dbd/new/sub")" = 700 ]
check "merge into --db in a missing directory creates it (mode 700) and the database" $? \
  "exit $rc: $(head -c 300 "$tmp/dbmerge0.err") $(ls -la "$dbd/new" 2>&1 | head -3)"
run dbbest0 best --dim 64 --seq 128 --db "$main"
[ "$rc" -eq 1 ] && [ ! -s "$tmp/dbbest0.out" ] && one_line "$tmp/dbbest0.err" &&
  grep -q 'nothing recorded for any dtype dim 64' "$tmp/dbbest0.err"
check "best on an empty database: exit 1, 'nothing recorded'" $? "exit $rc: $(head -c 300 "$tmp/dbbest0.err")"
run dbshow0 show --db "$main"
[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/dbshow0.out")" -eq 1 ] && grep -q '^variant ' "$tmp/dbshow0.out" &&
  grep -q 'no trials recorded' "$tmp/dbshow0.err"
check "show on an empty database: the header, and 'no trials recorded'" $? "exit $rc"
run dbshowj0 show --json --db "$main"
[ "$rc" -eq 0 ] && [ "$(cat "$tmp/dbshowj0.out")" = "[]" ]
check "show --json on an empty database: []" $? "exit $rc: $(head -c 100 "$tmp/dbshowj0.out")"
run dbcsv0 export --format csv --db "$main"
[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/dbcsv0.out")" -eq 1 ] && grep -q '^variant,hash,.*,created,arch,req_seq_q,req_seq_k,seed,op,compiler,suite_cases,suite_err,suite_failed,deterministic,req_batch,kv_group,page,dim_v$' "$tmp/dbcsv0.out"
check "export --format csv of an empty database: the header line only" $? "exit $rc"
run dbjson0 export --format json --db "$main"
[ "$rc" -eq 0 ] && [ "$(cat "$tmp/dbjson0.out")" = "[]" ]
check "export --format json of an empty database: []" $? "exit $rc: $(head -c 100 "$tmp/dbjson0.out")"

head -c 4096 /dev/urandom >"$dbd/garbage.db"
sum=$(cksum <"$dbd/garbage.db")
run dbmergeg merge "$dbd/garbage.db" --db "$dbd/target.db"
[ "$rc" -eq 1 ] && one_line "$tmp/dbmergeg.err" && grep -q 'not a fatune database' "$tmp/dbmergeg.err" &&
  [ "$(cksum <"$dbd/garbage.db")" = "$sum" ] && [ ! -e "$dbd/target.db" ]
check "merge of a garbage file: exit 1, one line, the file unchanged, no target created" $? \
  "exit $rc: $(head -c 300 "$tmp/dbmergeg.err")"
run dbshowg show --db "$dbd/garbage.db"
[ "$rc" -eq 1 ] && one_line "$tmp/dbshowg.err" && [ "$(cksum <"$dbd/garbage.db")" = "$sum" ]
check "show --db on a garbage file: exit 1, one line, the file unchanged" $? \
  "exit $rc: $(head -c 300 "$tmp/dbshowg.err")"

if [ "$HAVE_PY" -eq 1 ] && python3 -c 'import sqlite3' 2>/dev/null; then
  python3 - "$main" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("INSERT INTO devices (name, uuid, backend, cc_major, cc_minor, sm_count, "
          "smem_per_block_optin, l2_bytes) VALUES ('NVIDIA H200', 'GPU-1', 'cuda', 9, 0, 132, "
          "232448, 50331648)")
for i, n in enumerate(["simt-fast", "simt-slow", "simt-bad"]):
    c.execute("INSERT INTO variants (family, template_version, name, hash, config, source_hash) "
              "VALUES ('simt', 'simt-1', ?, ?, ?, 'src')",
              (n, "h%d" % i, '{"family": "simt", "block_m": %d}' % (32 << i)))
for v, s, m, st in [(1, 1024, 80.0, "ok"), (2, 1024, 100.0, "ok"), (3, 1024, 10.0, "invalid"),
                    (2, 4096, 900.0, "ok")]:
    c.execute("INSERT INTO trials (variant_id, device_id, arch, dtype, dim, req_seq_q, "
              "req_seq_k, seq_q, seq_k, batch, heads, causal, status, max_abs_err, rel_err, "
              "median_us, tflops, fatune_version, created) "
              "VALUES (?, 1, 'sm_90', 'fp32', 64, ?, ?, ?, ?, 4, 16, 0, ?, 1e-6, 1e-7, ?, 50.0, "
              "'0.1.0', '2026-01-01T00:00:00.000Z')", (v, s, s, s, s, st, m))
c.commit()
PY
  run dbbest best --dim 64 --seq 1024 --db "$main"
  [ "$rc" -eq 0 ] && grep -q '^variant *simt-fast$' "$tmp/dbbest.out" && grep -q '^median_us *80.00$' "$tmp/dbbest.out" &&
    [ ! -s "$tmp/dbbest.err" ]
  check "best --seq 1024: the fastest ok variant, simt-fast at 80 us" $? \
    "exit $rc: $(head -c 300 "$tmp/dbbest.out") $(head -c 300 "$tmp/dbbest.err")"
  run dbnear best --dim 64 --seq 5000 --device h200 --db "$main" --json
  [ "$rc" -eq 0 ] && grep -q 'no exact entry for seq 5000; nearest tuned: seq 4096' "$tmp/dbnear.err" &&
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["variant"] == "simt-slow" and d["seq_q"] == 4096 and d["exact"] is False, d
assert d["requested_seq_q"] == 5000 and d["config"]["block_m"] == 64, d' "$tmp/dbnear.out"
  check "best --seq 5000 --json: nearest tuned seq 4096, said on stderr" $? \
    "exit $rc: $(head -c 300 "$tmp/dbnear.err") $(head -c 300 "$tmp/dbnear.out")"
  run dbshow show --db "$main"
  [ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/dbshow.out")" -eq 5 ] && grep -q 'simt-bad .* invalid ' "$tmp/dbshow.out"
  check "show: a header and 4 trials" $? "exit $rc: $(head -c 400 "$tmp/dbshow.out")"
  run dbshowf show --seq 1024 --device GPU-1 --dtype fp32 --dim 64 --json --db "$main"
  [ "$rc" -eq 0 ] && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d) == 3 and all(t["seq_q"] == 1024 for t in d), d
assert d[0]["variant"] == "simt-fast", d[0]' "$tmp/dbshowf.out"
  check "show --seq 1024 --json: 3 trials, best first" $? "exit $rc: $(head -c 300 "$tmp/dbshowf.out")"
  run dbcsv export --format csv --db "$main"
  [ "$rc" -eq 0 ] && python3 -c '
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, len(rows)
assert json.loads(rows[0]["config"])["family"] == "simt", rows[0]
assert rows[0]["median_us"] == "80" and rows[0]["min_us"] == "", rows[0]' "$tmp/dbcsv.out"
  check "export --format csv: 4 rows, the config as JSON in one field" $? \
    "exit $rc: $(head -c 300 "$tmp/dbcsv.out")"
  run dbjson export --format json --db "$main"
  [ "$rc" -eq 0 ] && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d) == 4 and d[2]["status"] == "invalid" and d[0]["causal"] is False, d' "$tmp/dbjson.out"
  check "export --format json: 4 objects" $? "exit $rc: $(head -c 300 "$tmp/dbjson.out")"
  # Merge takes a variant only under the name and hash of its config: the
  # three made up above are refused, and so are their trials.
  run dbmergef merge "$main" --db "$dbd/forged.db"
  [ "$rc" -eq 0 ] && grep -q '^trials: *0 added' "$tmp/dbmergef.out" &&
    grep -q 'merge: 3 variants refused' "$tmp/dbmergef.err" &&
    grep -q '3 with a name or hash not their config' "$tmp/dbmergef.err"
  check "merge refuses variants whose name and hash are not their config's" $? \
    "exit $rc: $(head -c 600 "$tmp/dbmergef.err")"
  # Under the names, hashes and configs fatune gives them, they are taken.
  cp "$main" "$dbd/real.db"
  "$FATUNE" list --dim 64 --dtype fp32 | head -3 >"$tmp/list3.txt"
  python3 - "$dbd/real.db" "$tmp/list3.txt" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for i, line in enumerate(open(sys.argv[2])):
    parts = line.split()
    cfg = dict(kv.split("=", 1) for kv in parts[1:-1])
    cfg = {k: int(v) if v.isdigit() else v for k, v in cfg.items()}
    c.execute("UPDATE variants SET name = ?, hash = ?, config = ? WHERE id = ?",
              (parts[0], parts[-1].split("=", 1)[1], json.dumps(cfg), i + 1))
c.commit()
PY
  run dbmerge merge "$dbd/real.db" --db "$dbd/copy.db"
  run dbmerge2 merge "$dbd/real.db" --db "$dbd/copy.db"
  [ "$rc" -eq 0 ] && grep -q '^trials: *4 added' "$tmp/dbmerge.out" &&
    grep -q '^trials: *0 added, 0 replaced .*, 4 skipped' "$tmp/dbmerge2.out"
  check "merge twice: 4 trials added, then 4 skipped" $? \
    "$(cat "$tmp/dbmerge.out" "$tmp/dbmerge2.out" | head -c 600)"
fi

echo "($((SECONDS - t_start)) s)"
finish
