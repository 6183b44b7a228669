"""fatune on PyTorch tensors: CPU tensors on the emulator (any machine with
PyTorch), CUDA tensors against scaled_dot_product_attention (a GPU); the
fatune::attention operator, its fake implementation, torch.compile.
Every test here is SKIPPED where PyTorch (or, for the CUDA ones, a GPU)
is missing."""
import warnings

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
        o, lse = torch.ops.fatune.attention(q, k, k, "bottom_right", None, "bhnd", None)
        assert o.shape == q.shape and o.dtype == q.dtype
        assert lse.shape == (2, 8, 32) and lse.dtype == torch.float32


def test_plain_call_goes_straight_to_the_library(monkeypatch):
    """Nothing to trace or watch: the operators' dispatch (more than the
    rest of a call's host cost) is skipped, with the same results, and
    with the same gradients where autograd records the call."""
    q, k, v = qkv(dtype=torch.float32, hq=4, hk=2)
    o_op, lse_op = torch.ops.fatune.attention(q, k, v, "bottom_right", None, "bhnd", None)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    og, lg = torch.ops.fatune.attention(qg, kg, vg, "bottom_right", None, "bhnd", None)
    want = torch.autograd.grad((og * o_op).sum() + lg.sum(), (qg, kg, vg))

    def refuse(*args, **kw):
        raise AssertionError("went through the operator")
    monkeypatch.setattr(fatune._torch, "attention_op", refuse)
    monkeypatch.setattr(fatune._torch, "attention_out_op", refuse)
    monkeypatch.setattr(fatune._torch, "attention_backward_op", refuse)
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
    out = torch.full_like(q, float("nan"))
    assert fatune.attention(q, k, v, causal=True, out=out) is out
    assert torch.equal(out, o_op)
    with torch.no_grad():
        assert torch.equal(fatune.attention(q.clone().requires_grad_(), k, v, causal=True), o_op)
    og, lg = fatune.attention(qg, kg, vg, causal=True, return_lse=True)
    assert og.grad_fn is not None and torch.equal(og.detach(), o_op)
    got = torch.autograd.grad((og * o_op).sum() + lg.sum(), (qg, kg, vg))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_watchers_see_the_operator():
    """A dispatch mode (as FlopCounterMode, FakeTensorMode), a function
    mode, torch.jit.trace: each sees fatune::attention, not a bare library
    call."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []

    class Dispatched(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    class Called(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = qkv(dtype=torch.float32)
    want = fatune.attention(q, k, v)
    for mode in (Dispatched, Called):
        seen.clear()
        with mode():
            assert torch.equal(fatune.attention(q, k, v), want)
        assert any("fatune.attention" in s for s in seen), (mode.__name__, seen)
    q.requires_grad_()
    o = fatune.attention(q, k, v)
    assert o.grad_fn is not None and torch.equal(o.detach(), want)
    q.requires_grad_(False)
    # torch.jit.trace: the operator is in the graph, so a traced function
    # computes on the inputs it is given, not on those it was traced with.
    with warnings.catch_warnings():  # deprecated, not gone
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(lambda a, b, c: fatune.attention(a, b, c), (q, k, v))
    assert "fatune::attention" in str(traced.graph)
    q2, k2, v2 = qkv(dtype=torch.float32, seed=1)
    assert torch.equal(traced(q2, k2, v2), fatune.attention(q2, k2, v2))


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


# ---- Defects of the PyTorch path, each with a test that failed before its fix.

def test_import_registers_the_operator():
    assert hasattr(torch.ops.fatune, "attention")
    assert hasattr(torch.ops.fatune, "attention_out")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_every_dtype_on_cpu_tensors(dtype):
    dt = getattr(torch, dtype)
    q, k, v = qkv(dtype=dt, seed=31)
    o = fatune.attention(q, k, v)
    assert isinstance(o, torch.Tensor) and o.dtype == dt
    assert rel_err(o.double().numpy(), ref(q, k, v)[0]) < TOLERANCE[dtype]


def sdpa_grads(q, k, v, g, causal, layout="bhnd"):
    """Gradients of PyTorch's scaled_dot_product_attention in float64."""
    tr = (lambda t: t) if layout == "bhnd" else (lambda t: t.transpose(1, 2))
    qs, ks, vs = (tr(x.detach()).double().requires_grad_() for x in (q, k, v))
    grp = qs.shape[1] // ks.shape[1]
    nq, nk = qs.shape[2], ks.shape[2]
    mask = None
    if causal:
        mask = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq if causal is True else 0)
    o = torch.nn.functional.scaled_dot_product_attention(
        qs, ks.repeat_interleave(grp, 1), vs.repeat_interleave(grp, 1), attn_mask=mask)
    return [tr(x) for x in torch.autograd.grad(o, (qs, ks, vs), tr(g).double())]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("causal", [False, True, "top_left"])
