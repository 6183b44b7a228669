"""fatune.attention_with_kvcache: the new tokens' attention over a KV cache
through fatune_attention_kvcache, for NumPy arrays (on the emulator) and
PyTorch tensors (CUDA ones on their GPU and current stream, CPU ones on the
emulator), with flash_attn_with_kvcache's shapes."""
import ctypes
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _check, _lib, _numpy


class KvcacheArgs(ctypes.Structure):
    _fields_ = [("q", _lib.Tensor), ("k_cache", _lib.Tensor), ("v_cache", _lib.Tensor),
                ("o", _lib.Tensor), ("lse", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
                ("pages_per_seq", ctypes.c_int), ("cache_seqlens", ctypes.c_void_p),
                ("max_seqlen_k", ctypes.c_int), ("causal", ctypes.c_int),
                ("scale", ctypes.c_double), ("stream", ctypes.c_void_p)]


_lib.LIB.fatune_attention_kvcache.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvcacheArgs)]
_lib.LIB.fatune_attention_kvcache.restype = ctypes.c_int


def _tensor(data: int, code: int, shape: Tuple[int, ...], strides: Tuple[int, ...],
            swap: bool) -> _lib.Tensor:
    """A library tensor; swap: (batch, seq, heads, dim) given, the library's
    (batch, heads, seq, dim) taken by swapping the middle dims."""
    shape, strides = list(shape), list(strides)
    if swap:
        shape[1], shape[2] = shape[2], shape[1]
        strides[1], strides[2] = strides[2], strides[1]
    return _lib.Tensor(data, code, (ctypes.c_longlong * 4)(*shape),
                       (ctypes.c_longlong * 4)(*strides))


def _shapes(q: Any, k: Any, v: Any, seqlens: Any, table: Any) -> None:
    """The shapes flash_attn_with_kvcache takes, else ValueError naming the
    argument."""
    for name, x in (("q", q), ("k_cache", k), ("v_cache", v)):
        if len(x.shape) != 4:
            raise ValueError("%s: 4 dims, not %d" % (name, len(x.shape)))
    b = q.shape[0]
    if tuple(k.shape[:3]) != tuple(v.shape[:3]):
        raise ValueError("v_cache: %s, but k_cache's first dims are %s"
                         % (tuple(v.shape), tuple(k.shape[:3])))
    if k.shape[3] != q.shape[3]:
        raise ValueError("k_cache: head dim %d, but q's is %d" % (k.shape[3], q.shape[3]))
    if len(seqlens.shape) != 1 or seqlens.shape[0] != b:
        raise ValueError("cache_seqlens: shape %s, not (%d,)" % (tuple(seqlens.shape), b))
    if table is not None and (len(table.shape) != 2 or table.shape[0] != b):
        raise ValueError("block_table: shape %s, not (%d, pages per sequence)"
                         % (tuple(table.shape), b))
    if table is None and k.shape[0] < b:
        raise ValueError("k_cache: %d sequences for a batch of %d (a contiguous cache holds "
                         "one per sequence)" % (k.shape[0], b))


def _run(ctx: int, stream: int, arrays: List[Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]],
         lse: int, table: int, pps: int, seqlens: int, max_k: int, causal: bool,
         scale: float) -> None:
    q, k, v, o = arrays
    args = KvcacheArgs(_tensor(*q, swap=True), _tensor(*k, swap=False), _tensor(*v, swap=False),
                       _tensor(*o, swap=True), lse, table or None, pps, seqlens, max_k,
                       1 if causal else 0, scale, stream or None)
    _lib.check(_lib.LIB.fatune_attention_kvcache(ctx, ctypes.byref(args)))


