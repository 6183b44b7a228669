#!/usr/bin/env bash
# cli_commands.sh: the fatune commands do what they say, with no GPU needed:
# list (plain, --json, --space full), gen (by name and by config,
# deterministic), compile (table and --json), --help, --version, and the main
# job with and without --arch.
#
# usage: FATUNE=build/fatune bash tests/cli_commands.sh
set -u

NAME=cli_commands
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"
HAVE_PY=0
if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' 2>/dev/null; then HAVE_PY=1; fi
# check NAME CONDITION-STATUS WHY: records one result from the last test's status.
check() { if [ "$2" -eq 0 ]; then pass "$1"; else fail "$1" "$3"; fi; }

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
run list list --dim 64
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

run listjson list --dim 64 --json
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

run listfull list --dim 64 --space full
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

run genc gen --config 'block_m=3,block_n=3,warps=1,norm=eager' --dim 4
check "gen --config 'block_m=3,block_n=3,warps=1,norm=eager' --dim 4 exits 0" "$rc" \
  "exit $rc: $(head -c 300 "$tmp/genc.err")"
grep -q 'FA_KERNEL(simt_f32_d4_m3n3w1_eager[a-z0-9_]*,' "$tmp/genc.out"
check "gen --config: kernel is simt_f32_d4_m3n3w1_eager..." $? \
  "$(grep -n 'FA_KERNEL(' "$tmp/genc.out" | tail -1)"

# --- compile -----------------------------------------------------------------
run listd4 list --dim 4 --arch sm_80
n_d4=$(grep -c . "$tmp/listd4.out")
run cjson compile --dim 4 --arch sm_80 --json
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

run ctab compile --dim 4 --arch sm_80
check "compile --dim 4 --arch sm_80 exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/ctab.err")"
summary=$(grep '^sm_80: ' "$tmp/ctab.out" | tail -1)
[[ "$summary" == *"$n_d4 variants"* && "$summary" == *" ok"* && "$summary" == *" 0 failed"* ]]
check "compile table summary: '$summary'" $? "want '$n_d4 variants ... ok ... 0 failed'"
rows=$(grep -c '^simt-f32-d4-.* ok$' "$tmp/ctab.out")
[ "$rows" -eq "$n_d4" ] && grep -q '^compile ms' "$tmp/ctab.out"
check "compile table: $rows rows ending in ok, and a 'compile ms' line" $? "$rows rows of $n_d4"

# --- the main job, no GPU needed ---------------------------------------------
run main80 --dim 4 --seq 16 --arch sm_80
check "fatune --dim 4 --seq 16 --arch sm_80 exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/main80.err")"
summary=$(grep '^sm_80: ' "$tmp/main80.out" | tail -1)
[[ "$summary" == *" variants"* && "$summary" == *" 0 failed"* ]]
check "main job --arch sm_80 compiles for sm_80: '$summary'" $? "no 'sm_80: N variants ... 0 failed' line"

run main --dim 4 --seq 16
check "fatune --dim 4 --seq 16 (no --arch) exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/main.err")"
have_driver=0
if command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  have_driver=1
fi
if grep -qi 'driver' "$tmp/main.err"; then
  pass "no --arch: stderr says '$(grep -i -m1 driver "$tmp/main.err")'"
elif [ "$have_driver" -eq 1 ]; then
  pass "no --arch: a CUDA driver is installed here, so no 'no driver' message (skipped)"
else
  fail "no --arch: stderr names the missing CUDA driver" "stderr: $(head -c 300 "$tmp/main.err")"
fi
summary=$(grep -E '^sm_[0-9]+a?: ' "$tmp/main.out" | tail -1)
if [ "$have_driver" -eq 0 ]; then
  [[ "$summary" == "sm_90: "*" variants"*" 0 failed"* ]]
  check "no --arch: compiles for the default arch sm_90: '$summary'" $? "no 'sm_90: ... 0 failed' line"
else
  [[ "$summary" == *" variants"*" 0 failed"* ]]
  check "no --arch: compiles for the GPU's arch: '$summary'" $? "no summary line"
fi

echo "($((SECONDS - t_start)) s)"
finish
