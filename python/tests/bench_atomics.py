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

Then the patterns that tell the model's hypotheses apart: a warp's single
adds laid over 128-byte lines in five ways (one line of 32 floats, 4 lines
of 8, 8 lines of 4 two apart as tcbwd's fragments add, 8 lines of 4, 32
lines of 1), each at distinct addresses in a buffer L2 holds. A cost per
line puts the second at 4 times the first's time, a cost per 32-byte
sector at the same time, a cost per add at the same time throughout.

usage: python3 python/tests/bench_atomics.py
"""
import sys

from bench_gpu import gpu_median, require_triton

torch, triton, tl, INTERPRET = require_triton()


@triton.jit
def dq_adds(dq, seq, BM: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.arange(0, BM)[:, None]
    cols = tl.arange(0, D)[None, :]
    ones = tl.full((BM, D), 1.0, tl.float32)
    head = dq + bh * seq * D
    for m in range(0, seq // BM):
        tl.atomic_add(head + (m * BM + rows) * D + cols, ones, sem="relaxed")


@triton.jit(do_not_specialize=["span", "wrap", "A", "T", "S"])
def pattern_adds(acc, rounds, span, wrap, A, T, S):
    """One warp's 32 single adds per round: lane i at row i // A (S floats
    apart), element i % A (T apart); the rounds walk the buffer. The layout
    is not specialized on, so Triton cannot prove lanes contiguous and
    widen the adds."""
    i = tl.arange(0, 32)
    off = (i // A) * S + (i % A) * T
    ones = tl.full((32,), 1.0, tl.float32)
    p = tl.program_id(0)
    for r in range(rounds):
        base = ((p * rounds + r) * span) % wrap
        tl.atomic_add(acc + base + off, ones, sem="relaxed")


# (floats a row, their spacing, what the row is): rows S = 32 floats apart,
# a 128-byte line each.
PATTERNS = [(32, 1, "1 line of 32 floats (4 sectors)"),
            (8, 1, "4 lines of 8 floats (4 sectors)"),
            (4, 2, "8 lines of 4 floats 2 apart (8 half-filled sectors: tcbwd's single adds)"),
            (4, 1, "8 lines of 4 floats (8 sectors)"),
            (1, 1, "32 lines of 1 float (32 sectors)")]


def patterns(dev):
    S = 32
    programs, rounds = (4, 2) if INTERPRET else (8192, 64)
    times = []
    for a, t, what in PATTERNS:
        span = (32 // a) * S
        wrap = span * 4096          # 4096 footprints: at most 16 MB, which L2 holds
        acc = torch.zeros(wrap + span, device=dev, dtype=torch.float32)
        args = (acc, rounds, span, wrap, a, t, S)
        pattern_adds[(programs,)](*args, num_warps=1)
        adds = programs * rounds * 32
        if float(acc.sum()) != adds:
            print("FAILED: %s: the buffer sums to %g, not %d" % (what, float(acc.sum()), adds))
            return 1
        if INTERPRET:
            print("pattern_adds checked on the CPU: %s, %d adds" % (what, adds))
            continue
        med = gpu_median(lambda: pattern_adds[(programs,)](*args, num_warps=1))
        times.append(med)
        warp_adds = adds / 32
        print("a warp's adds over %s: median %.1f us, %.1f G adds/s, %.2f G warp adds/s"
              % (what, med * 1e6, adds / med / 1e9, warp_adds / med / 1e9))
    if times:
        print("time of 4 lines of 8 against 1 line of 32: %.2f (a cost per line: 4; per sector "
              "or per add: 1)" % (times[1] / times[0]))
    return 0


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
        med = gpu_median(lambda: dq_adds[grid](dq, n, BM=BM, D=d), before=dq.zero_)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        print("fp32 atomic adds, FA2's dQ pattern, %d heads x seq %d x dim %d, %d K/V blocks: "
              "median %.1f us, %.1f G adds/s (%.0f GB/s of payload, %.2f G adds/s per SM)"
              % (bh, n, d, n // BM, med * 1e6, adds / med / 1e9, 4 * adds / med / 1e9,
                 adds / med / 1e9 / sms))
    return patterns(dev)


if __name__ == "__main__":
    sys.exit(main())
