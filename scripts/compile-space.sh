#!/usr/bin/env bash
# compile-space.sh: compile the default space of every (dim, dtype, causal,
# arch) problem with NVRTC and report, per problem and in total, how many
# variants compiled, spills, registers and compile times; then compare
# compile throughput on one thread against all cores. No GPU needed.
#
# usage: scripts/compile-space.sh [BUILD_DIR]        (default: build)
#
# The sweep can take tens of minutes. These environment variables narrow it:
#   DIMS="4 16 64 128"   DTYPES="fp32 fp64"   CAUSALS="0 1"   ARCHS="sm_80 sm_90"
#   SPACE=default        the space to compile (default or full)
#   JOBS=                threads per compile (default: all cores)
#   SPEEDUP=1            0 skips the 1-thread vs all-cores comparison
#   SPEEDUP_DIM=64 SPEEDUP_ARCH=sm_90   the problem that comparison uses
#   LOGDIR=              keep every command's output there (default: a temp dir, removed)
#
# Exit status: 0 when every variant compiled, 1 when any failed or a command
# did not run, 2 on bad usage.
set -u

BUILD_DIR=${1:-build}
FATUNE=$BUILD_DIR/fatune
if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
if [ ! -x "$FATUNE" ]; then
  echo "compile-space: no fatune binary at $FATUNE (build first, or pass BUILD_DIR)" >&2
  exit 2
fi

DIMS=${DIMS:-"4 16 64 128"}
DTYPES=${DTYPES:-"fp32 fp64"}
CAUSALS=${CAUSALS:-"0 1"}
ARCHS=${ARCHS:-"sm_80 sm_90"}
SPACE=${SPACE:-default}
JOBS=${JOBS:-}
SPEEDUP=${SPEEDUP:-1}
SPEEDUP_DIM=${SPEEDUP_DIM:-64}
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

nproblems=0
for _d in $DIMS; do for _t in $DTYPES; do for _c in $CAUSALS; do for _a in $ARCHS; do
  nproblems=$((nproblems + 1))
done; done; done; done

echo "fatune: $("$FATUNE" --version 2>&1)"
echo "compiling the $SPACE space of $nproblems problems (dims: $DIMS; dtypes: $DTYPES;" \
     "causal: $CAUSALS; archs: $ARCHS) on ${JOBS:-all} threads"
echo

# One record per problem, in the order run:
#   label variants ok failed spilling max_spill regs_lo regs_hi median_ms wall_s rc
records=()
total_variants=0 total_ok=0 total_failed=0 total_spilling=0 max_spill=0 max_regs=0
total_wall=0 broken=0
failed_lines=()

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

i=0
t0=$SECONDS
for dim in $DIMS; do
  for dtype in $DTYPES; do
    for causal in $CAUSALS; do
      for arch in $ARCHS; do
        i=$((i + 1))
        cflag=()
        ctext=""
        if [ "$causal" = 1 ]; then cflag=(--causal); ctext=" causal"; fi
        label="d$dim $dtype${ctext:- noncausal} $arch"
        log="$logdir/d$dim-$dtype-c$causal-$arch.txt"
        printf '[%2d/%d] %-28s ' "$i" "$nproblems" "$label"
        "$FATUNE" compile --dim "$dim" --dtype "$dtype" "${cflag[@]}" --arch "$arch" \
          --space "$SPACE" "${jobs_flag[@]}" >"$log" 2>&1 </dev/null
        rc=$?
        if ! parse_summary "$log"; then
          broken=$((broken + 1))
          echo "FAILED to run (exit $rc): $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"
          records+=("$label|-|-|-|-|-|-|-|-|-|$rc")
          continue
        fi
        echo "$p_variants variants, $p_failed failed, regs $p_regs_lo-$p_regs_hi," \
             "$p_spilling spill; $p_wall s ($p_rate variants/s)"
        if [ "$p_failed" -gt 0 ] || [ "$rc" -ne 0 ]; then
          while IFS= read -r line; do
            failed_lines+=("$label: $line")
          done < <(grep -E '^simt-' "$log" | grep -vE '  ok$' | head -n 20)
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
      done
    done
  done
done
sweep_s=$((SECONDS - t0))

echo
echo "== per problem =="
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

echo
echo "== totals =="
echo "problems:    $nproblems ($broken did not run cleanly)"
echo "variants:    $total_variants in all, $total_ok ok, $total_failed failed"
echo "spills:      $total_spilling variants spill; largest spill $max_spill bytes"
echo "registers:   largest $max_regs per thread"
awk -v n="$total_variants" -v w="$total_wall" -v s="$sweep_s" 'BEGIN {
  printf "throughput:  %d variants in %.1f s of compile wall time (%.2f variants/s); sweep took %d s\n",
         n, w, (w > 0 ? n / w : 0), s }'
if [ ${#failed_lines[@]} -gt 0 ]; then
  echo
  echo "== failures (first 20 per problem) =="
  printf '%s\n' "${failed_lines[@]}"
fi

speedup_bad=0
if [ "$SPEEDUP" != 0 ]; then
  echo
  echo "== compile throughput: 1 thread vs all cores (--dim $SPEEDUP_DIM --arch $SPEEDUP_ARCH) =="
  declare -A rate wall threads
  for mode in one all; do
    flag=()
    [ "$mode" = one ] && flag=(--jobs 1)
    log="$logdir/speedup-$mode.txt"
    "$FATUNE" compile --dim "$SPEEDUP_DIM" --arch "$SPEEDUP_ARCH" "${flag[@]}" >"$log" 2>&1 </dev/null
    rc=$?
    if ! parse_summary "$log" || [ "$rc" -ne 0 ]; then
      echo "$mode: did not run cleanly (exit $rc): $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"
      speedup_bad=1
      continue
    fi
    rate[$mode]=$p_rate
    wall[$mode]=$p_wall
    threads[$mode]=$p_threads
    printf '%-3s: %3d threads, %4d variants in %7.1f s wall, %7.2f variants/s\n' "$mode" \
      "$p_threads" "$p_variants" "$p_wall" "$p_rate"
  done
  if [ "$speedup_bad" -eq 0 ]; then
    awk -v a="${rate[one]}" -v b="${rate[all]}" -v t="${threads[all]}" 'BEGIN {
      s = (a > 0 ? b / a : 0)
      printf "speedup: %.2fx on %d threads (%.0f%% parallel efficiency)\n", s, t, (t > 0 ? 100 * s / t : 0) }'
  fi
fi

echo
if [ "$total_failed" -gt 0 ] || [ "$broken" -gt 0 ] || [ "$speedup_bad" -ne 0 ]; then
  echo "RESULT: FAILED ($total_failed variants failed, $broken problems did not run cleanly)"
  exit 1
fi
echo "RESULT: all $total_variants variants compiled"
exit 0
