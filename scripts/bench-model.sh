#!/usr/bin/env bash
# fatune's kernels against FlashAttention-2's and -3's own, side by side
# in the timing model (`fatune model`), on the FlashAttention-3 paper's
# problems: bf16 forward, 16k tokens in all (batch = 16384 / seq), heads =
# 2048 / dim, seq 512, 2k, 8k and 16k, dims 64, 128 and 256, causal and
# not. On H100, fatune's best of its default sm_90a space (wg and tc) by
# the model against FA3 and FA2, and the best of the sm_90 space (tc
# alone, the target without a GPU) against FA2; on A100, the best of the
# sm_80 space (tc) against FA2. Every variant is compiled once per
# (target, dim, mask), and
# each cubin modelled at every length; beside each TFLOP/s, the main
# loop's instructions per K/V block per warp and its tensor instructions,
# from the same SASS.
#
# FlashAttention's cubins come from FA_DATA (default tests/data/fa, as
# scripts/compare-fa2.sh and compare-fa3.sh keep them with FA_CUBINS):
# fa3_dD_sm_90a.cubin[.gz] (FA3's instantiation holds the causal kernel
# too), fa2_dD[_causal]_sm_90.cubin[.gz] and fa2_dD[_causal]_sm_80.cubin[.gz].
# A missing one is a "-" in the table, never a guess.
#
# usage: scripts/bench-model.sh [path/to/fatune]    (default build/fatune)
# TARGETS="h100:sm_90a h100:sm_90 a100:sm_80" DIMS="64 128 256" CAUSAL="0 1"
# SEQS=512,2048,8192,16384 narrow it. Needs nvdisasm (scripts/install-deps.sh installs it). Takes
# about a minute per (GPU, dim, mask) on two cores, most of it NVRTC.
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-model: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
data="${FA_DATA:-tests/data/fa}"
targets="${TARGETS:-h100:sm_90a h100:sm_90 a100:sm_80}" dims="${DIMS:-64 128 256}" masks="${CAUSAL:-0 1}"
seqs="${SEQS:-512,2048,8192,16384}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-model.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# A FlashAttention cubin from FA_DATA, gunzipped into $tmp; empty if absent.
fa_cubin() {  # name
  if [ -f "$data/$1.cubin" ]; then echo "$data/$1.cubin"
  elif [ -f "$data/$1.cubin.gz" ]; then gzip -dc "$data/$1.cubin.gz" >"$tmp/$1.cubin" && echo "$tmp/$1.cubin"
  fi
}

# The model's JSON for a kernel at every length (a list), or nothing.
model() {  # out gpu dim causal args...
  local out="$1" gpu="$2" dim="$3" causal="$4" flag=()
  shift 4
  [ "$causal" = 1 ] && flag=(--causal)
  "$fatune" model --gpu "$gpu" --dim "$dim" --dtype bf16 "${flag[@]}" --seq "$seqs" "$@" --json \
    >"$out" 2>"$out.err" || { echo "bench-model: $(tail -1 "$out.err")" >&2; rm -f "$out"; }
}

echo "| GPU | target | dim | causal | seq | fatune's best by the model | TFLOP/s | insns / mma | FA3 TFLOP/s | insns / mma | FA2 TFLOP/s | insns / mma | best / FA3 | best / FA2 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for target in $targets; do
  gpu=${target%%:*} arch=${target#*:}
  case "$target" in
    h100:sm_90a | h100:sm_90) fa2arch=sm_90 ;;
    a100:sm_80) fa2arch=sm_80 ;;
    *) echo "bench-model: target '$target' (h100:sm_90a, h100:sm_90 or a100:sm_80)" >&2; exit 2 ;;
  esac
  for dim in $dims; do for causal in $masks; do
    key="$gpu-$arch-$dim-$causal" flag=() suffix=""
    [ "$causal" = 1 ] && flag=(--causal) suffix=_causal
    mkdir -p "$tmp/$key"
    "$fatune" compile --dim "$dim" --dtype bf16 "${flag[@]}" --arch "$arch" \
      --save-cubin "$tmp/$key" >"$tmp/$key.compile" 2>&1 ||
      { echo "bench-model: compiling the $arch space for d$dim failed:" >&2; tail -3 "$tmp/$key.compile" >&2; exit 1; }
    for cubin in "$tmp/$key"/*.cubin; do
      [ -e "$cubin" ] || continue
      v=$(basename "$cubin" .cubin)
      model "$tmp/$key/$v.json" "$gpu" "$dim" "$causal" --variant "$v" --cubin "$cubin"
    done
    f3=""; [ "$arch" = sm_90a ] && f3=$(fa_cubin "fa3_d${dim}_sm_90a")
    [ -n "$f3" ] && model "$tmp/$key.fa3" "$gpu" "$dim" "$causal" --cubin "$f3" --launch fa3
    f2=$(fa_cubin "fa2_d${dim}${suffix}_$fa2arch")
    [ -n "$f2" ] && model "$tmp/$key.fa2" "$gpu" "$dim" "$causal" --cubin "$f2" --launch fa2
    python3 - "$tmp/$key" "$gpu" "$arch" "$dim" "$causal" <<'EOF'
import glob, json, os, sys
base, gpu, arch, dim, causal = sys.argv[1:]
def load(path):
    return json.load(open(path)) if os.path.exists(path) else None
ours = [r for r in (load(p) for p in glob.glob(base + "/*.json")) if r]
fa3, fa2 = load(base + ".fa3"), load(base + ".fa2")
def cell(r):
    return ("%.0f" % r["tflops"], "%d / %d %s" % (r["loop_instructions"], r["loop_mma"], r["mma"])) \
        if r else ("-", "-")
if not ours:
    print("| %s | %s | %s | %s | - | no variant modelled | - | - | - | - | - | - | - | - |"
          % (gpu, arch, dim, causal))
for i, seq in enumerate([p["seq"] for p in ours[0]] if ours else []):
    best = max((r[i] for r in ours), key=lambda p: p["tflops"])
    a, b = (fa3[i] if fa3 else None), (fa2[i] if fa2 else None)
    ratio = lambda o: "%.2f" % (best["tflops"] / o["tflops"]) if o else "-"
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        gpu, arch, dim, causal, seq, best["kernel"], cell(best)[0], cell(best)[1], cell(a)[0], cell(a)[1],
        cell(b)[0], cell(b)[1], ratio(a), ratio(b)))
EOF
  done; done
done
