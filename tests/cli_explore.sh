#!/usr/bin/env bash
# cli_explore.sh: fatune explore and fatune report on the CPU emulator.
#  - explore --dim 64 --seq 512 --axis all --json, in under two minutes:
#    every variant valid; every counter measured equals the cost model's;
#    deferred does fewer rescale multiplies than eager, kv_outer moves more
#    global memory than q_outer, split_k more shared memory (its reduction)
#    and more barriers than split_q, each by exactly the predicted amount;
#    naive attention's peak at N = 5000 grows by its score matrix, and the
#    tiled kernel allocates ten times less or better. Its trials are in the
#    database.
#  - the table of one axis states the effect, as predicted, with no flag.
#  - report from that database plus a sweep: at least three real PNG plots
#    (signature and size), each referenced by report.html; Markdown too;
#    with gnuplot off PATH the tables stay and the page says how to get the
#    plots; none of the GPU trials' plots (roofline, registers).
#  - the wg family on sm_90a (when the space has it): --axis norm and
#    --axis pingpong at dim 64, seq 128, every variant valid, the modelled
#    counters as predicted; eager rescales more than deferred, ping-pong
#    waits at more named barriers than none, with the same wgmma.
#  - tc's precision axis (fp16 on sm_89, dim 64, seq 512): its four points
#    valid; lazy rescaling does fewer rescale multiplies than the default,
#    fp16 accumulation the same; fp16 accumulation costs error (above the
#    default's, within fp16's tolerance); the timing model's TFLOP/s on the
#    RTX 4090 (--gpu) higher with fp16 accumulation, where it runs at
#    twice the rate, when nvdisasm is at hand.
#  - the backward pass (--op bwd, the simtbwd family) at dim 16, seq 100:
#    every counter of its six variants as the model predicts; FA1's order
#    makes 2 seq dim atomic adds per K/V block and FA2's none; dq=separate
#    recomputes every exponential once more than dq=atomic.
#  - bad input: one line on stderr, exit 2.
#
# usage: FATUNE=build/fatune bash tests/cli_explore.sh
set -u

NAME=cli_explore
TIMEOUT_S=300
. "$(dirname "$0")/cli_lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: python3 is needed to read explore's JSON (scripts/install-deps.sh installs it)"
  exit 77
fi
db="$tmp/explore.db"

# run NAME ARGS...: fatune, stdout to $tmp/NAME.out, stderr to .err, status in $rc.
run() {
  local name=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
  rc=$?
  if [ "$rc" -ge 124 ]; then
    fail "fatune $*" "exit $rc (crash or timeout); stderr: $(head -c 300 "$tmp/$name.err")"
  fi
}

# --- explore: the relations, on exact counters -------------------------------
t0=$SECONDS
run all explore --dim 64 --seq 512 --axis all --backend emu --seed 7 --db "$db" --json
took=$((SECONDS - t0))
check "explore --dim 64 --seq 512 --axis all --json exits 0" "$rc" \
  "exit $rc: $(tail -c 400 "$tmp/all.err")"
[ "$took" -lt 120 ]; check "explore --axis all at dim 64, seq 512 takes ${took} s (< 120 s)" $? \
  "${took} s"
