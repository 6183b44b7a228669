#!/usr/bin/env bash
# bench-db.sh: what the database saves (a benchmark, not a test). Runs the
# same tune three times on a fresh database: the first run, the identical
# second run (everything recorded: nothing measured), and a third with
# --retune (everything measured again); then the library's own overhead
# per call once a kernel is in memory.
#
# usage: scripts/bench-db.sh [build]     env: DIM (64) SEQ (256)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dim=${DIM:-64} seq=${SEQ:-256}
db=$(mktemp -d)/bench.db
trap 'rm -rf "$(dirname "$db")"' EXIT
run() {
  local start end
  start=$(date +%s.%N)
  "$build/fatune" --backend emu --dim "$dim" --seq "$seq" --db "$db" "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
first=$(run)
second=$(run)
retune=$(run --retune)
echo "tune dim $dim seq $seq on the emulator, a fresh database:"
echo "  first run            $first s"
echo "  identical second run $second s ($(awk -v a="$first" -v b="$second" 'BEGIN { printf "%.0f", a / b }') times faster)"
echo "  --retune             $retune s"
"$build/tests/test_lib" | grep 'us per call'
