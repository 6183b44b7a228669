#!/usr/bin/env bash
# FlashAttention-3's own forward kernels beside fatune's wg variants on the
# same tiles (FA3's hopper/tile_size.h, bf16: d64 192x192, causal 192x128,
# 3 consumer warpgroups; d128 128x176, causal 128x128, 2 consumer
# warpgroups; 2 K/V stages, intra-warpgroup overlap, ping-pong), compiled
# for sm_90a with the same toolchain and analysed by the same SASS analyser
# (fatune sass, fatune compile --sass): instructions per K/V block per warp
# in the consumer's loop, HGMMA, non-HGMMA instructions per HGMMA, the
# producer loop's instructions and TMA loads, registers / spill bytes.
#
# usage: scripts/compare-fa3.sh FA3_CHECKOUT CUTLASS_CHECKOUT [path/to/fatune]
#   FA3_CHECKOUT: a checkout of flash-attention with FA3's hopper/ directory
#   CUTLASS_CHECKOUT: a checkout of CUTLASS (include/cute, include/cutlass),
#   the csrc/cutlass submodule FlashAttention pins.
# With FA_CUBINS=DIR, it also compiles hdim256 and keeps the cubins there
# as fa3_dD_sm_90a.cubin (tests/data/fa holds them gzipped, for fatune
# model's validation and scripts/bench-model.sh).
# With FA3_BWD=1 (or FA_CUBINS) it also compiles FA3's backward kernels
# (hopper/instantiations/flash_bwd_hdimD_bf16_sm90.cu, D 64 and 128),
# prints their main loop per Q block beside the forward rows, and with
# FA_CUBINS keeps them as fa3_bwd_dD_sm_90a.cubin.
# With FA3_FP8=1 (or FA_CUBINS) it also compiles FA3's fp8 (e4m3) forward
# kernels (hopper/instantiations/flash_fwd_hdimD_e4m3_sm90.cu, D 128 and
# 256: tile_size.h's fp8 tiles 128x224 and 128x128, register-sourced PV,
# V transposed in shared memory by the producer warpgroup), prints their
# consumer and producer loops after the bf16 rows, and with FA_CUBINS keeps
# them as fa3_fp8_dD_sm_90a.cubin.
# It downloads nothing. Needs nvcc ($CUDA_HOME/bin, /usr/local/cuda/bin or
# PATH) and nvdisasm. One kernel file takes a minute or more and a few GB;
# they compile one after the other, and the cubins are kept in
# $FA3_CACHE (default ~/.cache/fatune/fa3) under a key of the compiler,
# the flags and the sources, so a rerun on the same sources is quick.
#
# The nvcc flags are hopper/setup.py's, with the defines PyTorch's
# extension builder adds (no half/bfloat16 operators in the CUDA headers,
# --expt-relaxed-constexpr), and setup.py's FLASHATTENTION_DISABLE_*
# switches for what this comparison does not look at (backward, split,
# paged and appended KV, local, softcap, PackGQA, fp8, varlen, clusters,
# sm8x): they leave out instantiations; the kernels compared (non-causal
# and causal, no other feature) are the same code either way. (The fp8
# switch only leaves the fp8 dispatch out of flash_api.cpp, which is not
# compiled here; the e4m3 files are compiled without it.) FA3's
# hopper/ needs nothing from PyTorch for these files, so no stub headers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 2 ]; then
  echo "usage: scripts/compare-fa3.sh FA3_CHECKOUT CUTLASS_CHECKOUT [path/to/fatune]" >&2
  echo "compare-fa3: no checkout given; this script downloads nothing: check out" \
       "flash-attention (with hopper/) and the CUTLASS it pins, and pass their directories" >&2
  exit 2
