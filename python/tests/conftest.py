"""The package's tests run against a database and key of their own, never
the user's; shared helpers: the float64 reference and each dtype's
tolerance (the tuner's)."""
import os
import shutil
import tempfile

import numpy as np

_tmp = None


def pytest_configure(config):
    # Before fatune opens a context: contexts are kept for the process.
    global _tmp
    _tmp = tempfile.mkdtemp(prefix="fatune-pytest-")
    os.environ["FATUNE_DB"] = os.path.join(_tmp, "test.db")
    os.environ.setdefault("FATUNE_KEY", os.path.join(_tmp, "test.key"))


def pytest_unconfigure(config):
    if _tmp:
        shutil.rmtree(_tmp, ignore_errors=True)


# The relative L2 error each dtype's kernels must meet (tuner/trial/validate.c).
TOLERANCE = {"float32": 1e-5, "float64": 1e-10, "float16": 5e-3, "bfloat16": 1e-2}


def rel_err(x, ref):
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(((x - ref) ** 2).sum() / (ref ** 2).sum()))


def reference(q, k, v, causal=False, scale=None, layout="bhnd"):
    """O and the logsumexp in float64 from the values q, k, v hold; k/v
    head h // group for q head h; causal True or "bottom_right" aligned to
    the bottom-right corner, "top_left" to the top-left one (query i sees
    keys 0..i). O in the layout given, lse (batch, heads, seq_q); a row
    that sees no key has O 0 and lse -inf."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    if layout == "bnhd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale else 1 / np.sqrt(q.shape[-1]))
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        shift = 0 if causal == "top_left" else nk - nq
        visible = np.arange(nk)[None, :] <= np.arange(nq)[:, None] + shift
        s = np.where(visible, s, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = np.isfinite(m)
    p = np.exp(s - np.where(seen, m, 0))
    l = p.sum(-1, keepdims=True)
    o = p @ v / np.where(seen, l, 1)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(l))[..., 0]
    if layout == "bnhd":
        o = o.transpose(0, 2, 1, 3)
    return o, lse


def reference_backward(q, k, v, grad_o, causal=False, scale=None, layout="bhnd",
                       grad_lse=None):
    """dq, dk, dv in float64 of attention as reference() computes it, for a
    loss with gradient grad_o with respect to O (and grad_lse, when given,
    with respect to the logsumexp); dk and dv summed over the q heads that
    share a k/v head."""
    q, k, v, grad_o = (np.asarray(x).astype(np.float64) for x in (q, k, v, grad_o))
    if layout == "bnhd":
        q, k, v, grad_o = (x.transpose(0, 2, 1, 3) for x in (q, k, v, grad_o))
    hk, group = k.shape[1], q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = scale if scale else 1 / np.sqrt(q.shape[-1])
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        shift = 0 if causal == "top_left" else nk - nq
        s = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None] + shift, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    p = p / np.where(np.isfinite(m), p.sum(-1, keepdims=True), 1)
    dp = grad_o @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    if grad_lse is not None:
        ds += p * np.asarray(grad_lse, dtype=np.float64)[..., None]
    dq, dk = ds @ k * scale, ds.transpose(0, 1, 3, 2) @ q * scale
    dv = p.transpose(0, 1, 3, 2) @ grad_o

    def fold(x):
        return x.reshape(x.shape[0], hk, group, *x.shape[2:]).sum(2)
    dk, dv = fold(dk), fold(dv)
    if layout == "bnhd":
        dq, dk, dv = (x.transpose(0, 2, 1, 3) for x in (dq, dk, dv))
    return dq, dk, dv
