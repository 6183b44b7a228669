"""fp8 (float8_e4m3fn) through fatune.attention: PyTorch CPU tensors and
ml_dtypes NumPy arrays on the emulator (at sm_90a, the one target whose
family computes fp8, whatever $FATUNE_EMU_ARCH says), CUDA tensors on an
H100 or H200. O is bfloat16, checked against the float64 reference on the
inputs as stored times their descales, by norm-relative error within 2^-4
(the tuner's bound for fp8: P is rounded to e4m3 once), the logsumexp
within bfloat16's 1e-2. Then what is refused: descales beside other
dtypes or of the wrong dtype, shape or kind, an fp8 out=, inputs that
require grad, and fp8 in the calls that take none (the backward pass,
variable-length batches, decoding). And fatune.quantize_fp8: its
scales and rounding, its rotation (which lowers the error on inputs with
outliers), the same bytes from tensors as from arrays, its refusals.
SKIPPED where PyTorch lacks float8_e4m3fn, or NumPy ml_dtypes."""
import numpy as np
import pytest

import fatune
from conftest import rel_err, reference

try:
    import torch
except ImportError:
    torch = None
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

FP8 = getattr(torch, "float8_e4m3fn", None) if torch is not None else None
has_fp8 = pytest.mark.skipif(FP8 is None, reason="PyTorch without float8_e4m3fn")
has_ml = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")
cuda = pytest.mark.skipif(FP8 is None or not torch.cuda.is_available() or
                          torch.cuda.get_device_capability() != (9, 0),
                          reason="no H100 or H200")
O_TOL, LSE_TOL = 2.0 ** -4, 1e-2


def values(shape, rng):
    """Normal values of size about 2, so that e4m3 really rounds them (its
    steps near 2 are 1/4)."""
    return rng.standard_normal(shape) * 2


def descaled(x, d, layout, group):
    """x's float64 values times its descales d ((batch, heads_kv), or None),
    each head taking its K/V head's: head h // group."""
    x = np.asarray(x, dtype=np.float64)
    if d is None:
        return x
    d = np.asarray(d, dtype=np.float64)
    hd = 1 if layout == "bhnd" else 2
    per_head = np.repeat(d, group, axis=1)          # (batch, heads)
    shape = [x.shape[0], 1, 1, 1]
    shape[hd] = x.shape[hd]
    return x * per_head.reshape(shape)


def check_against_reference(o, lse, q, k, v, ds, causal, scale, layout):
    """O (bfloat16) and lse against the float64 reference on the inputs as
    stored times their descales; the errors measured."""
    hd = 1 if layout == "bhnd" else 2
    group = q.shape[hd] // k.shape[hd]
    qd = descaled(q, ds[0], layout, group)
    kd = descaled(k, ds[1], layout, 1)
    vd = descaled(v, ds[2], layout, 1)
    ro, rl = reference(qd, kd, vd, causal=causal, scale=scale, layout=layout)
    e = rel_err(o, ro)
    assert 1e-3 < e <= O_TOL, "O's norm-relative error %.4g (P's rounding: 1e-3 to 2^-4)" % e
    if lse is not None:
        seen = np.isfinite(rl)
        le = float(np.abs(np.asarray(lse, np.float64)[seen] - rl[seen]).max())
        assert le <= LSE_TOL, "lse error %.3g" % le
        assert np.array_equal(np.isfinite(np.asarray(lse)), seen)
    return e