fi
[ -d "$1" ] || { echo "compare-fa3: $1 is not a directory" >&2; exit 2; }
[ -d "$2" ] || { echo "compare-fa3: $2 is not a directory" >&2; exit 2; }
fa3="$(cd "$1" && pwd)" cutlass="$(cd "$2" && pwd)"
fatune="${3:-$here/../build/fatune}"
hopper="$fa3/hopper"
[ -f "$hopper/instantiations/flash_fwd_hdim64_bf16_sm90.cu" ] ||
  { echo "compare-fa3: $hopper/instantiations/flash_fwd_hdim64_bf16_sm90.cu not found:" \
         "not a FlashAttention-3 checkout" >&2; exit 2; }
[ -d "$cutlass/include/cute" ] ||
  { echo "compare-fa3: $cutlass/include/cute not found: not a CUTLASS checkout" >&2; exit 2; }
[ -x "$fatune" ] || { echo "compare-fa3: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
nvcc=""
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc || true)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then nvcc="$c"; break; fi
done
[ -n "$nvcc" ] || { echo "compare-fa3: no nvcc" >&2; exit 2; }

# shellcheck disable=SC2054  # the comma is -gencode's, not an array separator
common=(-cubin -O3 -std=c++17 --ftemplate-backtrace-limit=0 --use_fast_math --resource-usage -lineinfo
       -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90
       -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
       -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr
       -DFLASHATTENTION_DISABLE_SPLIT
       -DFLASHATTENTION_DISABLE_PAGEDKV -DFLASHATTENTION_DISABLE_APPENDKV
       -DFLASHATTENTION_DISABLE_LOCAL -DFLASHATTENTION_DISABLE_SOFTCAP
       -DFLASHATTENTION_DISABLE_PACKGQA -DFLASHATTENTION_DISABLE_FP8
       -DFLASHATTENTION_DISABLE_VARLEN -DFLASHATTENTION_DISABLE_CLUSTER
       -DFLASHATTENTION_DISABLE_SM8x
       -gencode arch=compute_90a,code=sm_90a -I "$hopper" -I "$cutlass/include")
# The forward kernels' compile leaves the backward pass out; the backward
# kernels' is the same otherwise.
flags=("${common[@]}" -DFLASHATTENTION_DISABLE_BACKWARD)

# The fp8 kernels' compile: the forward flags without the fp8 switch.
fp8flags=()
for f in "${flags[@]}"; do [ "$f" = -DFLASHATTENTION_DISABLE_FP8 ] || fp8flags+=("$f"); done

