#!/usr/bin/env bash
# The SASS of fatune's tensor-core kernels on FlashAttention-2's own tiles
# (d64: 128x128, 4 warps; d128: 128x64, 4 warps), bf16 and fp16, causal
# and not, for sm_80 and sm_90, the row sums of P on the tensor cores
# (rowsum=mma, fatune's default) and by FADD (rowsum=fadd, as FA2), the
# latter also with P V by k16 steps (pv=step), and both with the K/V copy
# addresses carried through the loop (kv_addr=carry, as FA2): the main
# loop's instructions per K/V block
# per warp, non-HMMA instructions per HMMA, registers and spill bytes, CTAs
# per SM (A100 for sm_80, H100 for sm_90), from `fatune compile --sass`.
# For sm_90a, the wgmma family (wg) on FlashAttention-3's tiles
# (hopper/tile_size.h: d64 192x192, causal 192x128, 3 consumer
# warpgroups; d128 128x176, causal 128x128, 2 consumers), with FA3's
# intra-warpgroup overlap and, for 2 consumers, ping-pong, or without
# them where the family refuses them (its name says which): the consumer
# loop's instructions per K/V block per warp, HGMMA, non-HGMMA per HGMMA.
# Needs nvdisasm (scripts/install-deps.sh installs it).
# usage: scripts/bench-sass.sh [path/to/fatune]    (default build/fatune)
# DTYPES="bf16" CAUSAL="0" ARCHS="sm_80" SHAPES="mma" narrow the table
# (ARCHS: sm_80, sm_90 for tc, sm_90a for wg; SHAPES: tc's row sums,
# order and K/V addresses: mma, fadd, fadd-step, carry, fadd-carry,
# fadd-step-carry).
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-sass: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }

tile() {  # dim, shape (as SHAPES) -> the config of FA2's tile
  local bn=128 shape
  [ "$1" = 128 ] && bn=64
  case "$2" in
    mma) shape="rowsum=mma,pv=block,kv_addr=rebuild" ;;
    fadd) shape="rowsum=fadd,pv=block,kv_addr=rebuild" ;;
    fadd-step) shape="rowsum=fadd,pv=step,kv_addr=rebuild" ;;
    carry) shape="rowsum=mma,pv=block,kv_addr=carry" ;;
    fadd-carry) shape="rowsum=fadd,pv=block,kv_addr=carry" ;;
    fadd-step-carry) shape="rowsum=fadd,pv=step,kv_addr=carry" ;;
    *) echo "bench-sass: unknown shape '$2' (mma, fadd, fadd-step, carry, fadd-carry, fadd-step-carry)" >&2; exit 2 ;;
  esac
  echo "block_m=128,block_n=$bn,warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0,$shape"
}

# The table's row of the one variant: fields are name, regs, spill st/ld,
# smem, stack, compile, insns, mma, other, mufu, local, ctas, bound, est_tf.
print_row() {  # arch dim dtype causal table-row
  echo "$5" | awk -v arch="$1" -v dim="$2" -v dtype="$3" -v causal="$4" '{
    split($3, sp, "/")
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %d | %s |\n",
           arch, dim, dtype, causal, $1, $7, $8, $9, $2, sp[1] + sp[2], $12 }'
}

wg_row() {  # dim dtype causal: FA3's tile, its features where the family has them
  local bm=128 bn=176 cons pp=0 row feat flag=()
  case "$1/$3" in
    64/0) bm=192 bn=192 ;; 64/1) bm=192 bn=128 ;; 128/1) bn=128 ;;
  esac
  cons=$((bm / 64))
  [ "$cons" = 2 ] && pp=1
  [ "$3" = 1 ] && flag=(--causal)
  for feat in "pingpong=$pp,overlap=1" "pingpong=$pp,overlap=0" "pingpong=0,overlap=0"; do
    if row=$("$fatune" compile --sass --arch sm_90a --dim "$1" --dtype "$2" "${flag[@]}" --jobs 1 \
               --config "family=wg,block_m=$bm,block_n=$bn,consumers=$cons,stages=2,$feat" 2>/dev/null |
             grep '^wg-.* ok$'); then
      print_row sm_90a "$1" "$2" "$3" "$row"
      return
    fi
  done
  echo "| sm_90a | $1 | $2 | $3 | wg ${bm}x$bn: not built | - | - | - | - | - |"
}

for shape in ${SHAPES:-}; do tile 64 "$shape" >/dev/null || exit 2; done
echo "| arch | dim | dtype | causal | variant | insns per K/V block | HMMA / HGMMA | non-MMA per MMA | regs / spill bytes | CTAs per SM |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for arch in ${ARCHS:-sm_80 sm_90 sm_90a}; do
  for dim in 64 128; do
    for dtype in ${DTYPES:-bf16 fp16}; do
      for causal in ${CAUSAL:-0 1}; do
        if [ "$arch" = sm_90a ]; then
          wg_row "$dim" "$dtype" "$causal"
          continue
        fi
       for shape in ${SHAPES:-mma fadd fadd-step carry fadd-carry fadd-step-carry}; do
        flag=()
        [ "$causal" = 1 ] && flag=(--causal)
        row=$("$fatune" compile --sass --arch "$arch" --dim "$dim" --dtype "$dtype" "${flag[@]}" \
                --config "$(tile "$dim" "$shape")" --jobs 1 | grep '^tc-') ||
          { echo "bench-sass: fatune compile failed for $arch d$dim $dtype causal=$causal $shape" >&2; exit 1; }
        print_row "$arch" "$dim" "$dtype" "$causal" "$row"
       done
      done
    done
  done
done
