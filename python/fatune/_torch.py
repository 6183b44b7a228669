"""PyTorch tensors: CUDA tensors on their GPU and current stream, CPU
tensors on the emulator; the operators fatune::attention,
fatune::attention_out and fatune::attention_backward, with fake
implementations for torch.compile and torch.export, and fatune::attention's
autograd formula, which runs fatune's backward pass. Every argument is
checked here, before anything reaches C: the operators are public, and a
wrong dtype once read past k's end."""
from typing import Any, List, Optional, Tuple

import torch

from . import _check, _lib

if not hasattr(getattr(torch, "library", None), "custom_op"):
    raise ImportError("PyTorch %s is too old: fatune needs 2.4 or later "
                      "(torch.library.custom_op)" % getattr(torch, "__version__", "?"))

# What says a call is watched by something that must see the operators:
# a dispatch mode (FakeTensorMode, FlopCounterMode), a function mode, a
# functorch transform (vmap, grad), torch.jit.trace. Private to PyTorch; where one is
# missing, every call goes through the operators.
try:
    _dispatch_modes = torch._C._len_torch_dispatch_stack
    _function_mode = torch._C._is_torch_function_mode_enabled
    _transforms = torch._C._functorch.peek_interpreter_stack
    _jit_tracing = torch._C._get_tracing_state
except AttributeError:
    _dispatch_modes = None

_CODES = {torch.float32: _lib.FP32, torch.float64: _lib.FP64, torch.float16: _lib.FP16,
          torch.bfloat16: _lib.BF16}
# fp8 (e4m3), where this PyTorch has it: the forward pass alone (fatune.attention),
# O in bfloat16. _CODES stays the dtypes every call takes.
FP8 = getattr(torch, "float8_e4m3fn", None)
_FWD_CODES = dict(_CODES)
if FP8 is not None:
    _FWD_CODES[FP8] = _lib.E4M3


def _out_dtype(q: torch.Tensor) -> torch.dtype:
    """O's dtype: q's, bfloat16 beside float8_e4m3fn."""
    return torch.bfloat16 if q.dtype == FP8 else q.dtype


def _usable(t: torch.Tensor) -> bool:
    return t.shape[-1] == 1 or t.stride(-1) == 1


def _fields(t: torch.Tensor, code: int, layout: str) -> List[int]:
    """The tensor's fields for _lib.pack_args: data, dtype, shape, strides."""
    b, x, y, d = t.shape
    sb, sx, sy, sd = t.stride()
    if layout == "bnhd":
        x, y, sx, sy = y, x, sy, sx
    return [t.data_ptr(), code, b, x, y, d, sb, sx, sy, sd]


def lse_shape(q: torch.Tensor, layout: str) -> Tuple[int, int, int]:
    if layout == "bhnd":
        return (q.shape[0], q.shape[1], q.shape[2])
    return (q.shape[0], q.shape[2], q.shape[1])


def _lse_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _new_lse(q: torch.Tensor, layout: str) -> torch.Tensor:
    return torch.empty(lse_shape(q, layout), dtype=_lse_dtype(q), device=q.device)


def _new_out(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """O contiguous in the caller's layout, whatever q's strides: q's shape
    with v's head dim (bfloat16 for float8_e4m3fn)."""
    return torch.empty(q.shape[:3] + v.shape[3:], dtype=_out_dtype(q), device=q.device)


def _tensor(name: str, t: Any, q: Optional[torch.Tensor]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: a torch.Tensor%s, not %s" % (name, " like q" if q is not None
                                                          else "", type(t).__name__))
    if t.is_nested:
        raise TypeError("%s: a nested tensor; fatune takes dense ones (pad the sequences, "
                        "or run each on its own)" % name)
    if t.layout != torch.strided:
        raise TypeError("%s: a sparse tensor (%s); fatune takes dense (strided) ones"
                        % (name, t.layout))
    if q is None:
        if t.dtype not in _FWD_CODES:
            raise TypeError(_check.dtype_refused("q", t.dtype, FP8 is not None))
        if t.device.type not in ("cuda", "cpu"):
            raise TypeError("q: on %s; fatune runs CUDA tensors, and CPU ones on its "
                            "emulator" % t.device)
        return
    want = _out_dtype(q) if name == "out" else q.dtype
    if t.dtype != want:
        if want != q.dtype:   # fp8's O
            raise TypeError("%s: dtype %s, but O of q's %s is %s" % (name, t.dtype, q.dtype,
                                                                     want))
        raise TypeError("%s: dtype %s, but q's is %s" % (name, t.dtype, q.dtype))
    if t.device != q.device:
        raise ValueError("%s: on %s, but q is on %s" % (name, t.device, q.device))


