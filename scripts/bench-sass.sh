#!/usr/bin/env bash
# The SASS of fatune's tensor-core kernels on FlashAttention-2's own tiles
# (d64: 128x128, 4 warps; d128: 128x64, 4 warps), bf16 and fp16, causal
# and not, for sm_80 and sm_90, the row sums of P on the tensor cores
# (rowsum=mma, fatune's default) and by FADD (rowsum=fadd, as FA2): the main loop's instructions per K/V block
# per warp, non-HMMA instructions per HMMA, registers and spill bytes, CTAs
# per SM (A100 for sm_80, H100 for sm_90), from `fatune compile --sass`.
# Needs nvdisasm (scripts/install-deps.sh installs it).
# usage: scripts/bench-sass.sh [path/to/fatune]    (default build/fatune)
# DTYPES="bf16" CAUSAL="0" ARCHS="sm_80" ROWSUMS="mma" narrow the table.
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-sass: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }

tile() {  # dim, rowsum -> the config of FA2's tile
  local bn=128
  [ "$1" = 128 ] && bn=64
  echo "block_m=128,block_n=$bn,warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0,rowsum=$2"
}

echo "| arch | dim | dtype | causal | variant | insns per K/V block | HMMA | non-HMMA per HMMA | regs / spill bytes | CTAs per SM |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for arch in ${ARCHS:-sm_80 sm_90}; do
  for dim in 64 128; do
    for dtype in ${DTYPES:-bf16 fp16}; do
      for causal in ${CAUSAL:-0 1}; do
       for rowsum in ${ROWSUMS:-mma fadd}; do
        flag=()
        [ "$causal" = 1 ] && flag=(--causal)
        # The table's row of the one variant: fields are name, regs, spill st/ld,
        # smem, stack, compile, insns, mma, other, mufu, local, ctas, bound, est_tf.
        row=$("$fatune" compile --sass --arch "$arch" --dim "$dim" --dtype "$dtype" "${flag[@]}" \
                --config "$(tile "$dim" "$rowsum")" --jobs 1 | grep '^tc-') ||
          { echo "bench-sass: fatune compile failed for $arch d$dim $dtype causal=$causal rowsum=$rowsum" >&2; exit 1; }
        echo "$row" | awk -v arch="$arch" -v dim="$dim" -v dtype="$dtype" -v causal="$causal" '{
          split($3, sp, "/")
          printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %d | %s |\n",
                 arch, dim, dtype, causal, $1, $7, $8, $9, $2, sp[1] + sp[2], $12 }'
       done
      done
    done
  done
done
