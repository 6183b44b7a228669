#!/usr/bin/env bash
# fakegpu.sh: the CUDA path of fatune end to end, against whatever
# libcuda.so.1 the loader finds: the fake driver (tests/fakecuda, through
# LD_LIBRARY_PATH, in CI) or a real GPU's (scripts/gpu-check.sh).
#   tune DTYPE  the main job, --dim 64 --seq 512 --json: every variant of the
#               default space validated and timed, status ok, all in the
#               database; fatune best answers from it. For bf16, also
#               FAKECUDA_FAULT=launch:3:illegal_address: exactly one variant
#               crashed with the driver's message, every other ok and in
#               the database (a fresh worker goes on). bf16 runs with --sass,
#               and fatune report draws the roofline from the GPU trials,
#               and registers against TFLOP/s where nvdisasm gave registers;
#               with baselines recorded by fatune baseline and a run at seq
#               256, fatune's TFLOP/s against seq_len beside PyTorch's.
#               For e4m3, also FA3's tile in its blockscale form (descales
#               per block of 64 rows): its launches and workspace.
#   faults      each other fault's outcome: hang -> timeout, wrong ->
#               invalid, alloc -> crashed (out of memory), load -> crashed
#               (the module does not load), init -> one line, exit non-zero.
#   bwd         the main job on the backward pass, --op bwd --dtype bf16:
#               every variant of the default space validated (dq, dk and
#               dv on rows computed in float64 on the CPU) and timed, all in
#               the database, fatune best --op bwd answers from it; with the
#               fake, a wrong dK/dV launch is invalid, a deterministic
#               variant whose warm-up repeats it differently is invalid, and
#               dQ by atomics (non-deterministic) is not held to the bits.
#   explore     fatune explore --backend cuda, and libfatune's example on
#               the cuda backend.
#   trust       one variant, launch by launch: a wrong first warm-up launch,
#               or wrong timed launches, make it invalid (the kernel's output
#               must repeat bit for bit); the oracle out of memory, hung or
#               faulting is the environment's failure (env_error), recorded
#               nowhere, and the next run measures the variant.
# Fault injection is the fake's: with a real driver those parts are SKIPPED.
#
# usage: FATUNE=build/fatune EXAMPLE=build/example_attention bash tests/fakecuda/fakegpu.sh tune bf16
set -u

NAME=fakegpu
TIMEOUT_S=600
. "$(dirname "$0")/../cli_lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: python3 is needed to read fatune's JSON (scripts/install-deps.sh installs it)"
  exit 77
fi
mode=${1:-tune}
db="$tmp/fake.db"
export FATUNE_DB="$db"

# run NAME ARGS...: fatune, stdout to $tmp/NAME.out, stderr to .err, status in $rc.
run() {
  local n=$1
  shift
  "${TIMEOUT[@]}" "$FATUNE" "$@" >"$tmp/$n.out" 2>"$tmp/$n.err"
  rc=$?
}

# The fake, when the first libcuda.so.1 on LD_LIBRARY_PATH is it (the
# sanitizer build's fake cannot be loaded into another program to ask).
fake=0
IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do
  if [ -n "$d" ] && [ -e "$d/libcuda.so.1" ]; then
    grep -qa "(fakecuda)" "$d/libcuda.so.1" && fake=1
    break
  fi