def _symbolic(x: Any) -> bool:
    return isinstance(x, (torch.SymFloat, torch.SymInt))


def check(q: Any, k: Any, v: Any, out: Any, causal: Any, layout: Any, real: bool = True
          ) -> str:
    """Everything the kernels need of the tensors, the mask and the layout,
    or a TypeError or ValueError naming the argument that is wrong; the
    mask's name. Where the tensors are not real (fake ones, or traced by
    torch.compile) their memory is not looked at: the operator looks when
    it runs."""
    _check.layout(layout)
    mask = _check.causal(causal)
    _tensor("q", q, None)
    _tensor("k", k, q)
    _tensor("v", v, q)
    if real or not any(_symbolic(n) for n in (*q.shape, *k.shape)):
        _check.shapes(q.shape, k.shape, v.shape, layout)
    if out is not None:
        _check_out(q, k, v, out, real)
    return mask


def _check_out(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: Any, real: bool
               ) -> None:
    _tensor("out", out, q)
    if out.shape != q.shape[:3] + v.shape[3:]:
        raise ValueError("out: shape %s, but q's is %s and v's head dim %s (out is q's "
                         "shape with v's head dim)" % (tuple(out.shape), tuple(q.shape),
                                                       v.shape[3]))
    if not _usable(out):
        raise ValueError("out: stride %d along the head dim; it must be 1" % out.stride(-1))
    if out.requires_grad:
        raise ValueError("out: requires grad; fatune writes out= without autograd")
    if not real:
        return
    if not _check.no_self_overlap(out.shape, out.stride()):
        raise ValueError("out: strides %s make its elements overlap" % (out.stride(),))
    mine = _check.extent(out.data_ptr(), out.shape, out.stride(), out.element_size())
    _check.overlaps(mine, [(n, _check.extent(t.data_ptr(), t.shape, t.stride(),
                                             t.element_size()))
                           for n, t in (("q", q), ("k", k), ("v", v))])


def _context(q: torch.Tensor, db: Optional[str]) -> Tuple[int, int]:
    """The library's context for q's device and its stream: a CUDA tensor's
    GPU and current stream, or the emulator (at sm_90a for fp8)."""
    if q.is_cuda:
        return (_lib.context("cuda", q.device.index if q.device.index is not None
                             else torch.cuda.current_device(), db),
                torch.cuda.current_stream(q.device).cuda_stream)
    return _lib.context("emu", 0, db, _lib.FP8_EMU_ARCH if q.dtype == FP8 else None), 0


Descales = Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]
_NO_DESCALES: Descales = (None, None, None)


