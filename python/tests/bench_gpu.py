"""What the GPU benchmarks beside this file share (bench_atomics.py,
bench_mufu_overlap.py, bench_sdpa.py): the check that they can run, and
timing by CUDA events. Not a pytest module."""
import os
import statistics
import sys


def require_triton():
    """torch, triton, triton.language and whether Triton's interpreter runs
    the kernels (TRITON_INTERPRET=1: on the CPU, untimed); exit 77, which
    scripts/gpu-check.sh reports as skipped, without Triton, or without a
    GPU where the interpreter is off."""
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        print("SKIPPED: %s" % e)
        sys.exit(77)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if not interpret and not torch.cuda.is_available():
        print("SKIPPED: no CUDA GPU")
        sys.exit(77)
    return torch, triton, tl, interpret


def gpu_median(fn, reps=7, warmup=0, before=None):
    """The median GPU time of fn() in seconds over reps runs, each timed by
    CUDA events around it alone; before() (untimed) ahead of each."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before:
            before()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times)
