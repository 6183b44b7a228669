#!/usr/bin/env bash
# The precision axes: the speed each buys, by the timing model, and the
# error it costs, on the emulator. tc's two: s_acc (S = Q K^T accumulated
# in f16 instead of f32, fp16 inputs) and rescale (O rescaled lazily, only
# when a row's max grows by more than 8 in log2 units, bf16 here). Each at
# FlashAttention-2's tile (with pv=step for rescale, whose rows' maxima
# come before any exponential) and in FA2's order with the fewest
# instructions (rowsum=fadd, pv=step, kv_addr=carry): `fatune model
# --json` at 16k tokens on each GPU (TFLOP/s, and the axis's value over the
# default); then each variant's norm-relative error of O on the emulator
# (seq 200, a fixed seed, causal and not), with its worst error over the
# adversarial suite's cases it passed and the cases it failed. The
# README's Precision axes tables are this script's output.
#
# usage: scripts/bench-precision.sh [path/to/fatune]    (default build/fatune)
# GPUS="rtx4090:sm_89 h100:sm_90" (GPU:arch pairs), DIMS="64 128" and
# SEED=11 narrow or change it. Needs nvdisasm (scripts/install-deps.sh
# installs it) for the model.
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-precision: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
gpus="${GPUS:-rtx4090:sm_89 rtx3090:sm_86 rtx5090:sm_120 l40s:sm_89 a100:sm_80 h100:sm_90}"
dims="${DIMS:-64 128}"
seed="${SEED:-11}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-precision.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fa2=family=tc
fewest=family=tc,rowsum=fadd,pv=step,kv_addr=carry

# tflops GPU ARCH DIM CONFIG [DTYPE]: the model's TFLOP/s, or "-" (its reason on stderr).
tflops() {
  if "$fatune" model --gpu "$1" --arch "$2" --dim "$3" --seq 16384 --dtype "${5:-fp16}" --config "$4" \
       --json >"$tmp/m.json" 2>"$tmp/m.err"; then
    python3 -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["tflops"])' "$tmp/m.json"
  else
    echo "bench-precision: $1 d$3 $4: $(tail -n 1 "$tmp/m.err")" >&2
    echo -
  fi
}

ratio() { python3 -c 'import sys; a, b = sys.argv[1:]; print("-" if "-" in (a, b) else "%.2f" % (float(b) / float(a)))' "$1" "$2"; }

# speed TITLE BASE AXIS DTYPE: the model's table of an axis's value AXIS
# against the default, at BASE and in FA2's order.
speed() {
  echo "| GPU | dim | $1 | ratio | FA2's order, $1 | ratio |" | sed 's/ \/ / | /g'
  echo "|---|---|---|---|---|---|---|---|"
  for g in $gpus; do
    local gpu=${g%%:*} arch=${g#*:}
    for dim in $dims; do
      a=$(tflops "$gpu" "$arch" "$dim" "$2" "$4") b=$(tflops "$gpu" "$arch" "$dim" "$2,$3" "$4")
      c=$(tflops "$gpu" "$arch" "$dim" "$fewest" "$4") d=$(tflops "$gpu" "$arch" "$dim" "$fewest,$3" "$4")
      echo "| $gpu ($arch) | $dim | $a | $b | $(ratio "$a" "$b") | $c | $d | $(ratio "$c" "$d") |"
    done
  done
}
speed "S in f32 / S in f16" "$fa2" s_acc=f16 fp16
echo
speed "always / lazy" "$fa2,pv=step" rescale=lazy bf16

# errors DIM CAUSAL CONFIG DTYPE: O's norm-relative error, the suite's
# worst passed error and the cases failed, from the main job's JSON.
errors() {
  local flag=()
  [ "$2" = yes ] && flag=(--causal)
  rm -f "$tmp/e.db"
  "$fatune" --backend emu --arch sm_89 --dtype "$4" --dim "$1" --seq 200 "${flag[@]}" \
    --config "$3" --seed "$seed" --db "$tmp/e.db" --json >"$tmp/e.json" 2>"$tmp/e.err" ||
    { echo "bench-precision: the emulator's run of $3 failed: $(tail -n 1 "$tmp/e.err")" >&2; exit 1; }
  python3 - "$tmp/e.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))[0]
if r["status"] != "ok":
    print("%s | - | -" % r["status"])
else:
    print("%.1e | %.1e | %s" % (r["rel_err"], r["suite_err"], r["suite_failed"] or "none"))
EOF
}

# cost A B BASE AXIS DTYPE: the emulator's table of BASE against BASE,AXIS.
cost() {
  echo
  echo "| dim | causal | $1: O | suite, passed | failed | $2: O | suite, passed | failed |"
  echo "|---|---|---|---|---|---|---|---|"
  for dim in $dims; do
    for causal in no yes; do
      echo "| $dim | $causal | $(errors "$dim" $causal "$3" "$5") | $(errors "$dim" $causal "$3,$4" "$5") |"
    done
  done
}
cost "S in f32" "S in f16" "$fa2" s_acc=f16 fp16
cost "always" "lazy" "$fa2,pv=step" rescale=lazy bf16