def descales(q: torch.Tensor, k: torch.Tensor, layout: str, given: Any, real: bool = True,
             rows: int = 0) -> Descales:
    """fp8's descales checked: each None, or a float32 tensor of its shape
    (_check.descale_shapes': (batch, heads_kv), or per block of rows) on
    q's device (made contiguous); TypeError or ValueError naming it. Given
    beside inputs that are not fp8: ValueError."""
    rows = _check.descale_rows(rows)
    if rows and q.dtype != FP8:
        raise ValueError("descale_rows: descales scale float8_e4m3fn inputs only, and q is %s"
                         % str(q.dtype).replace("torch.", ""))
    if all(x is None for x in given):
        return _NO_DESCALES
    if q.dtype != FP8:
        _check.no_descales(given, q.dtype)
    symbolic = any(_symbolic(n) for n in (*q.shape, *k.shape))
    want = None if symbolic else _check.descale_shapes(q.shape, k.shape, layout, rows)
    out = []
    for i, (name, x) in enumerate(zip(_check.DESCALES, given)):
        if x is None:
            out.append(None)
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError("%s: a float32 torch.Tensor %s, not %s"
                            % (name, _check.descale_text(rows), type(x).__name__))
        if x.dtype != torch.float32:
            raise TypeError("%s: dtype %s; descales are float32, as FlashAttention-3's"
                            % (name, x.dtype))
        if x.device != q.device:
            raise ValueError("%s: on %s, but q is on %s" % (name, x.device, q.device))
        if x.requires_grad and torch.is_grad_enabled():
            raise ValueError("%s: requires grad; fp8 attention has no backward pass" % name)
        if want is not None and tuple(x.shape) != tuple(want[i]):
            raise ValueError("%s: shape %s; it must be %s = %s"
                             % (name, tuple(x.shape), _check.descale_text(rows), tuple(want[i])))
        out.append(x if not real or x.is_contiguous() else x.contiguous())
    return (out[0], out[1], out[2])


def _no_fp8_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """fp8 has no backward pass: inputs that require grad, with grad
    enabled, are a ValueError naming the first."""
    if q.dtype == FP8 and torch.is_grad_enabled():
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.requires_grad:
                raise ValueError("%s: requires grad, but fatune's fp8 (float8_e4m3fn) attention "
                                 "has no backward pass, as FlashAttention-3's; call it under "
                                 "torch.no_grad() or on tensors that do not require grad" % name)


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: Optional[torch.Tensor], mask: str, scale: float, layout: str,
        db: Optional[str] = None, plan: bool = False,
        budget: Tuple[float, bool] = (0.0, False),
        mod: _lib.Mod = None, ds: Descales = _NO_DESCALES, descale_rows: int = 0) -> str:
    """out (and lse) for q, k, v; every argument already checked; budget the
    library's error budget (max_rel_err, deterministic); mod a modification
    as _check.mod gives it; ds fp8's descales, as descales gives them. With
    plan, the variant's name, and nothing launched."""
    code = _FWD_CODES[q.dtype]
    ocode = _lib.BF16 if code == _lib.E4M3 else code
    addr = tuple(t.data_ptr() if t is not None else 0 for t in ds)
    # Strides the kernels cannot take (a strided head dim): a copy, made on
    # the stream the kernel runs on, so it lives as long as the kernel needs.
    q, k, v = (t if _usable(t) else t.contiguous() for t in (q, k, v))
    ctx, stream = _context(q, db)
    with _lib.modification(ctx, mod) as handle:
        sd = 2 if layout == "bhnd" else 1
        nq, nk = q.shape[sd], k.shape[sd]
        segs = _check.segments(nq, nk, mask)
        _check.descale_segments(descale_rows, segs, nk)
        names = []
        for lo, hi, rows, causal in segs:
            whole = len(segs) == 1 and hi - lo == nq
            part_lse = lse if whole or lse is None else \
                torch.empty(lse.shape[:2] + (hi - lo,), dtype=lse.dtype, device=lse.device)
            qs, os_ = (q, out) if whole else (q.narrow(sd, lo, hi - lo),
                                              out.narrow(sd, lo, hi - lo))
            ks, vs = (k, v) if rows == nk else (k.narrow(sd, 0, rows), v.narrow(sd, 0, rows))
            args = _lib.pack_args(*_fields(qs, code, layout), *_fields(ks, code, layout),
                                  *_fields(vs, code, layout), *_fields(os_, ocode, layout),
                                  part_lse.data_ptr() if part_lse is not None else 0,
                                  1 if causal else 0, scale, stream,
                                  max_rel_err=budget[0], deterministic=budget[1], mod=handle,
                                  descales=addr, descale_rows=descale_rows)
            names.append(_lib.call(ctx, args, plan))
            if part_lse is not lse:
                lse[:, :, lo:hi] = part_lse
        return " + ".join(names)


