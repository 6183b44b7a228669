#!/usr/bin/env bash
# tc-compile-space.sh: compile the default space of the tensor-core family
# with NVRTC (fatune compile) for every (arch, dim, dtype), causal and not,
# and print per (arch, dim, dtype): variants, failures, how many spill,
# register range, shared-memory range and the median compile time. No GPU
# needed.
#
# usage: scripts/tc-compile-space.sh [BUILD_DIR]        (default: build)
#
# Environment, to narrow or widen the sweep:
#   DIMS="64 128 256"  DTYPES="fp16 bf16"  CAUSALS="0 1"  ARCHS="sm_80 sm_90"
#   SPACE=default      JOBS= (threads per compile; default all cores)
#   LOGDIR=            keep every command's output there (default: a temp dir)
#
# Exit status: 0 when every variant compiled and every median compile time
# is under 3 s; 1 otherwise; 2 on bad usage.
set -u

BUILD_DIR=${1:-build}
FATUNE=$BUILD_DIR/fatune
if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
if [ ! -x "$FATUNE" ]; then
  echo "tc-compile-space: no fatune binary at $FATUNE (build first, or pass BUILD_DIR)" >&2
  exit 2
fi

DIMS=${DIMS:-"64 128 256"}
DTYPES=${DTYPES:-"fp16 bf16"}
CAUSALS=${CAUSALS:-"0 1"}
ARCHS=${ARCHS:-"sm_80 sm_90"}
SPACE=${SPACE:-default}
JOBS=${JOBS:-}
MEDIAN_LIMIT_MS=3000

if [ -n "${LOGDIR:-}" ]; then
  mkdir -p "$LOGDIR" || exit 2
  logdir=$LOGDIR
else
  logdir=$(mktemp -d "${TMPDIR:-/tmp}/tc-compile-space.XXXXXX")
  trap 'rm -rf "$logdir"' EXIT
fi
jobs_flag=()
[ -n "$JOBS" ] && jobs_flag=(--jobs "$JOBS")

echo "fatune: $("$FATUNE" --version 2>&1)"
echo "compiling the $SPACE tc space: dims $DIMS; dtypes $DTYPES; causal $CAUSALS; archs $ARCHS;" \
     "${JOBS:-all} threads"
echo

bad=0
rows=()
t0=$SECONDS
for arch in $ARCHS; do
  for dim in $DIMS; do
    for dtype in $DTYPES; do
      table="$logdir/$arch-d$dim-$dtype.table"
      : >"$table"
      for causal in $CAUSALS; do
        cflag=()
        [ "$causal" = 1 ] && cflag=(--causal)
        log="$logdir/$arch-d$dim-$dtype-c$causal.txt"
        "$FATUNE" compile --dim "$dim" --dtype "$dtype" "${cflag[@]}" --arch "$arch" \
          --space "$SPACE" "${jobs_flag[@]}" >"$log" 2>&1 </dev/null
        rc=$?
        n=$(grep -c '^tc-' "$log")
        if [ "$n" -eq 0 ]; then
          echo "$arch d$dim $dtype causal=$causal: fatune compile did not run (exit $rc):" \
               "$(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"
          bad=1
          continue
        fi
        [ "$rc" -ne 0 ] && bad=1
        grep '^tc-' "$log" >>"$table"
      done
      # Columns: variant regs "st/ld" smem stack "NNNms" status...
      row=$(awk -v label="$arch d$dim $dtype" '
        { n++
          if ($NF != "ok") { failed++; next }
          split($3, sp, "/"); if (sp[1] + sp[2] > 0) { spill++; if (sp[1] + sp[2] > maxsp) maxsp = sp[1] + sp[2] }
          if (rlo == "" || $2 < rlo) rlo = $2; if ($2 > rhi) rhi = $2
          if (slo == "" || $4 < slo) slo = $4; if ($4 > shi) shi = $4 }
        { t = $(NF-1); sub(/ms$/, "", t); ms[n] = t + 0 }
        END {
          if (n == 0) { printf "%s|0|0|0|0|-|-|-\n", label; exit }
          # median of the compile times (insertion sort; n is small)
          for (i = 2; i <= n; i++) { x = ms[i]; j = i - 1; while (j > 0 && ms[j] > x) { ms[j + 1] = ms[j]; j-- } ms[j + 1] = x }
          med = (n % 2) ? ms[(n + 1) / 2] : (ms[n / 2] + ms[n / 2 + 1]) / 2
          printf "%s|%d|%d|%d|%d|%s-%s|%s-%s|%.0f\n", label, n, failed, spill, maxsp, rlo, rhi, slo, shi, med
        }' "$table")
      rows+=("$row")
      IFS='|' read -r label n failed spill maxsp regs smem med <<<"$row"
      printf '%-18s %3s variants, %s failed, %s spill (max %s B), registers %s, smem %s, median %s ms\n' \
        "$label" "$n" "$failed" "$spill" "$maxsp" "$regs" "$smem" "$med"
      [ "$failed" != 0 ] && bad=1
      [ "$med" != "-" ] && [ "$med" -ge "$MEDIAN_LIMIT_MS" ] && bad=1
    done
  done
done

echo
echo "== per (arch, dim, dtype), causal ${CAUSALS// /+} together =="
printf '%-18s %8s %6s %8s %10s %10s %15s %10s\n' "arch dim dtype" variants failed spilling "max spill" registers "smem bytes" "median ms"
for r in "${rows[@]}"; do
  IFS='|' read -r label n failed spill maxsp regs smem med <<<"$r"
  printf '%-18s %8s %6s %8s %9sB %10s %15s %10s\n' "$label" "$n" "$failed" "$spill" "$maxsp" "$regs" "$smem" "$med"
done
echo
echo "sweep took $((SECONDS - t0)) s"
if [ "$bad" -ne 0 ]; then
  echo "RESULT: FAILED (a variant failed, a command did not run, or a median was 3 s or more)"
  exit 1
fi
echo "RESULT: every variant compiled; every median under 3 s"
exit 0
