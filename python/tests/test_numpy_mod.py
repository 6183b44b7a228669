"""fatune.attention(..., mod=) on NumPy arrays, run on the emulator: each
built-in and a modification file against attention written here from the
built-in's formula in float64 (not from fatune's expression), the logsumexp
of rows a mask leaves empty, and bad modifications refused naming mod."""
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
    """Tensors that need no gradient take mod= straight to the library; those
    that do, and the traced paths, refuse it in words."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(np.float32, seed=5))
    o = fatune.attention(q, k, v, mod="window=6:1")
    ref, _ = modified(q.numpy(), k.numpy(), v.numpy(), *CASES["window=6:1"])
    assert rel_err(o.numpy(), ref) < TOLERANCE["float32"]
    with pytest.raises(ValueError, match="^mod: only on tensors that need no gradient"):
        fatune.attention(q.clone().requires_grad_(), k, v, mod="window=6:1")
    with torch.no_grad():
        og = fatune.attention(q.clone().requires_grad_(), k, v, mod="window=6:1")
    assert torch.equal(og, o)