why=$(python3 - "$tmp/all.out" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
errs = []
run = d["runs"][0]
assert (run["seq_q"], run["seq_k"]) == (512, 512), "ran %r" % ((run["seq_q"], run["seq_k"]),)
by = {v["name"]: v for v in run["variants"]}
ax = {a["axis"]: dict(zip(a["labels"], a["variants"])) for a in d["axes"]}
assert set(ax) == {"norm", "parallel", "warp_split", "layout", "tiles"}, "axes %s" % sorted(ax)
compared = 0
for v in run["variants"]:
    if v["status"] != "ok":
        errs.append("%s is %s: %s" % (v["name"], v["status"], v["message"]))
        continue
    for k, m in v["measured"].items():
        compared += 1
        if m != v["predicted"][k]:
            errs.append("%s %s: measured %d, predicted %d" % (v["name"], k, m, v["predicted"][k]))
assert compared >= 9 * 11, "only %d counters compared" % compared
def val(kind, axis, label, *keys):
    return sum(by[ax[axis][label]][kind][k] for k in keys)
def effect(axis, fa1, fa2, *keys):
    m = val("measured", axis, fa1, *keys) - val("measured", axis, fa2, *keys)
    p = val("predicted", axis, fa1, *keys) - val("predicted", axis, fa2, *keys)
    if not (m > 0 and m == p):
        errs.append("%s: %s - %s of %s is %d measured, %d predicted" % (axis, fa1, fa2, keys, m, p))
    return m
r = effect("norm", "eager", "deferred", "rescale_count")
g = effect("parallel", "kv_outer", "q_outer", "global_bytes_read", "global_bytes_written")
s = effect("warp_split", "split_k", "split_q", "smem_bytes_read", "smem_bytes_written")
b = effect("warp_split", "split_k", "split_q", "barriers")
if val("measured", "norm", "eager", "exp_count") != \
   val("measured", "norm", "deferred", "exp_count"):
    errs.append("eager and deferred differ in exponentials")
pk = d["peak_memory"]
score = pk["n"] * pk["n"] * 4
if not (pk["naive_rss_growth"] is not None and pk["naive_rss_growth"] >= 0.9 * score):
    errs.append("naive attention's peak grew %r bytes, its score matrix is %d"
                % (pk["naive_rss_growth"], score))
if not (pk["naive_bytes"] >= score and 10 * pk["tiled_bytes"] < pk["naive_bytes"]):
    errs.append("naive allocates %r, tiled %r" % (pk["naive_bytes"], pk["tiled_bytes"]))
if errs:
    print("; ".join(errs[:6]))
    sys.exit(1)
print("%d counters as predicted; deferred saves %d rescales, q_outer %d global bytes, split_q %d "
      "shared bytes and %d barriers; naive peak +%.1f MiB, tiled %.2f MiB"
      % (compared, r, g, s, b, pk["naive_rss_growth"] / 2**20, pk["tiled_bytes"] / 2**20))
EOF
)
check "explore JSON: ${why}" $? "$why"
rows=$("$FATUNE" export --format csv --db "$db" 2>/dev/null | grep -c ',ok,')
[ "$rows" -eq 9 ]; check "explore recorded its 9 trials in the database ($rows ok rows)" $? "$rows"

run norm explore --dim 64 --seq 512 --axis norm --backend emu --seed 7 --db "$db"
grep -q 'effect: deferred: .* rescale multiplies .* fewer .*exactly' "$tmp/norm.out" &&
  ! grep -q '^  !' "$tmp/norm.out" && grep -q 'Theta(N^2 d^2 / M)' "$tmp/norm.out"
check "explore --axis norm: the effect as predicted, nothing flagged, the paper's bound" $? \
  "exit $rc: $(grep -E 'effect|^  !' "$tmp/norm.out" | head -3)"

# --- the wg family (sm_90a) -------------------------------------------------------
if "$FATUNE" list --dim 64 --dtype bf16 --arch sm_90a 2>/dev/null | grep -q '^wg-'; then
  for axis in norm pingpong; do
    run "wg$axis" explore --dim 64 --seq 128 --dtype bf16 --arch sm_90a --axis "$axis" \
      --backend emu --seed 7 --db "$db" --json
    check "explore --arch sm_90a --axis $axis exits 0" "$rc" \
      "exit $rc: $(tail -c 400 "$tmp/wg$axis.err")"
  done
  why=$(python3 - "$tmp/wgnorm.out" "$tmp/wgpingpong.out" <<'EOF'
import json, sys
errs, seen = [], {}
for path in sys.argv[1:]:
    d = json.load(open(path))
    assert d["family"] == "wg", "family %r" % d["family"]
    ax = d["axes"][0]
    by = {v["name"]: v for v in d["runs"][0]["variants"]}
    for label, name in zip(ax["labels"], ax["variants"]):
        v = by[name]
        if v["status"] != "ok":
            errs.append("%s is %s: %s" % (name, v["status"], v["message"]))
            continue
        for k, p in v["predicted"].items():
            if p is not None and v["measured"][k] != p:
                errs.append("%s %s: measured %d, predicted %d" % (name, k, v["measured"][k], p))
        seen[(ax["axis"], label)] = v["measured"]
def m(axis, label, key):
    return seen.get((axis, label), {}).get(key, -1)
if not m("norm", "eager", "rescale_count") > m("norm", "deferred", "rescale_count") >= 0:
    errs.append("rescales: eager %d, deferred %d" % (m("norm", "eager", "rescale_count"),
                                                      m("norm", "deferred", "rescale_count")))
if not m("pingpong", "pp", "named_bar_waits") > m("pingpong", "none", "named_bar_waits") >= 0:
    errs.append("named-barrier waits: pp %d, none %d"
                % (m("pingpong", "pp", "named_bar_waits"), m("pingpong", "none", "named_bar_waits")))
if m("pingpong", "pp", "wgmma_count") != m("pingpong", "none", "wgmma_count"):
    errs.append("ping-pong changes the wgmma count")
if errs:
    print("; ".join(errs[:6]))
    sys.exit(1)
print("eager rescales %d, deferred %d; ping-pong waits %d named barriers, none %d"
      % (m("norm", "eager", "rescale_count"), m("norm", "deferred", "rescale_count"),
         m("pingpong", "pp", "named_bar_waits"), m("pingpong", "none", "named_bar_waits")))
EOF
)
  check "explore wg JSON: ${why}" $? "$why"
