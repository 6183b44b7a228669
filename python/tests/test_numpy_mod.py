"""fatune.attention(..., mod=) on NumPy arrays, run on the emulator: each
built-in and a modification file against attention written here from the
built-in's formula in float64 (not from fatune's expression), the logsumexp
of rows a mask leaves empty, the backward pass under each built-in against
gradients written here from the same formulas and their derivatives (on
NumPy arrays, and through autograd on torch tensors), and bad
modifications refused naming mod."""
import math

import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err

B, H, NQ, NK, D = 1, 4, 40, 56, 16


def qkv(dt, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, n, D)).astype(dt) for n in (NQ, NK, NK))


def modified(q, k, v, sees, score):
    """O and lse with key c of row r of head h seen when sees(h, r, c), its
    score rewritten by score(h, r, c, s); rows that see nothing: 0, -inf."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
    h, r, c = np.meshgrid(np.arange(H), np.arange(NQ), np.arange(NK), indexing="ij")
    s = np.where(sees(h, r, c), score(h, r, c, s), -np.inf)
    m = s.max(-1, keepdims=True)
    empty = ~np.isfinite(m)
    p = np.exp(s - np.where(empty, 0, m))
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bhqk,bhkd->bhqd", p / np.where(empty, 1, l), v)
    lse = np.where(empty[..., 0], -np.inf, (m + np.log(np.where(empty, 1, l)))[..., 0])
    return o, lse


OFF = NK - NQ   # the bottom-right diagonal: row r's is key r + OFF
CASES = {
    "window=6:1": (lambda h, r, c: (c >= r + OFF - 6) & (c <= r + OFF + 1), lambda h, r, c, s: s),
    "softcap=2": (lambda h, r, c: c >= 0, lambda h, r, c, s: 2 * np.tanh(s / 2)),
    "alibi": (lambda h, r, c: c >= 0,
              lambda h, r, c, s: s - 2.0 ** (-8.0 * (h + 1) / H) * np.abs(r + OFF - c)),
    "prefixlm=5": (lambda h, r, c: (c < 5) | (c <= r + OFF), lambda h, r, c, s: s),
    "chunked=8": (lambda h, r, c: ((r + OFF) // 8 == c // 8) & (c <= r + OFF), lambda h, r, c, s: s),
}


# Each built-in's score's derivative by the score, from its formula.
DERIVATIVES = {
    "softcap=2": lambda s: 1 - np.tanh(s / 2) ** 2,
}


def modified_grads(q, k, v, do, spec):
    """dq, dk, dv of sum(do * O) for O as modified() gives it under CASES'
    spec: dS = P (dP - D) times the score's derivative; hidden keys and rows
    that see nothing pass nothing back."""
    sees, score = CASES[spec]
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
    h, r, c = np.meshgrid(np.arange(H), np.arange(NQ), np.arange(NK), indexing="ij")
    seen = sees(h, r, c) & np.ones(s.shape, bool)
    sm = np.where(seen, score(h, r, c, s), -np.inf)
    m = sm.max(-1, keepdims=True)
    p = np.where(seen, np.exp(sm - np.where(np.isfinite(m), m, 0)), 0)
    l = p.sum(-1, keepdims=True)
    p = p / np.where(l > 0, l, 1)
    o = np.einsum("bhqk,bhkd->bhqd", p, v)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v)
    ds = p * (dp - (do * o).sum(-1, keepdims=True)) * DERIVATIVES.get(spec, lambda x: 1)(s)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, k) / math.sqrt(D)
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) / math.sqrt(D)
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    return dq, dk, dv


@pytest.mark.parametrize("spec", sorted(CASES))
@pytest.mark.parametrize("name", ["float32", "float16"])
def test_backward(spec, name):
    """fatune.attention_backward(..., mod=spec) on the forward pass's O and
    lse under it: each gradient against modified_grads."""
    q, k, v = qkv(np.dtype(name), seed=7)
    do = np.random.default_rng(8).standard_normal(q.shape).astype(name)
    o, lse = fatune.attention(q, k, v, mod=spec, return_lse=True)
    got = fatune.attention_backward(do, q, k, v, o, lse, mod=spec)
    for g, ref, what in zip(got, modified_grads(q, k, v, do, spec), ("dq", "dk", "dv")):
        assert rel_err(g, ref) < TOLERANCE[name], (spec, what, rel_err(g, ref))


@pytest.mark.parametrize("spec", sorted(CASES))
@pytest.mark.parametrize("name", ["float32", "float16"])
def test_builtins(spec, name):
    q, k, v = qkv(np.dtype(name))
    o, lse = fatune.attention(q, k, v, mod=spec, return_lse=True)
    ref, ref_lse = modified(q, k, v, *CASES[spec])
    assert rel_err(o, ref) < TOLERANCE[name]
    assert np.allclose(lse, ref_lse, atol=1e-3 if name == "float16" else 1e-5)


def test_rows_without_a_key():
    """A window past the start of the keys leaves the first rows nothing:
    zeros and a logsumexp of -inf, never NaN."""
    q, k, v = qkv(np.float32)
    sees = lambda h, r, c: (c >= r + OFF - 60) & (c <= r + OFF - 30)
    o, lse = fatune.attention(q, k, v, mod="window=60:-30", return_lse=True)
    ref, ref_lse = modified(q, k, v, sees, lambda h, r, c, s: s)
    empty = np.isneginf(ref_lse)
    assert empty.any() and not np.isnan(o).any()
    assert np.array_equal(np.isneginf(lse), empty) and (o[empty] == 0).all()
    assert rel_err(o, ref) < TOLERANCE["float32"]


def test_file(tmp_path):
    path = tmp_path / "docs.lua"
    path.write_text("-- documents of 12 tokens\nreturn {\n  params = { { 'len', 12 } },\n"
                    "  mask = 'q_idx / len == kv_idx / len',\n"
                    "  score = 'score - 0.1 * float(abs(q_idx - kv_idx))',\n}\n")
    q, k, v = qkv(np.float32, seed=3)
    o = fatune.attention(q, k, v, mod=path)
    ref, _ = modified(q, k, v, lambda h, r, c: r // 12 == c // 12,
                      lambda h, r, c, s: s - 0.1 * np.abs(r - c))
    assert rel_err(o, ref) < TOLERANCE["float32"]


def test_bad(tmp_path):
    q, k, v = qkv(np.float32)
    with pytest.raises(TypeError, match="^mod: "):
        fatune.attention(q, k, v, mod=3)
    with pytest.raises(ValueError, match="^mod: .*none.lua: No such file"):
        fatune.attention(q, k, v, mod=str(tmp_path / "none.lua"))
    with pytest.raises(fatune.Error, match="unknown modification 'nope'"):
        fatune.attention(q, k, v, mod="nope")
    bad = tmp_path / "bad.lua"
    bad.write_text("return {\n  mask = 'q_idx <',\n}\n")
    with pytest.raises(fatune.Error, match=r"bad.lua:2: mask: unexpected 'end of text'"):
        fatune.attention(q, k, v, mod=bad)
    with pytest.raises(ValueError, match="^mod: not with a top-left"):
        fatune.attention(q, k, v, causal="top_left", mod="window=4")


def test_torch_tensors():
    """Tensors that need no gradient take mod= straight to the library;
    those that do get their gradients under it through autograd; out= under
    autograd is refused as without a modification."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(np.float32, seed=5))
    o = fatune.attention(q, k, v, mod="window=6:1")
    ref, _ = modified(q.numpy(), k.numpy(), v.numpy(), *CASES["window=6:1"])
    assert rel_err(o.numpy(), ref) < TOLERANCE["float32"]
    with torch.no_grad():
        og = fatune.attention(q.clone().requires_grad_(), k, v, mod="window=6:1")
    assert torch.equal(og, o)
    do = torch.from_numpy(np.random.default_rng(6).standard_normal(q.shape).astype(np.float32))
    for spec in ("window=6:1", "softcap=2"):
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        fatune.attention(qg, kg, vg, mod=spec).backward(do)
        refs = modified_grads(q.numpy(), k.numpy(), v.numpy(), do.numpy(), spec)
        for t, r in zip((qg, kg, vg), refs):
            assert rel_err(t.grad.numpy(), r) < TOLERANCE["float32"], spec
    with pytest.raises(ValueError, match="^out: .*autograd"):
        fatune.attention(q.clone().requires_grad_(), k, v, out=torch.empty_like(q),
                         mod="window=6:1")