def _op_scale(scale: Optional[torch.Tensor], real: bool = True) -> float:
    """The operators' scale, a CPU tensor of one float (a tensor, so that
    torch.compile need not specialize a graph on its value), as the library
    takes it: 0.0 for None, 1/sqrt(dim)."""
    if scale is None:
        return 0.0
    if not isinstance(scale, torch.Tensor) or scale.numel() != 1 or \
            not scale.is_floating_point():
        raise TypeError("scale: a tensor of one float, or None for 1/sqrt(dim)")
    if scale.device.type != "cpu":
        raise ValueError("scale: on %s; it must be a CPU tensor (reading it would wait for "
                         "the device)" % scale.device)
    return _check.scale(scale.item()) if real else 0.0


def _op_budget(max_rel_err: float, deterministic: bool) -> Tuple[float, bool]:
    """The operators' error budget, 0.0 and False for none, as the library
    takes it."""
    return _check.budget(max_rel_err if max_rel_err != 0.0 else None, deterministic)


def _op_mod(mod_spec: Optional[str], mod_text: Optional[str], mask: str,
            mod_names: Optional[str] = None, mod_tensors: Optional[List[torch.Tensor]] = None
            ) -> _lib.Mod:
    """The operators' modification: a built-in's spec (mod_text None), or a
    file's name and text, with its captured tensors (mod_names, comma
    separated, naming mod_tensors), as _check.mod gives them; None for
    none. Not with a top-left causal mask."""
    names = mod_names.split(",") if mod_names else []
    tensors = list(mod_tensors) if mod_tensors is not None else []
    if len(names) != len(tensors):
        raise ValueError("mod_names: %d names for %d mod_tensors" % (len(names), len(tensors)))
    if mod_spec is None:
        if mod_text is not None or tensors:
            raise ValueError("mod_text, mod_tensors: without mod_spec (the modification)")
        return None
    if mask == _check.TOP_LEFT:
        raise ValueError("mod: not with a top-left causal mask (write it into the "
                         "modification's mask instead)")
    return (mod_spec, mod_text, tuple(zip(names, tensors)))


def _op_mod_args(mod: _lib.Mod) -> Tuple[Any, ...]:
    """The operators' four modification arguments for mod (_check.mod's)."""
    if mod is None:
        return (None, None, None, None)
    pairs = [(n, t if isinstance(t, torch.Tensor) else torch.as_tensor(t)) for n, t in mod[2]]
    return (mod[0], mod[1], ",".join(n for n, _ in pairs) or None,
            [t for _, t in pairs] or None)