done
# skip_without_gpu ERRFILE: SKIPPED when fatune found no driver or no device.
skip_without_gpu() {
  if grep -q "no CUDA driver\|no GPU\|cuInit failed" "$1"; then
    echo "SKIPPED: $(head -n 1 "$1")"
    exit 77
  fi
}
# Every line the fake printed about a broken contract fails the test.
no_violation() {
  if grep -h "fakecuda: VIOLATION" "$tmp"/*.err; then fail "$1: driver contract" "see above"; fi
}

# statuses FILE: "ok=28 crashed=1" from a --json answer, and the messages
# of the others on the lines after.
statuses() {
  python3 - "$1" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))
c = collections.Counter(r["status"] for r in rows)
print(" ".join("%s=%d" % kv for kv in sorted(c.items())))
for r in rows:
    if r["status"] != "ok":
        print("%s %s: %s" % (r["status"], r["name"], r["message"]))
PY
}

# trials DTYPE [SEQ]: the trials of the run's problem (seq 512 unless SEQ)
# in the database, by status.
trials() {
  "$FATUNE" export --format json --db "$db" | python3 -c '
import collections, json, sys
rows = [r for r in json.load(sys.stdin) if r["dtype"] == sys.argv[1] and r["seq_q"] == int(sys.argv[2])]
print(" ".join("%s=%d" % kv for kv in sorted(collections.Counter(r["status"] for r in rows).items())))' "$1" "${2:-512}"
}

tune_args=(--backend cuda --dim 64 --seq 512 --json --trial-ms 2)

case $mode in
tune)
  dt=${2:-bf16}
  sass=()
  [ "$dt" = bf16 ] && sass=(--sass)
  run tune --dtype "$dt" "${tune_args[@]}" "${sass[@]}"
  skip_without_gpu "$tmp/tune.err"
  arch=$(grep -o 'target sm_[0-9a-z]*' "$tmp/tune.err" | cut -c8-)
  # The fake's default device is an H100 (9.0): its target is sm_90a, and
  # the banner says why.
  if [ "$fake" = 1 ] && [ -z "${FAKECUDA_DEVICE:-}" ]; then
    [ "$arch" = sm_90a ] && grep -q 'an sm_90 device runs sm_90a code' "$tmp/tune.err"
    check "on an sm_90 device the target is sm_90a, and the banner says why" $? \
      "target '${arch}': $(grep -m1 'target' "$tmp/tune.err")"
  fi
  n=$("$FATUNE" list --dim 64 --dtype "$dt" --arch "${arch:-none}" | wc -l)
  got=$(statuses "$tmp/tune.out")
  [ "$rc" -eq 0 ] && [ "$got" = "ok=$n" ]
  check "tune $dt: all $n variants ok" $? "exit $rc, $got; $(tail -n 3 "$tmp/tune.err")"
  got=$(trials "$dt")
  [ "$got" = "ok=$n" ]
  check "tune $dt: the database holds every trial" $? "$got"
  # Each trial says what compiled its code: this NVRTC.
  nvrtc=$("$FATUNE" --version | sed -n 's/.*(\(NVRTC [0-9.]*\)).*/\1/p')
  got=$("$FATUNE" export --format json --db "$db" | python3 -c '
import json, sys
print(" | ".join(sorted({r["compiler"] or "NULL" for r in json.load(sys.stdin)})))')
  [ -n "$nvrtc" ] && [ "$got" = "$nvrtc" ]
  check "tune $dt: each trial records its compiler, $got" $? "'$got', not '$nvrtc'"
  run best best --dim 64 --seq 512 --dtype "$dt" --json
  best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["variant"])' "$tmp/best.out" 2>/dev/null)
  want=$(python3 -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["status"] == "ok"]
print(min(rows, key=lambda r: r["median_us"])["name"])' "$tmp/tune.out")
  [ "$rc" -eq 0 ] && [ -n "$best" ] && [ "$best" = "$want" ]
  check "best $dt: the fastest of the run" $? "exit $rc, best '$best', fastest '$want'"
  if [ "$dt" = e4m3 ]; then
    # Descales per block of 64 rows: the blockscale form's two launches, its
    # larger workspace and parameters through the CUDA path (the fake
    # computes O by the reference from the kernel's name, and the GPU's
    # main case has no descales: their arithmetic is the emulator's to check).
    run tunebs --dtype e4m3 --backend cuda --dim 64 --seq 256 --json --trial-ms 2 \
      --descale-rows 64 --config family=wg --db "$tmp/bs.db"
    got=$(statuses "$tmp/tunebs.out")
    [ "$rc" -eq 0 ] && [ "$got" = "ok=1" ] && grep -q -- '-blockscale"' "$tmp/tunebs.out"
    check "tune e4m3 --descale-rows 64: the blockscale variant ok" $? \
      "exit $rc, $got; $(tail -n 3 "$tmp/tunebs.err")"
  fi
  if [ "$dt" = bf16 ] && command -v gnuplot >/dev/null 2>&1; then
    run report report --out "$tmp/rep"
    page="$tmp/rep/report.html"
    [ "$rc" -eq 0 ] && [ -s "$tmp/rep/gpu0-roofline.png" ] &&
      grep -q 'src="gpu0-roofline.png"' "$page" &&
      grep -q "<h2>.*(cuda), bf16: roofline and registers</h2>" "$page" &&
      grep -q "<tr><td>512</td><td>64</td>" "$page"
    check "report: the GPU trials' roofline, and the best at seq 512 against its roof" $? \
      "exit $rc: $(cat "$tmp/report.err"); $(ls "$tmp/rep")"
    # Registers come from the SASS figures, which need nvdisasm.
    if grep -q '"est_tflops": [0-9]' "$tmp/tune.out"; then
      [ -s "$tmp/rep/gpu0-registers.png" ] && grep -q "<th>registers per thread</th>" "$page"
      check "report: TFLOP/s against registers, and their table" $? "$(ls "$tmp/rep")"
    else
      [ ! -e "$tmp/rep/gpu0-registers.png" ] && grep -q "No registers recorded" "$page"
      check "report without SASS figures: no registers plot, and says why" $? "$(ls "$tmp/rep")"
    fi
    grep -q "No figure of TFLOP/s against PyTorch: the database holds no baseline" "$page" &&
      ! ls "$tmp"/rep/base* >/dev/null 2>&1
    check "report without baselines: no PyTorch figure, and says why" $? "$(ls "$tmp/rep")"
    # PyTorch's times as scripts/gpu-check.sh records them (made up here: the
    # fake times nothing), at two lengths, fatune's at a second one too.
    run t256 --dtype "$dt" --backend cuda --dim 64 --seq 256 --trial-ms 2
    gpu=$("$FATUNE" export --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["device"])')
    {
      echo "gpu,backend,dtype,batch,heads,seq_q,seq_k,dim,causal,median_us,torch"
      for b in "sdpa-flash 12.0 20.0" "sdpa-cudnn 11.0 18.0"; do
        read -r name t256 t512 <<<"$b"
        echo "$gpu,$name,bf16,4,16,256,256,64,0,$t256,2.5.1"
        echo "$gpu,$name,bf16,4,16,512,512,64,0,$t512,2.5.1"
      done
    } >"$tmp/sdpa.csv"
    run baseline baseline "$tmp/sdpa.csv"
    check "baseline: PyTorch's times recorded" $rc "exit $rc: $(cat "$tmp/baseline.err")"
    run report2 report --out "$tmp/rep2"
    page="$tmp/rep2/report.html"
    # The row at 512: fatune's best of the run, flash's 4*4*16*512*512*64 FLOPs in 20 us.
    want=$(python3 -c '
import json, sys
best = max(r["tflops"] for r in json.load(open(sys.argv[1])) if r["status"] == "ok")
flash, cudnn = (2**32 / us / 1e6 for us in (20.0, 18.0))
print("<tr><td>512</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>" % (
    best, cudnn, flash, best / max(flash, cudnn)))' "$tmp/tune.out")
    [ "$rc" -eq 0 ] && [ -s "$tmp/rep2/base0-sdpa.png" ] && grep -q 'src="base0-sdpa.png"' "$page" &&
      grep -qF "$want" "$page" && grep -q "<tr><td>256</td><td>[0-9]" "$page"
    check "report: fatune's best TFLOP/s against seq_len beside PyTorch's, and the table" $? \
      "exit $rc: $(cat "$tmp/report2.err"); want $want; $(grep -A4 'fatune (best' "$page")"
  fi
  if [ "$dt" = bf16 ] && [ $fake -eq 1 ]; then
    # At seq 128: the fake computes every launch's attention, and a worker
    # that goes on after a crash needs no longer sequences to show it. The
    # database is the one tuned at 512: every cubin comes from its compile
    # cache, and the programs loaded from it run as compiled ones do.
    FAKECUDA_FAULT=launch:3:illegal_address FAKECUDA_STATE="$tmp/state" run crash --dtype "$dt" \
      "${tune_args[@]}" --seq 128
    got=$(statuses "$tmp/crash.out")
    [ "$(head -n 1 <<<"$got")" = "crashed=1 ok=$((n - 1))" ] &&
      grep -q "^crashed .*CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" <<<"$got"
    check "tune $dt, launch 3 faults: one crashed, with the driver's message" $? "$got"
    grep -q "compiled (NVRTC $arch, $n from the compile cache)" "$tmp/crash.err"
    check "tune $dt at another length: all $n cubins from the compile cache" $? \
      "$(grep -E '^[0-9]+ variants: ' "$tmp/crash.err" || tail -n 2 "$tmp/crash.err")"
    got=$(trials "$dt" 128)
    [ "$got" = "crashed=1 ok=$((n - 1))" ]
    check "tune $dt, launch 3 faults: the database holds every trial" $? "$got"
  fi
  ;;
faults)
  if [ $fake -eq 0 ]; then echo "SKIPPED: fault injection is the fake driver's"; exit 77; fi
  # A T4 (sm_75, 64 KB of shared memory) has the smallest space: each run
  # compiles ten variants.
  export FAKECUDA_DEVICE=sm_75
  args=(--backend cuda --dim 64 --seq 128 --dtype fp64 --json --trial-ms 1 --retune)
  n=$("$FATUNE" list --dim 64 --dtype fp64 --arch sm_75 | wc -l)
  one() {  # one FAULT WANT-STATUS WANT-MESSAGE TIMEOUT-S
    rm -f "$tmp/state"
    FAKECUDA_FAULT=$1 FAKECUDA_STATE="$tmp/state" run "f$2" "${args[@]}" --timeout $4
    got=$(statuses "$tmp/f$2.out")
    want=$(printf '%s\n' "$2=1" "ok=$((n - 1))" | sort | paste -sd ' ')
    [ "$(head -n 1 <<<"$got")" = "$want" ] && grep -q "^$2 .*$3" <<<"$got"
    check "fault $1: one $2 ($3), the rest ok" $? "exit $rc, $got; $(tail -n 2 "$tmp/f$2.err")"
  }
  # The hang's run bounds every variant's measurement by its timeout: 20 s
  # leaves the others room under a sanitizer on a busy machine.
  one launch:3:hang timeout "no answer after 20 s" 20
  one launch:2:wrong invalid "" 120
  one alloc:9 crashed "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY" 120
  one load:2 crashed "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE" 120
  # A GPU newer than NVRTC: one line naming both, before anything compiles.
  FAKECUDA_DEVICE=sm_150 run newer "${args[@]}"
  [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/newer.err")" -eq 1 ] &&
    grep -q "is sm_150: NVRTC [0-9.]* cannot compile for sm_150 (the newest it knows is sm_1" \
      "$tmp/newer.err"
  check "a GPU newer than NVRTC is refused in one line" $? "exit $rc: $(cat "$tmp/newer.err")"
  FAKECUDA_FAULT=init run init "${args[@]}"
  [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/init.err")" -eq 1 ] &&
    grep -q "no GPU: no CUDA-capable device is detected" "$tmp/init.err"
  check "fault init: one line, exit non-zero" $? "exit $rc: $(cat "$tmp/init.err")"
  ;;
bwd)
  bargs=(--backend cuda --op bwd --dtype bf16 --dim 64 --seq 512 --batch 2 --heads 4 --json
         --trial-ms 2)
  run bwd "${bargs[@]}"
  skip_without_gpu "$tmp/bwd.err"
  arch=$(grep -o 'target sm_[0-9a-z]*' "$tmp/bwd.err" | cut -c8-)
  n=$("$FATUNE" list --op bwd --dim 64 --dtype bf16 --arch "${arch:-none}" | wc -l)
  got=$(statuses "$tmp/bwd.out")
  [ "$rc" -eq 0 ] && [ "$n" -ge 2 ] && [ "$got" = "ok=$n" ] &&
    python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
