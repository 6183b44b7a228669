#!/usr/bin/env bash
# bench-overhead.sh: what one attention call costs on the host once its
# kernel is in memory (a benchmark, not a test), from C and from Python,
# without a GPU: fatune_attention_plan and fatune.plan do everything a call
# does (the checks, the lookup of the kernel, the launch's arguments) but
# the launch itself. The best of five rounds each, against the machine's
# other load. Problem: fp32, batch 1, 8 heads over 2 K/V heads, seq 128,
# dim 64, causal, on the emulator backend. fatune.attention is timed with
# the library's call replaced by nothing (on the emulator it would run the
# kernel): what Python adds, and autograd for tensors that require grad;
# beside it, the operator fatune::attention called as such, with PyTorch's
# dispatcher.
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
echo "Python:"
"$build/venv/bin/python" - <<'PY'
import timeit

import numpy as np

import fatune
from fatune import _lib

try:
    import torch
except ImportError:
    torch = None


def best_us(fn, n):
    fn()  # the kernel built, then in memory
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


q = np.zeros((1, 8, 128, 64), np.float32)
k = np.zeros((1, 2, 128, 64), np.float32)
name = fatune.plan(q, k, k, causal=True)
print("  fatune.plan on NumPy arrays: %.1f us per call (%s)"
      % (best_us(lambda: fatune.plan(q, k, k, causal=True), 20000), name))
if torch is not None:
    qt, kt = torch.from_numpy(q), torch.from_numpy(k)
    print("  fatune.plan on torch tensors: %.1f us per call"
          % best_us(lambda: fatune.plan(qt, kt, kt, causal=True), 20000))
# attention() with the library's call taken out (it would launch the
# kernel on the emulator, milliseconds): what Python adds to a call.
launched = []
_lib.call = lambda ctx, args, plan: launched.append(len(args)) or ""
print("  fatune.attention on NumPy arrays, Python's part: %.1f us per call"
      % best_us(lambda: fatune.attention(q, k, k, causal=True), 20000))
if torch is not None:
    print("  fatune.attention on torch tensors, no gradient needed (straight to the library), "
          "Python's part: %.1f us per call"
          % best_us(lambda: fatune.attention(qt, kt, kt, causal=True), 20000))
    qg = qt.clone().requires_grad_()
    print("  fatune.attention on torch tensors that require grad (recorded by autograd, "
          "past the operators' dispatch), Python's and autograd's part: %.1f us per call"
          % best_us(lambda: fatune.attention(qg, kt, kt, causal=True), 20000))
    print("  torch.ops.fatune.attention on the same (the operator, as torch.compile and the "
          "modes see it), Python's, autograd's and the dispatcher's part: %.1f us per call"
          % best_us(lambda: torch.ops.fatune.attention(qg, kt, kt, "bottom_right", None,
                                                       "bhnd", None), 20000))
assert launched, "the library's call was not replaced"
PY
