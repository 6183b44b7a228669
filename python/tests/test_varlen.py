"""fatune.attention_varlen on NumPy arrays (the emulator) and, with
PyTorch, on CPU tensors: packed sequences of their own lengths (0 and 1
among them), GQA, causal per sequence, against attention written here in
float64 on each sequence alone; bad arguments refused naming the argument;
offsets no kernel may follow reported."""
import math

import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err

H, KVH, D = 4, 2, 16
LQ, LK = [5, 0, 1, 23], [9, 4, 0, 23]


def packed(dt, lq=LQ, lk=LK, seed=0):
    rng = np.random.default_rng(seed)
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], H, D)).astype(dt)
    k = rng.standard_normal((cu_k[-1], KVH, D)).astype(dt)
    v = rng.standard_normal((cu_k[-1], KVH, D)).astype(dt)
    return q, k, v, cu_q, cu_k


def reference(q, k, v, cu_q, cu_k, causal):
    """O (total_q, H, D) and lse (H, total_q) in float64, each sequence on
    its own; rows that see no key: zeros and -inf."""
    o = np.zeros(q.shape, np.float64)
    lse = np.full((H, q.shape[0]), -np.inf)
    for b in range(len(cu_q) - 1):
        q0, n = int(cu_q[b]), int(cu_q[b + 1] - cu_q[b])
        k0, m = int(cu_k[b]), int(cu_k[b + 1] - cu_k[b])
        for h in range(H):
            kh = k[k0:k0 + m, h // (H // KVH)].astype(np.float64)
            vh = v[k0:k0 + m, h // (H // KVH)].astype(np.float64)
            for r in range(n):
                seen = m if not causal else max(0, min(m, r + m - n + 1))
                if seen == 0:
                    continue
                s = kh[:seen] @ q[q0 + r, h].astype(np.float64) / math.sqrt(D)
                mx = s.max()
                p = np.exp(s - mx)
                o[q0 + r, h] = p @ vh[:seen] / p.sum()
                lse[h, q0 + r] = mx + math.log(p.sum())
    return o, lse


@pytest.mark.parametrize("dt,causal", [(np.float32, False), (np.float32, True),
                                       (np.float16, True), (np.float64, False)])
def test_varlen(dt, causal):
    q, k, v, cu_q, cu_k = packed(dt)
    o, lse = fatune.attention_varlen(q, k, v, cu_q, cu_k, max(LQ), max(LK), causal=causal,
                                     return_softmax_lse=True)
    ref, ref_lse = reference(q, k, v, cu_q, cu_k, causal)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (H, q.shape[0])
    assert rel_err(o, ref) <= TOLERANCE[np.dtype(dt).name]
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), seen)
    assert np.all(lse[~seen] == -np.inf)
    assert np.max(np.abs(lse[seen] - ref_lse[seen])) <= 1e-3 * max(1.0, np.max(np.abs(ref_lse[seen])))
    assert np.all(o[cu_q[2]:cu_q[3]] == 0)   # the sequence of no keys


def test_same_as_dense():
    """Sequences of one length packed give the dense call's O."""
    q, k, v, cu_q, cu_k = packed(np.float32, [12, 12], [20, 20])
    o = fatune.attention_varlen(q, k, v, cu_q, cu_k, 12, 20, causal=True)
    qd, kd, vd = (x.reshape(2, -1, x.shape[1], D).transpose(0, 2, 1, 3) for x in (q, k, v))
    od = fatune.attention(np.ascontiguousarray(qd), np.ascontiguousarray(kd),
                          np.ascontiguousarray(vd), causal=True)
    assert rel_err(o, od.transpose(0, 2, 1, 3).reshape(o.shape).astype(np.float64)) <= 1e-6


def test_bad_arguments():
    q, k, v, cu_q, cu_k = packed(np.float32)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        fatune.attention_varlen(q, k, v, cu_q.astype(np.int64), cu_k, 23, 23)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        fatune.attention_varlen(q, k, v, cu_q, cu_k[:3], 23, 23)
    with pytest.raises(ValueError, match="q"):
        fatune.attention_varlen(q[None], k, v, cu_q, cu_k, 23, 23)
    with pytest.raises(TypeError, match="k"):
        fatune.attention_varlen(q, k.astype(np.float16), v, cu_q, cu_k, 23, 23)
    with pytest.raises(TypeError, match="causal"):
        fatune.attention_varlen(q, k, v, cu_q, cu_k, 23, 23, causal=1)
    with pytest.raises(fatune.Error, match="max_seqlen"):
        fatune.attention_varlen(q, k, v, cu_q, cu_k, 23, 10 ** 6)


def test_offsets_not_followed():
    """Decreasing offsets: nothing read out of bounds, the call says so."""
    q, k, v, cu_q, cu_k = packed(np.float32)
    bad = cu_q.copy()
    bad[2] = bad[1] - 1
    with pytest.raises(fatune.Error, match="cu_seqlens"):
        fatune.attention_varlen(q, k, v, bad, cu_k, 23, 23)