@torch.library.custom_op("fatune::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: str,
                 scale: Optional[torch.Tensor], layout: str, db: Optional[str],
                 max_rel_err: float = 0.0, deterministic: bool = False,
                 mod_spec: Optional[str] = None, mod_text: Optional[str] = None,
                 mod_names: Optional[str] = None, mod_tensors: Optional[List[torch.Tensor]] = None,
                 q_descale: Optional[torch.Tensor] = None,
                 k_descale: Optional[torch.Tensor] = None,
                 v_descale: Optional[torch.Tensor] = None, descale_rows: int = 0
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """O (contiguous, q's shape and dtype; bfloat16 for float8_e4m3fn) and the
    logsumexp ([batch][heads][seq_q], fp32; fp64 for fp64). causal: 'none',
    'bottom_right' or 'top_left';
    scale: a CPU tensor of one float, None for 1/sqrt(dim); db: the results
    database, None for the default; max_rel_err (0.0: none) and
    deterministic: the error budget of fatune.attention, which the
    backward pass keeps too; mod_spec and mod_text: a score or mask
    modification, a built-in's spec ("window=256") or a file's name and
    text, which the backward pass takes too; q_descale, k_descale,
    v_descale: fp8's descales, float32 (batch, heads_kv) or None, or per
    block of descale_rows rows (fatune.attention's)."""
    mask = check(q, k, v, None, causal, layout)
    budget = _op_budget(max_rel_err, deterministic)
    mod = _op_mod(mod_spec, mod_text, mask, mod_names, mod_tensors)
    ds = descales(q, k, layout, (q_descale, k_descale, v_descale), rows=descale_rows)
    out, lse = _new_out(q, v), _new_lse(q, layout)
    run(q, k, v, out, lse, mask, _op_scale(scale), layout, db, budget=budget, mod=mod, ds=ds,
        descale_rows=descale_rows)
    return out, lse


@attention_op.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: str,
                    scale: Optional[torch.Tensor], layout: str, db: Optional[str],
                    max_rel_err: float = 0.0, deterministic: bool = False,
                    mod_spec: Optional[str] = None, mod_text: Optional[str] = None,
                    mod_names: Optional[str] = None,
                    mod_tensors: Optional[List[torch.Tensor]] = None,
                    q_descale: Optional[torch.Tensor] = None,
                    k_descale: Optional[torch.Tensor] = None,
                    v_descale: Optional[torch.Tensor] = None, descale_rows: int = 0
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    _op_mod(mod_spec, mod_text, check(q, k, v, None, causal, layout, real=False),
            mod_names, mod_tensors)
    _op_scale(scale, real=False)
    _op_budget(max_rel_err, deterministic)
    descales(q, k, layout, (q_descale, k_descale, v_descale), real=False, rows=descale_rows)
    return _new_out(q, v), _new_lse(q, layout)


def run_backward(grad_o: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                 mask: str, scale: float, layout: str, db: Optional[str],
                 budget: Tuple[float, bool] = (0.0, False),
                 mod: _lib.Mod = None
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (contiguous, shaped as q, k, v) from the forward pass's out
    and lse, and the gradients of out and (when not None) of lse; one
    library call per segment of the mask (run's), the key gradients of
    several summed. Under grouped-query attention the library sums each K/V
    head's gradients over its query heads. mod: the forward pass's
    modification, as run takes it."""
    code = _CODES[q.dtype]
    q, k, v, out, grad_o = (t if _usable(t) else t.contiguous() for t in (q, k, v, out, grad_o))
    ctx, stream = _context(q, db)
    with _lib.modification(ctx, mod) as handle:
        sd = 2 if layout == "bhnd" else 1
        nq, nk = q.shape[sd], k.shape[sd]
        segs = _check.segments(nq, nk, mask)
        whole = len(segs) == 1 and segs[0][2] == nk
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=q.dtype, device=q.device) if whole else torch.zeros_like(k)
        dv = torch.empty(v.shape, dtype=q.dtype, device=q.device) if whole else torch.zeros_like(v)
        lse = lse.contiguous()
        grad_lse = grad_lse.contiguous() if grad_lse is not None else None
        for lo, hi, rows, causal in segs:
            part = lambda t: t if hi - lo == nq else t.narrow(sd, lo, hi - lo)  # noqa: E731
            keys = lambda t: t if rows == nk else t.narrow(sd, 0, rows)  # noqa: E731
            part_lse = lse if hi - lo == nq else lse[:, :, lo:hi].contiguous()
            part_dlse = grad_lse if grad_lse is None or hi - lo == nq else \
                grad_lse[:, :, lo:hi].contiguous()
            pdk = dk if whole else torch.empty(keys(k).shape, dtype=q.dtype, device=q.device)
            pdv = dv if whole else torch.empty(keys(v).shape, dtype=q.dtype, device=q.device)
            args = _lib.pack_backward_args(
                *_fields(part(q), code, layout), *_fields(keys(k), code, layout),
                *_fields(keys(v), code, layout), *_fields(part(out), code, layout),
                *_fields(part(grad_o), code, layout), *_fields(part(dq), code, layout),
                *_fields(pdk, code, layout), *_fields(pdv, code, layout),
                part_lse.data_ptr(), 1 if causal else 0, scale, stream,
                part_dlse.data_ptr() if part_dlse is not None else 0,
                max_rel_err=budget[0], deterministic=budget[1], mod=handle)
            _lib.call_backward(ctx, args)
            if not whole:
                keys(dk).add_(pdk)
                keys(dv).add_(pdv)
        return dq, dk, dv


@torch.library.custom_op("fatune::attention_backward", mutates_args=())
def attention_backward_op(grad_o: torch.Tensor, grad_lse: Optional[torch.Tensor],
                          q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                          lse: torch.Tensor, causal: str, scale: Optional[torch.Tensor],
                          layout: str, db: Optional[str], max_rel_err: float = 0.0,
                          deterministic: bool = False, mod_spec: Optional[str] = None,
                          mod_text: Optional[str] = None, mod_names: Optional[str] = None,
                          mod_tensors: Optional[List[torch.Tensor]] = None
                          ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of fatune::attention: grad_o the gradient of its output,
    grad_lse of its logsumexp (None: zero), out and lse what it returned for
    q, k, v, causal, scale and modification; the backward variant within
    the error budget, as fatune::attention's. No fp8: it has no backward pass."""
    if q.dtype == FP8:
        raise TypeError(_check.dtype_refused("q", q.dtype, False))
    mask = check(q, k, v, None, causal, layout)
    budget = _op_budget(max_rel_err, deterministic)
    mod = _op_mod(mod_spec, mod_text, mask, mod_names, mod_tensors)
    for name, t in (("grad_o", grad_o), ("out", out)):
        _tensor(name, t, q)
        if t.shape != q.shape[:3] + v.shape[3:]:
            raise ValueError("%s: shape %s, but q's is %s and v's head dim %s"
                             % (name, tuple(t.shape), tuple(q.shape), v.shape[3]))
    for name, t in (("lse", lse), ("grad_lse", grad_lse)):
        if name == "grad_lse" and t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.shape != lse_shape(q, layout) or \
                t.dtype != _lse_dtype(q) or t.device != q.device:
            raise ValueError("%s: want %s %s on %s, as fatune::attention returns lse"
                             % (name, lse_shape(q, layout), _lse_dtype(q), q.device))
    return run_backward(grad_o, grad_lse, q, k, v, out, lse, mask, _op_scale(scale), layout,
                        db, budget, mod)


@attention_backward_op.register_fake
def _attention_backward_fake(grad_o: torch.Tensor, grad_lse: Optional[torch.Tensor],
                             q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             out: torch.Tensor, lse: torch.Tensor, causal: str,
                             scale: Optional[torch.Tensor], layout: str, db: Optional[str],
                             max_rel_err: float = 0.0, deterministic: bool = False,
                             mod_spec: Optional[str] = None, mod_text: Optional[str] = None,
                             mod_names: Optional[str] = None,
                             mod_tensors: Optional[List[torch.Tensor]] = None
                             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if q.dtype == FP8:
        raise TypeError(_check.dtype_refused("q", q.dtype, False))
    _op_mod(mod_spec, mod_text, check(q, k, v, None, causal, layout, real=False),
            mod_names, mod_tensors)
    _op_scale(scale, real=False)
    _op_budget(max_rel_err, deterministic)
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=q.dtype, device=q.device),
            torch.empty(v.shape, dtype=q.dtype, device=q.device))


def _backward(ctx: Any, grad_o: Optional[torch.Tensor], grad_lse: Optional[torch.Tensor]
              ) -> Tuple[Any, ...]:
    q, k, v, out, lse, scale = ctx.saved_tensors if ctx.has_scale else \
        (*ctx.saved_tensors, None)
    # causal, scale, layout, db, max_rel_err, deterministic, the four mod_
    # arguments (mod_tensors a list: no gradient for each), the descales and
    # their rows
    tensors = ctx.mod[3]
    rest = (None,) * 9 + ([None] * len(tensors) if tensors is not None else None,) + (None,) * 4
    if grad_o is None and grad_lse is None:
        return (None, None, None) + rest
    if q.dtype == FP8:   # refused by the forward call; never run
        raise ValueError("q: fatune's fp8 (float8_e4m3fn) attention has no backward pass")
    if grad_o is None:
        grad_o = torch.zeros_like(out)
    dq, dk, dv = attention_backward_op(grad_o, grad_lse, q, k, v, out, lse, ctx.causal, scale,
                                       ctx.layout, ctx.db, *ctx.budget, *ctx.mod)
    return (dq, dk, dv) + rest


def _setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    q, k, v, causal, scale, layout, db, max_rel_err, deterministic, *rest = inputs
    mod = rest[:4]   # then the descales, fp8's, which has no backward pass
    _no_fp8_grad(q, k, v)
    out, lse = output
    ctx.budget = (max_rel_err, deterministic)
    ctx.mod = tuple(mod) + (None,) * (4 - len(mod))
    ctx.set_materialize_grads(False)
    ctx.has_scale = scale is not None
    ctx.save_for_backward(q, k, v, out, lse, *((scale,) if scale is not None else ()))
    ctx.causal, ctx.layout, ctx.db = causal, layout, db


attention_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("fatune::attention_out", mutates_args=("out",))
def attention_out_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     causal: str, scale: Optional[torch.Tensor], layout: str,
                     db: Optional[str], max_rel_err: float = 0.0, deterministic: bool = False,
                     mod_spec: Optional[str] = None, mod_text: Optional[str] = None,
                     mod_names: Optional[str] = None,
                     mod_tensors: Optional[List[torch.Tensor]] = None,
                     q_descale: Optional[torch.Tensor] = None,
                     k_descale: Optional[torch.Tensor] = None,
                     v_descale: Optional[torch.Tensor] = None, descale_rows: int = 0
                     ) -> torch.Tensor:
    """fatune::attention into out (q's shape and dtype, bfloat16 for
    float8_e4m3fn; the head dim contiguous, sharing no memory with q, k or
    v); returns the logsumexp."""
    mask = check(q, k, v, out, causal, layout)
    budget = _op_budget(max_rel_err, deterministic)
    mod = _op_mod(mod_spec, mod_text, mask, mod_names, mod_tensors)
    ds = descales(q, k, layout, (q_descale, k_descale, v_descale), rows=descale_rows)
    lse = _new_lse(q, layout)
    run(q, k, v, out, lse, mask, _op_scale(scale), layout, db, budget=budget, mod=mod, ds=ds,
        descale_rows=descale_rows)
    return lse


@attention_out_op.register_fake
def _attention_out_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                        causal: str, scale: Optional[torch.Tensor], layout: str,
                        db: Optional[str], max_rel_err: float = 0.0,
                        deterministic: bool = False, mod_spec: Optional[str] = None,
                        mod_text: Optional[str] = None, mod_names: Optional[str] = None,
                        mod_tensors: Optional[List[torch.Tensor]] = None,
                        q_descale: Optional[torch.Tensor] = None,
                        k_descale: Optional[torch.Tensor] = None,
                        v_descale: Optional[torch.Tensor] = None, descale_rows: int = 0
                        ) -> torch.Tensor:
    _op_mod(mod_spec, mod_text, check(q, k, v, out, causal, layout, real=False),
            mod_names, mod_tensors)
    _op_scale(scale, real=False)
    _op_budget(max_rel_err, deterministic)
    descales(q, k, layout, (q_descale, k_descale, v_descale), real=False, rows=descale_rows)
    return _new_lse(q, layout)


