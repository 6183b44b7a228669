"""fatune on PyTorch tensors: CPU tensors on the emulator (any machine with
PyTorch), CUDA tensors against scaled_dot_product_attention (a GPU); the
fatune::attention operator, its fake implementation, torch.compile.
Every test here is SKIPPED where PyTorch (or, for the CUDA ones, a GPU)
is missing."""
import numpy as np
import pytest

import fatune
from conftest import TOLERANCE, rel_err, reference

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(torch is None, reason="PyTorch is not installed")]
cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                          reason="no CUDA GPU")
B, H, NQ, NK, D = 1, 2, 16, 24, 16


def qkv(device="cpu", dtype=None, hq=H, hk=H, nq=NQ, nk=NK, d=D, layout="bhnd", seed=0):
    g = torch.Generator().manual_seed(seed)

    def make(h, n):
        shape = (B, h, n, d) if layout == "bhnd" else (B, n, h, d)
        return torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)
    return make(hq, nq), make(hk, nk), make(hk, nk)


def ref(q, k, v, **kw):
    return reference(*(x.double().cpu().numpy() for x in (q, k, v)), **kw)


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_cpu_tensors_on_the_emulator(layout):
    q, k, v = qkv(dtype=torch.float32, layout=layout, hq=4, hk=2)
    o, lse = fatune.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    r, rl = ref(q, k, v, causal=True, layout=layout)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32 and o.shape == q.shape
    assert rel_err(o.numpy(), r) < TOLERANCE["float32"]
    assert rel_err(lse.numpy(), rl) < TOLERANCE["float32"]


def test_out_and_strides():
    q, k, v = qkv(dtype=torch.float32)
    q = torch.cat([q, q], dim=2)[:, :, ::2]          # strided rows
    out = torch.full((B, H, NQ, 2 * D), float("nan"))[..., :D]
    assert fatune.attention(q, k, v, out=out) is out
    assert rel_err(out.numpy(), ref(q, k, v)[0]) < TOLERANCE["float32"]


def test_operator_and_fake():
    assert hasattr(torch.ops.fatune, "attention")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 8, 32, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 2, 48, 64, dtype=torch.bfloat16)
        o, lse = torch.ops.fatune.attention(q, k, k, True, 0.0, "bhnd")
        assert o.shape == q.shape and o.dtype == q.dtype
        assert lse.shape == (2, 8, 32) and lse.dtype == torch.float32


def test_torch_compile():
    q, k, v = qkv(dtype=torch.float32)

    def layer(q, k, v):
        return fatune.attention(q, k, v) * 2

    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(q, k, v), layer(q, k, v))


def test_bad_inputs():
    q, k, v = qkv(dtype=torch.float32)
    with pytest.raises(TypeError, match="^k: "):
        fatune.attention(q, k.numpy(), v)
    with pytest.raises(TypeError, match="^q: dtype"):
        fatune.attention(q.int(), k.int(), v.int())
    with pytest.raises(TypeError, match="^q: on meta"):
        fatune.attention(q.to("meta"), k.to("meta"), v.to("meta"))
    with pytest.raises(ValueError, match="^out: "):
        fatune.attention(q, k, v, out=torch.empty(B, H, NQ, 2 * D)[..., ::2])


@cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_cuda_against_sdpa(dtype, layout):
    dt = getattr(torch, dtype)
    q, k, v = qkv("cuda", dt, hq=8, hk=2, nq=200, nk=300, d=64, layout=layout)
    o = fatune.attention(q, k, v, causal=True, layout=layout)
    r = ref(q, k, v, causal=True, layout=layout)[0]
    assert o.device == q.device and o.dtype == dt
    assert rel_err(o.float().cpu().numpy(), r) < TOLERANCE[dtype]
    t = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(1, 2))
    s = torch.nn.functional.scaled_dot_product_attention(
        t(q), t(k).repeat_interleave(4, 1), t(v).repeat_interleave(4, 1), is_causal=False,
        attn_mask=torch.ones(200, 300, dtype=torch.bool, device="cuda").tril(100))
    assert rel_err(o.float().cpu().numpy(), t(s).double().cpu().numpy()) < 2 * TOLERANCE[dtype]


@cuda
def test_cuda_current_stream_and_device():
    q, k, v = qkv("cuda", torch.bfloat16, nq=128, nk=128, d=64)
    dev = torch.cuda.current_device()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = fatune.attention(q, k, v)
    side.synchronize()
    assert torch.cuda.current_device() == dev
    assert rel_err(o.float().cpu().numpy(), ref(q, k, v)[0]) < TOLERANCE["bfloat16"]


@cuda
@pytest.mark.skipif(torch is None or torch.cuda.device_count() < 2, reason="one GPU")
def test_cuda_second_device():
    q, k, v = qkv("cuda:1", torch.float16, nq=64, nk=64, d=64)
    torch.cuda.set_device(0)
    o = fatune.attention(q, k, v)
    assert o.device == q.device and torch.cuda.current_device() == 0
    assert rel_err(o.float().cpu().numpy(), ref(q, k, v)[0]) < TOLERANCE["float16"]
