#!/usr/bin/env bash
# Prefill over a KV cache (fatune_attention_kvcache with many new tokens)
# in the timing model, in two tables.
#
# 1. The paged form (K/V through the block table) against the dense form
#    of the same variant on the same problem: 8 sequences of 2048 new
#    tokens over 2048 keys, 16 heads, bf16, head dims 64 and 128, with and
#    without the causal mask, on A100 (tc at FlashAttention-2's tile) and
#    H100 (wg at FlashAttention-3's, the library's default there); TFLOP/s
#    and their ratio. wg's form loads K and V in TMA boxes within a page:
#    for pages of 16 rows boxes of 16, for pages of 256 the most rows that
#    the tile's block_n allows (page_rows, as the library takes them); tc
#    copies rows, the same kernel for any page size.
# 2. What the library chooses between: the decoding family (tcdec, at the
#    splits the model finds best) and the paged form (tc on A100, wg on
#    H100, pages of 16), over a 8192-key
#    cache, 32 query heads, head dim 128, for a few batches, GQA ratios
#    and new-token counts; the time of each and the library's rule (the
#    paged form from 64 new tokens when its query rows make a quarter of
#    128 an SM per wave of 128-row tiles, a sixth for wg's form).
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
printf '%-5s %-4s %-7s %-47s %6s %9s %6s %9s %6s\n' gpu dim mask variant dense "pages 16" ratio \
  "pages 256" ratio
for gpu in $gpus; do
  for d in 64 128; do
    for causal in "" --causal; do
      if [ "$gpu" = a100 ]; then
        case $d in 64) v=tc-bf16-d64-m128n128w4-deferred-swizzle-qsmem-s2;;
                   *) v=tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2;; esac
        v=$v${causal:+-causal}
      else
        case $d$causal in
          64) v=wg-bf16-d64-m192n192c3;; 64--causal) v=wg-bf16-d64-m192n128c3;;
          128) v=wg-bf16-d128-m128n176c2;; *) v=wg-bf16-d128-m128n128c2;;
        esac
        v=$v-deferred-np-sq-s2-sw128${causal:+-causal}
      fi
      # wg's boxes for pages of 256: the most rows (up to 128) dividing block_n
      big=$v-paged
      if [ "${v%%-*}" = wg ]; then
        bn=$(echo "$v" | sed -E 's/.*n([0-9]+)c[0-9].*/\1/')
        rows=16
        for r in 32 64 128; do [ $((bn % r)) -eq 0 ] && rows=$r; done
        [ "$rows" -gt 16 ] && big=$big-pr$rows
      fi
      common=(--gpu "$gpu" --dim "$d" ${causal:+"$causal"} --seq 2048 --batch 8 --heads 16)
      dense=$(field tflops "${common[@]}" --variant "$v")
      p16=$(field tflops "${common[@]}" --paged --variant "$v-paged")
      p256=$p16
      [ "$big" != "$v-paged" ] && p256=$(field tflops "${common[@]}" --paged --variant "$big")
      printf '%-5s %-4s %-7s %-47s %6.0f %9.0f %6.2f %9.0f %6.2f\n' "$gpu" "$d" \
        "$(m=${causal#--}; echo "${m:-none}")" "${v#*-bf16-}" "$dense" "$p16" \
        "$(python3 -c "print($p16 / $dense)")" "$p256" "$(python3 -c "print($p256 / $dense)")"
    done
  done
done

echo
echo "decoding or the paged forward pass: 8192 cached keys, 32 heads, d128 bf16, causal (us)"
printf '%-5s %-5s %-4s %-6s %14s %10s %-8s %-8s\n' gpu batch gqa new "tcdec (splits)" "paged" faster library
for gpu in $gpus; do
  sms=$(case $gpu in a100) echo 108;; *) echo 132;; esac)
  # the forward form the library runs there, over pages of 16
  fwd=$(case $gpu in a100) echo tc-bf16-d128-m128n64w4-deferred-swizzle-qsmem-s2-causal-paged;;
                     *) echo wg-bf16-d128-m128n128c2-deferred-np-sq-s2-sw128-causal-paged;; esac)
  for c in "1 1 64" "1 1 96" "1 1 128" "1 8 128" "1 1 256" "1 1 512" "4 1 64" "4 8 64" "4 1 256" \
           "8 1 128" "1 1 2048"; do
    read -r b g n <<<"$c"
    dec=$("$fatune" model --op decode --gpu "$gpu" --dtype bf16 --dim 128 --heads 32 --causal \
            --page 16 --seq "$n" --seq-k 8192 --batch "$b" --gqa "$g" --variant tcdec-bf16-d128-n64w4-s1-causal --json |
          python3 -c '
import json, sys
best = next(r for r in json.load(sys.stdin) if r["best"])
print("%.1f %d" % (best["time_us"], best["splits"]))')
    pgd=$(field time_us --gpu "$gpu" --dim 128 --heads 32 --causal --seq "$n" --seq-k 8192 \
            --batch "$b" --paged --variant "$fwd")
    read -r dt ds <<<"$dec"
    python3 - "$gpu" "$b" "$g" "$n" "$dt" "$ds" "$pgd" "$sms" <<'EOF'
import sys
gpu, b, g, n, dt, ds, pg, sms = sys.argv[1:]
b, n, sms, dt, pg = int(b), int(n), int(sms), float(dt), float(pg)
ctas = b * 32 * ((n + 127) // 128)
share = 128 * sms * ((ctas + sms - 1) // sms)
lib = "paged" if n >= 64 and (6 if gpu == "h100" else 4) * b * 32 * n >= share else "decode"
print("%-5s %-5d %-4s %-6d %8.1f (%3s) %10.1f %-8s %-8s" % (gpu, b, g, n, dt, ds, pg,
      "paged" if pg < dt else "decode", lib))
EOF
  done
done
