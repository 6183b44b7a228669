#!/usr/bin/env bash
# Variable-length batches (fatune_attention_varlen) in the timing model:
# the same variant in its dense form over a dense batch and in its varlen
# form over packed batches of the same 16384 tokens, uniform (8 x 2048),
# skewed (8192 down to 128) and mixed (16 sequences of 333 to 1999), as
# TFLOP/s (each sequence's own work, its causal half) and their ratio to
# the dense batch's; bf16, head dims 64 and 128, 16 heads, with and
# without the causal mask, on A100 and H100. Each figure is
# `fatune model --json`'s. The variants: tc at FlashAttention-2's tile;
# on H100 also wg at FlashAttention-3's, a CTA per tile and persistent.
# OP=bwd does the same for the backward pass (fatune_attention_varlen_backward)
# with tcbwd's FlashAttention-2 tiles (no Hopper family computes it yet).
#
# usage: scripts/bench-varlen.sh [path/to/fatune]    (default build/fatune)
# GPUS="a100" and DIMS="128" narrow it. Needs nvdisasm (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-varlen: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
gpus="${GPUS:-a100 h100}"
dims="${DIMS:-64 128}"
op="${OP:-fwd}"
case $op in fwd|bwd) ;; *) echo "bench-varlen: OP is fwd or bwd, not $op" >&2; exit 2;; esac
skewed="8192,4096,2048,1024,512,256,128,128"
mixed="1999,333,1024,777,1500,412,1333,901,650,1200,333,1111,1801,555,1000,1322"

# variants GPU DIM CAUSAL: the variants of a row each, without the mask's suffix
variants() {
  if [ "$op" = bwd ]; then
    case $2 in 64) echo tcbwd-bf16-d64-m128n128w8wn4wd2-dqatomic;;
               *) echo tcbwd-bf16-d128-m64n128w8wn4wd2-dqatomic;; esac
    return
  fi
  case $2 in 64) echo tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2;;
             *) echo tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2;; esac
  [ "$1" = h100 ] || return 0
  local wg
  case $2/$3 in
    64/) wg=wg-bf16-d64-m192n192c3-deferred-np-sq-s2-sw128;;
    64/--causal) wg=wg-bf16-d64-m192n128c3-deferred-np-sq-s2-sw128;;
    */--causal) wg=wg-bf16-d128-m128n128c2-deferred-pp-ov-s2-sw128;;
    *) wg=wg-bf16-d128-m128n176c2-deferred-pp-ov-s2-sw128;;
  esac
  echo "$wg" "$wg-pers"
}

tflops() {  # tflops FLAGS...: the model's TFLOP/s
  "$fatune" model --op "$op" --dtype bf16 --heads 16 --json "$@" |
    python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["tflops"])'
}

printf '%-5s %-4s %-7s %-44s %6s %15s %15s %15s\n' gpu dim mask variant dense "uniform (x)" \
  "skewed (x)" "mixed (x)"
for gpu in $gpus; do
  for d in $dims; do
    for causal in "" --causal; do
      for base in $(variants "$gpu" "$d" "$causal"); do
        v="$base${causal:+-causal}"
        common=(--gpu "$gpu" --dim "$d" $causal --variant "$v")
        dense=$(tflops "${common[@]}" --seq 2048 --batch 8)
        row=""
        for lens in 2048,2048,2048,2048,2048,2048,2048,2048 "$skewed" "$mixed"; do
          t=$(tflops "${common[@]}" --seq-lens "$lens")
          row+=$(printf ' %8s (%4.2f)' "$t" "$(python3 -c "print($t / $dense)")")
        done
        printf '%-5s %-4s %-7s %-44s %6s%s\n' "$gpu" "$d" "${causal:-none}" "${base#*-bf16-}" \
          "$dense" "$row"
      done
    done
  done
done
