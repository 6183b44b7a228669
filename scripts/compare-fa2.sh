#!/usr/bin/env bash
# FlashAttention-2's own forward kernels beside fatune's on the same tiles
# (d64: 128x128, d128: 128x64, 4 warps; bf16, non-causal; sm_80, sm_90),
# compiled with the same toolchain and analysed by the same SASS analyser
# (fatune sass): instructions per K/V block per warp, non-HMMA per HMMA,
# registers / spill bytes (ptxas), CTAs per SM (A100, for sm_80).
#
# usage: scripts/compare-fa2.sh FA2_CHECKOUT CUTLASS_CHECKOUT [path/to/fatune]
#   FA2_CHECKOUT: a checkout of flash-attention (v2.x; csrc/flash_attn/src)
#   CUTLASS_CHECKOUT: a checkout of CUTLASS (include/cute, include/cutlass),
#   e.g. the csrc/cutlass submodule FA2 pins.
# With FA_CUBINS=DIR, it also compiles d256 and the causal kernels
# (flash_fwd_hdimD_bf16_causal_sm80.cu), the backward pass's at d64 and
# d128 (flash_bwd_hdimD_bf16_sm80.cu) and the decoding kernels
# at d64, d128 and d256 (flash_fwd_split[_align]_hdimD_bf16_sm80.cu: more
# than one split, and one), and keeps every cubin there as
# fa2_dD[_causal]_sm_XX.cubin, fa2_bwd_dD_sm_XX.cubin and
# fa2_split[_align]_dD_sm_XX.cubin
# (tests/data/fa holds them gzipped, for fatune model's validation,
# scripts/bench-model.sh and scripts/bench-decode.sh).
# It downloads nothing. Needs nvcc ($CUDA_HOME/bin, /usr/local/cuda/bin or
# PATH) and nvdisasm. Each kernel file takes a few minutes to compile.
#
# The nvcc flags are FA2's setup.py's, plus the FLASHATTENTION_DISABLE_*
# switches setup.py lists (commented out) for dropout, ALiBi, softcap,
# uneven head dims and local attention: they leave out instantiations this
# comparison does not look at; the one it looks at, flash_fwd_kernel for
# even M, N and K with none of those features, is the same code either way.
# The PyTorch headers the launch code includes are replaced by the stubs in
# scripts/fa2-stubs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 2 ]; then
  echo "usage: scripts/compare-fa2.sh FA2_CHECKOUT CUTLASS_CHECKOUT [path/to/fatune]" >&2
  echo "compare-fa2: no checkout given; this script downloads nothing: check out" \
       "flash-attention (v2.x) and CUTLASS and pass their directories" >&2
  exit 2
fi
fa2="$(cd "$1" && pwd)" cutlass="$(cd "$2" && pwd)"
fatune="${3:-$here/../build/fatune}"
src="$fa2/csrc/flash_attn/src"
[ -f "$src/flash_fwd_hdim64_bf16_sm80.cu" ] ||
  { echo "compare-fa2: $src/flash_fwd_hdim64_bf16_sm80.cu not found: not a FlashAttention-2 checkout" >&2; exit 2; }
[ -d "$cutlass/include/cute" ] ||
  { echo "compare-fa2: $cutlass/include/cute not found: not a CUTLASS checkout" >&2; exit 2; }
[ -x "$fatune" ] || { echo "compare-fa2: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
nvcc=""
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc || true)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then nvcc="$c"; break; fi
done
[ -n "$nvcc" ] || { echo "compare-fa2: no nvcc" >&2; exit 2; }

out=$(mktemp -d "${TMPDIR:-/tmp}/compare-fa2.XXXXXX")
trap 'rm -rf "$out"' EXIT
flags=(-cubin -O3 -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__
       -U__CUDA_NO_HALF2_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr
       --expt-extended-lambda --use_fast_math
       -DFLASHATTENTION_DISABLE_DROPOUT -DFLASHATTENTION_DISABLE_ALIBI -DFLASHATTENTION_DISABLE_SOFTCAP
       -DFLASHATTENTION_DISABLE_UNEVEN_K -DFLASHATTENTION_DISABLE_LOCAL
       -Xptxas -v -I "$fa2/csrc/flash_attn" -I "$src" -I "$cutlass/include" -I "$here/fa2-stubs")

# All compiles at once, as many as there are cores.
cases=() all=()
for arch in sm_80 sm_90; do for dim in 64 128; do cases+=("$arch $dim"); done; done
all=("${cases[@]}")
if [ -n "${FA_CUBINS:-}" ]; then
  for arch in sm_80 sm_90; do
    all+=("$arch 256")
    for dim in 64 128 256; do all+=("$arch ${dim}_causal"); done
    for dim in 64 128; do all+=("$arch bwd_$dim"); done
    for dim in 64 128 256; do all+=("$arch split_$dim" "$arch split_align_$dim"); done
  done