def torch_fp8(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(FP8)


def torch_qkv(rng, b, hq, hk, nq, nk, d, layout="bhnd"):
    shape = (lambda h, n: (b, h, n, d)) if layout == "bhnd" else (lambda h, n: (b, n, h, d))
    return (torch_fp8(values(shape(hq, nq), rng)), torch_fp8(values(shape(hk, nk), rng)),
            torch_fp8(values(shape(hk, nk), rng)))


def torch_descales(rng, b, hk, which="qkv"):
    return tuple(torch.from_numpy(rng.uniform(0.5, 2, (b, hk)).astype(np.float32))
                 if c in which else None for c in "qkv")


def stored(t):
    """A tensor's values as float64 NumPy (fp8 as stored)."""
    return t.to(torch.float64).cpu().numpy()


@has_fp8
@pytest.mark.parametrize("layout,causal", [("bhnd", True), ("bnhd", False),
                                           ("bhnd", "top_left")])
def test_torch_cpu_fp8(layout, causal):
    """GQA 4/2, seq_q != seq_k (top-left with seq_q > seq_k: two calls), all
    three descales: O bfloat16 within fp8's bound, lse float32."""
    rng = np.random.default_rng(1)
    nq, nk = (72, 40) if causal == "top_left" else (40, 72)
    q, k, v = torch_qkv(rng, 2, 4, 2, nq, nk, 64, layout)
    ds = torch_descales(rng, 2, 2)
    o, lse = fatune.attention(q, k, v, causal=causal, layout=layout, return_lse=True,
                              q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert o.shape == q.shape and o.is_contiguous()
    e = check_against_reference(o.float().numpy(), lse.numpy(), stored(q), stored(k), stored(v),
                                [d.numpy() for d in ds], causal, None, layout)
    print("torch CPU fp8 %s causal=%s: O norm-relative error %.4f" % (layout, causal, e))


@has_fp8
def test_torch_cpu_fp8_strided_some_descales_and_scale():
    """Inputs sliced out of larger tensors (strided heads and rows), only
    K's and V's descales, a scale; the variant named by fatune.plan is wg's
    fp8 kernel."""
    rng = np.random.default_rng(2)
    big = torch_fp8(values((1, 48, 2, 2, 64), rng))    # (b, n, h, two tensors, d)
    q = big[:, :40, :, 0]                                # bnhd: heads 128, rows 256 apart
    kv = torch_fp8(values((1, 60, 1, 2, 64), rng))
    k, v = kv[:, :, :, 0], kv[:, :, :, 1]                # GQA 2/1, rows 128 apart
    assert not q.is_contiguous() and not k.is_contiguous()
    ds = torch_descales(rng, 1, 1, "kv")
    o = fatune.attention(q, k, v, scale=0.3, layout="bnhd", k_descale=ds[1], v_descale=ds[2])
    assert o.dtype == torch.bfloat16
    check_against_reference(o.float().numpy(), None, stored(q), stored(k), stored(v),
                            [None, ds[1].numpy(), ds[2].numpy()], False, 0.3, "bnhd")
    assert fatune.plan(q, k, v, layout="bnhd").startswith("wg-e4m3-d64-")


@has_fp8
def test_torch_cpu_fp8_out_and_the_operator():
    """out= takes a bfloat16 tensor; the operators (what torch.compile sees)
    give the plain call's very bits, descales included; an fp8 out= is
    refused."""
    rng = np.random.default_rng(3)
    q, k, v = torch_qkv(rng, 1, 2, 2, 24, 32, 64)
    ds = torch_descales(rng, 1, 2)
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True, q_descale=ds[0],
                              k_descale=ds[1], v_descale=ds[2])
    out = torch.full(o.shape, float("nan"), dtype=torch.bfloat16)
    fatune.attention(q, k, v, causal=True, out=out, q_descale=ds[0], k_descale=ds[1],
                     v_descale=ds[2])
    assert torch.equal(out, o)
    o2, lse2 = torch.ops.fatune.attention(q, k, v, "bottom_right", None, "bhnd", None, 0.0,
                                          False, None, None, None, None, *ds)
    assert torch.equal(o2, o) and torch.equal(lse2, lse)
    out.fill_(0)
    lse3 = torch.ops.fatune.attention_out(q, k, v, out, "bottom_right", None, "bhnd", None,
                                          0.0, False, None, None, None, None, *ds)
    assert torch.equal(out, o) and torch.equal(lse3, lse)
    compiled = torch.compile(lambda a, b, c, d: fatune.attention(a, b, c, causal=True,
                                                                 v_descale=d),
                             backend="aot_eager", fullgraph=True)
    torch.compiler.reset()
    want = fatune.attention(q, k, v, causal=True, v_descale=ds[2])
    assert torch.equal(compiled(q, k, v, ds[2]), want)
    with pytest.raises(TypeError, match="^out: dtype torch.float8_e4m3fn"):
        fatune.attention(q, k, v, out=torch.empty_like(q))


@has_fp8
def test_torch_fp8_refusals():
    rng = np.random.default_rng(4)
    q, k, v = torch_qkv(rng, 1, 2, 1, 16, 16, 64)
    good = torch.ones(1, 1)
    with pytest.raises(ValueError, match="^q_descale: shape"):
        fatune.attention(q, k, v, q_descale=torch.ones(1, 2))
    with pytest.raises(TypeError, match="^k_descale: dtype torch.float64"):
        fatune.attention(q, k, v, k_descale=good.double())
    with pytest.raises(TypeError, match="^v_descale: a torch.Tensor like q"):
        fatune.attention(q, k, v, v_descale=np.ones((1, 1), np.float32))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    with pytest.raises(ValueError, match="^q_descale: descales scale float8_e4m3fn inputs only"):
        fatune.attention(qb, kb, vb, q_descale=good)
    # No backward pass: inputs that require grad are refused; without grad, fine.
    with pytest.raises(ValueError, match="^k: requires grad.*no backward pass"):
        fatune.attention(q, k.clone().requires_grad_(), v)
    with torch.no_grad():
        fatune.attention(q, k.clone().requires_grad_(), v)
    # The calls that take no fp8 say so.
    cu = torch.tensor([0, 16], dtype=torch.int32)
    packed = [x[0].transpose(0, 1).contiguous() for x in (q, k, v)]
    with pytest.raises(TypeError, match="^q: dtype float8_e4m3fn .fp8. runs through "
                                        "fatune.attention alone"):
        fatune.attention_varlen(*packed, cu, cu, 16, 16)
    kc = k.transpose(1, 2).contiguous()
    with pytest.raises(TypeError, match="runs through fatune.attention alone"):
        fatune.attention_with_kvcache(q.transpose(1, 2).contiguous(), kc, kc,
                                      torch.tensor([16], dtype=torch.int32))
    with pytest.raises(TypeError, match="runs through fatune.attention alone"):
        torch.ops.fatune.attention_backward(q, None, q, k, v, q, torch.zeros(1, 2, 16),
                                            "none", None, "bhnd", None)


@has_fp8
def test_fp8_runs_at_sm90a_whatever_the_environment(monkeypatch, tmp_path):
    """The emulator's fp8 context is opened at sm_90a by the options, over a
    FATUNE_EMU_ARCH that names a target without fp8."""
    monkeypatch.setenv("FATUNE_EMU_ARCH", "sm_80")
    rng = np.random.default_rng(5)
    q, k, v = torch_qkv(rng, 1, 1, 1, 16, 16, 64)
    o = fatune.attention(q, k, v, db=str(tmp_path / "arch.db"))
    check_against_reference(o.float().numpy(), None, stored(q), stored(k), stored(v),
                            [None] * 3, False, None, "bhnd")


@has_ml
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_numpy_fp8(layout):
    """ml_dtypes.float8_e4m3fn arrays: O in ml_dtypes.bfloat16, MQA 2/1,
    causal, descales as NumPy float32 arrays (one of them non-contiguous)."""
    rng = np.random.default_rng(6)
    f8 = ml_dtypes.float8_e4m3fn
    shape = (lambda h, n: (1, h, n, 64)) if layout == "bhnd" else (lambda h, n: (1, n, h, 64))
    q = values(shape(2, 30), rng).astype(f8)
    k, v = (values(shape(1, 50), rng).astype(f8) for _ in range(2))
    qd = rng.uniform(0.5, 2, (1, 1)).astype(np.float32)
    vd = np.asfortranarray(rng.uniform(0.5, 2, (1, 1)).astype(np.float32))
    o, lse = fatune.attention(q, k, v, causal=True, layout=layout, return_lse=True,
                              q_descale=qd, v_descale=vd)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and lse.dtype == np.float32
    e = check_against_reference(o.astype(np.float64), lse, q.astype(np.float64),
                                k.astype(np.float64), v.astype(np.float64), [qd, None, vd],
                                True, None, layout)
    print("NumPy fp8 %s: O norm-relative error %.4f" % (layout, e))
    out = np.zeros(o.shape, ml_dtypes.bfloat16)
    fatune.attention(q, k, v, causal=True, layout=layout, out=out, q_descale=qd, v_descale=vd)
    assert np.array_equal(out.view(np.uint16), o.view(np.uint16))


@has_ml
def test_numpy_fp8_refusals():
    f8 = ml_dtypes.float8_e4m3fn
    q = np.ones((1, 1, 16, 64), f8)
    with pytest.raises(ValueError, match="^out: float8_e4m3fn"):
        fatune.attention(q, q, q, out=np.zeros(q.shape, f8))
    with pytest.raises(TypeError, match="^k_descale: dtype float64"):
        fatune.attention(q, q, q, k_descale=np.ones((1, 1)))
    with pytest.raises(ValueError, match="^v_descale: shape"):
        fatune.attention(q, q, q, v_descale=np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match="^q_descale: descales scale float8_e4m3fn"):
        fatune.attention(*(np.ones((1, 1, 16, 64), np.float32),) * 3,
                         q_descale=np.ones((1, 1), np.float32))
    with pytest.raises(TypeError, match="^q: dtype float8_e5m2 is not one fatune runs"):
        e5 = np.ones((1, 1, 16, 64), ml_dtypes.float8_e5m2)
        fatune.attention(e5, e5, e5)
    with pytest.raises(TypeError, match="runs through fatune.attention alone"):
        fatune.attention_backward(np.zeros((1, 1, 16, 64), ml_dtypes.bfloat16), q, q, q,
                                  np.zeros((1, 1, 16, 64), ml_dtypes.bfloat16),
                                  np.zeros((1, 1, 16), np.float32))


def block_descaled(x, d, layout, rows):
    """x's float64 values times its descales per block of rows: d (batch,
    heads, blocks) of x's own heads, row r taking block r // rows."""
    x = np.asarray(x, dtype=np.float64)
    if d is None:
        return x
    n = x.shape[2 if layout == "bhnd" else 1]
    per_row = np.repeat(np.asarray(d, np.float64), rows, axis=2)[:, :, :n]   # (b, h, n)
    return x * (per_row[..., None] if layout == "bhnd" else per_row.transpose(0, 2, 1)[..., None])


@has_ml
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_numpy_fp8_descales_per_block(layout):
    """descale_rows=64: q's descales per block of 64 rows of each query
    head, k's and v's of each K/V head (GQA 4/2, causal, 130 queries over
    200 keys: partial last blocks), against the float64 reference on the
    stored inputs times them; quantize_fp8(block_rows=64) gives that
    shape, and a block of queries 10^5 times the rest leaves the others'
    rows where a scale per head loses them."""
    rng = np.random.default_rng(12)
    f8 = ml_dtypes.float8_e4m3fn
    shape = (lambda h, n: (1, h, n, 64)) if layout == "bhnd" else (lambda h, n: (1, n, h, 64))
    q = values(shape(4, 130), rng).astype(f8)
    k, v = (values(shape(2, 200), rng).astype(f8) for _ in range(2))
    qd = rng.uniform(0.5, 2, (1, 4, 3)).astype(np.float32)
    kd, vd = (rng.uniform(0.5, 2, (1, 2, 4)).astype(np.float32) for _ in range(2))
    o, lse = fatune.attention(q, k, v, causal=True, layout=layout, return_lse=True,
                              q_descale=qd, k_descale=kd, v_descale=vd, descale_rows=64)
    hd = 1 if layout == "bhnd" else 2
    ref_k, ref_v = (np.repeat(block_descaled(x, d, layout, 64), 2, axis=hd)
                    for x, d in ((k, kd), (v, vd)))
    ro, rl = reference(block_descaled(q, qd, layout, 64), ref_k, ref_v, causal=True,
                       layout=layout)
    e = rel_err(o.astype(np.float64), ro)
    assert 1e-3 < e <= O_TOL, e
    assert float(np.abs(lse - rl).max()) <= LSE_TOL
    print("NumPy fp8 %s, descales per 64 rows: O norm-relative error %.4f" % (layout, e))
    # The same values with the descales folded in: a descale of 1 per head.
    wrong = fatune.attention(q, k, v, causal=True, layout=layout, q_descale=qd[:, ::2, 0],
                             k_descale=kd[:, :, 0], v_descale=vd[:, :, 0])
    assert rel_err(wrong.astype(np.float64), ro) > 4 * e

    x = values((1, 2, 256, 64), rng)
    x[:, :, :64] *= 1e5
    y, z = values((1, 2, 256, 64), rng), values((1, 2, 256, 64), rng)
    want, _ = reference(x, y, z)
    errs = []
    for rows in (0, 64):
        q8, k8, v8, qd, kd, vd = fatune.quantize_fp8(x, y, z, block_rows=rows)
        assert qd.shape == ((1, 2, 4) if rows else (1, 2))
        o = fatune.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd,
                             descale_rows=rows)
        errs.append(rel_err(o.astype(np.float64)[:, :, 64:], want[:, :, 64:]))
    # against the values before any rounding: the inputs' e4m3 too
    assert errs[1] < 0.125 and errs[0] > 4 * errs[1], errs