else
  echo "SKIPPED the wg checks: the space lists no wg variant for sm_90a"
fi

# --- tc's precision axis ----------------------------------------------------------
run prec explore --dim 64 --seq 512 --dtype fp16 --arch sm_89 --gpu rtx4090 --axis precision \
  --backend emu --seed 7 --db "$db" --json
check "explore --dtype fp16 --arch sm_89 --axis precision exits 0" "$rc" \
  "exit $rc: $(tail -c 400 "$tmp/prec.err")"
why=$(python3 - "$tmp/prec.out" <<'EOF' 2>&1
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["family"] == "tc", "family %r" % d["family"]
ax = d["axes"][0]
assert ax["labels"] == ["fa2", "s_f16", "lazy", "f16_lazy"], ax["labels"]
by = {v["name"]: v for v in d["runs"][0]["variants"]}
v = {label: by[name] for label, name in zip(ax["labels"], ax["variants"])}
for label, x in v.items():
    assert x["status"] == "ok", "%s is %s: %s" % (label, x["status"], x["message"])
    assert 0 < x["rel_err"] <= 5e-3, "%s: error %g" % (label, x["rel_err"])
r = {label: x["measured"]["rescale_count"] for label, x in v.items()}
assert r["lazy"] < r["fa2"] == r["s_f16"] and r["f16_lazy"] == r["lazy"], r
assert v["s_f16"]["rel_err"] > v["fa2"]["rel_err"], (v["s_f16"]["rel_err"], v["fa2"]["rel_err"])
t = {label: x["model_tflops"] for label, x in v.items()}
if all(x is not None and not math.isnan(x) for x in t.values()):
    assert t["s_f16"] > 1.1 * t["fa2"], t
print("rescales %d against %d lazily; errors %.2e (fa2) and %.2e (fp16 accumulation); "
      "RTX 4090 TFLOP/s %s" % (r["fa2"], r["lazy"], v["fa2"]["rel_err"], v["s_f16"]["rel_err"], t))
EOF
)
check "explore tc precision: ${why}" $? "$why"

# --- the backward pass (simtbwd) ---------------------------------------------------
run bwd explore --op bwd --dim 16 --seq 100 --backend emu --seed 7 --db "$db" --json
check "explore --op bwd --dim 16 --seq 100 exits 0" "$rc" "exit $rc: $(tail -c 400 "$tmp/bwd.err")"
why=$(python3 - "$tmp/bwd.out" <<'EOF' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["family"], d["op"]) == ("simtbwd", "bwd"), (d["family"], d["op"])
ax = {a["axis"]: dict(zip(a["labels"], a["variants"])) for a in d["axes"]}
assert set(ax) == {"order", "dq", "tiles"}, "axes %s" % sorted(ax)
by = {v["name"]: v for v in d["runs"][0]["variants"]}
errs, compared = [], 0
for v in by.values():
    if v["status"] != "ok":
        errs.append("%s is %s: %s" % (v["name"], v["status"], v["message"]))
        continue
    for k, m in v["measured"].items():
        compared += 1
        if m != v["predicted"][k]:
            errs.append("%s %s: measured %d, predicted %d" % (v["name"], k, m, v["predicted"][k]))
assert compared == 6 * 8, "compared %d counters" % compared
def m(axis, label, key):
    return by[ax[axis][label]]["measured"][key]