def test_torch_cpu():
    torch = pytest.importorskip("torch")
    q, k, v, cu_q, cu_k = packed(np.float32)
    o = fatune.attention_varlen(*(torch.from_numpy(x) for x in (q, k, v, cu_q, cu_k)),
                                max(LQ), max(LK), causal=True)
    ref, _ = reference(q, k, v, cu_q, cu_k, True)
    assert isinstance(o, torch.Tensor) and rel_err(o.numpy(), ref) <= TOLERANCE["float32"]


def reference_grads(q, k, v, do, cu_q, cu_k, causal, dlse=None):
    """dq, dk, dv in float64, each sequence on its own (dk, dv summed over
    the query heads of each K/V head); dlse, the gradient of a loss with
    respect to lse, adds P dlse to dS."""
    scale = 1 / math.sqrt(D)
    dq = np.zeros(q.shape, np.float64)
    dk, dv = np.zeros(k.shape, np.float64), np.zeros(v.shape, np.float64)
    for b in range(len(cu_q) - 1):
        q0, n = int(cu_q[b]), int(cu_q[b + 1] - cu_q[b])
        k0, m = int(cu_k[b]), int(cu_k[b + 1] - cu_k[b])
        if n == 0 or m == 0:
            continue
        cols = np.arange(m)[None, :]
        rows = np.arange(n)[:, None]
        seen = cols <= rows + m - n if causal else np.ones((n, m), bool)
        for h in range(H):
            g = h // (H // KVH)
            qh = q[q0:q0 + n, h].astype(np.float64)
            kh = k[k0:k0 + m, g].astype(np.float64)
            vh = v[k0:k0 + m, g].astype(np.float64)
            doh = do[q0:q0 + n, h].astype(np.float64)
            s = np.where(seen, qh @ kh.T * scale, -np.inf)
            mx = np.max(s, axis=1, keepdims=True)
            mx[~np.isfinite(mx)] = 0
            p = np.exp(s - mx)
            den = p.sum(axis=1, keepdims=True)
            p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)
            dp = doh @ vh.T
            ds = p * (dp - np.sum(p * dp, axis=1, keepdims=True))
            if dlse is not None:
                ds += p * dlse[h, q0:q0 + n, None].astype(np.float64)
            dq[q0:q0 + n, h] = scale * ds @ kh
            dk[k0:k0 + m, g] += scale * ds.T @ qh
            dv[k0:k0 + m, g] += p.T @ doh
    return dq, dk, dv


@pytest.mark.parametrize("dt,causal", [(np.float32, False), (np.float32, True),
                                       (np.float64, True), (np.float16, False)])
def test_varlen_backward(dt, causal):
    """The gradients of every sequence alone, the one of no queries (dk, dv
    0) and of no keys (dq 0) among them."""
    q, k, v, cu_q, cu_k = packed(dt, seed=1)
    o, lse = fatune.attention_varlen(q, k, v, cu_q, cu_k, max(LQ), max(LK), causal=causal,
                                     return_softmax_lse=True)
    do = np.random.default_rng(2).standard_normal(o.shape).astype(dt)
    dq, dk, dv = fatune.attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, max(LQ),
                                                  max(LK), causal=causal)
    want = reference_grads(q, k, v, do, cu_q, cu_k, causal)
    tol = 4 * TOLERANCE[np.dtype(dt).name]
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        assert got.shape == ref.shape and got.dtype == q.dtype, name
        assert np.all(np.isfinite(got)), name
        assert rel_err(got, ref) <= tol, (name, rel_err(got, ref))
    assert np.all(dq[cu_q[2]:cu_q[3]] == 0)             # sequence 2 sees no key
    assert np.all(dk[cu_k[1]:cu_k[2]] == 0) and np.all(dv[cu_k[1]:cu_k[2]] == 0)  # no query


def test_varlen_backward_bad_arguments():
    q, k, v, cu_q, cu_k = packed(np.float32)
    o, lse = fatune.attention_varlen(q, k, v, cu_q, cu_k, 23, 23, return_softmax_lse=True)
    with pytest.raises(ValueError, match="lse"):
        fatune.attention_varlen_backward(o, q, k, v, o, lse.T, cu_q, cu_k, 23, 23)
    with pytest.raises(ValueError, match="grad_o"):
        fatune.attention_varlen_backward(o[:-1], q, k, v, o, lse, cu_q, cu_k, 23, 23)
    with pytest.raises(TypeError, match="q"):
        fatune.attention_varlen_backward(o, list(q), k, v, o, lse, cu_q, cu_k, 23, 23)
    bad = cu_q.copy()
    bad[2] = bad[1] - 1
    with pytest.raises(fatune.Error, match="cu_seqlens"):
        fatune.attention_varlen_backward(o, q, k, v, o, lse, bad, cu_k, 23, 23)