@has_ml
def test_numpy_fp8_descales_per_block_refusals():
    f8 = ml_dtypes.float8_e4m3fn
    q = np.ones((1, 2, 100, 64), f8)
    with pytest.raises(ValueError, match="^descale_rows: 96; 0 .* or a power of two"):
        fatune.attention(q, q, q, descale_rows=96)
    with pytest.raises(TypeError, match="^descale_rows: an int"):
        fatune.attention(q, q, q, descale_rows=64.0)
    with pytest.raises(ValueError, match=r"^q_descale: shape \(1, 2\); it must be "
                                         r"\(batch, heads, ceil"):
        fatune.attention(q, q, q, q_descale=np.ones((1, 2), np.float32), descale_rows=64)
    with pytest.raises(ValueError, match="^descale_rows: not with a top-left causal mask"):
        fatune.attention(q, np.ones((1, 2, 130, 64), f8), np.ones((1, 2, 130, 64), f8),
                         causal="top_left", descale_rows=64)
    with pytest.raises(ValueError, match="^descale_rows: descales scale float8_e4m3fn"):
        fatune.attention(*(np.ones((1, 1, 16, 64), np.float32),) * 3, descale_rows=64)
    with pytest.raises(ValueError, match="^descale_rows: 32"):
        fatune.quantize_fp8(*(np.ones((1, 1, 16, 64)),) * 3, block_rows=32)