fa1, fa2 = m("order", "q", "global_atomics"), m("order", "kv", "global_atomics")
if not (fa1 == 2 * 100 * 16 * 4 and fa2 == 0):
    errs.append("atomics: FA1 %d, FA2 %d" % (fa1, fa2))
sep, at = m("dq", "separate", "exp_count"), m("dq", "atomic", "exp_count")
if not (sep == 2 * 100 * 100 and at == 100 * 100):
    errs.append("exponentials: dq=separate %d, dq=atomic %d" % (sep, at))
if errs:
    print("; ".join(errs[:6]))
    sys.exit(1)
print("FA1's order %d atomic adds, FA2's none; dq=separate %d exponentials, dq=atomic %d"
      % (fa1, sep, at))
EOF
)
check "explore --op bwd JSON: ${why}" $? "$why"

# --- report --------------------------------------------------------------------
run sweep explore --dim 32 --sweep seq=32:128 --axis tiles --backend emu --seed 7 --db "$db"
check "explore --sweep seq=32:128 --axis tiles exits 0" "$rc" \
  "exit $rc: $(tail -c 300 "$tmp/sweep.err")"
[ "$(grep -c '^== ' "$tmp/sweep.out")" -eq 3 ]
check "the sweep runs seq 32, 64 and 128" $? "$(grep '^== ' "$tmp/sweep.out")"

command -v gnuplot >/dev/null 2>&1 ||
  fail "gnuplot on PATH" "not installed: scripts/install-deps.sh installs gnuplot-nox"
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

