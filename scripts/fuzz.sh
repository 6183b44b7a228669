#!/usr/bin/env bash
# usage: scripts/fuzz.sh SECONDS [HARNESS...]
#
# Builds the libFuzzer harnesses of tests/fuzz with clang (build-fuzz, every
# layer under AddressSanitizer and UndefinedBehaviorSanitizer) and runs each
# (default: all of them, as many at once as there are cores) for SECONDS
# on a copy of its seed corpus, so the corpus in the repository does not
# grow. Prints per harness the inputs run,
# the coverage (libFuzzer's cov: edges and ft: features) and whether it
# found a crash, a leak or a hang; the input that did it is kept in
# build-fuzz/crashes/. Exits 1 when any harness found one.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh SECONDS [HARNESS...]" >&2
  exit 2
fi
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_npy fuzz_config fuzz_args fuzz_db fuzz_sass fuzz_merge fuzz_workload fuzz_mod)
build=build-fuzz

cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DFATUNE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${harnesses[@]}" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/crashes"
# The harnesses' own files (databases, arrays) go to memory when there is
# some: the database harness makes several files per input.
harness_tmp=$work
if [ -d /dev/shm ] && [ -w /dev/shm ]; then harness_tmp=$(mktemp -d -p /dev/shm); fi
trap 'rm -rf "$work" "$harness_tmp"' EXIT

# NVRTC's folder, for a sanitized program to find NVRTC's builtins library
# (scripts/test.sh says why).
nvrtc_dir=$(dirname "$(sed -n 's/^NVRTC_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")")

# One harness: runs, cov, ft and the verdict on one line.
run_one() {
  local h=$1 dir=$work/$1 rc=0
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp tests/fuzz/corpus/"$h"/* "$dir/corpus/"
  TMPDIR=$harness_tmp LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/tests/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" \
    >"$dir/log" 2>&1 || rc=$?
  local runs cov ft verdict=ok
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$dir/artifacts")" ]; then
    verdict="FOUND (exit $rc)"
    for a in "$dir"/artifacts/*; do
      [ -e "$a" ] || continue
      cp "$a" "$build/crashes/$h-$(basename "$a")"
      verdict="$verdict $build/crashes/$h-$(basename "$a")"
    done
    cp "$dir/log" "$build/crashes/$h.log"
    grep -m1 -E 'ERROR|SUMMARY' "$dir/log" >&2 || tail -5 "$dir/log" >&2
  fi
  printf '%-12s %8s %8s %8s  %s\n' "$h" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$verdict"
  [ "$verdict" = ok ]
}

printf '%-12s %8s %8s %8s  %s\n' harness runs cov ft "result ($secs s each)"
# As many harnesses at once as there are cores, each into its own line;
# the lines in the list's order.
jobs=$(nproc) running=0
for h in "${harnesses[@]}"; do
  { run_one "$h" >"$work/$h.line" && : >"$work/$h.ok"; } &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
failed=0
for h in "${harnesses[@]}"; do
  cat "$work/$h.line"
  [ -e "$work/$h.ok" ] || failed=1
done
exit $failed