assert all(r["rel_err"] < 1e-2 and r["median_us"] > 0 and r["tflops"] > 0 for r in rows), rows' "$tmp/bwd.out"
  check "tune --op bwd bf16: all $n variants validated and timed" $? \
    "exit $rc, $got; $(tail -n 3 "$tmp/bwd.err")"
  got=$(trials bf16)
  [ "$got" = "ok=$n" ]
  check "tune --op bwd: the database holds every trial" $? "$got"
  run best best --op bwd --dim 64 --seq 512 --dtype bf16 --json
  best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["variant"])' "$tmp/best.out" 2>/dev/null)
  want=$(python3 -c '
import json, sys
print(min(json.load(open(sys.argv[1])), key=lambda r: r["median_us"])["name"])' "$tmp/bwd.out")
  [ "$rc" -eq 0 ] && [ -n "$best" ] && [ "$best" = "$want" ]
  check "best --op bwd: the fastest of the run" $? "exit $rc, best '$best', fastest '$want'"
  # Under GQA tcbwd lists every tile both ways (a CTA per K/V head, and
  # per query head with the sums after): each validated on the CPU's rows
  # of the summed dK and dV, timed, and recorded under gqa 2.
  ntc=$("$FATUNE" list --op bwd --dim 64 --dtype bf16 --arch "${arch:-none}" | grep -c '^tcbwd-')
  run bwdgqa --backend cuda --op bwd --dtype bf16 --dim 64 --seq 256 --batch 1 --heads 4 --gqa 2 \
    --json --trial-ms 2
  got=$(statuses "$tmp/bwdgqa.out")
  nq=$(python3 -c 'import json, sys; print(sum("-qhead" in r["name"] for r in json.load(open(sys.argv[1]))))' \
       "$tmp/bwdgqa.out" 2>&1)
  [ "$rc" -eq 0 ] && [ "$ntc" -ge 2 ] && [ "$got" = "ok=$((n + ntc))" ] && [ "$nq" = "$ntc" ]
  check "tune --op bwd --gqa 2: all $((n + ntc)) variants ($ntc a CTA per query head) validated and timed" \
    $? "exit $rc, $got, $nq qhead; $(tail -n 3 "$tmp/bwdgqa.err")"
  run bestgqa best --op bwd --gqa 2 --dim 64 --seq 256 --dtype bf16 --json
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["kv_group"] == 2, r' \
    "$tmp/bestgqa.out" 2>/dev/null
  check "best --op bwd --gqa 2: the run's, keyed gqa 2" $? "exit $rc: $(head -c 300 "$tmp/bestgqa.out")"
  if [ $fake -eq 1 ]; then
    # Launch 1 is the oracle's; each run of a variant is D's launch, dK/dV's
    # and dQ's: 2 to 4 validate it, 5 to 7 are the first warm-up.
    pass=$("$FATUNE" list --op bwd --dim 64 --dtype bf16 --arch "$arch" | grep -m1 dqpass | cut -d' ' -f1)
    atomic=${pass%dqpass}dqatomic
    one() {  # one FAULT VARIANT NAME
      rm -f "$db" "$tmp/state"
      FAKECUDA_FAULT=$1 FAKECUDA_STATE="$tmp/state" run "$3" "${bargs[@]}" --variant "$2"
      got=$(statuses "$tmp/$3.out")
    }
    one launch:3:wrong "$pass" wrongdkdv
    [ "$rc" -ne 0 ] && [ "$(head -n 1 <<<"$got")" = invalid=1 ] &&
      grep -q "dk: norm-relative error .* on the rows computed in float64 on the CPU exceeds" <<<"$got"
    check "bwd: a wrong dK/dV launch is invalid, judged on the CPU's rows" $? "exit $rc, $got"
    one launch:6:wrong "$pass" warm
    [ "$rc" -ne 0 ] && [ "$(head -n 1 <<<"$got")" = invalid=1 ] &&
      grep -q "warm-up launch 1 differs from the first launch's at dk\[0,0,0,0\], bit for bit" <<<"$got"
    check "bwd, deterministic: a warm-up run that differs is invalid" $? "exit $rc, $got"
    one launch:6:wrong "$atomic" atomic
    [ "$rc" -eq 0 ] && [ "$got" = ok=1 ]
    check "bwd, dQ by atomics: timed without the bitwise check" $? "exit $rc, $got"
  fi
  ;;
explore)
  run explore explore --backend cuda --dim 64 --seq 512 --axis norm --json
  skip_without_gpu "$tmp/explore.err"
  got=$(python3 -c '
import json, sys
rows = [v for run in json.load(open(sys.argv[1]))["runs"] for v in run["variants"]]
print(len(rows), sum(1 for r in rows if r["status"] == "ok" and r["median_us"] > 0))' "$tmp/explore.out" 2>&1)
  [ "$rc" -eq 0 ] && [ "${got%% *}" -ge 2 ] && [ "${got%% *}" = "${got##* }" ]
  check "explore --backend cuda: every variant ok" $? "exit $rc, $got; $(tail -n 3 "$tmp/explore.err")"
  if [ -n "${EXAMPLE:-}" ]; then
    "${TIMEOUT[@]}" "$EXAMPLE" "$db" cuda >"$tmp/example.out" 2>"$tmp/example.err"
    rc=$?
    [ "$rc" -eq 0 ] && grep -q " on cuda " "$tmp/example.out"
    check "libfatune's example on cuda" $? "exit $rc: $(cat "$tmp/example.out" "$tmp/example.err" | tail -n 3)"
  fi
  ;;
trust)
  if [ $fake -eq 0 ]; then echo "SKIPPED: fault injection is the fake driver's"; exit 77; fi
  export FAKECUDA_DEVICE=sm_75
  v=$("$FATUNE" list --dim 64 --dtype fp64 --arch sm_75 | head -n 1 | cut -d' ' -f1)
  args=(--backend cuda --dim 64 --seq 128 --dtype fp64 --json --trial-ms 1 --variant "$v")
  # one FAULT NAME: a fresh database and fault counts, the run in $tmp/NAME.*
  # A hang must time out, so its bound is short; any other run gets a bound
  # that a sanitizer build on a busy machine stays well inside.
  one() {
    local t=120
    case $1 in *hang*) t=5 ;; esac
    rm -f "$db" "$tmp/state"
    FAKECUDA_FAULT=$1 FAKECUDA_STATE="$tmp/state" run "$2" "${args[@]}" --timeout $t
  }
  # Launch 1 is the oracle's, 2 the validated one, 3 to 5 the warm-up.
  one launch:3:wrong warm
  got=$(statuses "$tmp/warm.out")
  [ "$rc" -ne 0 ] && [ "$(head -n 1 <<<"$got")" = invalid=1 ] &&
    grep -q "warm-up launch 1 differs from the first launch's at o\[0,0,0,0\], bit for bit (a race?)" <<<"$got" &&
    [ "$(trials fp64 128)" = invalid=1 ]
  check "the first warm-up launch wrong: invalid, and recorded so" $? "exit $rc, $got; $(trials fp64 128)"
  one launch:7-:wrong timed
  got=$(statuses "$tmp/timed.out")
  [ "$rc" -ne 0 ] && [ "$(head -n 1 <<<"$got")" = invalid=1 ] &&
    grep -q "the output of the last timed launch differs from the first launch's" <<<"$got"
  check "timed launches wrong: invalid" $? "exit $rc, $got"
  one "" clean
  got=$(statuses "$tmp/clean.out")
  [ "$rc" -eq 0 ] && [ "$got" = ok=1 ]
  check "no fault: ok (every launch repeats the first, bit for bit)" $? "exit $rc, $got"
  # The oracle's inputs and outputs are allocations 1 to 5.
  for f in alloc:4 launch:1:hang launch:1:illegal_address; do
    one "$f" env
    got=$(statuses "$tmp/env.out")
    [ "$rc" -ne 0 ] && [ "$(head -n 1 <<<"$got")" = env_error=1 ] &&
      grep -q "^env_error .*\(cannot set up validation\|setting up validation\)" <<<"$got" &&
      grep -q "1 env_error (the environment failed" "$tmp/env.err" && [ -z "$(trials fp64 128)" ]
    check "fault $f in the oracle: env_error, no trial recorded" $? \
      "exit $rc, $got, recorded '$(trials fp64 128)'; $(tail -n 2 "$tmp/env.err")"
    FAKECUDA_STATE="$tmp/state" run again "${args[@]}"
    got=$(statuses "$tmp/again.out")
    [ "$rc" -eq 0 ] && [ "$got" = ok=1 ] && [ "$(trials fp64 128)" = ok=1 ]
    check "fault $f in the oracle: the next run measures the variant" $? \
      "exit $rc, $got, recorded '$(trials fp64 128)'"
  done
  ;;
esac
no_violation "$mode"
finish