@pytest.mark.parametrize("heads,nq,nk", [((2, 2), 16, 24), ((4, 2), 24, 16)])
def test_backward_matches_sdpa(dtype, layout, causal, heads, nq, nk):
    q, k, v = (t.requires_grad_() for t in qkv(dtype=getattr(torch, dtype), hq=heads[0],
                                               hk=heads[1], nq=nq, nk=nk, layout=layout,
                                               seed=nq + 7 * heads[0]))
    o = fatune.attention(q, k, v, causal=causal, layout=layout)
    g = torch.randn(o.shape, generator=torch.Generator().manual_seed(5), dtype=o.dtype)
    got = torch.autograd.grad(o, (q, k, v), g)
    want = sdpa_grads(q, k, v, g, causal, layout)
    for name, x, r in zip(("dq", "dk", "dv"), got, want):
        assert x.dtype == q.dtype and x.shape == r.shape, name
        assert rel_err(x.double().numpy(), r.numpy()) < TOLERANCE[dtype], name


def test_training_step_matches_sdpa():
    """One SGD step of a small attention layer: fatune's gradients on the
    emulator against scaled_dot_product_attention's, in float64."""
    def layer(attn):
        torch.manual_seed(3)
        proj = torch.nn.Linear(16, 3 * 16, dtype=torch.float64)
        opt = torch.optim.SGD(proj.parameters(), lr=0.1)
        x = torch.randn(2, 20, 16, dtype=torch.float64)
        q, k, v = proj(x).view(2, 20, 3, 1, 16).unbind(2)   # (B, N, H, D)
        loss = attn(q, k, v).square().mean()
        loss.backward()
        opt.step()
        return loss.item(), proj.weight.detach().clone()

    fat = layer(lambda q, k, v: fatune.attention(q, k, v, causal=True, layout="bnhd"))
    ref = layer(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True))
    assert abs(fat[0] - ref[0]) < 1e-12 * abs(ref[0])
    assert rel_err(fat[1].numpy(), ref[1].numpy()) < 1e-12


def test_backward_is_deterministic():
    q, k, v = (t.requires_grad_() for t in qkv(dtype=torch.float32, nq=40, nk=40, seed=9))
    first = None
    for _ in range(3):
        grads = torch.autograd.grad(fatune.attention(q, k, v, causal=True).sum(), (q, k, v))
        if first is None:
            first = grads
        assert all(torch.equal(a, b) for a, b in zip(first, grads))


def test_backward_through_the_logsumexp():
    """A loss on O and the logsumexp: gradients as PyTorch's own autograd
    gives them for the same formula in float64."""
    q, k, v = (t.requires_grad_() for t in qkv(dtype=torch.float64, seed=13))
    o, lse = fatune.attention(q, k, v, causal=True, return_lse=True)
    got = torch.autograd.grad(o.square().sum() + (lse * torch.arange(NQ)).sum(), (q, k, v))
    s = q @ k.transpose(-1, -2) / D ** 0.5
    s = s.masked_fill(~torch.ones(NQ, NK, dtype=torch.bool).tril(NK - NQ), float("-inf"))
    want = torch.autograd.grad(
        (torch.softmax(s, -1) @ v).square().sum() + (torch.logsumexp(s, -1) *
                                                      torch.arange(NQ)).sum(), (q, k, v))
    for x, r in zip(got, want):
        assert rel_err(x.detach().numpy(), r.detach().numpy()) < TOLERANCE["float64"]
    with torch.no_grad():
        assert not fatune.attention(q, k, v).requires_grad


