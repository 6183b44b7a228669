"""fatune.attention_varlen: a variable-length batch through
fatune_attention_varlen, for NumPy arrays (on the emulator) and PyTorch
tensors (CUDA ones on their GPU and current stream, CPU ones on the
emulator), with flash_attn_varlen_func's shapes: every sequence's tokens
packed as (total, heads, dim), cu_seqlens the int32 offsets."""
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
                ("stream", ctypes.c_void_p)]


_lib.LIB.fatune_attention_varlen.argtypes = [ctypes.c_void_p, ctypes.POINTER(VarlenArgs)]
_lib.LIB.fatune_attention_varlen.restype = ctypes.c_int

Fields = Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]


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
         batch: int, max_q: int, max_k: int, causal: bool, scale: float) -> None:
    q, k, v, o = (_tensor(*a) for a in arrays)
    args = VarlenArgs(q, k, v, o, lse, cu_q, cu_k, batch, max_q, max_k, 1 if causal else 0,
                      scale, stream or None)
    _lib.check(_lib.LIB.fatune_attention_varlen(ctx, ctypes.byref(args)))


def _numpy_call(q: np.ndarray, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
                causal: bool, scale: float, db: Optional[str]) -> Tuple[np.ndarray, np.ndarray]:
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.dtype != q.dtype:
            raise TypeError("%s: a NumPy array of q's dtype %s" % (name, q.dtype))
    for name, x in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if not isinstance(x, np.ndarray) or x.dtype != np.int32:
            raise TypeError("%s: a NumPy array of int32" % name)
    batch = _shapes(q, k, v, cu_q, cu_k)
    code = _numpy.dtype_code("q", q)
    q, k, v, cu_q, cu_k = (np.ascontiguousarray(x) for x in (q, k, v, cu_q, cu_k))
    o = np.empty(q.shape[:2] + (v.shape[2],), q.dtype)
    lse = np.empty((q.shape[1], q.shape[0]), np.float64 if q.dtype == np.float64 else np.float32)
    es = q.itemsize

    def fields(a: np.ndarray) -> Fields:
        return (a.ctypes.data, code, a.shape, tuple(s // es for s in a.strides))
    _run(_lib.context("emu", 0, db), 0, [fields(q), fields(k), fields(v), fields(o)],
         lse.ctypes.data, cu_q.ctypes.data, cu_k.ctypes.data, batch, max_q, max_k, causal, scale)
    return o, lse


def _torch_call(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
                causal: bool, scale: float, db: Optional[str], pt: Any) -> Tuple[Any, Any]:
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
        raise TypeError("q: dtype %s is not one fatune runs (float16, bfloat16, float32, "
                        "float64)" % q.dtype)
    q, k, v, cu_q, cu_k = (x.contiguous() for x in (q, k, v, cu_q, cu_k))
    o = torch.empty(q.shape[:2] + (v.shape[2],), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), device=q.device,
                      dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    ctx, stream = pt._context(q, db)

    def fields(t: Any) -> Fields:
        return (t.data_ptr(), code, tuple(t.shape), tuple(t.stride()))
    _run(ctx, stream, [fields(q), fields(k), fields(v), fields(o)], lse.data_ptr(),
         cu_q.data_ptr(), cu_k.data_ptr(), batch, max_q, max_k, causal, scale)
    return o, lse


def attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                     softmax_scale: Optional[float], return_softmax_lse: bool,
                     db: Optional[str], pt: Any) -> Any:
    if not isinstance(causal, bool):
        raise TypeError("causal: True or False, not %r" % (causal,))
    scale = _check.scale(softmax_scale)
    max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
    if pt is not None and isinstance(q, pt.torch.Tensor):
        if any(x is not None and x.requires_grad for x in (q, k, v)):
            raise ValueError("attention_varlen has no backward pass yet: give tensors that "
                             "need no gradient (torch.no_grad())")
        o, lse = _torch_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, scale,
                             db, pt)
    elif isinstance(q, np.ndarray):
        o, lse = _numpy_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, scale,
                             db)
    else:
        raise TypeError("q: a NumPy array or a torch.Tensor, not %s" % type(q).__name__)
    return (o, lse) if return_softmax_lse else o
