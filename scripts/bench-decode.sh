#!/usr/bin/env bash
# Decoding (op decode) in the timing model: the splits a tuner finds (the
# model's best of 1 to 128) against FlashAttention-2's heuristic
# (num_splits_heuristic), the same kernel at both, and FlashAttention-2's
# own decoding kernel (flash_fwd_splitkv_kernel, tests/data/fa) at its
# heuristic's splits, on uniform and skewed batches, without GQA and with 8
# query heads per K/V head (one new token, and four: speculative decoding's
# drafts, where FA2 runs a CTA per query head), on H100 and A100; bf16, head
# dim 128 (DIMS="64 128 256" adds the others), 32 query heads, fatune's
# cache paged in 16-token pages (FA2's
# kernel reads pages of 256 or more the same way: the model does not see
# the page size): tcdec with and without GQA. Each figure
# is `fatune model --op decode`'s, the K/V cache's bytes over the time as
# a share of the GPU's HBM bandwidth beside it.
#
# usage: scripts/bench-decode.sh [path/to/fatune]    (default build/fatune)
# GPUS="h100 a100" narrows it; MHA_VARIANT and GQA_VARIANT name fatune's
# kernels (at d128; tcdec-bf16-dD-n64w4-s1 at another head dim), and
# WIDE_VARIANT the one for a group of 32 rows (GQA 8, 4 new tokens: two m16
# tiles a CTA, tcdec-bf16-dD-m32n64w4-s1, 8 warps at d256 as the library's
# untuned choice). Needs nvdisasm (scripts/install-deps.sh).
# About 6 s a line on two cores, most of it NVRTC.
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "bench-decode: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
gpus="${GPUS:-h100 a100}"
dims="${DIMS:-128}"
# the tensor-core family with and without GQA (the group's rows, or the
# one, in an m16 tile): without GQA the CUDA-core one
# (simtdec-bf16-d128-r1n64w4-cpasync-s1) keeps 90% of H100's HBM busy at
# best, where its tensor-core twin, like FA2's kernel, keeps nearly all
mha="${MHA_VARIANT:-tcdec-bf16-d128-n64w4-s1}"
gqa="${GQA_VARIANT:-tcdec-bf16-d128-n64w4-s1}"
skew="32768,512,512,512,512,512,512,512"
data=tests/data/fa
fa2=$(mktemp -d "${TMPDIR:-/tmp}/bench-decode.XXXXXX")
trap 'rm -rf "$fa2"' EXIT
for f in "$data"/fa2_split*_d*_sm_*.cubin.gz; do gzip -dc "$f" >"$fa2/$(basename "$f" .gz)"; done

# name | problem flags (--gqa G last)
cases=(
  "batch 1, 32k keys|--batch 1 --seq-k 32768 --gqa 1"
  "batch 8, 32k keys|--batch 8 --seq-k 32768 --gqa 1"
  "batch 64, 4k keys|--batch 64 --seq-k 4096 --gqa 1"
  "skewed: 32k + 7 x 512|--kv-lens $skew --gqa 1"
  "gqa 8, batch 1, 32k|--batch 1 --seq-k 32768 --gqa 8"
  "gqa 8, batch 8, 32k|--batch 8 --seq-k 32768 --gqa 8"
  "gqa 8, skewed|--kv-lens $skew --gqa 8"
  "gqa 8, 4 tokens, batch 1|--seq 4 --batch 1 --seq-k 32768 --gqa 8"
  "gqa 8, 4 tokens, batch 8|--seq 4 --batch 8 --seq-k 32768 --gqa 8"
)

printf '%-5s %-4s %-24s %22s %22s %8s %22s %8s\n' gpu dim case "tuned: splits us HBM" "FA2: splits us HBM" \
  "FA2/tuned" "FA2 kernel: splits us HBM" "/tuned"
for d in $dims; do
for gpu in $gpus; do
  arch=sm_90
  [ "$gpu" = a100 ] && arch=sm_80
  for c in "${cases[@]}"; do
    name="${c%%|*}" flags="${c#*|}"
    g="${flags##*--gqa }"
    v=$mha
    [ "$g" -gt 1 ] && v=$gqa
    [ "$d" = 128 ] || v=tcdec-bf16-d$d-n64w4-s1
    w=4
    [ "$d" -gt 128 ] && w=8
    case "$flags" in *"--seq 4 "*) [ "$g" -gt 1 ] && v="${WIDE_VARIANT:-tcdec-bf16-d$d-m32n64w$w-s1}";; esac
    # shellcheck disable=SC2086
    "$fatune" model --op decode --gpu "$gpu" --dtype bf16 --dim "$d" --heads 32 --page 16 \
      $flags --variant "$v" --json >"$fa2/ours.json"
    # FA2's kernel: the split file's with more than one split, else the align file's
    # shellcheck disable=SC2086
    "$fatune" model --op decode --gpu "$gpu" --dtype bf16 --dim "$d" --heads 32 \
      $flags --cubin "$fa2/fa2_split_d${d}_$arch.cubin" --launch fa2 --json >"$fa2/fa2.json" 2>/dev/null ||
      # shellcheck disable=SC2086
      "$fatune" model --op decode --gpu "$gpu" --dtype bf16 --dim "$d" --heads 32 \
        $flags --cubin "$fa2/fa2_split_align_d${d}_$arch.cubin" --launch fa2 --json >"$fa2/fa2.json"
    python3 -c '
import json, sys
gpu, dim, name = sys.argv[1], sys.argv[5], sys.argv[2]
rows = json.load(open(sys.argv[3]))
theirs = json.load(open(sys.argv[4]))[0]
tuned = next(r for r in rows if r["best"])
fa2 = next(r for r in rows if r["fa2_heuristic"])
cell = lambda r: "%3d %8.2f %5.1f%%" % (r["splits"], r["time_us"], 100 * r["hbm_share"])
print("%-5s %-4s %-24s %22s %22s %8.2f %22s %8.2f" % (gpu, dim, name, cell(tuned), cell(fa2),
      fa2["time_us"] / tuned["time_us"], cell(theirs), theirs["time_us"] / tuned["time_us"]))
'  "$gpu" "$name" "$fa2/ours.json" "$fa2/fa2.json" "$d"
  done
done
done