@has_fp8
def test_torch_cpu_fp8_descales_per_block():
    """The same through PyTorch CPU tensors, eagerly and through the
    operator (out=): descales per block of 128 rows, MQA 2/1."""
    rng = np.random.default_rng(13)
    q, k, v = torch_qkv(rng, 1, 2, 1, 200, 300, 64)
    qd = torch.from_numpy(rng.uniform(0.5, 2, (1, 2, 2)).astype(np.float32))
    kd, vd = (torch.from_numpy(rng.uniform(0.5, 2, (1, 1, 3)).astype(np.float32))
              for _ in range(2))
    o = fatune.attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, descale_rows=128)
    ro, _ = reference(block_descaled(stored(q), qd.numpy(), "bhnd", 128),
                      np.repeat(block_descaled(stored(k), kd.numpy(), "bhnd", 128), 2, axis=1),
                      np.repeat(block_descaled(stored(v), vd.numpy(), "bhnd", 128), 2, axis=1))
    e = rel_err(o.float().numpy(), ro)
    assert 1e-3 < e <= O_TOL, e
    out = torch.zeros(o.shape, dtype=torch.bfloat16)
    q.requires_grad_(False)
    fatune.attention(q, k, v, out=out, q_descale=qd, k_descale=kd, v_descale=vd,
                     descale_rows=128)
    assert torch.equal(out, o)
    o2, _ = torch.ops.fatune.attention(q, k, v, "none", None, "bhnd", None, 0.0, False, None,
                                       None, None, None, qd, kd, vd, 128)
    assert torch.equal(o2, o)
    with pytest.raises(ValueError, match=r"^k_descale: shape \(1, 1\); it must be"):
        fatune.attention(q, k, v, k_descale=kd[:, :, 0], descale_rows=128)


