"""fatune.attention_varlen: a variable-length batch through
fatune_attention_varlen, for NumPy arrays (on the emulator) and PyTorch
tensors (CUDA ones on their GPU and current stream, CPU ones on the
emulator), with flash_attn_varlen_func's shapes: every sequence's tokens
packed as (total, heads, dim), cu_seqlens the int32 offsets. Its gradients
through fatune_attention_varlen_backward: autograd for tensors,
fatune.attention_varlen_backward for NumPy arrays."""
import ctypes
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _check, _lib, _numpy


class VarlenArgs(ctypes.Structure):
    _fields_ = [("q", _lib.Tensor), ("k", _lib.Tensor), ("v", _lib.Tensor), ("o", _lib.Tensor),
                ("lse", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p), ("batch", ctypes.c_int),
                ("max_seqlen_q", ctypes.c_int), ("max_seqlen_k", ctypes.c_int),
                ("causal", ctypes.c_int), ("scale", ctypes.c_double),
                ("stream", ctypes.c_void_p), ("mod", ctypes.c_void_p)]


_lib.LIB.fatune_attention_varlen.argtypes = [ctypes.c_void_p, ctypes.POINTER(VarlenArgs)]
_lib.LIB.fatune_attention_varlen.restype = ctypes.c_int


class VarlenBackwardArgs(ctypes.Structure):
    _fields_ = [("q", _lib.Tensor), ("k", _lib.Tensor), ("v", _lib.Tensor), ("o", _lib.Tensor),
                ("dout", _lib.Tensor), ("dq", _lib.Tensor), ("dk", _lib.Tensor),
                ("dv", _lib.Tensor), ("lse", ctypes.c_void_p), ("dlse", ctypes.c_void_p),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("batch", ctypes.c_int), ("max_seqlen_q", ctypes.c_int),
                ("max_seqlen_k", ctypes.c_int), ("causal", ctypes.c_int),
                ("scale", ctypes.c_double), ("stream", ctypes.c_void_p),
                ("deterministic", ctypes.c_int), ("mod", ctypes.c_void_p)]


_lib.LIB.fatune_attention_varlen_backward.argtypes = [ctypes.c_void_p,
                                                      ctypes.POINTER(VarlenBackwardArgs)]
_lib.LIB.fatune_attention_varlen_backward.restype = ctypes.c_int

Fields = Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]
Mod = _lib.Mod   # _check.mod's


def _tensor(data: int, code: int, shape: Tuple[int, ...], strides: Tuple[int, ...]) -> _lib.Tensor:
    """The library's (1, heads, total, dim) of a packed (total, heads, dim)."""
    return _lib.Tensor(data, code, (ctypes.c_longlong * 4)(1, shape[1], shape[0], shape[2]),
                       (ctypes.c_longlong * 4)(0, strides[1], strides[0], strides[2]))


