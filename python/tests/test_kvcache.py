"""fatune.attention_with_kvcache on NumPy arrays (the emulator) and, with
PyTorch, on CPU tensors: paged caches with pages out of order and shared,
page size 1 and others, a contiguous cache (its rows picked by
cache_batch_idx too), lengths 0 and 1, GQA, the
causal mask of the new tokens, against attention written here in float64
over keys gathered by hand; bad arguments refused naming the argument;
a page outside the pool and a length past the capacity reported; many new
tokens (prefill) through the forward pass's paged form."""
import math

import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err

B, SQ, H, KVH, D = 3, 2, 4, 2, 16
LENS = np.array([37, 0, 1], dtype=np.int32)


def paged(dt, page, seed=0):
    """q, a pool of pages in reverse order with sequence 2's first page
    sequence 0's, the table, and each sequence's keys and values by hand."""
    rng = np.random.default_rng(seed)
    pps = -(-40 // page)
    pages = B * pps
    q = rng.standard_normal((B, SQ, H, D)).astype(dt)
    kp = rng.standard_normal((pages, page, KVH, D)).astype(dt)
    vp = rng.standard_normal((pages, page, KVH, D)).astype(dt)
    table = np.arange(pages, dtype=np.int32)[::-1].reshape(B, pps).copy()
    table[2, 0] = table[0, 0]
    return q, kp, vp, table


def gather(pool, table, b, n):
    page = pool.shape[1]
    return np.stack([pool[table[b, c // page], c % page] for c in range(n)]) if n else \
        np.zeros((0,) + pool.shape[2:], pool.dtype)


def reference(q, kp, vp, table, lens, causal):
    """O (B, SQ, H, D) and lse (B, H, SQ) in float64; rows that see no key:
    zeros and -inf."""
    o = np.zeros(q.shape, np.float64)
    lse = np.full((B, H, SQ), -np.inf)
    for b in range(B):
        n = int(lens[b])
        k, v = gather(kp, table, b, n).astype(np.float64), gather(vp, table, b, n).astype(np.float64)
        for h in range(H):
            for r in range(SQ):
                seen = n if not causal else max(0, min(n, r + n - SQ + 1))
                if seen == 0:
                    continue
                s = k[:seen, h // (H // KVH)] @ q[b, r, h].astype(np.float64) / math.sqrt(D)
                m = s.max()
                p = np.exp(s - m)
                o[b, r, h] = p @ v[:seen, h // (H // KVH)] / p.sum()
                lse[b, h, r] = m + math.log(p.sum())
    return o, lse


@pytest.mark.parametrize("dt,page,causal", [(np.float32, 8, False), (np.float32, 1, True),
                                             (np.float16, 5, True), (np.float64, 16, False)])
def test_paged(dt, page, causal):
    q, kp, vp, table = paged(dt, page)
    o, lse = fatune.attention_with_kvcache(q, kp, vp, LENS, table, causal=causal,
                                           return_softmax_lse=True)
    ref, ref_lse = reference(q, kp, vp, table, LENS, causal)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert rel_err(o, ref) <= TOLERANCE[np.dtype(dt).name]
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), seen)
    assert np.max(np.abs(lse[seen] - ref_lse[seen])) <= 1e-3 * max(1.0, np.max(np.abs(ref_lse[seen])))
    assert np.all(o[1] == 0)   # the sequence of no keys


def test_contiguous():
    q, kp, vp, table = paged(np.float32, 8)
    kc = np.stack([gather(kp, table, b, 40) for b in range(B)])
    vc = np.stack([gather(vp, table, b, 40) for b in range(B)])
    o = fatune.attention_with_kvcache(q, kc, vc, LENS, causal=True)
    ident = np.arange(B, dtype=np.int32).reshape(B, 1)
    ref, _ = reference(q, kc, vc, ident, LENS, True)
    assert rel_err(o, ref) <= TOLERANCE["float32"]


def test_bad_arguments():
    q, kp, vp, table = paged(np.float32, 8)
    with pytest.raises(TypeError, match="cache_seqlens"):
        fatune.attention_with_kvcache(q, kp, vp, LENS.astype(np.int64), table)
    with pytest.raises(ValueError, match="cache_seqlens"):
        fatune.attention_with_kvcache(q, kp, vp, LENS[:2], table)
    with pytest.raises(ValueError, match="block_table"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table[:2])
    with pytest.raises(TypeError, match="k_cache"):
        fatune.attention_with_kvcache(q, kp.astype(np.float16), vp, LENS, table)
    with pytest.raises(ValueError, match="v_cache"):
        fatune.attention_with_kvcache(q, kp, vp[:, :4], LENS, table)
    with pytest.raises(ValueError, match="k_cache"):
        fatune.attention_with_kvcache(q, kp[:2], vp[:2], LENS)
    with pytest.raises(TypeError, match="causal"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, causal="yes")
    bad = table.copy()
    bad[0, 1] = 999
    with pytest.raises(fatune.Error, match="outside the pool"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, bad)
    with pytest.raises(fatune.Error, match="capacity"):
        fatune.attention_with_kvcache(q, kp, vp, np.array([41, 0, 1], np.int32), table)
    with pytest.raises(fatune.Error, match="heads"):
        fatune.attention_with_kvcache(q[:, :, :3], kp, vp, LENS, table)


def test_torch_cpu():
    torch = pytest.importorskip("torch")
    q, kp, vp, table = paged(np.float32, 4, seed=3)
    o = fatune.attention_with_kvcache(torch.from_numpy(q), torch.from_numpy(kp),
                                      torch.from_numpy(vp), torch.from_numpy(LENS),
                                      torch.from_numpy(table), causal=True)
    ref, _ = reference(q, kp, vp, table, LENS, True)
    assert isinstance(o, torch.Tensor) and rel_err(o.numpy(), ref) <= TOLERANCE["float32"]
    with pytest.raises(ValueError, match="no backward"):
        fatune.attention_with_kvcache(torch.from_numpy(q).requires_grad_(), torch.from_numpy(kp),
                                      torch.from_numpy(vp), torch.from_numpy(LENS),
                                      torch.from_numpy(table))


def test_plan_decode():
    """Planned once, run on two sets of values of the planned shapes, into
    a fixed output; a bad page reported by check(), then cleared."""
    q, kp, vp, table = paged(np.float32, 8)
    plan = fatune.plan_decode(q, kp, vp, LENS, table, causal=True)
    assert plan.variant.startswith("simtdec-f32-d16")
    out = np.empty(q.shape, q.dtype)
    for seed in (1, 2):
        q2, kp2, vp2, _ = paged(np.float32, 8, seed=seed)
        o = plan.run(q2, kp2, vp2, LENS, table, out=out)
        ref, _ = reference(q2, kp2, vp2, table, LENS, True)
        assert o is out and rel_err(o, ref) <= TOLERANCE["float32"]
    plan.check()
    bad = table.copy()
    bad[0, 1] = 10 ** 6
    plan.run(q, kp, vp, LENS, bad)
    with pytest.raises(fatune.Error, match="outside the pool"):
        plan.check()
    plan.check()   # cleared
    with pytest.raises(fatune.Error, match="plan"):
        plan.run(q[:2], kp, vp, LENS[:2], table[:2])
    with pytest.raises(ValueError, match="out"):
        plan.run(q, kp, vp, LENS, table, out=np.empty((1,), q.dtype))
    plan.close()
    with pytest.raises(ValueError, match="closed"):
        plan.run(q, kp, vp, LENS, table)


def test_new_keys_appended():
    """k= and v= go into the pages at each sequence's length, in place, and
    the attention covers them; cache_seqlens is left as it was."""
    q, kp, vp, table = paged(np.float32, 8)
    rng = np.random.default_rng(5)
    kn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    vn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    kx, vx = kp.copy(), vp.copy()
    for b in range(B):
        for j in range(SQ):
            pos = int(LENS[b]) + j
            kx[table[b, pos // 8], pos % 8] = kn[b, j]
            vx[table[b, pos // 8], pos % 8] = vn[b, j]
    lens = LENS.copy()
    o = fatune.attention_with_kvcache(q, kp, vp, lens, table, causal=True, k=kn, v=vn)
    assert np.array_equal(kp, kx) and np.array_equal(vp, vx) and np.array_equal(lens, LENS)
    ref, _ = reference(q, kx, vx, table, LENS + SQ, True)
    assert rel_err(o, ref) <= TOLERANCE["float32"]
    with pytest.raises(ValueError, match="come together"):
        fatune.attention_with_kvcache(q, kp, vp, lens, table, k=kn)
    with pytest.raises(ValueError, match="k: shape"):
        fatune.attention_with_kvcache(q, kp, vp, lens, table, k=kn[:, :1], v=vn[:, :1])
    with pytest.raises(ValueError, match="contiguous"):
        fatune.attention_with_kvcache(q, kp[::-1], vp, lens, table, k=kn, v=vn)


def test_cache_batch_idx():
    """A contiguous cache of five rows, the sequences in rows 3, 0 and 4
    (the others NaN), picked by cache_batch_idx, with new keys appended
    into those rows; an index past the cache reported; with a block table
    refused."""
    q, kp, vp, table = paged(np.float32, 8)
    rows = np.array([3, 0, 4], dtype=np.int32)
    kc = np.full((5, 40, KVH, D), np.nan, np.float32)
    vc = np.full((5, 40, KVH, D), np.nan, np.float32)
    for b in range(B):
        kc[rows[b]], vc[rows[b]] = gather(kp, table, b, 40), gather(vp, table, b, 40)
    o = fatune.attention_with_kvcache(q, kc, vc, LENS, causal=True, cache_batch_idx=rows)
    ref, _ = reference(q, kc, vc, rows.reshape(B, 1), LENS, True)
    assert rel_err(o, ref) <= TOLERANCE["float32"]
    rng = np.random.default_rng(6)
    kn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    vn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    kx, vx = kc.copy(), vc.copy()
    for b in range(B):
        kx[rows[b], LENS[b]:LENS[b] + SQ] = kn[b]
        vx[rows[b], LENS[b]:LENS[b] + SQ] = vn[b]
    o = fatune.attention_with_kvcache(q, kc, vc, LENS, causal=True, k=kn, v=vn,
                                      cache_batch_idx=rows)
    assert np.array_equal(kc, kx, equal_nan=True) and np.array_equal(vc, vx, equal_nan=True)
    ref, _ = reference(q, kx, vx, rows.reshape(B, 1), LENS + SQ, True)
    assert rel_err(o, ref) <= TOLERANCE["float32"]
    with pytest.raises(fatune.Error, match="cache_batch_idx"):
        fatune.attention_with_kvcache(q, kc, vc, LENS, cache_batch_idx=np.array([7, 0, 4],
                                                                                np.int32))
    with pytest.raises(ValueError, match="not both"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, cache_batch_idx=rows)
    with pytest.raises(ValueError, match="cache_batch_idx: shape"):
        fatune.attention_with_kvcache(q, kc, vc, LENS, cache_batch_idx=rows[:2])
    with pytest.raises(TypeError, match="cache_batch_idx"):
        fatune.attention_with_kvcache(q, kc, vc, LENS, cache_batch_idx=rows.astype(np.int64))


def rotate(x, cos, sin, pos, inter):
    """Rows x (..., D) rotated in float64 at positions pos (broadcast over
    x's leading dims but the last), as flash_attn's rotary embedding."""
    rd = 2 * cos.shape[1]
    c, s = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
    x = x.astype(np.float64)
    y = x.copy()
    a, b = (x[..., 0:rd:2], x[..., 1:rd:2]) if inter else (x[..., :rd // 2], x[..., rd // 2:rd])
    ya, yb = (a * c - b * s), (a * s + b * c)
    if inter:
        y[..., 0:rd:2], y[..., 1:rd:2] = ya, yb
    else:
        y[..., :rd // 2], y[..., rd // 2:rd] = ya, yb
    return y


@pytest.mark.parametrize("inter,causal", [(False, True), (True, False)])
def test_rotary(inter, causal):
    """rotary_cos and rotary_sin with new keys: the keys go into the cache
    rotated at their positions, the queries are rotated at theirs (all at
    the old length without causal), q itself unchanged; O against the
    float64 reference over the rotated tokens."""
    q, kp, vp, table = paged(np.float32, 8)
    rng = np.random.default_rng(7)
    kn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    vn = rng.standard_normal((B, SQ, KVH, D)).astype(np.float32)
    theta = rng.uniform(0, 2 * np.pi, (48, 6))     # rotary_dim 12 of 16
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    kx, vx = kp.copy(), vp.copy()
    qr = np.empty(q.shape, np.float64)
    for b in range(B):
        for j in range(SQ):
            pos = int(LENS[b]) + j
            kx[table[b, pos // 8], pos % 8] = rotate(kn[b, j], cos, sin, pos, inter)
            vx[table[b, pos // 8], pos % 8] = vn[b, j]
            qr[b, j] = rotate(q[b, j], cos, sin, pos if causal else int(LENS[b]), inter)
    q0, lens = q.copy(), LENS.copy()
    o = fatune.attention_with_kvcache(q, kp, vp, lens, table, causal=causal, k=kn, v=vn,
                                      rotary_cos=cos, rotary_sin=sin, rotary_interleaved=inter)
    assert np.array_equal(q, q0) and np.array_equal(lens, LENS)
    assert np.max(np.abs(kp - kx)) <= 1e-5 and np.array_equal(vp, vx)
    ref, _ = reference(qr, kx, vx, table, LENS + SQ, causal)
    assert rel_err(o, ref) <= TOLERANCE["float32"]


def test_rotary_refused():
    q, kp, vp, table = paged(np.float32, 8)
    kn = np.zeros((B, SQ, KVH, D), np.float32)
    cos = sin = np.ones((48, 4), np.float32)
    with pytest.raises(ValueError, match="come together"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, k=kn, v=kn, rotary_cos=cos)
    with pytest.raises(ValueError, match="new keys"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, rotary_cos=cos, rotary_sin=sin)
    with pytest.raises(ValueError, match="rotary_dim"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, k=kn, v=kn,
                                      rotary_cos=np.ones((48, 9), np.float32),
                                      rotary_sin=np.ones((48, 9), np.float32))
    # positions past the tables (sequence 0 has 37 keys): said after the call
    with pytest.raises(fatune.Error, match="rotary"):
        fatune.attention_with_kvcache(q, kp, vp, LENS, table, k=kn, v=kn,
                                      rotary_cos=cos[:30], rotary_sin=sin[:30])


def test_prefill():
    """Many new tokens (prefill) take the forward pass's paged form: fp16,
    pages of 16 in a shuffled order, GQA, causal, the new keys appended
    first, a sequence whose cache was empty; by a call and by a plan."""
    b, sq, h, kvh, d, page, cap = 3, 72, 4, 2, 32, 16, 176
    lens = np.array([90, 0, 40], dtype=np.int32)
    rng = np.random.default_rng(11)
    pps = cap // page
    order = rng.permutation(b * pps).astype(np.int32)
    table = order.reshape(b, pps).copy()
    q = rng.standard_normal((b, sq, h, d)).astype(np.float16)
    kp = rng.standard_normal((b * pps, page, kvh, d)).astype(np.float16)
    vp = rng.standard_normal((b * pps, page, kvh, d)).astype(np.float16)
    kn = rng.standard_normal((b, sq, kvh, d)).astype(np.float16)
    vn = rng.standard_normal((b, sq, kvh, d)).astype(np.float16)
    kx, vx = kp.copy(), vp.copy()
    for s in range(b):
        for j in range(sq):
            pos = int(lens[s]) + j
            kx[table[s, pos // page], pos % page] = kn[s, j]
            vx[table[s, pos // page], pos % page] = vn[s, j]
    ref = np.zeros(q.shape, np.float64)
    for s in range(b):
        n = int(lens[s]) + sq
        k, v = gather(kx, table, s, n).astype(np.float64), gather(vx, table, s, n).astype(np.float64)
        for hh in range(h):
            sc = q[s, :, hh].astype(np.float64) @ k[:, hh // (h // kvh)].T / math.sqrt(d)
            sc[np.arange(n)[None, :] > np.arange(sq)[:, None] + n - sq] = -np.inf
            p = np.exp(sc - sc.max(axis=1, keepdims=True))
            ref[s, :, hh] = p @ v[:, hh // (h // kvh)] / p.sum(axis=1, keepdims=True)
    for planned in (False, True):
        kc, vc, lc = kp.copy(), vp.copy(), lens.copy()
        if planned:
            plan = fatune.plan_decode(q, kc, vc, lc, table, causal=True, k=kn, v=vn)
            assert plan.variant.startswith("tc-f16-d32") and plan.variant.endswith("-paged")
            o = np.zeros_like(q)
            plan.run(q, kc, vc, lc, table, k=kn, v=vn, out=o)
            plan.check()
            plan.close()
        else:
            o = fatune.attention_with_kvcache(q, kc, vc, lc, table, causal=True, k=kn, v=vn)
        assert np.array_equal(kc, kx) and np.array_equal(vc, vx)
        assert rel_err(o, ref) <= TOLERANCE["float16"]


def test_modification():
    """mod= over a cache: a sliding window of 8 and a softcap over each
    sequence's own keys, two new tokens (the decoding kernels run them:
    tcdec in float16, simtdec in float32), by a call and by a plan."""
    b, sq, h, kvh, d, page = 2, 2, 4, 2, 32, 16
    lens = np.array([40, 5], dtype=np.int32)
    rng = np.random.default_rng(3)
    table = rng.permutation(2 * 3).astype(np.int32).reshape(b, 3)
    q = rng.standard_normal((b, sq, h, d)).astype(np.float16)
    kp = rng.standard_normal((6, page, kvh, d)).astype(np.float16)
    vp = rng.standard_normal((6, page, kvh, d)).astype(np.float16)
    for mod, left, cap in (("window=8", 8, None), ("softcap=5", None, 5.0)):
        ref = np.zeros(q.shape, np.float64)
        for s in range(b):
            n = int(lens[s])
            k, v = gather(kp, table, s, n).astype(np.float64), gather(vp, table, s, n).astype(np.float64)
            for hh in range(h):
                sc = q[s, :, hh].astype(np.float64) @ k[:, hh // (h // kvh)].T / math.sqrt(d)
                if cap:
                    sc = cap * np.tanh(sc / cap)
                diag = np.arange(sq)[:, None] + n - sq
                hide = np.arange(n)[None, :] > diag
                if left is not None:
                    hide |= np.arange(n)[None, :] < diag - left
                sc[hide] = -np.inf
                p = np.exp(sc - sc.max(axis=1, keepdims=True))
                ref[s, :, hh] = p @ v[:, hh // (h // kvh)] / p.sum(axis=1, keepdims=True)
        for dt, family in ((np.float16, "tcdec-"), (np.float32, "simtdec-")):
            x = [a.astype(dt) for a in (q, kp, vp)]
            o = fatune.attention_with_kvcache(*x, lens, table, causal=True, mod=mod)
            assert rel_err(o, ref) <= TOLERANCE[np.dtype(dt).name], (mod, dt)
            plan = fatune.plan_decode(*x, lens, table, causal=True, mod=mod)
            assert plan.variant.startswith(family) and plan.variant.endswith("-causal"), plan.variant
            o2 = plan.run(*x, lens, table)
            plan.check()
            plan.close()
            assert rel_err(o2, ref) <= TOLERANCE[np.dtype(dt).name], (mod, dt)
    with pytest.raises((TypeError, ValueError), match="mod"):
        fatune.attention_with_kvcache(q, kp, vp, lens, table, mod=3)
