#!/usr/bin/env bash
# cli_tune.sh: the main job end to end on the emulator, with no GPU needed:
# every variant of the default space compiled, run and validated (table and
# --json, with and without --arch, a short emulated sequence standing in for
# a long one). Slow: each run builds and runs the whole space; the fast
# tier takes the same code paths one variant at a time (cli_defaults,
# test_api).
#
# usage: FATUNE=build/fatune bash tests/cli_tune.sh
set -u

NAME=cli_tune
TIMEOUT_S=600
. "$(dirname "$0")/cli_lib.sh"
HAVE_PY=0
if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' 2>/dev/null; then HAVE_PY=1; fi

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

# --- the main job, no GPU needed ---------------------------------------------
have_driver=0
if command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  have_driver=1
fi

run main80 --dtype fp32 --dim 4 --seq 16 --arch sm_80 --backend emu
check "fatune --dim 4 --seq 16 --arch sm_80 --backend emu exits 0" "$rc" \
  "exit $rc: $(tail -c 300 "$tmp/main80.err")"
summary=$(grep -E '^[0-9]+ variants: ' "$tmp/main80.out" | tail -1)
n_ok=$(grep -c '^simt-f32-d4-.* ok ' "$tmp/main80.out")
[[ "$summary" == "$n_ok variants: $n_ok ok, 0 invalid, 0 compile_error, 0 crashed"* && $n_ok -gt 0 ]]
check "main job on the emulator validates every variant: '$summary'" $? "$n_ok ok rows"
[[ "$summary" == *"NVRTC sm_80"* ]]
check "main job --arch sm_80 compiles for sm_80 too" $? "summary: $summary"
grep -q 'not GPU performance' "$tmp/main80.err"
check "the banner says emulator figures are not GPU performance" $? \
  "stderr: $(head -c 300 "$tmp/main80.err")"

# The compile cache: a rerun in the same database takes every cubin from it,
# and compiles again those whose entries were edited (their MACs no longer
# verify), with the same machine-code figures as the cached ones.
run cached --dtype fp32 --dim 4 --seq 16 --arch sm_80 --backend emu --retune --json
grep -q "(NVRTC sm_80, $n_ok from the compile cache)" "$tmp/cached.err"
check "a rerun takes all $n_ok cubins from the compile cache" $? \
  "exit $rc: $(grep -E '^[0-9]+ variants: ' "$tmp/cached.err" || tail -n 2 "$tmp/cached.err")"
if [ "$HAVE_PY" -eq 1 ] && python3 -c 'import sqlite3' 2>/dev/null; then
  python3 - "$XDG_CACHE_HOME/fatune/fatune.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE binaries SET blob = zeroblob(length(blob))")
db.commit()
PY
  run edited --dtype fp32 --dim 4 --seq 16 --arch sm_80 --backend emu --retune --json
  why=$(python3 - "$tmp/cached.out" "$tmp/edited.out" <<'PY' 2>&1
import json, sys
a, b = ({r["name"]: r for r in json.load(open(f))} for f in sys.argv[1:])
assert a.keys() == b.keys() and a, (len(a), len(b))
same = ["registers", "spill_bytes", "smem_per_cta", "loop_instructions", "loop_hmma", "loop_mufu",
        "bound", "est_tflops", "model_tflops", "model_bound"]
for n, r in a.items():
    assert r["status"] == b[n]["status"] == "ok", (n, r["status"], b[n]["status"])
    diff = [(k, r.get(k), b[n].get(k)) for k in same if r.get(k) != b[n].get(k)]
    assert not diff, (n, diff)
print("%d variants, registers %s" % (len(a), sorted({r["registers"] for r in a.values()})))
PY
  )
  [ "$rc" -eq 0 ] && ! grep -q "from the compile cache" "$tmp/edited.err" && ! grep -q Error <<<"$why"
  check "edited cache entries are compiled again, figures as cached: $why" $? \
    "exit $rc: $why; $(grep -E '^[0-9]+ variants: ' "$tmp/edited.err")"
fi

run main --dtype fp32 --dim 4 --seq 16
check "fatune --dim 4 --seq 16 (no --arch) exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/main.err")"
if [ "$have_driver" -eq 0 ]; then
  grep -q 'no CUDA driver' "$tmp/main.err" && grep -q 'backend emu' "$tmp/main.err" &&
    grep -q 'NVRTC sm_90' "$tmp/main.out"
  check "no GPU: auto falls back to the emulator, says why, targets sm_90" $? \
    "stderr: $(head -c 300 "$tmp/main.err")"
  run nocuda --dim 4 --seq 16 --backend cuda
  [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/nocuda.err")" -eq 1 ] && grep -q 'cuda.*driver' "$tmp/nocuda.err"
  check "--backend cuda with no driver: one line, exit $rc" $? "stderr: $(head -c 300 "$tmp/nocuda.err")"
else
  pass "a CUDA driver is installed here: the no-driver fallback is not shown (skipped)"
fi

run mainseq --dtype fp32 --dim 8 --seq 1000 --seq-k 300 --causal --backend emu --emu-seq 40 --seed 7 --json
check "main job --json with --emu-seq 40 exits 0" "$rc" "exit $rc: $(tail -c 300 "$tmp/mainseq.err")"
grep -q 'emulator runs seq_q 40 seq_k 40' "$tmp/mainseq.err" &&
  grep -q 'inputs seed 7' "$tmp/mainseq.err" && grep -q 'was not run' "$tmp/mainseq.err"
check "the emulator says what it ran, the seed, and what it did not run" $? \
  "stderr: $(head -c 400 "$tmp/mainseq.err")"
if [ "$HAVE_PY" -eq 1 ]; then
  python3 - "$tmp/mainseq.out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
keys = ["name", "status", "max_abs_err", "rel_err", "global_bytes_read", "global_bytes_written",
        "smem_bytes", "exp_count", "mma_count", "barriers"]
assert rows, "no rows"
for r in rows:
    missing = [k for k in keys if k not in r]
    assert not missing, (r.get("name"), missing)
    assert r["status"] == "ok", (r["name"], r["status"], r.get("message"))
    assert r["rel_err"] <= 1e-5 and r["global_bytes_read"] > 0 and r["exp_count"] > 0, r
    assert r["causal"] == 1 and r["dim"] == 8 and r["seed"] == 7, r
PY
  check "main job --json: every row ok, with errors and counters" $? "see above"
fi

echo "($((SECONDS - t_start)) s)"
finish
