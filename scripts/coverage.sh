#!/usr/bin/env bash
# Which (target, dtype, head dim) the default forward spaces cover, from
# `fatune list`: per target and dtype, the head dims in ranges, the family
# that serves each range and how many variants it lists there (least to
# most), as a Markdown table. Head dims checked: 1 to 16, every multiple
# of 8 up to 576 (FA_DIM_MAX: DeepSeek's MLA), and odd ones between (DIMS
# overrides them). Exits 1 when a target lists no variant for a head dim
# from 8 to 576 in fp16, bf16 or fp32, or from 1 to 576 in fp32 or fp64.
# OP=bwd: the backward pass's default spaces instead.
# usage: scripts/coverage.sh [path/to/fatune]    (default build/fatune)
# ARCHS="sm_75 sm_86" DTYPES="fp16" DIMS="8 64 512" narrow the table.
set -euo pipefail
cd "$(dirname "$0")/.."
fatune="${1:-build/fatune}"
[ -x "$fatune" ] || { echo "coverage: no fatune at $fatune (build it, or pass its path)" >&2; exit 2; }
ARCHS="${ARCHS:-sm_75 sm_80 sm_86 sm_89 sm_90a sm_120}"
OP="${OP:-fwd}"
DTYPES="${DTYPES:-fp16 bf16 fp32 fp64}"
if [ -z "${DIMS:-}" ]; then
  DIMS="$(seq 1 16) $(seq 24 8 576) 36 56 100 136 200 224 257 300 333 500 511 575"
  DIMS="$(printf '%s\n' $DIMS | sort -n -u | tr '\n' ' ')"
fi

echo "| target | dtype | head dims: family (variants) |"
echo "|---|---|---|"
gaps=0
for arch in $ARCHS; do
  for dtype in $DTYPES; do
    # One line per head dim: "dim fam:count fam:count ..." ("dim -" for none).
    rows=""
    for d in $DIMS; do
      fams="$("$fatune" list --op "$OP" --arch "$arch" --dtype "$dtype" --dim "$d" 2>/dev/null |
              awk '{split($1, a, "-"); n[a[1]]++} END {for (f in n) printf "%s:%d ", f, n[f]}')" || true
      rows+="$d ${fams:--}"$'\n'
      if [ -z "$fams" ] && { [ "$d" -ge 8 ] || [ "$dtype" = fp32 ] || [ "$dtype" = fp64 ]; }; then
        echo "coverage: $arch $dtype head dim $d: no variant" >&2
        gaps=$((gaps + 1))
      fi
    done
    # Consecutive dims with the same families make one range; counts min-max.
    cells="$(printf '%s' "$rows" | awk '
      function key(  i, k, s) { s = ""; for (i = 2; i <= NF; i++) { split($i, k, ":"); s = s k[1] " " } return s }
      function flush(  i, f, s) {
        if (first == "") return
        s = (first == last ? "d" first : "d" first "-" last) ": "
        if (cur == "- ") s = s "none"
        else for (i = 1; i <= nf; i++) { f = fam[i]
          s = s (i > 1 ? ", " : "") f " (" (lo[f] == hi[f] ? lo[f] : lo[f] "-" hi[f]) ")" }
        out = out (out == "" ? "" : "; ") s
      }
      { k = key()
        if (k != cur) { flush(); cur = k; first = $1; nf = 0; delete lo; delete hi
          for (i = 2; i <= NF; i++) { split($i, p, ":"); if (p[1] != "-") fam[++nf] = p[1] } }
        for (i = 2; i <= NF; i++) { split($i, p, ":"); if (p[1] == "-") continue
          if (!(p[1] in lo) || p[2] < lo[p[1]]) lo[p[1]] = p[2]
          if (!(p[1] in hi) || p[2] > hi[p[1]]) hi[p[1]] = p[2] }
        last = $1 }
      END { flush(); print out }')"
    echo "| $arch | $dtype | $cells |"
  done
done
if [ "$gaps" -gt 0 ]; then
  echo "coverage: $gaps (target, dtype, head dim) without a variant" >&2
  exit 1
fi