# The cache key: the compiler, the flags, FA3's sources, CUTLASS's file list.
key=$( { "$nvcc" --version; printf '%s\n' "${flags[@]}";
         cat "$hopper"/*.h "$hopper"/*.hpp "$hopper"/instantiations/flash_fwd_hdim{64,128,256}_bf16_sm90.cu \
             "$hopper"/instantiations/flash_bwd_hdim{64,128}_bf16_sm90.cu \
             "$hopper"/instantiations/flash_fwd_hdim{128,256}_e4m3_sm90.cu;
         (cd "$cutlass/include" && find . -type f -printf '%p %s %T@\n' | LC_ALL=C sort); } |
       sha256sum | cut -c1-16)
cache="${FA3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fatune/fa3}/$key"
mkdir -p "$cache"
dims="64 128"
[ -n "${FA_CUBINS:-}" ] && dims="64 128 256"
for dim in $dims; do
  if [ -s "$cache/d$dim.cubin" ] && [ -s "$cache/d$dim.log" ]; then continue; fi
  echo "compare-fa3: compiling FA3's hdim$dim bf16 sm90 kernels (a minute or more)..." >&2
  if ! nice "$nvcc" "${flags[@]}" -o "$cache/d$dim.part" \
         "$hopper/instantiations/flash_fwd_hdim${dim}_bf16_sm90.cu" >"$cache/d$dim.log" 2>&1; then
    echo "compare-fa3: nvcc failed for hdim$dim:" >&2
    tail -20 "$cache/d$dim.log" >&2
    rm -f "$cache/d$dim.part" "$cache/d$dim.log"
    exit 1
  fi
  mv "$cache/d$dim.part" "$cache/d$dim.cubin"
done

bwd=0
[ -n "${FA3_BWD:-}${FA_CUBINS:-}" ] && bwd=1
for dim in 64 128; do
  [ "$bwd" = 1 ] || break
  if [ -s "$cache/bwd_d$dim.cubin" ] && [ -s "$cache/bwd_d$dim.log" ]; then continue; fi
  echo "compare-fa3: compiling FA3's hdim$dim bf16 sm90 backward kernels (a minute or more)..." >&2
  if ! nice "$nvcc" "${common[@]}" -o "$cache/bwd_d$dim.part" \
         "$hopper/instantiations/flash_bwd_hdim${dim}_bf16_sm90.cu" >"$cache/bwd_d$dim.log" 2>&1; then
    echo "compare-fa3: nvcc failed for the hdim$dim backward kernels:" >&2
    tail -20 "$cache/bwd_d$dim.log" >&2
    rm -f "$cache/bwd_d$dim.part" "$cache/bwd_d$dim.log"
    exit 1
  fi
  mv "$cache/bwd_d$dim.part" "$cache/bwd_d$dim.cubin"
done

fp8=0
[ -n "${FA3_FP8:-}${FA_CUBINS:-}" ] && fp8=1
for dim in 128 256; do
  [ "$fp8" = 1 ] || break
  if [ -s "$cache/fp8_d$dim.cubin" ] && [ -s "$cache/fp8_d$dim.log" ]; then continue; fi
  echo "compare-fa3: compiling FA3's hdim$dim e4m3 sm90 kernels (a minute or more)..." >&2
  if ! nice "$nvcc" "${fp8flags[@]}" -o "$cache/fp8_d$dim.part" \
         "$hopper/instantiations/flash_fwd_hdim${dim}_e4m3_sm90.cu" >"$cache/fp8_d$dim.log" 2>&1; then
    echo "compare-fa3: nvcc failed for the hdim$dim e4m3 kernels:" >&2
    tail -20 "$cache/fp8_d$dim.log" >&2
    rm -f "$cache/fp8_d$dim.part" "$cache/fp8_d$dim.log"
    exit 1
  fi
  mv "$cache/fp8_d$dim.part" "$cache/fp8_d$dim.cubin"
done

if [ -n "${FA_CUBINS:-}" ]; then
  mkdir -p "$FA_CUBINS"
  for dim in $dims; do cp "$cache/d$dim.cubin" "$FA_CUBINS/fa3_d${dim}_sm_90a.cubin"; done
  for dim in 64 128; do cp "$cache/bwd_d$dim.cubin" "$FA_CUBINS/fa3_bwd_d${dim}_sm_90a.cubin"; done
  for dim in 128 256; do cp "$cache/fp8_d$dim.cubin" "$FA_CUBINS/fa3_fp8_d${dim}_sm_90a.cubin"; done
fi

# A JSON member of one line of fatune's --json output (numbers, null).
member() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1"; }

# ptxas --resource-usage: "registers spill-bytes" of a function.
ptxas_usage() {
  awk -v fn="$2" '
    index($0, "Function properties for " fn) { want = 1; next }
    want && /spill stores/ { n = split($0, a, /[ ,]+/); for (i = 1; i + 3 <= n; i++)
        if (a[i + 1] == "bytes" && a[i + 2] == "spill" && a[i + 3] == "stores") st = a[i]; next }
    want && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); print substr($0, RSTART + 5, RLENGTH - 5), st + 0; exit }
  ' "$1"
}

row() {  # dim causal kernel tile consumers json-line registers spill
  local j="$6" prod="-" p
  p=$(member "$j" producer_instructions)
  if [ -n "$p" ] && [ "$p" != null ]; then
    prod="$(member "$j" producer_instructions) / $(member "$j" producer_utmaldg)"
  fi
  printf "| %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %s / %s |\n" "$1" "$2" "$3" "$4" "$5" \
    "$(member "$j" loop_instructions)" "$(member "$j" loop_hmma)" "$(member "$j" non_mma_per_mma)" \
    "$prod" "$7" "$8"
}

echo "| dim | causal | kernel | tile | consumers | insns per K/V block per warp | HGMMA | non-HGMMA per HGMMA | producer insns / UTMALDG | regs / spill store bytes |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for dim in 64 128; do
  for causal in 0 1; do
    # FA3's tile (hopper/tile_size.h) and its consumer warpgroups (block_m / 64).
    case "$dim/$causal" in
      64/0) bm=192 bn=192 ;; 64/1) bm=192 bn=128 ;;
      128/0) bm=128 bn=176 ;; 128/1) bm=128 bn=128 ;;
    esac
    wgs=$((bm / 64))
    # FA3's kernel: CollectiveMainloopFwdSm90<..., Sm90, Is_causal, ...>.
    js=$("$fatune" sass "$cache/d$dim.cubin" --json | grep "4arch4Sm90ELb${causal}E") ||
      { echo "compare-fa3: no FA3 kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
    [ "$(wc -l <<<"$js")" = 1 ] ||
      { echo "compare-fa3: more than one FA3 kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
    fn=$(sed -n 's/.*"function": "\([^"]*\)".*/\1/p' <<<"$js")
    read -r regs spill <<<"$(ptxas_usage "$cache/d$dim.log" "$fn")"
    row "$dim" "$causal" "FA3 flash_fwd" "${bm}x$bn" "$wgs" "$js" "${regs:--}" "${spill:--}"
    # fatune's wg variant on the same tile.
    flag=()
    [ "$causal" = 1 ] && flag=(--causal)
    # FA3's features first (overlap; ping-pong between 2 consumers), then
    # without those the family refuses; the variant's name says which ran.
    pp=0
    [ "$wgs" = 2 ] && pp=1
    found=0
    for feat in "pingpong=$pp,overlap=1" "pingpong=$pp,overlap=0" "pingpong=0,overlap=0"; do
      cfg="family=wg,block_m=$bm,block_n=$bn,consumers=$wgs,stages=2,$feat,norm=deferred,swizzle=128"
      if js=$("$fatune" compile --sass --arch sm_90a --dim "$dim" --dtype bf16 "${flag[@]}" \
                --config "$cfg" --jobs 1 --json 2>/dev/null | grep '"name": "wg-') &&
         [ "$(member "$js" loop_instructions)" != null ]; then
        found=1
        break
      fi
    done
    if [ "$found" = 1 ]; then
      name=$(sed -n 's/.*"name": "\([^"]*\)".*/\1/p' <<<"$js")
      row "$dim" "$causal" "$name" "${bm}x$bn" "$wgs" "$js" "$(member "$js" registers)" \
        "$(member "$js" spill_store_bytes)"
    else
      echo "| $dim | $causal | fatune wg | ${bm}x$bn | $wgs | not built | | | | |"
    fi
  done
done

if [ "$fp8" = 1 ]; then
  # FA3's fp8 (e4m3) forward kernels (tile_size.h, element size 1: d128
  # 128x224, d256 128x128, causal or not; 2 consumer warpgroups, P V from
  # registers, intra-warpgroup overlap). The producer warpgroup loads V with
  # TMA and transposes it in shared memory (LDSM.T / STSM) for the P V
  # wgmma, whose operands are both K-major in fp8; fatune's wg transposes V
  # in a launch of its own before the main one.
  echo
  echo "| dim | causal | kernel (e4m3) | tile | consumers | insns per K/V block per warp | QGMMA | non-QGMMA per QGMMA | producer insns / UTMALDG | regs / spill store bytes |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for dim in 128 256; do
    for causal in 0 1; do
      case "$dim" in 128) bm=128 bn=224 ;; 256) bm=128 bn=128 ;; esac
      wgs=$((bm / 64))
      js=$("$fatune" sass "$cache/fp8_d$dim.cubin" --json | grep "float_e4m3_t.*4arch4Sm90ELb${causal}E") ||
        { echo "compare-fa3: no FA3 e4m3 kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
      [ "$(wc -l <<<"$js")" = 1 ] ||
        { echo "compare-fa3: more than one FA3 e4m3 kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
      fn=$(sed -n 's/.*"function": "\([^"]*\)".*/\1/p' <<<"$js")
      read -r regs spill <<<"$(ptxas_usage "$cache/fp8_d$dim.log" "$fn")"
      row "$dim" "$causal" "FA3 flash_fwd" "${bm}x$bn" "$wgs" "$js" "${regs:--}" "${spill:--}"
      flag=()
      [ "$causal" = 1 ] && flag=(--causal)
      found=0
      for feat in "pingpong=1,overlap=1" "pingpong=1,overlap=0" "pingpong=0,overlap=0"; do
        cfg="family=wg,block_m=$bm,block_n=$bn,consumers=$wgs,stages=2,$feat,norm=deferred,swizzle=128"
        if js=$("$fatune" compile --sass --arch sm_90a --dim "$dim" --dtype e4m3 "${flag[@]}" \
                  --config "$cfg" --jobs 1 --json 2>/dev/null | grep '"name": "wg-') &&
           [ "$(member "$js" loop_instructions)" != null ]; then
          found=1
          break
        fi
      done
      if [ "$found" = 1 ]; then
        name=$(sed -n 's/.*"name": "\([^"]*\)".*/\1/p' <<<"$js")
        row "$dim" "$causal" "$name" "${bm}x$bn" "$wgs" "$js" "$(member "$js" registers)" \
          "$(member "$js" spill_store_bytes)"
      else
        echo "| $dim | $causal | fatune wg | ${bm}x$bn | $wgs | not built | | | | |"
      fi
    done
  done
fi

[ "$bwd" = 1 ] || exit 0
# FA3's backward kernels (FlashAttnBwdSm90, the non-GQA epilogue, not
# deterministic): a CTA per 128 keys walking Q blocks of kBlockM rows
# (hopper/flash_bwd_launch_template.h: d64 128; d128 80, causal 64), two
# MMA warpgroups; their loop per Q block per warp. fatune has no Hopper
# backward kernel to set beside them yet.
echo
echo "| dim | causal | kernel | tile (keys x query rows) | consumers | insns per Q block per warp | HGMMA | non-HGMMA per HGMMA | producer insns / UTMALDG | regs / spill store bytes |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for dim in 64 128; do
  for causal in 0 1; do
    case "$dim/$causal" in 64/*) bm=128 ;; 128/0) bm=80 ;; 128/1) bm=64 ;; esac
    js=$("$fatune" sass "$cache/bwd_d$dim.cubin" --json |
         grep "FlashAttnBwdSm90.*4arch4Sm90ELb${causal}ELb0ELb0ELb0ELb0E.*CollectiveEpilogueBwdI") ||
      { echo "compare-fa3: no FA3 backward kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
    [ "$(wc -l <<<"$js")" = 1 ] ||
      { echo "compare-fa3: more than one FA3 backward kernel with Is_causal=$causal in hdim$dim" >&2; exit 1; }
    fn=$(sed -n 's/.*"function": "\([^"]*\)".*/\1/p' <<<"$js")
    read -r regs spill <<<"$(ptxas_usage "$cache/bwd_d$dim.log" "$fn")"
    row "$dim" "$causal" "FA3 flash_bwd" "128x$bm" 2 "$js" "${regs:--}" "${spill:--}"
  done
done