def _shapes(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any) -> int:
    """The shapes flash_attn_varlen_func takes, else ValueError naming the
    argument; the batch."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != 3:
            raise ValueError("%s: 3 dims (total, heads, dim), not %d" % (name, len(x.shape)))
    if tuple(v.shape[:2]) != tuple(k.shape[:2]):
        raise ValueError("v: %s, but k's tokens and heads are %s"
                         % (tuple(v.shape), tuple(k.shape[:2])))
    if k.shape[2] != q.shape[2]:
        raise ValueError("k: head dim %d, but q's is %d" % (k.shape[2], q.shape[2]))
    for name, x in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if len(x.shape) != 1 or x.shape[0] < 2:
            raise ValueError("%s: shape %s, not (batch + 1,)" % (name, tuple(x.shape)))
    if cu_q.shape[0] != cu_k.shape[0]:
        raise ValueError("cu_seqlens_k: %d offsets, cu_seqlens_q %d" % (cu_k.shape[0],
                                                                        cu_q.shape[0]))
    return int(cu_q.shape[0]) - 1


def _run(ctx: int, stream: int, arrays: List[Fields], lse: int, cu_q: int, cu_k: int,
         batch: int, max_q: int, max_k: int, causal: bool, scale: float, mod: Mod) -> None:
    q, k, v, o = (_tensor(*a) for a in arrays)
    with _lib.modification(ctx, mod) as h:
        args = VarlenArgs(q, k, v, o, lse, cu_q, cu_k, batch, max_q, max_k, 1 if causal else 0,
                          scale, stream or None, h or None)
        _lib.check(_lib.LIB.fatune_attention_varlen(ctx, ctypes.byref(args)))


def _run_backward(ctx: int, stream: int, arrays: List[Fields], lse: int, dlse: int, cu_q: int,
                  cu_k: int, batch: int, max_q: int, max_k: int, causal: bool, scale: float,
                  deterministic: bool, mod: Mod) -> None:
    """fatune_attention_varlen_backward over the eight packed tensors (q, k,
    v, o, dout, dq, dk, dv)."""
    t = [_tensor(*a) for a in arrays]
    with _lib.modification(ctx, mod) as h:
        args = VarlenBackwardArgs(*t, lse, dlse or None, cu_q, cu_k, batch, max_q, max_k,
                                  1 if causal else 0, scale, stream or None,
                                  1 if deterministic else 0, h or None)
        _lib.check(_lib.LIB.fatune_attention_varlen_backward(ctx, ctypes.byref(args)))


def _numpy_checked(q: np.ndarray, others: Tuple[Tuple[str, Any], ...], cu_q: Any,
                   cu_k: Any) -> Tuple[int, int]:
    """The batch and the dtype's code of NumPy arrays flash_attn_varlen_func
    would take (others: named arrays of q's dtype), else TypeError or
    ValueError naming the argument."""
    for name, x in others:
        if not isinstance(x, np.ndarray) or x.dtype != q.dtype:
            raise TypeError("%s: a NumPy array of q's dtype %s" % (name, q.dtype))
    for name, x in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if not isinstance(x, np.ndarray) or x.dtype != np.int32:
            raise TypeError("%s: a NumPy array of int32" % name)
    return _shapes(q, others[0][1], others[1][1], cu_q, cu_k), _numpy.dtype_code("q", q)


def _numpy_fields(a: np.ndarray, code: int) -> Fields:
    return (a.ctypes.data, code, a.shape, tuple(s // a.itemsize for s in a.strides))


def _numpy_call(q: np.ndarray, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
                causal: bool, scale: float, db: Optional[str], mod: Mod
                ) -> Tuple[np.ndarray, np.ndarray]:
    batch, code = _numpy_checked(q, (("k", k), ("v", v)), cu_q, cu_k)
    q, k, v, cu_q, cu_k = (np.ascontiguousarray(x) for x in (q, k, v, cu_q, cu_k))
    o = np.empty(q.shape[:2] + (v.shape[2],), q.dtype)
    lse = np.empty((q.shape[1], q.shape[0]), np.float64 if q.dtype == np.float64 else np.float32)
    _run(_lib.context("emu", 0, db), 0, [_numpy_fields(x, code) for x in (q, k, v, o)],
         lse.ctypes.data, cu_q.ctypes.data, cu_k.ctypes.data, batch, max_q, max_k, causal, scale,
         mod)
    return o, lse


def _numpy_backward(grad_o: Any, q: np.ndarray, k: Any, v: Any, out: Any, lse: Any, cu_q: Any,
                    cu_k: Any, max_q: int, max_k: int, causal: bool, scale: float,
                    grad_lse: Any, deterministic: bool, db: Optional[str], mod: Mod
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    batch, code = _numpy_checked(q, (("k", k), ("v", v), ("out", out), ("grad_o", grad_o)),
                                 cu_q, cu_k)
    want = q.shape[:2] + (v.shape[2],)
    for name, x in (("out", out), ("grad_o", grad_o)):
        if tuple(x.shape) != want:
            raise ValueError("%s: shape %s, not q's tokens and heads with v's head dim %s"
                             % (name, tuple(x.shape), want))
    lse_dtype = np.float64 if q.dtype == np.float64 else np.float32
    for name, x in (("lse", lse), ("grad_lse", grad_lse)):
        if name == "grad_lse" and x is None:
            continue
        if not isinstance(x, np.ndarray) or x.dtype != lse_dtype or \
                tuple(x.shape) != (q.shape[1], q.shape[0]):
            raise ValueError("%s: a NumPy array (heads, total_q) = %s of %s, as "
                             "attention_varlen(..., return_softmax_lse=True) returns lse"
                             % (name, (q.shape[1], q.shape[0]), np.dtype(lse_dtype).name))
    q, k, v, out, grad_o, lse, cu_q, cu_k = (np.ascontiguousarray(x) for x in
                                             (q, k, v, out, grad_o, lse, cu_q, cu_k))
    dlse = None if grad_lse is None else np.ascontiguousarray(grad_lse)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    _run_backward(_lib.context("emu", 0, db), 0,
                  [_numpy_fields(x, code) for x in (q, k, v, out, grad_o, dq, dk, dv)],
                  lse.ctypes.data,
                  0 if dlse is None else dlse.ctypes.data, cu_q.ctypes.data, cu_k.ctypes.data,
                  batch, max_q, max_k, causal, scale, deterministic, mod)
    return dq, dk, dv


def _torch_checked(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, pt: Any
                   ) -> Tuple[int, int]:
    """The batch and the dtype's code of tensors flash_attn_varlen_func
    would take, else TypeError or ValueError naming the argument."""
    torch = pt.torch
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dtype != q.dtype or x.device != q.device:
            raise TypeError("%s: a torch.Tensor of q's dtype and device" % name)
    for name, x in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or x.device != q.device:
            raise TypeError("%s: a torch.Tensor of int32 on q's device" % name)
    batch = _shapes(q, k, v, cu_q, cu_k)
    code = pt._CODES.get(q.dtype)
    if code is None:
        raise TypeError(_check.dtype_refused("q", q.dtype, False))
    return batch, code


def _torch_fields(t: Any, code: int) -> Fields:
    return (t.data_ptr(), code, tuple(t.shape), tuple(t.stride()))


def _torch_call(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
                causal: bool, scale: float, db: Optional[str], pt: Any, mod: Mod
                ) -> Tuple[Any, Any]:
    torch = pt.torch
    batch, code = _torch_checked(q, k, v, cu_q, cu_k, pt)
    q, k, v, cu_q, cu_k = (x.contiguous() for x in (q, k, v, cu_q, cu_k))
    o = torch.empty(q.shape[:2] + (v.shape[2],), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), device=q.device,
                      dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    ctx, stream = pt._context(q, db)
    _run(ctx, stream, [_torch_fields(x, code) for x in (q, k, v, o)], lse.data_ptr(),
         cu_q.data_ptr(), cu_k.data_ptr(), batch, max_q, max_k, causal, scale, mod)
    return o, lse


def _torch_backward(grad_o: Any, grad_lse: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                    cu_q: Any, cu_k: Any, max_q: int, max_k: int, causal: bool, scale: float,
                    deterministic: bool, db: Optional[str], pt: Any, mod: Mod
                    ) -> Tuple[Any, Any, Any]:
    torch = pt.torch
    batch, code = _torch_checked(q, k, v, cu_q, cu_k, pt)
    grad_o = grad_o.contiguous() if grad_o is not None else torch.zeros_like(out)
    dlse = grad_lse.contiguous() if grad_lse is not None else None
    dq, dk, dv = (torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v))
    ctx, stream = pt._context(q, db)
    _run_backward(ctx, stream, [_torch_fields(x, code) for x in
                                (q, k, v, out, grad_o, dq, dk, dv)],
                  lse.data_ptr(), 0 if dlse is None else dlse.data_ptr(), cu_q.data_ptr(),
                  cu_k.data_ptr(), batch, max_q, max_k, causal, scale, deterministic, mod)
    return dq, dk, dv


def _function(pt: Any) -> Any:
    """The autograd Function of attention_varlen (made once torch is there)."""
    global _VARLEN
    if _VARLEN is not None:
        return _VARLEN
    torch = pt.torch

    class _Varlen(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int,
                    max_k: int, causal: bool, scale: float, deterministic: bool,
                    db: Optional[str], mod: Mod) -> Tuple[Any, Any]:
            q, k, v, cu_q, cu_k = (x.contiguous() for x in (q, k, v, cu_q, cu_k))
            o, lse = _torch_call(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, db, pt, mod)
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
            ctx.args = (max_q, max_k, causal, scale, deterministic, db, mod)
            return o, lse

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, grad_o: Any, grad_lse: Any) -> Tuple[Any, ...]:
            rest = (None,) * 9
            if grad_o is None and grad_lse is None:
                return (None, None, None) + rest
            q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
            max_q, max_k, causal, scale, deterministic, db, mod = ctx.args
            return _torch_backward(grad_o, grad_lse, q, k, v, o, lse, cu_q, cu_k, max_q, max_k,
                                   causal, scale, deterministic, db, pt, mod) + rest

    _VARLEN = _Varlen
    return _VARLEN


_VARLEN: Any = None


def attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                     softmax_scale: Optional[float], return_softmax_lse: bool,
                     deterministic: bool, db: Optional[str], pt: Any, mod: Any = None) -> Any:
    if not isinstance(causal, bool):
        raise TypeError("causal: True or False, not %r" % (causal,))
    scale = _check.scale(softmax_scale)
    spec = _check.mod(mod)
    max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
    if pt is not None and isinstance(q, pt.torch.Tensor):
        torch = pt.torch
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in (q, k, v)):
            _torch_checked(q, k, v, cu_seqlens_q, cu_seqlens_k, pt)
            o, lse = _function(pt).apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                                         causal, scale, bool(deterministic), db, spec)
        else:
            o, lse = _torch_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal,
                                 scale, db, pt, spec)
    elif isinstance(q, np.ndarray):
        o, lse = _numpy_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, scale,
                             db, spec)
    else:
        raise TypeError("q: a NumPy array or a torch.Tensor, not %s" % type(q).__name__)
    return (o, lse) if return_softmax_lse else o


def attention_varlen_backward(grad_o: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                              cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                              max_seqlen_k: int, causal: bool, softmax_scale: Optional[float],
                              grad_lse: Any, deterministic: bool, db: Optional[str],
                              mod: Any = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(causal, bool):
        raise TypeError("causal: True or False, not %r" % (causal,))
    if not isinstance(q, np.ndarray):
        raise TypeError("q: a NumPy array, not %s (torch tensors get their gradients through "
                        "autograd: .backward() on attention_varlen's output)" % type(q).__name__)
    return _numpy_backward(grad_o, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                           int(max_seqlen_q), int(max_seqlen_k), causal,
                           _check.scale(softmax_scale), grad_lse, bool(deterministic), db,
                           _check.mod(mod))