def test_training_step_under_torch_compile():
    q, k, v = qkv(dtype=torch.float64, seed=21)

    def step(q, k, v):
        return fatune.attention(q, k, v, causal=True).square().sum()

    torch.compiler.reset()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(compiled(*ins), ins)
    ins2 = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(step(*ins2), ins2)
    assert got is not None and all(torch.allclose(a, b) for a, b in zip(got, want))


def test_requires_grad_with_db_is_recorded_by_autograd(tmp_path):
    q, k, v = (t.requires_grad_() for t in qkv(dtype=torch.float32))
    o = fatune.attention(q, k, v, db=str(tmp_path / "x.db"))
    assert o.requires_grad


def test_requires_grad_with_out_is_refused():
    q, k, v = (t.requires_grad_() for t in qkv(dtype=torch.float32))
    with pytest.raises(ValueError, match="^out: .*autograd"):
        fatune.attention(q, k, v, out=torch.empty(q.shape))
    with torch.no_grad():
        out = torch.empty(q.shape)
        assert fatune.attention(q, k, v, out=out) is out


def op_cases():
    if torch is None:
        return []
    q, k, v = qkv(dtype=torch.float32)
    return [
        ("k", TypeError, (q, k.half(), v.half(), "none", None, "bhnd", None)),
        ("v", TypeError, (q, k, v.double(), "none", None, "bhnd", None)),
        ("layout", ValueError, (q, k, v, "none", None, "xyz", None)),
        ("q", TypeError, (q.int(), k.int(), v.int(), "none", None, "bhnd", None)),
        ("q", ValueError, (q[0], k[0], v[0], "none", None, "bhnd", None)),
        ("q", ValueError, (q[:, :, :0], k, v, "none", None, "bhnd", None)),
        ("k", ValueError, (q, k[:, :, :0], v[:, :, :0], "none", None, "bhnd", None)),
        ("causal", ValueError, (q, k, v, "sideways", None, "bhnd", None)),
        ("scale", ValueError, (q, k, v, "none", torch.tensor(float("inf")), "bhnd", None)),
        ("scale", ValueError, (q, k, v, "none", torch.tensor(1e308, dtype=torch.float64),
                               "bhnd", None)),
        ("scale", TypeError, (q, k, v, "none", torch.tensor([1.0, 2.0]), "bhnd", None)),
        ("q", ValueError, (torch.zeros(1, 1, 4, 600), torch.zeros(1, 1, 4, 600),
                           torch.zeros(1, 1, 4, 600), "none", None, "bhnd", None)),
    ]


@pytest.mark.parametrize("arg,exc,args", op_cases(),
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(op_cases())])
def test_operator_validates_its_arguments(arg, exc, args):
    with pytest.raises(exc, match="^%s: " % arg):
        torch.ops.fatune.attention(*args)


def test_operator_refuses_mixed_dtypes_with_large_inputs():
    # fp32 q with fp16 k/v once read past the end of k and v.
    q = torch.zeros(1, 1, 16, 64)
    k = torch.zeros(1, 1, 1 << 17, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match="^k: dtype"):
        torch.ops.fatune.attention(q, k, k, "none", None, "bhnd", None)


def test_public_errors_name_the_argument():
    q, k, v = qkv(dtype=torch.float32)
    with pytest.raises(TypeError, match="^q: .*sparse"):
        fatune.attention(q.to_sparse(), k, v)
    nested = torch.nested.nested_tensor([q[0], q[0]])
    with pytest.raises(TypeError, match="^q: .*nested"):
        fatune.attention(nested, k, v)
    with pytest.raises(ValueError, match="^q: head dim 600"):
        z = torch.zeros(1, 1, 4, 600)
        fatune.attention(z, z, z)


def test_output_is_contiguous_whatever_q_strides():
    q, k, v = qkv(dtype=torch.float32, seed=37)
    r = ref(q, k, v)[0]
    cases = [q.contiguous(memory_format=torch.channels_last),
             q.transpose(-1, -2).contiguous().transpose(-1, -2),
             q[:, :1].expand(q.shape)]                     # stride 0 over heads
    for i, qq in enumerate(cases):
        o = fatune.attention(qq, k, v)
        assert o.is_contiguous(), i
        rr = ref(qq, k, v)[0] if i == 2 else r
        assert rel_err(o.numpy(), rr) < TOLERANCE["float32"], i


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_out_aliasing_an_input_is_refused(which):
    q, k, v = qkv(dtype=torch.float32, nk=NQ)
    args = dict(q=q, k=k, v=v)
    with pytest.raises(ValueError, match="^out: .*%s" % which):
        fatune.attention(**args, out=args[which])
    with pytest.raises(ValueError, match="^out: .*overlap"):
        fatune.attention(q, k, v, out=torch.empty(q.shape[-1]).expand(q.shape))