def test_torch_operators():
    """The operators take a modification (mod_spec, and a file's mod_text):
    under torch.compile, forward and backward, as eagerly; opcheck's
    checks of the operator and its autograd; a file's; refusals in words."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(np.float32, seed=9))
    do = torch.from_numpy(np.random.default_rng(10).standard_normal(q.shape).astype(np.float32))

    def step(q, k, v):
        return (fatune.attention(q, k, v, mod="softcap=2") * do).sum()

    torch.compiler.reset()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(compiled(*ins), ins)
    refs = modified_grads(q.numpy(), k.numpy(), v.numpy(), do.numpy(), "softcap=2")
    for g, r in zip(got, refs):
        assert rel_err(g.numpy(), r) < TOLERANCE["float32"]
    o, _ = torch.ops.fatune.attention(q, k, v, "none", None, "bhnd", None, 0.0, False,
                                      "window=6:1", None)
    ref, _ = modified(q.numpy(), k.numpy(), v.numpy(), *CASES["window=6:1"])
    assert rel_err(o.numpy(), ref) < TOLERANCE["float32"]
    text = "return { mask = 'kv_idx >= q_idx + (seq_k - seq_q - 6) && kv_idx <= q_idx + (seq_k - seq_q + 1)' }"
    o2, _ = torch.ops.fatune.attention(q, k, v, "none", None, "bhnd", None, 0.0, False,
                                       "mine.lua", text)
    assert rel_err(o2.numpy(), ref) < TOLERANCE["float32"]
    qg = q.clone().requires_grad_()
    torch.library.opcheck(torch.ops.fatune.attention.default,
                          (qg, k, v, "bottom_right", None, "bhnd", None, 0.0, False,
                           "window=6:1", None))
    with pytest.raises(ValueError, match="^mod: not with a top-left"):
        torch.ops.fatune.attention(q, k, v, "top_left", None, "bhnd", None, 0.0, False,
                                   "window=6:1", None)
    with pytest.raises(ValueError, match="^mod_text, mod_tensors: without mod_spec"):
        torch.ops.fatune.attention(q, k, v, "none", None, "bhnd", None, 0.0, False, None,
                                   text)
