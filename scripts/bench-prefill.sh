#!/usr/bin/env bash
# Prefill over a KV cache (fatune_attention_kvcache with many new tokens)
# in the timing model, in two tables.
#
# 1. tc's paged form (K/V through the block table) against its dense form
#    on the same problem: 8 sequences of 2048 new tokens over 2048 keys,
#    16 heads, bf16, head dims 64 and 128, with and without the causal
#    mask, on A100 and H100, at FlashAttention-2's tile; TFLOP/s and their
#    ratio.
# 2. What the library chooses between: the decoding family (tcdec, at the
#    splits the model finds best) and tc's paged form, over a 8192-key
#    cache, 32 query heads, head dim 128, for a few batches, GQA ratios
#    and new-token counts; the time of each and the library's rule (the
#    paged form from 64 new tokens when its grid fills half the SMs).
#
# Each figure is `fatune model --json`'s.
# usage: scripts/bench-prefill.sh [path/to/fatune]    (default build/fatune)
# GPUS="h100" narrows it. Needs nvdisasm (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-prefill: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
gpus="${GPUS:-a100 h100}"

field() {  # field NAME FLAGS...: one field of the model's JSON
  local name=$1
  shift
  "$fatune" model --dtype bf16 --json "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$name"
}

echo "paged against dense: 8 x 2048 new tokens over 2048 keys, 16 heads, bf16 (TFLOP/s)"
printf '%-5s %-4s %-7s %-40s %6s %6s %6s\n' gpu dim mask variant dense paged ratio
for gpu in $gpus; do
  for d in 64 128; do
    case $d in 64) v=tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2;;
               *) v=tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2;; esac
    for causal in "" --causal; do
      common=(--gpu "$gpu" --dim "$d" ${causal:+"$causal"} --seq 2048 --batch 8 --heads 16)
      dense=$(field tflops "${common[@]}" --variant "$v${causal:+-causal}")
      paged=$(field tflops "${common[@]}" --paged --variant "$v${causal:+-causal}-paged")
      printf '%-5s %-4s %-7s %-40s %6.0f %6.0f %6.2f\n' "$gpu" "$d" "$(m=${causal#--}; echo "${m:-none}")" "${v#*-bf16-}" \
        "$dense" "$paged" "$(python3 -c "print($paged / $dense)")"
    done
  done
done

echo
echo "decoding or the paged forward pass: 8192 cached keys, 32 heads, d128 bf16, causal (us)"
printf '%-5s %-5s %-4s %-6s %14s %10s %-8s %-8s\n' gpu batch gqa new "tcdec (splits)" "tc paged" faster library
for gpu in $gpus; do
  sms=$(case $gpu in a100) echo 108;; *) echo 132;; esac)
  for c in "1 1 64" "1 1 512" "1 8 128" "4 1 64" "4 8 64" "4 1 256" "8 1 128" "1 1 2048"; do
    read -r b g n <<<"$c"
    dec=$("$fatune" model --op decode --gpu "$gpu" --dtype bf16 --dim 128 --heads 32 --causal \
            --page 16 --seq "$n" --seq-k 8192 --batch "$b" --gqa "$g" --variant tcdec-bf16-d128-n64w4-s1-causal --json |
          python3 -c '
import json, sys
best = next(r for r in json.load(sys.stdin) if r["best"])
print("%.1f %d" % (best["time_us"], best["splits"]))')
    pgd=$(field time_us --gpu "$gpu" --dim 128 --heads 32 --causal --seq "$n" --seq-k 8192 \
            --batch "$b" --paged --variant tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2-causal-paged)
    read -r dt ds <<<"$dec"
    python3 - "$gpu" "$b" "$g" "$n" "$dt" "$ds" "$pgd" "$sms" <<'EOF'
import sys
gpu, b, g, n, dt, ds, pg, sms = sys.argv[1:]
b, n, sms, dt, pg = int(b), int(n), int(sms), float(dt), float(pg)
ctas = b * 32 * ((n + 127) // 128)
lib = "paged" if n >= 64 and 2 * ctas >= sms else "decode"
print("%-5s %-5d %-4s %-6d %8.1f (%3s) %10.1f %-8s %-8s" % (gpu, b, g, n, dt, ds, pg,
      "paged" if pg < dt else "decode", lib))
EOF
  done
done