def outlier_values(shape, rng):
    """Normal values with outliers: 1% of them 10 times larger (as
    `fatune explore --axis quant` draws them, denser)."""
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.01] *= 10
    return x


@has_ml
def test_quantize_fp8_numpy():
    """GQA 4/2 in bnhd, a K/V head all zeros: one descale per (batch, K/V
    head), amax / 448 over the group's heads (1 for the zeros), float32;
    each group's largest value 448; every value within e4m3's rounding
    (half a step: 2^-4 relative, or half the smallest subnormal)."""
    rng = np.random.default_rng(7)
    q = values((2, 24, 4, 64), rng) * np.array([1, 1, 5, 5])[None, None, :, None]
    k, v = values((2, 40, 2, 64), rng), values((2, 40, 2, 64), rng)
    k[1, :, 1] = 0
    q8, k8, v8, qd, kd, vd = fatune.quantize_fp8(q, k, v, layout="bnhd")
    for x, x8, d, group in ((q, q8, qd, 2), (k, k8, kd, 1), (v, v8, vd, 1)):
        assert x8.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and x8.shape == x.shape
        assert d.dtype == np.float32 and d.shape == (2, 2)
        amax = np.abs(x).reshape(2, 40 if group == 1 else 24, 2, -1).max(axis=(1, 3))
        want = np.where(amax > 0, amax / 448, 1)
        assert np.allclose(d, want, rtol=1e-6), (d, want)
        y = x8.astype(np.float64)
        back = descaled(y, d, "bnhd", group)
        assert np.all(np.abs(back - x) <= 2.0 ** -4 * np.abs(x) + descaled(
            np.full(x.shape, 2.0 ** -10), d, "bnhd", group) * 1.0001)
        peak = np.abs(y).reshape(2, -1, 2, group * 64).max(axis=(1, 3))
        assert np.array_equal(peak, np.where(amax > 0, 448, 0))
    assert kd[1, 1] == 1 and not np.any(k8[1, :, 1].astype(np.float32))


