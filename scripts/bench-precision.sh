#!/usr/bin/env bash
# The precision axes: the speed each buys, by the timing model, and the
# error it costs, on the emulator. For now tc's s_acc (S = Q K^T
# accumulated in f16 instead of f32, fp16 inputs): at FlashAttention-2's
# tile and in FA2's order with the fewest instructions (rowsum=fadd,
# pv=step, kv_addr=carry), `fatune model --json` at 16k tokens on each GPU
# (TFLOP/s, and f16 over f32); then each variant's norm-relative error of O
# on the emulator (fp16, seq 200, a fixed seed, causal and not), with its
# worst error over the adversarial suite's cases it passed and the cases it
# failed. The README's Precision axes tables are this script's output.
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

# tflops GPU ARCH DIM CONFIG: the model's TFLOP/s, or "-" (its reason on stderr).
tflops() {
  if "$fatune" model --gpu "$1" --arch "$2" --dim "$3" --seq 16384 --dtype fp16 --config "$4" \
       --json >"$tmp/m.json" 2>"$tmp/m.err"; then
    python3 -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["tflops"])' "$tmp/m.json"
  else
    echo "bench-precision: $1 d$3 $4: $(tail -n 1 "$tmp/m.err")" >&2
    echo -
  fi
}

ratio() { python3 -c 'import sys; a, b = sys.argv[1:]; print("-" if "-" in (a, b) else "%.2f" % (float(b) / float(a)))' "$1" "$2"; }

echo "| GPU | dim | S in f32 | S in f16 | ratio | FA2's order, f32 | f16 | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for g in $gpus; do
  gpu=${g%%:*} arch=${g#*:}
  for dim in $dims; do
    a=$(tflops "$gpu" "$arch" "$dim" "$fa2") b=$(tflops "$gpu" "$arch" "$dim" "$fa2,s_acc=f16")
    c=$(tflops "$gpu" "$arch" "$dim" "$fewest") d=$(tflops "$gpu" "$arch" "$dim" "$fewest,s_acc=f16")
    echo "| $gpu ($arch) | $dim | $a | $b | $(ratio "$a" "$b") | $c | $d | $(ratio "$c" "$d") |"
  done
done

# errors DIM CAUSAL CONFIG: O's norm-relative error, the suite's worst
# passed error and the cases failed, from the main job's JSON.
errors() {
  local flag=()
  [ "$2" = yes ] && flag=(--causal)
  rm -f "$tmp/e.db"
  "$fatune" --backend emu --arch sm_89 --dtype fp16 --dim "$1" --seq 200 "${flag[@]}" \
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

echo
echo "| dim | causal | S in f32: O | suite, passed | failed | S in f16: O | suite, passed | failed |"
echo "|---|---|---|---|---|---|---|---|"
for dim in $dims; do
  for causal in no yes; do
    echo "| $dim | $causal | $(errors "$dim" $causal "$fa2") | $(errors "$dim" $causal "$fa2,s_acc=f16") |"
  done
done