fi
jobs=$(nproc)
running=0
for c in "${all[@]}"; do
  read -r arch dim <<<"$c"
  cc=${arch#sm_}
  file="$src/flash_fwd_hdim${dim%_causal}_bf16_sm80.cu"
  [ "$dim" = "${dim%_causal}" ] || file="$src/flash_fwd_hdim${dim%_causal}_bf16_causal_sm80.cu"
  [ "$dim" = "${dim#bwd_}" ] || file="$src/flash_bwd_hdim${dim#bwd_}_bf16_sm80.cu"
  [ "$dim" = "${dim#split}" ] || file="$src/flash_fwd_${dim%_*}_hdim${dim##*_}_bf16_sm80.cu"
  "$nvcc" "${flags[@]}" -gencode "arch=compute_$cc,code=$arch" -o "$out/d${dim}_$arch.cubin" \
    "$file" >"$out/d${dim}_$arch.log" 2>&1 &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
for c in "${all[@]}"; do
  read -r arch dim <<<"$c"
  [ -s "$out/d${dim}_$arch.cubin" ] ||
    { echo "compare-fa2: nvcc failed for d$dim $arch:" >&2; tail -20 "$out/d${dim}_$arch.log" >&2; exit 1; }
done

if [ -n "${FA_CUBINS:-}" ]; then
  mkdir -p "$FA_CUBINS"
  for c in "${all[@]}"; do
    read -r arch dim <<<"$c"
    name="fa2_d${dim}_$arch.cubin"
    [ "$dim" = "${dim#bwd_}" ] || name="fa2_bwd_d${dim#bwd_}_$arch.cubin"
    [ "$dim" = "${dim#split}" ] || name="fa2_${dim%_*}_d${dim##*_}_$arch.cubin"
    cp "$out/d${dim}_$arch.cubin" "$FA_CUBINS/$name"
  done
fi

# fatune's rows first, in bench-sass.sh's table, then FA2's under it.
ARCHS="sm_80 sm_90" DTYPES=bf16 CAUSAL=0 "$here/bench-sass.sh" "$fatune"
# The main kernel: flash_fwd_kernel<traits of (dim, 128, block_n, 4 warps), Is_dropout=0, Is_causal=0,
# Is_local=0, Has_alibi=0, Is_even_MN=1, Is_even_K=1, Is_softcap=0,
# Return_softmax=0>. FA2's shared memory per CTA is Q + K + V tiles of
# 16-bit elements: d64 128x128: 48 KB, d128 128x64: 64 KB.
even='Lb0ELb0ELb0ELb0ELb1ELb1ELb0ELb0EEEv'
for c in "${cases[@]}"; do
  read -r arch dim <<<"$c"
  bn=128 smem=49152
  [ "$dim" = 128 ] && bn=64 smem=65536
  gpu=a100
  [ "$arch" = sm_90 ] && gpu=h100
  row=$("$fatune" sass "$out/d${dim}_$arch.cubin" --config "block_m=128,block_n=$bn,dim=$dim,warps=4" \
          --smem "$smem" --gpu "$gpu" | grep -E "flash_fwd_kernelI23Flash_fwd_kernel_traitsILi${dim}ELi128ELi${bn}ELi4E.*$even") ||
    { echo "compare-fa2: no kernel matching $even in d$dim $arch" >&2; exit 1; }
  fn=$(echo "$row" | awk '{print $NF}')
  # ptxas -v: registers and spill bytes of that function.
  res=$(awk -v fn="$fn" '
    index($0, "Function properties for " fn) { want = 1; next }
    want && /spill stores/ { n = split($0, a, /[ ,]+/); for (i = 1; i + 3 <= n; i++)
        if (a[i + 1] == "bytes" && a[i + 2] == "spill" && a[i + 3] == "stores") st = a[i]; next }
    want && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); print substr($0, RSTART + 5, RLENGTH - 5), st + 0; exit }
  ' "$out/d${dim}_$arch.log")
  echo "$row" | awk -v arch="$arch" -v dim="$dim" -v res="$res" '{
    split(res, r, " ")
    ctas = $7; if (ctas == "-") ctas = "-"
    printf "| %s | %s | bf16 | 0 | FA2 flash_fwd_kernel (even M, N, K) | %s | %s | %s | %s / %s | %s |\n",
           arch, dim, $2, $3, $4, r[1], r[2], ctas }'
done