@has_ml
def test_quantize_fp8_rotation():
    """rotate: q k^T kept (through e4m3, within its rounding), and on inputs
    with outliers attention's error against float64 on the inputs before
    rounding is lower with the rotation than without, over three seeds."""
    errs = {False: [], True: []}
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        q, k, v = (outlier_values((1, 2, 128, 64), rng) for _ in range(3))
        ro, _ = reference(q, k, v, causal=False, scale=None, layout="bhnd")
        for rot in (False, True):
            q8, k8, v8, qd, kd, vd = fatune.quantize_fp8(q, k, v, rotate=rot, seed=seed)
            if rot:
                qs = descaled(q8.astype(np.float64), qd, "bhnd", 1)
                ks = descaled(k8.astype(np.float64), kd, "bhnd", 1)
                assert rel_err(qs @ ks.transpose(0, 1, 3, 2), q @ k.transpose(0, 1, 3, 2)) < 0.1
                assert not np.allclose(qs, q, atol=0.5)   # rotated, not q itself
            o = fatune.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
            errs[rot].append(rel_err(o.astype(np.float64), ro))
    plain, rotated = np.mean(errs[False]), np.mean(errs[True])
    print("fp8 with outliers: O norm-relative error %.4f, rotated %.4f" % (plain, rotated))
    assert rotated < 0.85 * plain, errs


