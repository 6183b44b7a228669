"""fatune.attention_backward on NumPy arrays, run on the emulator, against
a float64 reference backward: every dtype, both layouts, GQA and MQA (K/V
gradients summed over their query heads), both causal alignments with
seq_q != seq_k, a gradient of the logsumexp, and bad inputs."""
import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err, reference_backward
from test_numpy import dtype, qkv, randn


def grads(q, k, v, seed, causal=False, layout="bhnd", grad_lse=None):
    """fatune's forward pass, then its backward pass for a random grad_o;
    the reference's gradients beside them."""
    o, lse = fatune.attention(q, k, v, causal=causal, return_lse=True, layout=layout)
    go = randn(q.shape, q.dtype, seed)
    got = fatune.attention_backward(go, q, k, v, o, lse, causal=causal, layout=layout,
                                    grad_lse=grad_lse)
    want = reference_backward(q, k, v, go, causal=causal, layout=layout, grad_lse=grad_lse)
    return got, want


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_dtypes_and_layouts(name, layout):
    dt = dtype(name)
    q, k, v = qkv(dt, layout=layout, seed=20)
    got, want = grads(q, k, v, 23, causal=True, layout=layout)
    for g, w, like in zip(got, want, (q, k, v)):
        assert g.dtype == dt and g.shape == like.shape
        assert rel_err(g, w) < TOLERANCE[name]


@pytest.mark.parametrize("hk", [1, 2])
@pytest.mark.parametrize("causal", [False, "bottom_right", "top_left"])
def test_gqa_mqa_and_masks(hk, causal):
    # More queries than keys: under a top-left mask two library calls, whose
    # key gradients are summed.
    q, k, v = qkv(np.float64, hq=4, hk=hk, nq=24, nk=16, layout="bnhd", seed=30)
    got, want = grads(q, k, v, 31, causal=causal, layout="bnhd")
    assert got[1].shape == k.shape and got[2].shape == v.shape
    for g, w in zip(got, want):
        assert rel_err(g, w) < TOLERANCE["float64"]


def test_grad_of_the_logsumexp():
    q, k, v = qkv(np.float32, seed=40)
    gl = randn((q.shape[0], q.shape[1], q.shape[2]), np.float32, 41)
    got, want = grads(q, k, v, 42, grad_lse=gl)
    for g, w in zip(got, want):
        assert rel_err(g, w) < TOLERANCE["float32"]
    plain = reference_backward(q, k, v, randn(q.shape, q.dtype, 42))
    assert rel_err(plain[0], want[0]) > 1e-3   # the lse's gradient matters here


def test_bad_inputs():
    q, k, v = qkv(np.float32, seed=50)
    o, lse = fatune.attention(q, k, v, return_lse=True)
    go = np.ones_like(q)
    with pytest.raises(ValueError, match="lse: want a NumPy array of shape"):
        fatune.attention_backward(go, q, k, v, o, lse[:, :, :-1])
    with pytest.raises(ValueError, match="lse: want .* float32"):
        fatune.attention_backward(go, q, k, v, o, lse.astype(np.float64))
    with pytest.raises(ValueError, match="grad_o: shape"):
        fatune.attention_backward(go[:, :, :-1], q, k, v, o, lse)
    with pytest.raises(TypeError, match="out: dtype float64, but q's is float32"):
        fatune.attention_backward(go, q, k, v, o.astype(np.float64), lse)
    with pytest.raises(TypeError, match="q: a NumPy array"):
        fatune.attention_backward(go, q.tolist(), k, v, o, lse)


def test_tensors_take_autograd():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(np.float32, seed=60))
    with pytest.raises(TypeError, match="through autograd"):
        fatune.attention_backward(q, q, k, v, q, q[:, :, :, 0])


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name,dv", [("float32", 8), ("float64", 40), ("float16", 24),
                                     ("bfloat16", 40)])
def test_v_head_dim_apart(name, dv, layout):
    """V's head dim apart from Q's and K's (16): dV of V's width, dQ and
    dK of Q's, against float64, causal with GQA."""
    dt = dtype(name)

    def shape(h, n, d):
        return (1, h, n, d) if layout == "bhnd" else (1, n, h, d)
    q, k, v = (randn(shape(h, n, d), dt, 81 + i)
               for i, (h, n, d) in enumerate(((4, 16, 16), (2, 24, 16), (2, 24, dv))))
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True, layout=layout)
    go = randn(o.shape, dt, 85)
    got = fatune.attention_backward(go, q, k, v, o, lse, causal=True, layout=layout)
    want = reference_backward(q, k, v, go, causal=True, layout=layout)
    for g, w, like in zip(got, want, (q, k, v)):
        assert g.dtype == dt and g.shape == like.shape
        assert rel_err(g, w) < TOLERANCE[name]
    with pytest.raises(ValueError, match="^grad_o: "):
        fatune.attention_backward(randn(q.shape, dt, 86), q, k, v, o, lse, causal=True,
                                  layout=layout)


@pytest.mark.parametrize("name,d,dv", [("float16", 300, 300), ("bfloat16", 576, 512)])
def test_past_head_dim_256(name, d, dv):
    """Past head dim 256 the backward pass runs on CUDA cores in every
    dtype (16-bit read and written as such, computed in fp32), DeepSeek's
    576/512 among them, against float64."""
    dt = dtype(name)
    q, k, v = (randn((1, 1, n, x), dt, 91 + i)
               for i, (n, x) in enumerate(((7, d), (11, d), (11, dv))))
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True)
    go = randn(o.shape, dt, 95)
    got = fatune.attention_backward(go, q, k, v, o, lse, causal=True)
    want = reference_backward(q, k, v, go, causal=True)
    for g, w, like in zip(got, want, (q, k, v)):
        assert g.dtype == dt and g.shape == like.shape
        assert rel_err(g, w) < TOLERANCE[name]