@pytest.mark.parametrize("with_lse", [False, True])
def test_torch_autograd_cpu(with_lse):
    """loss.backward() through attention_varlen on CPU tensors: the
    gradients of O and, with_lse, of the logsumexp too."""
    torch = pytest.importorskip("torch")
    q, k, v, cu_q, cu_k = packed(np.float32, seed=3)
    t = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    o, lse = fatune.attention_varlen(*t, torch.from_numpy(cu_q), torch.from_numpy(cu_k),
                                     max(LQ), max(LK), causal=True, return_softmax_lse=True)
    rng = np.random.default_rng(4)
    do = rng.standard_normal(o.shape).astype(np.float32)
    dlse = rng.standard_normal(lse.shape).astype(np.float32)
    loss = (o * torch.from_numpy(do)).sum()
    if with_lse:
        finite = torch.isfinite(lse)
        dlse[~finite.numpy()] = 0
        loss = loss + (torch.where(finite, lse, torch.zeros_like(lse)) * torch.from_numpy(dlse)).sum()
    loss.backward()
    want = reference_grads(q, k, v, do, cu_q, cu_k, True, dlse if with_lse else None)
    for name, x, ref in zip(("q", "k", "v"), t, want):
        assert x.grad is not None and x.grad.shape == x.shape, name
        assert rel_err(x.grad.numpy(), ref) <= 4 * TOLERANCE["float32"], name


def reference_mod(q, k, v, do, cu_q, cu_k, left, cap):
    """O, dq, dk, dv in float64 under a window of `left` keys before each
    row's diagonal (bottom-right aligned per sequence) and a softcap of
    `cap`, each sequence on its own."""
    scale = 1 / math.sqrt(D)
    o, dq = np.zeros(q.shape, np.float64), np.zeros(q.shape, np.float64)
    dk, dv = np.zeros(k.shape, np.float64), np.zeros(v.shape, np.float64)
    for b in range(len(cu_q) - 1):
        q0, n = int(cu_q[b]), int(cu_q[b + 1] - cu_q[b])
        k0, m = int(cu_k[b]), int(cu_k[b + 1] - cu_k[b])
        if n == 0 or m == 0:
            continue
        c, r = np.arange(m)[None, :], np.arange(n)[:, None]
        seen = (c >= r + m - n - left) & (c <= r + m - n)
        for h in range(H):
            g = h // (H // KVH)
            qh, kh, vh, doh = (x.astype(np.float64) for x in
                               (q[q0:q0 + n, h], k[k0:k0 + m, g], v[k0:k0 + m, g], do[q0:q0 + n, h]))
            raw = qh @ kh.T * scale
            s = np.where(seen, cap * np.tanh(raw / cap), -np.inf)
            mx = np.max(s, axis=1, keepdims=True)
            mx[~np.isfinite(mx)] = 0
            p = np.exp(s - mx)
            den = p.sum(axis=1, keepdims=True)
            p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)
            o[q0:q0 + n, h] = p @ vh
            dp = doh @ vh.T
            ds = p * (dp - np.sum(p * dp, axis=1, keepdims=True)) * (1 - np.tanh(raw / cap) ** 2)
            dq[q0:q0 + n, h] = scale * ds @ kh
            dk[k0:k0 + m, g] += scale * ds.T @ qh
            dv[k0:k0 + m, g] += p.T @ doh
    return o, dq, dk, dv


def test_modification_forward_and_backward():
    """mod= over each sequence on its own (flash_attn_varlen_func's
    window_size and softcap, here one modification traced from Python):
    O and the gradients on NumPy arrays, and through autograd on CPU
    tensors, against reference_mod."""
    from fatune import mods
    left, cap = 6, 2.0
    mod = mods.from_functions(
        lambda s, b, h, qi, kv: cap * mods.tanh(s / cap),
        lambda b, h, qi, kv: (kv >= qi + (mods.SEQ_K - mods.SEQ_Q) - left)
        & (kv <= qi + (mods.SEQ_K - mods.SEQ_Q)), name="softcap_window")
    q, k, v, cu_q, cu_k = packed(np.float32, seed=5)
    do = np.random.default_rng(6).standard_normal(q.shape).astype(np.float32)
    want = reference_mod(q, k, v, do, cu_q, cu_k, left, cap)
    o, lse = fatune.attention_varlen(q, k, v, cu_q, cu_k, max(LQ), max(LK), mod=mod,
                                     return_softmax_lse=True)
    assert rel_err(o, want[0]) <= TOLERANCE["float32"]
    got = fatune.attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, max(LQ), max(LK),
                                           mod=mod)
    for name, g, r in zip(("dq", "dk", "dv"), got, want[1:]):
        assert rel_err(g, r) <= 4 * TOLERANCE["float32"], (name, rel_err(g, r))
    torch = pytest.importorskip("torch")
    ins = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    ot = fatune.attention_varlen(*ins, torch.from_numpy(cu_q), torch.from_numpy(cu_k), max(LQ),
                                 max(LK), mod=mod)
    ot.backward(torch.from_numpy(do))
    assert rel_err(ot.detach().numpy(), want[0]) <= TOLERANCE["float32"]
    for name, t, r in zip(("dq", "dk", "dv"), ins, want[1:]):
        assert rel_err(t.grad.numpy(), r) <= 4 * TOLERANCE["float32"], name