@has_fp8
@has_ml
def test_quantize_fp8_torch_as_numpy():
    """PyTorch tensors (float64, and bfloat16 in bhnd with GQA) give the bytes
    and descales NumPy gives for the same values, rotated or not, as tensors."""
    rng = np.random.default_rng(8)
    for dt, rot in ((torch.float64, True), (torch.bfloat16, False)):
        q, k, v = (torch.from_numpy(outlier_values(s, rng)).to(dt)
                   for s in ((2, 4, 20, 32), (2, 2, 30, 32), (2, 2, 30, 32)))
        got = fatune.quantize_fp8(q, k, v, rotate=rot, seed=3)
        want = fatune.quantize_fp8(*(x.double().numpy() for x in (q, k, v)), rotate=rot, seed=3)
        for g, w in zip(got[:3], want[:3]):
            assert g.dtype == FP8 and g.is_contiguous()
            assert np.array_equal(g.view(torch.uint8).numpy(), w.view(np.uint8))
        for g, w in zip(got[3:], want[3:]):
            assert g.dtype == torch.float32 and np.allclose(g.numpy(), w, rtol=1e-6)


@has_ml
def test_quantize_fp8_refusals():
    x = np.ones((1, 2, 16, 48))
    with pytest.raises(ValueError, match="^rotate: .* power of 2, and q's is 48"):
        fatune.quantize_fp8(x, x, x, rotate=True)
    bad = x.copy()
    bad[0, 1, 3, 5] = np.nan
    with pytest.raises(ValueError, match="^k: holds NaN or infinity"):
        fatune.quantize_fp8(x, bad, x)
    with pytest.raises(TypeError, match="^v: dtype int32"):
        fatune.quantize_fp8(x, x, x.astype(np.int32))
    with pytest.raises(ValueError, match="^layout: "):
        fatune.quantize_fp8(x, x, x, layout="nhd")
    with pytest.raises(ValueError, match="^k: 2 heads, which do not divide q's 3"):
        fatune.quantize_fp8(np.ones((1, 3, 16, 48)), x, x)
    with pytest.raises(TypeError, match="^q, k, v: three PyTorch tensors or three NumPy arrays"):
        fatune.quantize_fp8(x, x, [1.0])


@cuda
def test_cuda_fp8():
    """On an H100 or H200: CUDA float8 tensors, GQA, causal, descales, the
    bnhd layout, against the float64 reference; the same kernel's bits as
    the emulator's are not asserted (only the bound)."""
    rng = np.random.default_rng(7)
    for d in (64, 128, 256):
        q, k, v = (x.cuda() for x in torch_qkv(rng, 2, 8, 2, 300, 500, d, "bnhd"))
        ds = tuple(x.cuda() for x in torch_descales(rng, 2, 2))
        o, lse = fatune.attention(q, k, v, causal=True, layout="bnhd", return_lse=True,
                                  q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
        torch.cuda.synchronize()
        assert o.dtype == torch.bfloat16 and o.is_cuda
        e = check_against_reference(o.float().cpu().numpy(), lse.cpu().numpy(), stored(q),
                                    stored(k), stored(v), [x.cpu().numpy() for x in ds], True,
                                    None, "bnhd")
        print("CUDA fp8 d%d: O norm-relative error %.4f" % (d, e))
