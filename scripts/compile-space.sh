#!/usr/bin/env bash
# compile-space.sh: compile the default space of every (dim, dtype, causal,
# arch) problem of each kernel family with NVRTC and report, per problem,
# per (arch, dim, dtype) and in total, how many variants compiled, spills,
# register and shared-memory ranges and compile times; then, where a family
# names a problem for it, compare compile throughput on one thread against
# all cores. No GPU needed.
#
# usage: scripts/compile-space.sh [--family F ...] [BUILD_DIR]
#        (default: every family in the table below; BUILD_DIR build)
#
# The sweep can take tens of minutes. These environment variables narrow it:
#   DIMS=  DTYPES=       replace every family's own (e.g. DIMS="64")
#   CAUSALS="0 1"   ARCHS="sm_80 sm_90"
#   SPACE=default        the space to compile (default or full)
#   JOBS=                threads per compile (default: all cores)
#   SPEEDUP=1            0 skips the 1-thread vs all-cores comparison
#   SPEEDUP_ARCH=sm_90   the arch that comparison uses
#   LOGDIR=              keep every command's output there (default: a temp dir, removed)
#
# Exit status: 0 when every variant compiled and every median compile time
# is under its family's limit, 1 when any failed or a command did not run,
# 2 on bad usage.
set -u

# The families, one line each; a new family is swept by adding its line:
#   name | dims | dtypes | median limit per (arch, dim, dtype) in ms, or - |
#   the problem "dim dtype" for the 1-thread vs all-cores comparison, or -
FAMILY_TABLE=(
  "simt|4 16 64 128|fp32 fp64|-|64 fp32"
  "tc|64 128 256|fp16 bf16|3000|-"
)

usage() {
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

family_names() {
  local row
  for row in "${FAMILY_TABLE[@]}"; do printf '%s ' "${row%%|*}"; done
}

selected=()
BUILD_DIR=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage ;;
    --family)
      [ $# -ge 2 ] || usage
      case " $(family_names)" in
        *" $2 "*) selected+=("$2") ;;
        *) echo "compile-space: unknown family '$2' (known: $(family_names | sed "s/ $//"))" >&2; exit 2 ;;
      esac
      shift 2 ;;
    -*) usage ;;
    *) [ -z "$BUILD_DIR" ] || usage; BUILD_DIR=$1; shift ;;
  esac
done
BUILD_DIR=${BUILD_DIR:-build}
FATUNE=$BUILD_DIR/fatune
if [ ! -x "$FATUNE" ]; then
  echo "compile-space: no fatune binary at $FATUNE (build first, or pass BUILD_DIR)" >&2
  exit 2
