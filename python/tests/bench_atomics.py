"""The rate at which a GPU takes fp32 atomic adds into global memory in
FlashAttention-2's dQ pattern: every K/V block of a head adds a 64 x dim
tile into each of the head's Q blocks, in the same order, each warp's adds
coalesced. The timing model charges L2's atomic units per 128-byte line a
warp's add touches (RED_LINE_BYTES in tuner/analysis/model_sass.c, fitted
to tcbwd's adds of 8 lines each on an H200, tests/data/gpu); this rate, of
adds a line each, is what tells a cost per line from one per 32-byte
sector. Checked: every element of dQ ends at the number of K/V blocks. Not
a pytest module (scripts/gpu-check.sh runs it); exit 77 without a GPU or
Triton. TRITON_INTERPRET=1 runs a small case on the CPU, untimed.

usage: python3 python/tests/bench_atomics.py
"""
import os
import sys

try:
    import torch
    import triton
    import triton.language as tl
except ImportError as e:
    print("SKIPPED: %s" % e)
    sys.exit(77)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERPRET and not torch.cuda.is_available():
    print("SKIPPED: no CUDA GPU")
    sys.exit(77)


@triton.jit
def dq_adds(dq, seq, BM: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.arange(0, BM)[:, None]
    cols = tl.arange(0, D)[None, :]
    ones = tl.full((BM, D), 1.0, tl.float32)
    head = dq + bh * seq * D
    for m in range(0, seq // BM):
        tl.atomic_add(head + (m * BM + rows) * D + cols, ones, sem="relaxed")


def main():
    dev = "cpu" if INTERPRET else "cuda"
    BM = 64
    cases = [(2, 128, 16)] if INTERPRET else [(64, 4096, 128), (64, 4096, 64)]
    for bh, n, d in cases:
        dq = torch.zeros(bh, n, d, device=dev, dtype=torch.float32)
        grid = (n // BM, bh)
        dq_adds[grid](dq, n, BM=BM, D=d)
        if not bool((dq == n // BM).all()):
            print("FAILED: dQ is not %d everywhere" % (n // BM))
            return 1
        adds = bh * (n // BM) * n * d
        if INTERPRET:
            print("dq_adds checked on the CPU: %d adds" % adds)
            continue
        ms = []
        for _ in range(7):
            dq.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dq_adds[grid](dq, n, BM=BM, D=d)
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        ms.sort()
        med = ms[len(ms) // 2] * 1e-3
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        print("fp32 atomic adds, FA2's dQ pattern, %d heads x seq %d x dim %d, %d K/V blocks: "
              "median %.1f us, %.1f G adds/s (%.0f GB/s of payload, %.2f G adds/s per SM)"
              % (bh, n, d, n // BM, med * 1e6, adds / med / 1e9, 4 * adds / med / 1e9,
                 adds / med / 1e9 / sms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
