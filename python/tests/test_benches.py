"""The GPU benchmarks' kernels (bench_atomics.py, bench_mufu_overlap.py),
run by Triton's interpreter on the CPU at a small size: each checks its
results against what it computes itself, so a benchmark that would time
wrong work on a GPU fails here first. Skipped without Triton."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("script", ["bench_atomics.py", "bench_mufu_overlap.py"])
def test_interpreted(script):
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, script)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked on the CPU" in r.stdout and "FAILED" not in r.stdout, r.stdout