fi
[ ${#selected[@]} -gt 0 ] || read -r -a selected <<<"$(family_names)"

CAUSALS=${CAUSALS:-"0 1"}
ARCHS=${ARCHS:-"sm_80 sm_90"}
SPACE=${SPACE:-default}
JOBS=${JOBS:-}
SPEEDUP=${SPEEDUP:-1}
SPEEDUP_ARCH=${SPEEDUP_ARCH:-sm_90}

if [ -n "${LOGDIR:-}" ]; then
  mkdir -p "$LOGDIR" || exit 2
  logdir=$LOGDIR
else
  logdir=$(mktemp -d "${TMPDIR:-/tmp}/compile-space.XXXXXX")
  trap 'rm -rf "$logdir"' EXIT
fi

jobs_flag=()
[ -n "$JOBS" ] && jobs_flag=(--jobs "$JOBS")

# parse FILE: sets the summary fields from the two lines after the table.
parse_summary() {
  local f=$1
  local s c
  s=$(grep -E '^sm_[0-9]+a?: [0-9]+ variants' "$f" | tail -1)
  c=$(grep -E '^compile ms: ' "$f" | tail -1)
  [ -n "$s" ] && [ -n "$c" ] || return 1
  # sm_80: 120 variants, 120 ok, 0 failed; 0 spill (max 0 bytes), 0 use a stack (max 0 bytes); registers 40-168
  p_variants=$(sed -E 's/^[^:]*: ([0-9]+) variants.*/\1/' <<<"$s")
  p_ok=$(sed -E 's/.* ([0-9]+) ok,.*/\1/' <<<"$s")
  p_failed=$(sed -E 's/.* ([0-9]+) failed;.*/\1/' <<<"$s")
  p_spilling=$(sed -E 's/.*; ([0-9]+) spill \(max ([0-9]+) bytes\).*/\1/' <<<"$s")
  p_max_spill=$(sed -E 's/.*; ([0-9]+) spill \(max ([0-9]+) bytes\).*/\2/' <<<"$s")
  p_regs_lo=$(sed -E 's/.*registers ([0-9]+)-([0-9]+).*/\1/' <<<"$s")
  p_regs_hi=$(sed -E 's/.*registers ([0-9]+)-([0-9]+).*/\2/' <<<"$s")
  # compile ms: median 129, p90 184, max 226; 8.3 s wall on 2 threads, 14.39 variants/s
  p_median=$(sed -E 's/^compile ms: median ([0-9.]+),.*/\1/' <<<"$c")
  p_wall=$(sed -E 's/.*; ([0-9.]+) s wall on ([0-9]+) threads.*/\1/' <<<"$c")
  p_threads=$(sed -E 's/.*; ([0-9.]+) s wall on ([0-9]+) threads.*/\2/' <<<"$c")
  p_rate=$(sed -E 's/.*threads, ([0-9.]+) variants\/s.*/\1/' <<<"$c")
  local v
  for v in "$p_variants" "$p_ok" "$p_failed" "$p_spilling" "$p_max_spill" "$p_regs_lo" \
           "$p_regs_hi" "$p_median" "$p_wall" "$p_threads" "$p_rate"; do
    [[ "$v" =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
  done
  return 0
}

# group_row LABEL FILE...: the table lines of one (arch, dim, dtype), causal
# values together, as "label|variants|failed|spilling|max spill|regs|smem|median".
# Columns: variant regs "st/ld" smem stack "NNNms" status (failed: - - - -).
group_row() {
  local label=$1
  shift
  cat "$@" 2>/dev/null | awk -v label="$label" '
    { n++; t = $6; sub(/ms$/, "", t); ms[n] = t + 0
      if ($NF != "ok") { failed++; next }
      split($3, sp, "/"); if (sp[1] + sp[2] > 0) { spill++; if (sp[1] + sp[2] > maxsp) maxsp = sp[1] + sp[2] }
      if (rlo == "" || $2 < rlo) rlo = $2; if ($2 > rhi) rhi = $2
      if (slo == "" || $4 < slo) slo = $4; if ($4 > shi) shi = $4 }
    END {
      if (n == 0) { printf "%s|0|0|0|0|-|-|-\n", label; exit }
      # median of the compile times (insertion sort; n is small)
      for (i = 2; i <= n; i++) { x = ms[i]; j = i - 1; while (j > 0 && ms[j] > x) { ms[j + 1] = ms[j]; j-- } ms[j + 1] = x }
      med = (n % 2) ? ms[(n + 1) / 2] : (ms[n / 2] + ms[n / 2 + 1]) / 2
      printf "%s|%d|%d|%d|%d|%s-%s|%s-%s|%.0f\n", label, n, failed + 0, spill + 0, maxsp + 0, rlo, rhi, slo, shi, med
    }'
}

# sweep_problem FAMILY DIM DTYPE CAUSAL ARCH: one fatune compile, its line
# and its record.
sweep_problem() {
  local fam=$1 dim=$2 dtype=$3 causal=$4 arch=$5
  local cflag=() ctext="" label log rc line
  if [ "$causal" = 1 ]; then cflag=(--causal); ctext=" causal"; fi
  label="d$dim $dtype${ctext:- noncausal} $arch"
  log="$logdir/$fam-d$dim-$dtype-c$causal-$arch.txt"
  i=$((i + 1))
  printf '[%2d/%d] %-28s ' "$i" "$nproblems" "$label"
  "$FATUNE" compile --dim "$dim" --dtype "$dtype" "${cflag[@]}" --arch "$arch" \
    --space "$SPACE" "${jobs_flag[@]}" >"$log" 2>&1 </dev/null
  rc=$?
  grep -E "^$fam-" "$log" >"$log.table"
  if ! parse_summary "$log"; then
    broken=$((broken + 1))
    echo "FAILED to run (exit $rc): $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"
    records+=("$label|-|-|-|-|-|-|-|-|-|$rc")
    return
  fi
  echo "$p_variants variants, $p_failed failed, regs $p_regs_lo-$p_regs_hi," \
       "$p_spilling spill; $p_wall s ($p_rate variants/s)"
  if [ "$p_failed" -gt 0 ] || [ "$rc" -ne 0 ]; then
    while IFS= read -r line; do
      failed_lines+=("$fam $label: $line")
    done < <(grep -vE '  ok$' "$log.table" | head -n 20)
    [ "$p_failed" -eq 0 ] && broken=$((broken + 1))  # exit status without a failed variant
  fi
  records+=("$label|$p_variants|$p_ok|$p_failed|$p_spilling|$p_max_spill|$p_regs_lo|$p_regs_hi|$p_median|$p_wall|$rc")
  total_variants=$((total_variants + p_variants))
  total_ok=$((total_ok + p_ok))
  total_failed=$((total_failed + p_failed))
  total_spilling=$((total_spilling + p_spilling))
  [ "$p_max_spill" -gt "$max_spill" ] && max_spill=$p_max_spill
  [ "$p_regs_hi" -gt "$max_regs" ] && max_regs=$p_regs_hi
  total_wall=$(awk -v a="$total_wall" -v b="$p_wall" 'BEGIN { printf "%.1f", a + b }')
}

print_problems() {
  local r label v ok f sp msp rlo rhi med wall rc
  echo
  echo "== $fam: per problem =="
  printf '%-28s %8s %6s %6s %9s %10s %9s %10s %8s\n' problem variants ok failed spilling "max spill" registers "median ms" "wall s"
  for r in "${records[@]}"; do
    IFS='|' read -r label v ok f sp msp rlo rhi med wall rc <<<"$r"
    if [ "$v" = "-" ]; then
      printf '%-28s %s\n' "$label" "did not run (exit $rc)"
    else
      printf '%-28s %8s %6s %6s %9s %10s %9s %10s %8s\n' "$label" "$v" "$ok" "$f" "$sp" \
        "${msp}B" "$rlo-$rhi" "$med" "$wall"
    fi
  done
}

# The table lines of each (arch, dim, dtype), causal values together; a
# median at or over the family's limit fails.
print_groups() {
  local arch dim dtype causal files row label n failed spill maxsp regs smem med
  echo
  echo "== $fam: per (arch, dim, dtype), causal ${CAUSALS// /+} together =="
  printf '%-18s %8s %6s %8s %10s %10s %15s %10s\n' "arch dim dtype" variants failed spilling "max spill" registers "smem bytes" "median ms"
  for arch in $ARCHS; do
    for dim in $dims; do
      for dtype in $dtypes; do
        files=()
        for causal in $CAUSALS; do files+=("$logdir/$fam-d$dim-$dtype-c$causal-$arch.txt.table"); done
        row=$(group_row "$arch d$dim $dtype" "${files[@]}")
        IFS='|' read -r label n failed spill maxsp regs smem med <<<"$row"
        printf '%-18s %8s %6s %8s %9sB %10s %15s %10s\n' "$label" "$n" "$failed" "$spill" "$maxsp" "$regs" "$smem" "$med"
        if [ "$limit" != "-" ] && [ "$med" != "-" ] && [ "$med" -ge "$limit" ]; then
          slow_groups=$((slow_groups + 1))
        fi
      done
    done
  done
  if [ "$limit" != "-" ]; then
    echo "median limit: $limit ms; $slow_groups at or over it"
  fi
}

print_totals() {
  echo
  echo "== $fam: totals =="
  echo "problems:    $nproblems ($broken did not run cleanly)"
  echo "variants:    $total_variants in all, $total_ok ok, $total_failed failed"
  echo "spills:      $total_spilling variants spill; largest spill $max_spill bytes"
  echo "registers:   largest $max_regs per thread"
  awk -v n="$total_variants" -v w="$total_wall" -v s="$sweep_s" 'BEGIN {
    printf "throughput:  %d variants in %.1f s of compile wall time (%.2f variants/s); sweep took %d s\n",
           n, w, (w > 0 ? n / w : 0), s }'
  if [ ${#failed_lines[@]} -gt 0 ]; then
    echo
    echo "== $fam: failures (first 20 per problem) =="
    printf '%s\n' "${failed_lines[@]}"
  fi
}

# speedup DIM DTYPE: the same problem on one thread and on all cores.
speedup() {
  local sdim=$1 sdtype=$2 mode flag log rc
  local -A rate wall threads
  echo
  echo "== $fam: compile throughput: 1 thread vs all cores (--dim $sdim --dtype $sdtype --arch $SPEEDUP_ARCH) =="
  for mode in one all; do
    flag=()
    [ "$mode" = one ] && flag=(--jobs 1)
    log="$logdir/$fam-speedup-$mode.txt"
    "$FATUNE" compile --dim "$sdim" --dtype "$sdtype" --arch "$SPEEDUP_ARCH" "${flag[@]}" \
      >"$log" 2>&1 </dev/null
    rc=$?
    if ! parse_summary "$log" || [ "$rc" -ne 0 ]; then
      echo "$mode: did not run cleanly (exit $rc): $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"
      speedup_bad=1
      return
    fi
    rate[$mode]=$p_rate
    wall[$mode]=$p_wall
    threads[$mode]=$p_threads
    printf '%-3s: %3d threads, %4d variants in %7.1f s wall, %7.2f variants/s\n' "$mode" \
      "$p_threads" "$p_variants" "$p_wall" "$p_rate"
  done
  awk -v a="${rate[one]}" -v b="${rate[all]}" -v t="${threads[all]}" 'BEGIN {
    s = (a > 0 ? b / a : 0)
    printf "speedup: %.2fx on %d threads (%.0f%% parallel efficiency)\n", s, t, (t > 0 ? 100 * s / t : 0) }'
}

# sweep_family ROW: every problem of one family, its tables and totals.
sweep_family() {
  local fam dims dtypes limit sproblem sdim sdtype dim dtype causal arch t0 sweep_s
  IFS='|' read -r fam dims dtypes limit sproblem <<<"$1"
  dims=${DIMS:-$dims}
  dtypes=${DTYPES:-$dtypes}
  local records=() failed_lines=() i=0 nproblems=0 broken=0 slow_groups=0 speedup_bad=0
  local total_variants=0 total_ok=0 total_failed=0 total_spilling=0 max_spill=0 max_regs=0
  local total_wall=0
  for _d in $dims; do for _t in $dtypes; do for _c in $CAUSALS; do for _a in $ARCHS; do
    nproblems=$((nproblems + 1))
  done; done; done; done
  echo "== $fam: compiling the $SPACE space of $nproblems problems (dims: $dims; dtypes: $dtypes;" \
       "causal: $CAUSALS; archs: $ARCHS) on ${JOBS:-all} threads"
  t0=$SECONDS
  for dim in $dims; do
    for dtype in $dtypes; do
      for causal in $CAUSALS; do
        for arch in $ARCHS; do
          sweep_problem "$fam" "$dim" "$dtype" "$causal" "$arch"
        done
      done
    done
  done
  sweep_s=$((SECONDS - t0))
  print_problems
  print_groups
  print_totals
  if [ "$SPEEDUP" != 0 ] && [ "$sproblem" != "-" ]; then
    read -r sdim sdtype <<<"$sproblem"
    speedup "$sdim" "$sdtype"
  fi
  echo
  all_variants=$((all_variants + total_variants))
  if [ "$total_failed" -gt 0 ] || [ "$broken" -gt 0 ] || [ "$speedup_bad" -ne 0 ] ||
     [ "$slow_groups" -gt 0 ]; then
    echo "$fam: FAILED ($total_failed variants failed, $broken problems did not run cleanly," \
         "$slow_groups medians over the limit)"
    failed_families+=("$fam")
  else
    echo "$fam: all $total_variants variants compiled"
  fi
  echo
}

echo "fatune: $("$FATUNE" --version 2>&1)"
echo "families: ${selected[*]}"
echo
all_variants=0
failed_families=()
for fam in "${selected[@]}"; do
  for row in "${FAMILY_TABLE[@]}"; do
    [ "${row%%|*}" = "$fam" ] && sweep_family "$row"
  done
done

if [ ${#failed_families[@]} -gt 0 ]; then
  echo "RESULT: FAILED (${failed_families[*]})"
  exit 1
fi
echo "RESULT: all $all_variants variants of ${selected[*]} compiled"
exit 0