run report report --db "$db" --out "$tmp/rep"
check "report exits 0" "$rc" "exit $rc: $(cat "$tmp/report.err")"
pngs=0
bad_png=""
for f in "$tmp"/rep/*.png; do
  [ -e "$f" ] || continue
  if is_png "$f" && [ "$(stat -c %s "$f")" -gt 4000 ]; then
    pngs=$((pngs + 1))
  else
    bad_png="$bad_png $f"
  fi
done
[ "$pngs" -ge 3 ] && [ -z "$bad_png" ]
check "report draws $pngs PNG plots (>= 3, each a PNG over 4 KB)" $? "$pngs; bad:$bad_png"
# The roofline and registers plots are the GPU's: none from the emulator.
! ls "$tmp"/rep/gpu* >/dev/null 2>&1 && ! grep -q "roofline" "$tmp/rep/report.html"
check "report of emulator trials: no roofline nor registers plot" $? "$(ls "$tmp/rep")"
! ls "$tmp"/rep/base* >/dev/null 2>&1 &&
  grep -q "No figure of TFLOP/s against PyTorch: the database holds no baseline, and no trial timed on a GPU" "$tmp/rep/report.html"
check "report of emulator trials: no PyTorch figure, and says why" $? "$(ls "$tmp/rep")"
missing=""
refs=0
for src in $(grep -o 'src="[^"]*"' "$tmp/rep/report.html" | sed 's/src="//; s/"$//'); do
  refs=$((refs + 1))
  is_png "$tmp/rep/$src" || missing="$missing $src"
done
[ "$refs" -eq "$pngs" ] && [ -z "$missing" ] && grep -q '<table>' "$tmp/rep/report.html"
check "report.html references all $refs plots, and has tables" $? \
  "refs $refs, pngs $pngs, missing:$missing"

# What the plots show: no line for a single length, the design comparison
# at matched variants, byte axes in kB/MB/GB, the heat map coloured by the
# metric with values in its cells; the folder moves and draws again.
short=""
for d in "$tmp"/rep/g*.dat; do
  [ "$(grep -vc '^seq' "$d")" -ge 2 ] || short="$short $(basename "$d")"
done
[ -z "$short" ]
check "no line plot of a single sequence length" $? "single:$short"
grep -q "^set key title 'matched: tile " "$tmp/rep/plots.gp" &&
  grep -q "^set format y '%.0s %cB'" "$tmp/rep/plots.gp" &&
  grep -q "^set cblabel 'global bytes per head" "$tmp/rep/plots.gp" &&
  grep -qE '"[0-9]+x[0-9]+: [0-9.]+ (B|kB|MB|GB)"' "$tmp"/rep/h*-tiles.dat
check "design plot matched, bytes in kB/MB, heat map by bytes with values in its cells" $? \
  "$(grep -E '^set (key title|format|cblabel)' "$tmp/rep/plots.gp" | head -4)"
! grep -qE "(output|plot) '/" "$tmp/rep/plots.gp" && mv "$tmp/rep" "$tmp/rep-moved" &&
  rm "$tmp"/rep-moved/*.png && (cd "$tmp/rep-moved" && gnuplot plots.gp) &&
  [ "$(ls "$tmp"/rep-moved/*.png | wc -l)" -eq "$pngs" ]
check "the report folder moves: plots.gp names relative paths and draws again there" $? \
  "$(grep -m 2 "^set output" "$tmp/rep-moved/plots.gp")"

run md report --db "$db" --out "$tmp/rep-md" --format md
n_md=$(grep -c '^!\[.*\](.*\.png)$' "$tmp/rep-md/report.md")
[ "$rc" -eq 0 ] && [ "$n_md" -ge 3 ] && grep -q '^| --- |' "$tmp/rep-md/report.md"
check "report --format md: $n_md images and tables" $? "exit $rc, $n_md images"

"${TIMEOUT[@]}" env PATH=/nonexistent "$FATUNE" report --db "$db" --out "$tmp/rep-nognuplot" \
  >"$tmp/nognu.out" 2>"$tmp/nognu.err" </dev/null
rc=$?
page="$tmp/rep-nognuplot/report.html"
[ "$rc" -eq 0 ] && grep -q '<table>' "$page" && ! grep -q '<img' "$page" &&
  grep -q 'apt-get install gnuplot-nox' "$page" &&
  grep -q 'apt-get install gnuplot-nox' "$tmp/nognu.err"
check "report without gnuplot on PATH: tables, no images, and how to get them" $? \
  "exit $rc: $(head -c 300 "$tmp/nognu.err")"

# A gnuplot that draws nothing: the report says so and fails, its tables kept.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\nexit 0\n' >"$tmp/fakebin/gnuplot"
chmod +x "$tmp/fakebin/gnuplot"
"${TIMEOUT[@]}" env PATH="$tmp/fakebin:$PATH" "$FATUNE" report --db "$db" --out "$tmp/rep-fake" \
  >"$tmp/fake.out" 2>"$tmp/fake.err" </dev/null
rc=$?
[ "$rc" -eq 1 ] && grep -q 'gnuplot drew no' "$tmp/fake.err" &&
  grep -q '<table>' "$tmp/rep-fake/report.html" &&
  ! grep -q '<img' "$tmp/rep-fake/report.html"
check "report with a gnuplot that draws nothing: exit 1, says so, tables kept" $? \
  "exit $rc: $(head -c 300 "$tmp/fake.err")"

# --- bad input -----------------------------------------------------------------
bad() {
  local needle=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err" </dev/null
  local rc=$? lines
  lines=$(wc -l <"$tmp/bad.err")
  [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$tmp/bad.out" ] &&
    grep -q -- "$needle" "$tmp/bad.err"
  check "fatune $*: exit 2, one line naming '$needle'" $? "exit $rc: $(head -c 300 "$tmp/bad.err")"
}
bad "bogus" explore --axis bogus
bad "seq=9:3" explore --sweep seq=9:3
bad "seq=x" explore --sweep seq=x
bad "not both" explore --sweep seq=64:128 --seq 64
bad "the wg family (op fwd, fp16, bf16 on sm_90a) and the tc family" explore --dtype e4m3 \
  --arch sm_90a --backend emu --db "$db"
bad "not op bwd in bf16 on sm_90" explore --op bwd --dtype bf16 --arch sm_90 --backend emu \
  --db "$db"
bad "the simt family has no axis 'pingpong'" explore --axis pingpong --arch sm_90 --backend emu \
  --db "$db"
bad "pdf" report --format pdf
bad "--seq" report --seq 5
bad "--out" explore --out x

"${TIMEOUT[@]}" "$FATUNE" report --db "$tmp/none.db" --out "$tmp/rep-none" \
  >"$tmp/none.out" 2>"$tmp/none.err"
rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/none.err")" -eq 1 ] && [ ! -e "$tmp/rep-none" ]
check "report of a missing database: exit 1, one line, nothing written" $? \
  "exit $rc: $(head -c 300 "$tmp/none.err")"

finish
