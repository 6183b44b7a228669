"""fatune.attention beside torch's scaled_dot_product_attention on a GPU:
accuracy against a float32 reference and GPU time (CUDA events, median of
20), then what a call costs on the host with its kernel in memory. Not a
pytest module (scripts/gpu-check.sh runs it); exit 77 without a GPU.

usage: python3 python/tests/bench_sdpa.py
"""
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: PyTorch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA GPU")
    sys.exit(77)

import fatune  # noqa: E402
from bench_gpu import gpu_median  # noqa: E402


def gpu_us(fn, reps=20):
    return gpu_median(fn, reps=reps, warmup=3) * 1e6


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm()).item()


def case(b, hq, hk, n, d, causal, layout):
    dt = torch.bfloat16
    shape = (lambda h: (b, h, n, d)) if layout == "bhnd" else (lambda h: (b, n, h, d))
    q = torch.randn(shape(hq), device="cuda", dtype=dt)
    k = torch.randn(shape(hk), device="cuda", dtype=dt)
    v = torch.randn(shape(hk), device="cuda", dtype=dt)
    t = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(1, 2))
    g = hq // hk

    def sdpa(q, k, v):
        return t(F.scaled_dot_product_attention(t(q), t(k).repeat_interleave(g, 1),
                                                t(v).repeat_interleave(g, 1),
                                                is_causal=causal))
    t0 = time.perf_counter()
    o = fatune.attention(q, k, v, causal=causal, layout=layout)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ref = sdpa(q.float(), k.float(), v.float())
    o_s = sdpa(q, k, v)
    us_f = gpu_us(lambda: fatune.attention(q, k, v, causal=causal, layout=layout))
    us_s = gpu_us(lambda: sdpa(q, k, v))
    flops = 4 * b * hq * n * n * d / (2 if causal else 1)
    print("B%d H%d/%d N%d d%d %s %-6s fatune %8.1f us %6.1f TFLOP/s err %.2e | sdpa %8.1f us "
          "%6.1f TFLOP/s err %.2e | first call %.2f s (%s)"
          % (b, hq, hk, n, d, layout, "causal" if causal else "", us_f, flops / us_f / 1e6,
             rel_err(o, ref), us_s, flops / us_s / 1e6, rel_err(o_s, ref), first,
             fatune.plan(q, k, v, causal=causal, layout=layout)))
    return rel_err(o, ref)


def host_cost():
    q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    fatune.attention(q, k, k, out=out)
    torch.cuda.synchronize()
    for what, fn in (("fatune.plan", lambda: fatune.plan(q, k, k)),
                     ("fatune.attention(out=)", lambda: fatune.attention(q, k, k, out=out)),
                     ("fatune.attention", lambda: fatune.attention(q, k, k))):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            best = min(best, (time.perf_counter() - t0) / 2000 * 1e6)
            torch.cuda.synchronize()
        print("host cost per call, kernel in memory: %-24s %.2f us" % (what, best))


def main():
    print("torch %s, %s, fatune %s" % (torch.__version__, torch.cuda.get_device_name(),
                                       fatune.__version__))
    worst = 0.0
    for d in (64, 128):
        for causal in (False, True):
            worst = max(worst, case(4, 16, 16, 4096, d, causal, "bhnd"))
    worst = max(worst, case(2, 32, 8, 4096, 128, True, "bnhd"))
    host_cost()
    if not worst < 1e-2:
        print("FAILED: fatune's error %.2e exceeds bf16's tolerance 1e-2" % worst)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
