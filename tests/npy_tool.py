#!/usr/bin/env python3
"""npy_tool.py: .npy files for the command-line tests, with no NumPy.

  npy_tool.py write PATH DTYPE SEED D0 [D1 ...]   random normal array, DTYPE f2|f4|f8|V2
      (V2: bfloat16 as np.save writes an ml_dtypes.bfloat16 array, descr '<V2')
  npy_tool.py check Q K V O [LSE] [--causal] [--scale S]
      naive attention in Python floats on the inputs as stored; prints the
      max abs error of O (and LSE), exits 1 when O or LSE has the wrong shape
      or dtype (O's: Q's, or float64 with --fp64).
  npy_tool.py grad Q K V DO DQ DK DV [--causal] [--scale S]
      the gradients of naive attention in Python floats; prints the max abs
      error of dQ, dK and dV, exits 1 when one has the wrong shape or a
      dtype other than Q's.
"""
import math
import random
import struct
import sys


def write(path, dtype, seed, shape):
    rnd = random.Random(seed)
    n = 1
    for s in shape:
        n *= s
    vals = [rnd.gauss(0.0, 1.0) for _ in range(n)]
    if dtype == "V2":
        vals = [bf16_bits(x) for x in vals]
    fmt = {"f2": "e", "f4": "f", "f8": "d", "V2": "H"}[dtype]
    shape_txt = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '<%s', 'fortran_order': False, 'shape': %s, }" % (dtype, shape_txt)
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (n, fmt), *vals))


def bf16_bits(x):
    """x rounded to bfloat16 (nearest, ties to even), as its 16 bits."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = eval(data[10:10 + hlen].decode())  # our own test files only
    descr, shape = header["descr"], header["shape"]
    fmt = {"<f2": "e", "<f4": "f", "<f8": "d", "<V2": "H"}[descr]
    n = 1
    for s in shape:
        n *= s
    vals = struct.unpack("<%d%s" % (n, fmt), data[10 + hlen:])
    if descr == "<V2":
        vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in vals]
    return descr, tuple(shape), list(vals)


def as4(shape, vals):
    if len(shape) == 2:
        shape = (1, 1) + shape
    return shape, vals


def check(args):
    causal = "--causal" in args
    scale = None
    if "--scale" in args:
        scale = float(args[args.index("--scale") + 1])
    paths = [a for a in args if a.endswith(".npy")]
    (_, qs, q), (_, ks, k), (_, vs, v) = [read(p) for p in paths[:3]]
    odescr, os_, o = read(paths[3])
    q4, _ = as4(qs, q)
    k4, _ = as4(ks, k)
    B, H, N, D = q4
    M, DV = k4[2], vs[-1]   # V's head dim may differ from Q's and K's
    want_o = qs[:-1] + (DV,)
    if os_ != want_o:
        print("O shape %s, want %s" % (os_, want_o))
        return 1
    # O in the kernel's dtype: the inputs' (as Q's), fp64 when run so.
    want_descr = "<f8" if "--fp64" in args else read(paths[0])[0]
    if odescr != want_descr:
        print("O dtype %s, want %s" % (odescr, want_descr))
        return 1
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    err = lerr = 0.0
    lse_vals = None
    if len(paths) > 4:
        ldescr, ls, lse_vals = read(paths[4])
        want = (N,) if len(qs) == 2 else (B, H, N)
        if ldescr != "<f4" or ls != want:
            print("LSE %s %s, want <f4 %s" % (ldescr, ls, want))
            return 1
    for b in range(B):
        for h in range(H):
            for r in range(N):
                qo = ((b * H + h) * N + r) * D
                vis = M if not causal else max(0, min(M, r + (M - N) + 1))
                s = []
                for c in range(vis):
                    ko = ((b * H + h) * M + c) * D
                    s.append(scale * sum(q[qo + d] * k[ko + d] for d in range(D)))
                m = max(s) if s else -math.inf
                p = [math.exp(x - m) for x in s]
                l = sum(p)
                oo = ((b * H + h) * N + r) * DV
                for d in range(DV):
                    acc = 0.0
                    for c in range(vis):
                        acc += p[c] * v[((b * H + h) * M + c) * DV + d]
                    ref = acc / l if l > 0 else 0.0
                    err = max(err, abs(o[oo + d] - ref))
                if lse_vals is not None:
                    ref = m + math.log(l) if l > 0 else -math.inf
                    got = lse_vals[(b * H + h) * N + r]
                    if math.isinf(ref):
                        lerr = max(lerr, 0.0 if got == ref else math.inf)
                    else:
                        lerr = max(lerr, abs(got - ref))
    print("max_err %.3g lse_err %.3g" % (err, lerr))
    return 0


def grad(args):
    causal = "--causal" in args
    paths = [a for a in args if a.endswith(".npy")]
    (qd, qs, q), (_, ks, k), (_, vs, v), (_, dos, do) = [read(p) for p in paths[:4]]
    B, H, N, D = as4(qs, q)[0]
    M, DV = as4(ks, k)[0][2], vs[-1]
    scale = float(args[args.index("--scale") + 1]) if "--scale" in args else 1.0 / math.sqrt(D)
    got = []
    for path, want in zip(paths[4:7], (qs, ks, vs)):
        descr, shape, vals = read(path)
        if shape != want or descr != qd:
            print("%s: %s %s, want %s %s" % (path, descr, shape, qd, want))
            return 1
        got.append(vals)
    dq, dk, dv = [0.0] * len(q), [0.0] * len(k), [0.0] * len(v)
    for b in range(B):
        for h in range(H):
            kb = (b * H + h) * M
            for r in range(N):
                qo = ((b * H + h) * N + r) * D
                oo = ((b * H + h) * N + r) * DV
                vis = M if not causal else max(0, min(M, r + (M - N) + 1))
                if vis == 0:
                    continue
                s = [scale * sum(q[qo + d] * k[(kb + c) * D + d] for d in range(D))
                     for c in range(vis)]
                m = max(s)
                p = [math.exp(x - m) for x in s]
                l = sum(p)
                p = [x / l for x in p]
                dp = [sum(do[oo + d] * v[(kb + c) * DV + d] for d in range(DV))
                      for c in range(vis)]
                dsum = sum(p[c] * dp[c] for c in range(vis))
                for c in range(vis):
                    ds = p[c] * (dp[c] - dsum)
                    for d in range(D):
                        dq[qo + d] += scale * ds * k[(kb + c) * D + d]
                        dk[(kb + c) * D + d] += scale * ds * q[qo + d]
                    for d in range(DV):
                        dv[(kb + c) * DV + d] += p[c] * do[oo + d]
    errs = [max(abs(a - b) for a, b in zip(g, ref)) for g, ref in zip(got, (dq, dk, dv))]
    print("dq_err %.3g dk_err %.3g dv_err %.3g" % tuple(errs))
    return 0


def main():
    if sys.argv[1] == "grad":
        return grad(sys.argv[2:])
    if sys.argv[1] == "write":
        path, dtype, seed = sys.argv[2], sys.argv[3], int(sys.argv[4])
        write(path, dtype, seed, [int(x) for x in sys.argv[5:]])
        return 0
    return check(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
