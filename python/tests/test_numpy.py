"""fatune.attention on NumPy arrays, run on the emulator, against a float64
reference: every dtype, both layouts, strided and copied inputs, GQA and
MQA, causal with seq_q != seq_k, the logsumexp, out=, DLPack, bad inputs.
Shapes stay small (the emulator runs every GPU thread on the CPU), and
share a few problem keys, so that few kernels are compiled."""
import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err, reference

B, H, NQ, NK, D = 1, 2, 16, 24, 16


def dtype(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def randn(shape, dt, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


def qkv(dt, hq=H, hk=H, nq=NQ, nk=NK, layout="bhnd", seed=0):
    def shape(h, n):
        return (B, h, n, D) if layout == "bhnd" else (B, n, h, D)
    return (randn(shape(hq, nq), dt, seed), randn(shape(hk, nk), dt, seed + 1),
            randn(shape(hk, nk), dt, seed + 2))


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_dtypes_and_layouts(name, layout):
    dt = dtype(name)
    q, k, v = qkv(dt, layout=layout)
    o, lse = fatune.attention(q, k, v, layout=layout, return_lse=True)
    ref, ref_lse = reference(q, k, v, layout=layout)
    assert o.dtype == dt and o.shape == q.shape
    assert lse.dtype == (np.float64 if name == "float64" else np.float32)
    assert lse.shape == (B, H, NQ)
    assert rel_err(o, ref) < TOLERANCE[name]
    assert rel_err(lse, ref_lse) < TOLERANCE[name]


@pytest.mark.parametrize("hk", [1, 2])
def test_gqa_mqa(hk):
    q, k, v = qkv(np.float32, hq=4, hk=hk, layout="bnhd", seed=3)
    o = fatune.attention(q, k, v, layout="bnhd")
    assert rel_err(o, reference(q, k, v, layout="bnhd")[0]) < TOLERANCE["float32"]


def test_causal_seq_q_shorter():
    q, k, v = qkv(np.float32, nq=24, nk=40, seed=5)
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True)
    ref, ref_lse = reference(q, k, v, causal=True)
    assert rel_err(o, ref) < TOLERANCE["float32"]
    assert rel_err(lse, ref_lse) < TOLERANCE["float32"]
    # The mask matters here: without it the answer is another one.
    assert rel_err(o, reference(q, k, v)[0]) > 1e-2


def test_scale():
    q, k, v = qkv(np.float64, seed=7)
    o = fatune.attention(q, k, v, scale=0.5)
    assert rel_err(o, reference(q, k, v, scale=0.5)[0]) < TOLERANCE["float64"]


def test_non_contiguous():
    rng = np.random.default_rng(9)
    # q: every other row of a longer array; k: (B, N, H, D) memory seen as
    # (B, H, N, D); v: reversed along seq (negative strides: copied).
    q = rng.standard_normal((B, H, 2 * NQ, D)).astype(np.float32)[:, :, ::2]
    k = np.ascontiguousarray(rng.standard_normal((B, NK, H, D)).astype(np.float32))
    k = k.transpose(0, 2, 1, 3)
    v = rng.standard_normal((B, H, NK, D)).astype(np.float32)[:, :, ::-1]
    out = np.full((B, H, 2 * NQ, D), np.nan, np.float32)[:, :, 1::2]
    assert not (q.flags.c_contiguous or k.flags.c_contiguous or v.flags.c_contiguous)
    o = fatune.attention(q, k, v, out=out)
    assert o is out
    assert rel_err(out, reference(q, k, v)[0]) < TOLERANCE["float32"]
    assert np.isnan(out.base[:, :, ::2]).all()  # rows between untouched


def test_misaligned_fp16_stride_is_the_library_error():
    # fp16 with dim 16: the tensor-core kernel loads 16 bytes at a time.
    rng = np.random.default_rng(11)
    q = rng.standard_normal((B, H, NQ, D + 4)).astype(np.float16)[..., :D]
    k, v = qkv(np.float16)[1:]
    with pytest.raises(fatune.Error, match="q's stride 2 \\(seq\\)"):
        fatune.attention(q, k, v)


class Wrapped:
    """An array of another framework: nothing but DLPack."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack():
    q, k, v = qkv(np.float32, seed=13)
    o = fatune.attention(Wrapped(q), Wrapped(k), Wrapped(v))
    assert isinstance(o, np.ndarray)
    assert rel_err(o, reference(q, k, v)[0]) < TOLERANCE["float32"]
    # The result speaks DLPack too, and shares its memory.
    assert np.shares_memory(np.from_dlpack(o), o)
    out = np.empty_like(q)
    fatune.attention(Wrapped(q), k, v, out=Wrapped(out))
    assert np.array_equal(out, o)


class OnAnotherDevice(Wrapped):
    def __dlpack_device__(self):
        return (4, 0)  # ROCm


def test_dlpack_other_device():
    q, k, v = qkv(np.float32)
    with pytest.raises(TypeError, match="^k: a DLPack array on device type 4"):
        fatune.attention(q, OnAnotherDevice(k), v)


def test_plan_names_the_variant():
    q, k, v = qkv(np.float32)
    name = fatune.plan(q, k, v)
    assert name.startswith("simt-f32-d16")
    assert fatune.plan(q.astype(np.float16), k.astype(np.float16),
                       v.astype(np.float16)).startswith("tc-")


def bad_cases():
    q, k, v = qkv(np.float32)
    return [
        ("q", TypeError, dict(q=q.tolist())),
        ("q", TypeError, dict(q=q.astype(np.int32))),
        ("k", TypeError, dict(k=k.astype(np.float64))),
        ("q", ValueError, dict(q=q[0])),
        ("k", ValueError, dict(k=k[:, :1].repeat(3, axis=1), v=v[:, :1].repeat(3, axis=1))),
        ("k", ValueError, dict(k=k[..., :8], v=v[..., :8])),
        ("v", ValueError, dict(v=v[:, :, :5])),
        ("layout", ValueError, dict(layout="nhd")),
        ("scale", ValueError, dict(scale=-1.0)),
        ("scale", ValueError, dict(scale=float("nan"))),
        ("scale", TypeError, dict(scale="big")),
        ("out", ValueError, dict(out=np.empty((B, H, NQ + 1, D), np.float32))),
        ("out", ValueError, dict(out=np.empty((B, H, NQ, D), np.float64))),
        ("out", ValueError, dict(out=np.empty((B, H, NQ, 2 * D), np.float32)[..., ::2])),
        ("out", TypeError, dict(out=[0.0])),
    ]


@pytest.mark.parametrize("arg,exc,kw", bad_cases(),
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(bad_cases())])
def test_bad_inputs(arg, exc, kw):
    q, k, v = qkv(np.float32)
    args = dict(q=q, k=k, v=v)
    args.update(kw)
    with pytest.raises(exc, match="^%s: " % arg):
        fatune.attention(**args)


def test_read_only_out():
    q, k, v = qkv(np.float32)
    out = np.empty_like(q)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out: read-only"):
        fatune.attention(q, k, v, out=out)


def test_version_and_error():
    assert fatune.__version__ and fatune.__version__[0].isdigit()
    assert issubclass(fatune.Error, RuntimeError)


# ---- Defects of the NumPy path, each with a test that failed before its fix.

def test_big_endian_inputs_are_converted():
    q, k, v = qkv(np.float32, seed=17)
    o = fatune.attention(q.astype(">f4"), k.astype(">f4"), v.astype(">f4"))
    assert o.dtype == np.float32 and o.dtype.isnative
    assert rel_err(o, reference(q, k, v)[0]) < TOLERANCE["float32"]


def test_big_endian_out_is_refused():
    q, k, v = qkv(np.float32)
    with pytest.raises(TypeError, match="^out: .*byte order"):
        fatune.attention(q, k, v, out=np.empty(q.shape, ">f4"))


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_out_overlapping_an_input_is_refused(which):
    q, k, v = qkv(np.float32, nk=NQ)
    args = dict(q=q, k=k, v=v)
    with pytest.raises(ValueError, match="^out: .*%s" % which):
        fatune.attention(**args, out=args[which])


def test_out_overlapping_itself_is_refused():
    q, k, v = qkv(np.float32)
    base = np.zeros(B * H * NQ * D + D, np.float32)
    out = np.lib.stride_tricks.as_strided(base, q.shape, (H * NQ * 4, NQ * 4, 4, 4))
    with pytest.raises(ValueError, match="^out: .*overlap"):
        fatune.attention(q, k, v, out=out)


def odd_strided(a):
    """a's values in memory whose seq stride is two bytes more than a whole
    number of elements: rows at addresses no element size divides."""
    b, h, n, d = a.shape
    es = a.itemsize
    row = d * es + 2
    buf = np.zeros(b * h * n * row + es, np.uint8)
    view = np.lib.stride_tricks.as_strided(buf.view(a.dtype)[:1], a.shape,
                                           (h * n * row, n * row, row, es))
    view[...] = a
    assert view.strides[2] % es != 0
    return view


def test_byte_strides_not_whole_elements():
    # Inputs are copied (the library takes strides in elements); an out
    # with such strides is refused, since O must land where the caller reads.
    q, k, v = qkv(np.float32, seed=23)
    want = reference(q, k, v)[0]
    o = fatune.attention(odd_strided(q), odd_strided(k), v)
    assert rel_err(o, want) < TOLERANCE["float32"]
    with pytest.raises(ValueError, match="^out: strides .* whole elements"):
        fatune.attention(q, k, v, out=odd_strided(np.zeros_like(q)))


def test_fortran_order_and_broadcast_inputs():
    q, k, v = qkv(np.float32, seed=19)
    o = fatune.attention(np.asfortranarray(q), k, v)
    assert o.flags.c_contiguous
    assert rel_err(o, reference(q, k, v)[0]) < TOLERANCE["float32"]
    qb = np.broadcast_to(q[:, :1], q.shape)          # stride 0 over heads
    o = fatune.attention(qb, k, v)
    assert o.flags.c_contiguous and o.flags.writeable
    assert rel_err(o, reference(qb, k, v)[0]) < TOLERANCE["float32"]


def test_head_dim_out_of_range_is_a_value_error():
    q = np.zeros((1, 1, 8, 600), np.float32)
    with pytest.raises(ValueError, match="^q: head dim 600"):
        fatune.attention(q, q, q)


@pytest.mark.parametrize("name,dim", [("float16", 300), ("bfloat16", 512), ("float32", 384)])
def test_head_dims_past_256(name, dim):
    """Past head dim 256 the CUDA cores compute every dtype (fp16 and bf16
    read in 16 bits and computed in fp32), causal with more keys than
    queries, against float64."""
    dt = dtype(name)
    q, k, v = (randn((1, 2, n, dim), dt, 23 + i) for i, n in enumerate((19, 33, 33)))
    o = fatune.attention(q, k, v, causal=True)
    assert o.dtype == dt and o.shape == q.shape
    assert rel_err(o, reference(q, k, v, causal=True)[0]) < TOLERANCE[name]


@pytest.mark.parametrize("nq,nk", [(8, 24), (24, 8)])
def test_causal_alignments(nq, nk):
    q, k, v = qkv(np.float32, nq=nq, nk=nk, seed=23)
    top = reference(q, k, v, causal="top_left")[0]
    bottom = reference(q, k, v, causal=True)[0]
    assert rel_err(top, bottom) > 1e-2     # the two masks differ here
    o = fatune.attention(q, k, v, causal="top_left")
    assert rel_err(o, top) < TOLERANCE["float32"]
    for c in (True, "bottom_right"):
        assert rel_err(fatune.attention(q, k, v, causal=c), bottom) < TOLERANCE["float32"]
    with pytest.raises(ValueError, match="^causal: "):
        fatune.attention(q, k, v, causal="top")


def test_top_left_logsumexp_and_bnhd():
    q, k, v = qkv(np.float32, nq=24, nk=8, layout="bnhd", seed=29)
    o, lse = fatune.attention(q, k, v, causal="top_left", layout="bnhd", return_lse=True)
    r, rl = reference(q, k, v, causal="top_left", layout="bnhd")
    assert rel_err(o, r) < TOLERANCE["float32"] and rel_err(lse, rl) < TOLERANCE["float32"]


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name,dv", [("float32", 8), ("float64", 40), ("float16", 24),
                                     ("bfloat16", 8)])
def test_v_head_dim_apart(name, dv, layout):
    """V's head dim apart from Q's and K's (16 here, narrower and wider
    than V's): O takes V's, causal with more keys than queries and GQA,
    against float64."""
    dt = dtype(name)

    def shape(h, n, d):
        return (B, h, n, d) if layout == "bhnd" else (B, n, h, d)
    q, k, v = (randn(shape(h, n, d), dt, 31 + i)
               for i, (h, n, d) in enumerate(((4, NQ, D), (2, NK, D), (2, NK, dv))))
    o, lse = fatune.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    ref, ref_lse = reference(q, k, v, causal=True, layout=layout)
    assert o.dtype == dt and o.shape == q.shape[:3] + (dv,)
    assert rel_err(o, ref) < TOLERANCE[name]
    assert rel_err(lse, ref_lse) < TOLERANCE[name]


def test_deepseek_mla_dims():
    """DeepSeek's MLA attends over 576 (its latent and rotary parts) with
    V's 512: the largest head dims the kernels take."""
    q, k, v = (randn((1, 1, n, d), np.float32, 41 + i)
               for i, (n, d) in enumerate(((5, 576), (9, 576), (9, 512))))
    o = fatune.attention(q, k, v, causal=True)
    assert o.shape == (1, 1, 5, 512)
    assert rel_err(o, reference(q, k, v, causal=True)[0]) < TOLERANCE["float32"]


def test_v_head_dim_apart_bad_out_and_v():
    q, k, _ = qkv(np.float32)
    v = randn((B, H, NK, 8), np.float32, 3)
    with pytest.raises(ValueError, match="^out: .*v's head dim"):
        fatune.attention(q, k, v, out=np.empty(q.shape, np.float32))
    with pytest.raises(ValueError, match="^v: shape"):
        fatune.attention(q, k, randn((B, H, NK - 1, 8), np.float32, 4))
    with pytest.raises(ValueError, match="^v: head dim 600"):
        fatune.attention(q, k, np.zeros((B, H, NK, 600), np.float32))
