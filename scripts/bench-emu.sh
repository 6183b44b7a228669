#!/usr/bin/env bash
# bench-emu.sh: how long the CPU emulator takes to validate a whole default
# space (a benchmark, not a test). Runs the main job on the emulator and
# prints its summary: host-compiler time, NVRTC time (the ptxas figures,
# not the emulator's work) and validation time (two schedules per variant),
# then the wall time of the whole command.
#
# usage: scripts/bench-emu.sh [build]   env: DIM (64) SEQ (256) DTYPE (fp32) CAUSAL (0)
set -euo pipefail
cd "$(dirname "$0")/.."
fatune=${1:-build}/fatune
dim=${DIM:-64} seq=${SEQ:-256} dtype=${DTYPE:-fp32}
causal=()
[ "${CAUSAL:-0}" = 1 ] && causal=(--causal)
out=$(mktemp)
db=$(mktemp -d)
trap 'rm -rf "$out" "$db"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "problem: dim $dim seq $seq $dtype ${causal[*]:-}, the default space, backend emu"
start=$(date +%s.%N)
# A fresh database, so that every variant is measured.
"$fatune" --backend emu --dim "$dim" --seq "$seq" --emu-seq "$seq" --dtype "$dtype" "${causal[@]}" \
  --db "$db/bench.db" >"$out"
end=$(date +%s.%N)
grep -E '^[0-9]+ variants: ' "$out"
awk -v a="$start" -v b="$end" 'BEGIN { printf "wall %.1f s for the whole command\n", b - a }'