def test_big_endian_numpy_through_torch_dlpack_is_not_misread():
    q, k, v = qkv(dtype=torch.float32, seed=41)
    qb = q.numpy().astype(">f4")
    o = fatune.attention(qb, k.numpy(), v.numpy())
    assert rel_err(o, ref(q, k, v)[0]) < TOLERANCE["float32"]


@pytest.mark.parametrize("nq,nk", [(8, 24), (24, 8)])
def test_causal_alignment_against_sdpa(nq, nk):
    from torch.nn.attention.bias import causal_lower_right
    q, k, v = qkv(dtype=torch.float64, nq=nq, nk=nk, seed=43)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    top = sdpa(q, k, v, is_causal=True)
    o = fatune.attention(q, k, v, causal="top_left")
    assert rel_err(o.numpy(), top.numpy()) < TOLERANCE["float64"]
    bottom = fatune.attention(q, k, v, causal=True)
    assert rel_err(bottom.numpy(), top.numpy()) > 1e-2
    assert torch.equal(bottom, fatune.attention(q, k, v, causal="bottom_right"))
    if nq <= nk:   # rows that see no key: SDPA gives NaN there, fatune 0 (as flash_attn)
        lr = sdpa(q, k, v, attn_mask=causal_lower_right(nq, nk))
        assert rel_err(bottom.numpy(), lr.numpy()) < TOLERANCE["float64"]
    else:
        assert (bottom[:, :, :nq - nk] == 0).all()


def test_reload_after_tune(tmp_path):
    db = str(tmp_path / "reload.db")
    q = torch.zeros(1, 1, 32, 16)
    before = fatune.plan(q, q, q, db=db)
    fatune.tune(dim=16, seq=32, dtype="fp32", batch=1, heads=1, backend="emu", db=db)
    best = fatune.best(dim=16, seq=32, dtype="fp32", db=db)["variant"]
    assert best != before          # else this test shows nothing
    assert fatune.plan(q, q, q, db=db) == best
    fatune.reload()
    assert fatune.plan(q, q, q, db=db) == best


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_opcheck(dtype, layout):
    q, k, v = qkv(dtype=getattr(torch, dtype), hq=4, hk=2, layout=layout, seed=47)
    for causal in ("none", "bottom_right", "top_left"):
        torch.library.opcheck(torch.ops.fatune.attention.default,
                              (q, k, v, causal, None, layout, None))
        out = torch.empty(q.shape, dtype=q.dtype)
        torch.library.opcheck(torch.ops.fatune.attention_out.default,
                              (q, k, v, out, causal, torch.tensor(0.25), layout, None))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_opcheck_autograd(dtype):
    """opcheck with inputs that require grad: the autograd registration and
    the backward operator, traced by AOT autograd."""
    q, k, v = (t.requires_grad_() for t in qkv(dtype=getattr(torch, dtype), hq=4, hk=2,
                                               seed=61))
    for causal in ("none", "bottom_right", "top_left"):
        torch.library.opcheck(torch.ops.fatune.attention.default,
                              (q, k, v, causal, torch.tensor(0.5), "bhnd", None))
    with torch.no_grad():
        o, lse = torch.ops.fatune.attention(q, k, v, "bottom_right", None, "bhnd", None)
    for dlse in (None, torch.randn_like(lse)):
        torch.library.opcheck(torch.ops.fatune.attention_backward.default,
                              (torch.randn_like(o), dlse, q.detach(), k.detach(), v.detach(),
                               o, lse, "bottom_right", None, "bhnd", None))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_backends(backend):
    q, k, v = qkv(dtype=torch.float32, seed=53)

    def layer(q, k, v):
        return fatune.attention(q, k, v, causal=True) * 2

    torch.compiler.reset()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), layer(q, k, v))


