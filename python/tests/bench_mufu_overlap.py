"""Whether a GPU's tensor cores and its special-function units (MUFU) run
at once: the question behind the timing model's largest error. The model
lets wgmma and MUFU.EX2 overlap freely, and rates FlashAttention-3's
forward kernel at d64 1.5 times the paper's figure; the figures measured
so far (FA3's paper at d64, d128 and d256, fatune's own wg kernels on an
H200) all lie within 5% of the sum of the two units' times at the data
sheet's clock, as if they did not overlap at all.

Four kernels, each of one warpgroup a CTA, many CTAs an SM, time a loop
of ITERS steps over data each CTA keeps in registers:
  dot    acc = A B + acc, a 128 x 128 x 64 product on the tensor cores
  exp    x = exp2(x / 2) - 1 on a 128 x 64 tile, MUFU.EX2 for each element
  both   the two in one loop, independent of each other (one warp's
         instructions: wgmma is asynchronous, so its exponentials may run
         under it, as FlashAttention-3's intra-warpgroup overlap)
  split  even CTAs dot, odd CTAs exp, twice the CTAs (the units shared
         between warps of one SM, as FlashAttention-3's ping-pong)
The two loops are sized to about the same time per step at the data
sheet's rates (512 clocks each). Free overlap puts both and split at the
longer of dot and exp; no overlap at their sum. Checked: every
CTA's sum of its results against the same steps computed here. Not a pytest module
(scripts/gpu-check.sh runs it); exit 77 without a GPU or Triton.
TRITON_INTERPRET=1 runs a small case on the CPU, untimed.

usage: python3 python/tests/bench_mufu_overlap.py
"""
import sys

from bench_gpu import gpu_median, require_triton

torch, triton, tl, INTERPRET = require_triton()

BM, BN, BK, BX = 128, 128, 64, 64     # the product's tile; exp's tile is BM x BX
KINDS = ("dot", "exp", "both", "split")


@triton.jit
def loop(a_ptr, b_ptr, x_ptr, out_ptr, iters, KIND: tl.constexpr, BM: tl.constexpr,
         BN: tl.constexpr, BK: tl.constexpr, BX: tl.constexpr):
    """KIND 0 dot, 1 exp, 2 both, 3 split (even programs dot, odd exp)."""
    p = tl.program_id(0)
    rm = tl.arange(0, BM)[:, None]
    a = tl.load(a_ptr + rm * BK + tl.arange(0, BK)[None, :])
    b = tl.load(b_ptr + tl.arange(0, BK)[:, None] * BN + tl.arange(0, BN)[None, :])
    x = tl.load(x_ptr + rm * BX + tl.arange(0, BX)[None, :])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if KIND == 3:   # a CTA's kind from its parity: two loops, no branch within either
        if p % 2 == 0:
            for _ in range(iters):
                acc = tl.dot(a, b, acc)
        else:
            for _ in range(iters):
                x = tl.exp2(x * 0.5) - 1.0
    else:           # KIND fixed at compile time: the loop holds what it names alone
        for _ in range(iters):
            if KIND != 1:
                acc = tl.dot(a, b, acc)
            if KIND != 0:
                x = tl.exp2(x * 0.5) - 1.0
    # one value per CTA, so that neither loop is dead code
    tl.store(out_ptr + p, tl.sum(tl.sum(acc, axis=1), axis=0) + tl.sum(tl.sum(x, axis=1), axis=0))


def run(kind, programs, iters, dev, a, b, x):
    out = torch.empty(programs, device=dev, dtype=torch.float32)
    loop[(programs,)](a, b, x, out, iters, KIND=KINDS.index(kind), BM=BM, BN=BN, BK=BK, BX=BX,
                      num_warps=4)
    return out


def expected(kind, programs, iters, a, b, x):
    """Each CTA's value, computed here: the product iters times, exp's
    steps from x (in float32, as the kernel)."""
    prod = iters * float((a.double() @ b.double()).sum())
    xs = x.clone()
    for _ in range(iters):
        xs = torch.exp2(xs * 0.5) - 1.0
    dot, exp = prod + float(x.double().sum()), float(xs.double().sum())
    if kind == "split":
        return [dot if p % 2 == 0 else exp for p in range(programs)]
    return [{"dot": dot, "exp": exp, "both": prod + exp}[kind]] * programs


def main():
    dev = "cpu" if INTERPRET else "cuda"
    g = torch.Generator(device="cpu").manual_seed(1)
    # small values: the products stay finite over the iterations, and
    # exp2(x / 2) - 1 falls to its fixed point 0 from [0, 1)
    a = (torch.rand(BM, BK, generator=g) / 64).to(dev, torch.float16)
    b = (torch.rand(BK, BN, generator=g) / 64).to(dev, torch.float16)
    x = torch.rand(BM, BX, generator=g).to(dev, torch.float32)
    iters = 4 if INTERPRET else 4096
    sms = 2 if INTERPRET else torch.cuda.get_device_properties(0).multi_processor_count
    programs = 2 * sms if INTERPRET else 8 * sms
    for kind in KINDS:
        n = programs * (2 if kind == "split" else 1)
        got = run(kind, n, iters, dev, a, b, x).cpu().tolist()
        want = expected(kind, n, iters, a.cpu(), b.cpu(), x.cpu())
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want))
               if not abs(g - w) <= 1e-3 * max(1.0, abs(w))]
        if bad:
            print("FAILED: %s: CTA %d gave %.6g, not %.6g" % ((kind,) + bad[0]))
            return 1
    if INTERPRET:
        print("the four loops checked on the CPU: %d CTAs, %d steps, each CTA's sum as "
              "computed here" % (programs, iters))
        return 0
    times = {}
    for kind in KINDS:
        n = programs * (2 if kind == "split" else 1)
        # the first run compiles and warms
        times[kind] = gpu_median(lambda: run(kind, n, iters, dev, a, b, x), warmup=1)
    steps = programs * iters
    tflops = 2.0 * BM * BN * BK * steps / times["dot"] / 1e12
    ex2 = BM * BX * steps / times["exp"] / 1e12
    print("dot: %.1f us, %.0f TFLOP/s; exp: %.1f us, %.2f T exp2/s (%d CTAs of %d steps each)"
          % (times["dot"] * 1e6, tflops, times["exp"] * 1e6, ex2, programs, iters))
    longer, total = max(times["dot"], times["exp"]), times["dot"] + times["exp"]
    for kind, what in (("both", "one warp's dot and exp in one loop"),
                       ("split", "dot and exp in CTAs of their own, on the same SMs")):
        # split runs twice the CTAs, each kind's work once: the same total as both
        t = times[kind]
        print("%s (%s): %.1f us, %.2f of the longer (free overlap: 1), %.2f of the sum "
              "(no overlap: 1)" % (kind, what, t * 1e6, t / longer, t / total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
