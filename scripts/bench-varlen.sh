#!/usr/bin/env bash
# Variable-length batches (fatune_attention_varlen) in the timing model:
# the same tc variant in its dense form over a dense batch and in its varlen
# form over packed batches of the same 16384 tokens, uniform (8 x 2048),
# skewed (8192 down to 128) and mixed (16 sequences of 333 to 1999), as
# TFLOP/s (each sequence's own work, its causal half) and their ratio to
# the dense batch's; bf16, head dims 64 and 128, 16 heads, with and
# without the causal mask, on A100 and H100. Each figure is
# `fatune model --json`'s. On H100 the dense forward pass's best is the wg
# family's, which has no varlen form yet: its dense figure is shown beside.
#
# usage: scripts/bench-varlen.sh [path/to/fatune]    (default build/fatune)
# GPUS="a100" and DIMS="128" narrow it. Needs nvdisasm (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-varlen: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
gpus="${GPUS:-a100 h100}"
dims="${DIMS:-64 128}"
skewed="8192,4096,2048,1024,512,256,128,128"
mixed="1999,333,1024,777,1500,412,1333,901,650,1200,333,1111,1801,555,1000,1322"

# the tc family's FlashAttention-2 tile per head dim
variant() { case $1 in 64) echo tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2;;
                         *) echo tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2;; esac; }

tflops() {  # tflops FLAGS...: the model's TFLOP/s
  "$fatune" model --dtype bf16 --heads 16 --json "$@" |
    python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["tflops"])'
}

printf '%-5s %-4s %-7s %8s %15s %15s %15s %9s\n' gpu dim mask dense "uniform (x)" "skewed (x)" \
  "mixed (x)" wg_dense
for gpu in $gpus; do
  for d in $dims; do
    for causal in "" --causal; do
      v="$(variant "$d")${causal:+-causal}"
      common=(--gpu "$gpu" --dim "$d" $causal --variant "$v")
      dense=$(tflops "${common[@]}" --seq 2048 --batch 8)
      row=""
      for lens in 2048,2048,2048,2048,2048,2048,2048,2048 "$skewed" "$mixed"; do
        t=$(tflops "${common[@]}" --seq-lens "$lens")
        row+=$(printf ' %8s (%4.2f)' "$t" "$(python3 -c "print($t / $dense)")")
      done
      wg="-"
      if [ "$gpu" = h100 ]; then
        wg=$("$fatune" model --dtype bf16 --heads 16 --json --gpu h100 --dim "$d" $causal \
               --seq 2048 --batch 8 --config family=wg |
             python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["tflops"])')
      fi
      printf '%-5s %-4s %-7s %8s%s %9s\n' "$gpu" "$d" "${causal:-none}" "$dense" "$row" "$wg"
    done
  done
done