def test_torch_compile_varying_scale_and_out():
    q, k, v = qkv(dtype=torch.float32, seed=59)
    frames = []

    def counting(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    def layer(q, k, v, scale, out):
        fatune.attention(q, k, v, scale=scale, out=out)
        return out + 1

    torch.compiler.reset()
    compiled = torch.compile(layer, backend=counting, fullgraph=True)
    for s in (0.1, 0.2, 0.3, 0.4, 0.5):
        out = torch.empty(q.shape)
        got = compiled(q, k, v, s, out)
        assert rel_err(out.numpy(), ref(q, k, v, scale=s)[0]) < TOLERANCE["float32"]
        assert torch.equal(got, out + 1)
    assert len(frames) <= 2, "compiled %d times for 5 scales" % len(frames)


def test_torch_export_save_load(tmp_path):
    q, k, v = qkv(dtype=torch.float32, seed=61)

    class M(torch.nn.Module):
        def forward(self, q, k, v):
            return fatune.attention(q, k, v, causal="top_left", scale=0.3)

    ep = torch.export.export(M(), (q, k, v))
    path = tmp_path / "m.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    assert torch.equal(loaded.module()(q, k, v), M()(q, k, v))


TORCH_STUB = '''
__version__ = "2.3.1"
class Tensor:
    pass
'''


def run_python(code, tmp_path, stub=False):
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    if stub:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "__init__.py").write_text(TORCH_STUB)
        env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_without_torch_numpy_still_works(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, fatune\n"
            "q = np.ones((1, 1, 4, 8), np.float32)\n"
            "print(fatune.attention(q, q, q).shape)\n")
    r = run_python(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(1, 1, 4, 8)"


def test_too_old_torch_is_a_clear_error(tmp_path):
    code = ("import numpy as np, fatune, torch\n"
            "q = np.ones((1, 1, 4, 8), np.float32)\n"
            "print(fatune.attention(q, q, q).shape)\n"
            "try:\n"
            "    fatune.attention(torch.Tensor(), q, q)\n"
            "except TypeError as e:\n"
            "    print(e)\n")
    r = run_python(code, tmp_path, stub=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "(1, 1, 4, 8)"
    assert lines[1].startswith("q: a PyTorch tensor") and "2.3.1" in lines[1] \
        and "2.4" in lines[1], lines[1]


def test_training_example_runs():
    """examples/torch_training.py: fatune's training steps agree with SDPA's."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "torch_training.py"
    if not example.exists():
        pytest.skip("the examples are not beside this copy of the tests")
    r = subprocess.run([sys.executable, str(example), "--steps", "2"], capture_output=True,
                       text=True, env=dict(os.environ), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "largest relative difference" in r.stdout


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("dv", [8, 40])
def test_v_head_dim_apart_through_autograd(dtype, layout, dv):
    """V's head dim apart from Q's and K's (16): O of V's width and the
    gradients through autograd against scaled_dot_product_attention's in
    float64, causal with GQA."""
    q, k, _ = qkv(dtype=getattr(torch, dtype), hq=4, hk=2, layout=layout, seed=71)
    shape = (B, 2, NK, dv) if layout == "bhnd" else (B, NK, 2, dv)
    v = torch.randn(shape, generator=torch.Generator().manual_seed(72),
                    dtype=torch.float64).to(q.dtype)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o = fatune.attention(q, k, v, causal=True, layout=layout)
    assert o.shape == q.shape[:3] + (dv,) and o.dtype == q.dtype
    g = torch.randn(o.shape, generator=torch.Generator().manual_seed(73), dtype=o.dtype)
    got = torch.autograd.grad(o, (q, k, v), g)
    want = sdpa_grads(q, k, v, g, True, layout)
    for name, x, r in zip(("dq", "dk", "dv"), got, want):
        assert x.shape == r.shape, name
        assert rel_err(x.double().numpy(), r.numpy()) < TOLERANCE[dtype], name


def test_v_head_dim_apart_operator_checks():
    q, k, _ = qkv(dtype=torch.float32, seed=74)
    v = torch.randn(B, H, NK, 8)
    torch.library.opcheck(torch.ops.fatune.attention.default,
                          (q, k, v, "bottom_right", None, "bhnd", None))
    with pytest.raises(ValueError, match="^out: "):
        fatune.attention(q, k, v, out=torch.empty(q.shape))
