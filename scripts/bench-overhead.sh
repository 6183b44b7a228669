#!/usr/bin/env bash
# bench-overhead.sh: what one attention call costs on the host once its
# kernel is in memory (a benchmark, not a test), from C and from Python,
# without a GPU: fatune_attention_plan and fatune.plan do everything a call
# does (the checks, the lookup of the kernel, the launch's arguments) but
# the launch itself. The best of five rounds each, against the machine's
# other load. Problem: fp32, batch 1, 8 heads over 2 K/V heads, seq 128,
# dim 64, causal, on the emulator backend.
#
# usage: scripts/bench-overhead.sh [build]    (after scripts/test.sh, or a
#        build and `pip install ./python` into build/venv)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export FATUNE_DB="$tmp/bench.db" FATUNE_KEY="$tmp/bench.key"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo -n "C:      "
"$build/tests/test_api" | grep -E '^fatune_attention_plan'
echo -n "Python: "
"$build/venv/bin/python" - <<'PY'
import timeit

import numpy as np

import fatune

q = np.zeros((1, 8, 128, 64), np.float32)
k = np.zeros((1, 2, 128, 64), np.float32)
name = fatune.plan(q, k, k, causal=True)  # the kernel built, then in memory
n = 20000
best = min(timeit.repeat(lambda: fatune.plan(q, k, k, causal=True), number=n, repeat=5))
print("fatune.plan on NumPy arrays, kernel in memory: %.3f us per call (%s)"
      % (best / n * 1e6, name))
PY