def _eager(q: Any, k: Any, v: Any, out: Any) -> str:
    """How a call may skip the operators' dispatch (which costs more than
    the rest of a call on the host) when nothing traces or watches it:
    "plain", straight to the library, for plain tensors that need no
    gradient; "grad", through _Attention, for those that do; "" when the
    operators must run, so that torch.compile, torch.export, jit.trace and
    every mode and transform see them."""
    if _dispatch_modes is None or torch.compiler.is_compiling():
        return ""
    ts = (q, k, v) if out is None else (q, k, v, out)
    if any(type(t) is not torch.Tensor for t in ts):
        return ""  # a subclass, a fake tensor: checked and refused or run by the operators
    if not (_dispatch_modes() == 0 and not _function_mode() and _transforms() is None
            and _jit_tracing() is None):
        return ""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return "grad" if out is None else ""  # out= with autograd: the operator refuses it
    return "plain"


class _Attention(torch.autograd.Function):
    """fatune::attention and its autograd formula in eager mode, without
    the operators' dispatch: the same run and run_backward, every argument
    already checked; under a modification (mod), which the operators do not
    take, its gradients."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str,
                scale: float, layout: str, db: Optional[str], budget: Tuple[float, bool],
                mod: _lib.Mod) -> Tuple[torch.Tensor, torch.Tensor]:
        out, lse = _new_out(q, v), _new_lse(q, layout)
        run(q, k, v, out, lse, mask, scale, layout, db, budget=budget, mod=mod)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (mask, scale, layout, db, budget, mod)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_o: Optional[torch.Tensor], grad_lse: Optional[torch.Tensor]
                 ) -> Tuple[Any, ...]:
        rest = (None,) * 6
        if grad_o is None and grad_lse is None:
            return (None, None, None) + rest
        q, k, v, out, lse = ctx.saved_tensors
        mask, scale, layout, db, budget, mod = ctx.args
        if grad_o is None:
            grad_o = torch.zeros_like(out)
        return run_backward(grad_o, grad_lse, q, k, v, out, lse, mask, scale, layout, db,
                            budget, mod) + rest


def attention(q: Any, k: Any, v: Any, causal: Any, scale: Any, out: Any, return_lse: bool,
              layout: str, db: Optional[str], plan: bool,
              budget: Tuple[float, bool] = (0.0, False),
              mod: _lib.Mod = None, given: Tuple[Any, Any, Any] = (None, None, None),
              rows: int = 0) -> Tuple[Any, Any, str]:
    """fatune.attention on tensors: through the operators, which autograd,
    torch.compile and torch.export see, unless nothing needs them (_eager);
    plan calls the library directly. A modification (mod) goes to either,
    and to autograd's backward pass; given: fp8's descales, to either."""
    mask = _check.causal(causal)
    if isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and \
            isinstance(v, torch.Tensor):
        _no_fp8_grad(q, k, v)
    how = "plain" if plan else _eager(q, k, v, out)
    if how:
        check(q, k, v, out, mask, layout)
        ds = descales(q, k, layout, given, rows=rows)
        if how == "grad":
            o, lse = _Attention.apply(q, k, v, mask, _check.scale(scale), layout, db, budget,
                                      mod)
            return o, lse, ""
        o = out if out is not None else _new_out(q, v)
        lse = _new_lse(q, layout) if return_lse and not plan else None
        name = run(q, k, v, o, lse, mask, _check.scale(scale), layout, db, plan=plan,
                   budget=budget, mod=mod, ds=ds, descale_rows=rows)
        return (None, None, name) if plan else (o, lse, "")
    # What PyTorch's dispatcher would refuse in its own words (nested and
    # sparse tensors) is checked here; the operators check the rest, when
    # they run (and when traced, without looking at memory). The scale goes
    # to them as a tensor: traced by torch.compile, a varying scale is then
    # an input of the graph, not a constant it is compiled again for.
    _tensor("q", q, None)
    for name, t in (("k", k), ("v", v), ("out", out)):
        if t is not None:
            _tensor(name, t, q)
    if scale is None:
        st = None
    elif torch.compiler.is_compiling():
        st = torch.scalar_tensor(scale, dtype=torch.float64)
    else:
        st = torch.tensor(_check.scale(scale), dtype=torch.float64)
    ms = _op_mod_args(mod)
    if out is None:
        o, lse = attention_op(q, k, v, mask, st, layout, db, *budget, *ms, *given, rows)
        return o, lse, ""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("out: fatune.attention with out= does not support autograd (as "
                         "PyTorch's out= functions); call it without out=, or under "
                         "torch.no_grad()")
    lse = attention_out_op(q, k, v, out, mask, st, layout, db, *budget, *ms, *given, rows)
    return out, lse, ""