def _numpy_call(q: np.ndarray, k: Any, v: Any, seqlens: Any, table: Any, causal: bool,
                scale: float, max_k: int, db: Optional[str]) -> Tuple[np.ndarray, np.ndarray]:
    for name, x in (("k_cache", k), ("v_cache", v)):
        if not isinstance(x, np.ndarray) or x.dtype != q.dtype:
            raise TypeError("%s: a NumPy array of q's dtype %s" % (name, q.dtype))
    for name, x in (("cache_seqlens", seqlens), ("block_table", table)):
        if x is not None and (not isinstance(x, np.ndarray) or x.dtype != np.int32):
            raise TypeError("%s: a NumPy array of int32" % name)
    _shapes(q, k, v, seqlens, table)
    code = _numpy.dtype_code("q", q)
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    seqlens = np.ascontiguousarray(seqlens)
    table = None if table is None else np.ascontiguousarray(table)
    o = np.empty(q.shape[:3] + (v.shape[3],), q.dtype)
    lse = np.empty((q.shape[0], q.shape[2], q.shape[1]),
                   np.float64 if q.dtype == np.float64 else np.float32)
    es = q.itemsize

    def fields(a: np.ndarray) -> Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]:
        return (a.ctypes.data, code, a.shape, tuple(s // es for s in a.strides))
    _run(_lib.context("emu", 0, db), 0, [fields(q), fields(k), fields(v), fields(o)],
         lse.ctypes.data, 0 if table is None else table.ctypes.data,
         0 if table is None else table.shape[1], seqlens.ctypes.data, max_k, causal, scale)
    return o, lse


def _torch_call(q: Any, k: Any, v: Any, seqlens: Any, table: Any, causal: bool, scale: float,
                max_k: int, db: Optional[str], pt: Any) -> Tuple[Any, Any]:
    torch = pt.torch
    for name, x in (("k_cache", k), ("v_cache", v)):
        if not isinstance(x, torch.Tensor) or x.dtype != q.dtype or x.device != q.device:
            raise TypeError("%s: a torch.Tensor of q's dtype and device" % name)
    for name, x in (("cache_seqlens", seqlens), ("block_table", table)):
        if x is not None and (not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or
                              x.device != q.device):
            raise TypeError("%s: a torch.Tensor of int32 on q's device" % name)
    _shapes(q, k, v, seqlens, table)
    code = pt._CODES.get(q.dtype)
    if code is None:
        raise TypeError("q: dtype %s is not one fatune runs (float16, bfloat16, float32, "
                        "float64)" % q.dtype)
    q, k, v, seqlens = (x.contiguous() for x in (q, k, v, seqlens))
    table = None if table is None else table.contiguous()
    o = torch.empty(q.shape[:3] + (v.shape[3],), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device,
                      dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    ctx, stream = pt._context(q, db)

    def fields(t: Any) -> Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]:
        return (t.data_ptr(), code, tuple(t.shape), tuple(t.stride()))
    _run(ctx, stream, [fields(q), fields(k), fields(v), fields(o)], lse.data_ptr(),
         0 if table is None else table.data_ptr(), 0 if table is None else table.shape[1],
         seqlens.data_ptr(), max_k, causal, scale)
    return o, lse


def attention_with_kvcache(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any,
                           block_table: Any, causal: bool, softmax_scale: Optional[float],
                           max_seqlen_k: Optional[int], return_softmax_lse: bool,
                           db: Optional[str], pt: Any) -> Any:
    if not isinstance(causal, bool):
        raise TypeError("causal: True or False, not %r" % (causal,))
    scale = _check.scale(softmax_scale)
    max_k = 0 if max_seqlen_k is None else int(max_seqlen_k)
    if max_k < 0:
        raise ValueError("max_seqlen_k: %d is negative" % max_k)
    if pt is not None and isinstance(q, pt.torch.Tensor):
        if any(x is not None and x.requires_grad for x in (q, k_cache, v_cache)):
            raise ValueError("attention_with_kvcache has no backward pass: give tensors that "
                             "need no gradient (torch.no_grad())")
        o, lse = _torch_call(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                             max_k, db, pt)
    elif isinstance(q, np.ndarray):
        o, lse = _numpy_call(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                             max_k, db)
    else:
        raise TypeError("q: a NumPy array or a torch.Tensor, not %s" % type(q).__name__)
    return (o, lse) if return_softmax_lse else o
