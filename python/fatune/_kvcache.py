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
                ("scale", ctypes.c_double), ("stream", ctypes.c_void_p),
                ("k_new", _lib.Tensor), ("v_new", _lib.Tensor),
                ("cache_batch_idx", ctypes.c_void_p), ("rotary_cos", ctypes.c_void_p),
                ("rotary_sin", ctypes.c_void_p), ("rotary_len", ctypes.c_int),
                ("rotary_dim", ctypes.c_int), ("rotary_interleaved", ctypes.c_int),
                ("mod", ctypes.c_void_p)]


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


def _shapes(q: Any, k: Any, v: Any, seqlens: Any, table: Any, cbi: Any) -> None:
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
    if cbi is not None and table is not None:
        raise ValueError("cache_batch_idx: picks rows of a contiguous cache; give it or "
                         "block_table, not both")
    if cbi is not None and tuple(cbi.shape) != (b,):
        raise ValueError("cache_batch_idx: shape %s, not (%d,)" % (tuple(cbi.shape), b))
    if table is None and cbi is None and k.shape[0] < b:
        raise ValueError("k_cache: %d sequences for a batch of %d (a contiguous cache holds "
                         "one per sequence, unless cache_batch_idx picks them)"
                         % (k.shape[0], b))


Fields = Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]


def _args(stream: int, arrays: List[Fields], lse: int, table: int, pps: int, seqlens: int,
          max_k: int, causal: bool, scale: float, new: Optional[List[Fields]],
          cbi: int, rotary: Tuple[int, int, int, int, bool]) -> KvcacheArgs:
    q, k, v, o = arrays
    kn, vn = (_tensor(*a, swap=True) for a in new) if new else (_lib.Tensor(), _lib.Tensor())
    cos, sin, rlen, rdim, inter = rotary
    return KvcacheArgs(_tensor(*q, swap=True), _tensor(*k, swap=False), _tensor(*v, swap=False),
                       _tensor(*o, swap=True), lse, table or None, pps, seqlens, max_k,
                       1 if causal else 0, scale, stream or None, kn, vn, cbi or None,
                       cos or None, sin or None, rlen, rdim, 1 if inter else 0)


def _rotary_shapes(q: Any, kn: Any, cos: Any, sin: Any) -> None:
    """rotary_cos and rotary_sin: both or neither, with the new keys, shaped
    (positions, rotary_dim / 2) with rotary_dim at most the head dim."""
    if (cos is None) != (sin is None):
        raise ValueError("rotary_cos and rotary_sin: the rotary tables come together")
    if cos is None:
        return
    if kn is None:
        raise ValueError("rotary_cos: rotary embeddings apply with the new keys and values "
                         "(k=, v=), as flash_attn's")
    for name, x in (("rotary_cos", cos), ("rotary_sin", sin)):
        if len(x.shape) != 2 or tuple(x.shape) != tuple(cos.shape) or x.shape[0] < 1 or \
                not 1 <= 2 * x.shape[1] <= q.shape[3]:
            raise ValueError("%s: shape %s, not (positions, rotary_dim / 2) as rotary_cos, with "
                             "rotary_dim at most the head dim %d"
                             % (name, tuple(x.shape), q.shape[3]))


def _new_shapes(q: Any, k_cache: Any, v_cache: Any, k: Any, v: Any) -> None:
    """k and v, the new keys and values: both or neither, shaped (batch,
    seqlen_q, kv_heads, head dim)."""
    if (k is None) != (v is None):
        raise ValueError("k and v: the new keys and values come together")
    for name, x, d in (("k", k, k_cache.shape[3]), ("v", v, v_cache.shape[3])):
        want = (q.shape[0], q.shape[1], k_cache.shape[2], d)
        if x is not None and tuple(x.shape) != want:
            raise ValueError("%s: shape %s, not (batch, seqlen_q, kv_heads, dim) = %s"
                             % (name, tuple(x.shape), want))


class _Call:
    """One call's library arguments, its outputs, and what they point into
    (kept alive while the call runs), and the context it runs in."""

    def __init__(self, ctx: int, args: KvcacheArgs, o: Any, lse: Any, keep: Tuple[Any, ...]):
        self.ctx, self.args, self.o, self.lse, self.keep = ctx, args, o, lse, keep


def _numpy_call(q: np.ndarray, k: Any, v: Any, seqlens: Any, table: Any, causal: bool,
                scale: float, max_k: int, db: Optional[str], out: Any = None,
                kn: Any = None, vn: Any = None, cbi: Any = None,
                rot: Tuple[Any, Any, bool] = (None, None, False)) -> _Call:
    cos, sin, inter = rot
    for name, x in (("k_cache", k), ("v_cache", v), ("k", kn), ("v", vn), ("rotary_cos", cos),
                    ("rotary_sin", sin)):
        if (x is not None or name.endswith("cache")) and (not isinstance(x, np.ndarray) or
                                                          x.dtype != q.dtype):
            raise TypeError("%s: a NumPy array of q's dtype %s" % (name, q.dtype))
    for name, x in (("k_cache", k), ("v_cache", v)):
        if not x.flags.writeable and kn is not None:
            raise ValueError("%s: read-only, but the new keys and values go into it" % name)
    for name, x in (("cache_seqlens", seqlens), ("block_table", table), ("cache_batch_idx", cbi)):
        if x is not None and (not isinstance(x, np.ndarray) or x.dtype != np.int32):
            raise TypeError("%s: a NumPy array of int32" % name)
    _shapes(q, k, v, seqlens, table, cbi)
    _new_shapes(q, k, v, kn, vn)
    _rotary_shapes(q, kn, cos, sin)
    code = _numpy.dtype_code("q", q)
    if kn is not None and not (k.flags.c_contiguous and v.flags.c_contiguous):
        raise ValueError("k_cache and v_cache: contiguous, since the new keys and values go "
                         "into them in place")
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    new = None if kn is None else [np.ascontiguousarray(x) for x in (kn, vn)]
    seqlens = np.ascontiguousarray(seqlens)
    table = None if table is None else np.ascontiguousarray(table)
    cbi = None if cbi is None else np.ascontiguousarray(cbi)
    cos, sin = (None if x is None else np.ascontiguousarray(x) for x in (cos, sin))
    shape = q.shape[:3] + (v.shape[3],)
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != q.dtype or
                            out.shape != shape or not out.flags.c_contiguous):
        raise ValueError("out: a contiguous NumPy array %s of q's dtype" % (shape,))
    o = np.empty(shape, q.dtype) if out is None else out
    lse = np.empty((q.shape[0], q.shape[2], q.shape[1]),
                   np.float64 if q.dtype == np.float64 else np.float32)
    es = q.itemsize

    def fields(a: np.ndarray) -> Fields:
        return (a.ctypes.data, code, a.shape, tuple(s // es for s in a.strides))
    args = _args(0, [fields(q), fields(k), fields(v), fields(o)], lse.ctypes.data,
                 0 if table is None else table.ctypes.data,
                 0 if table is None else table.shape[1], seqlens.ctypes.data, max_k, causal, scale,
                 None if new is None else [fields(x) for x in new],
                 0 if cbi is None else cbi.ctypes.data,
                 (0, 0, 0, 0, False) if cos is None else
                 (cos.ctypes.data, sin.ctypes.data, cos.shape[0], 2 * cos.shape[1], inter))
    return _Call(_lib.context("emu", 0, db), args, o, lse,
                 (q, k, v, seqlens, table, new, cbi, cos, sin))


def _torch_call(q: Any, k: Any, v: Any, seqlens: Any, table: Any, causal: bool, scale: float,
                max_k: int, db: Optional[str], pt: Any, out: Any = None,
                kn: Any = None, vn: Any = None, cbi: Any = None,
                rot: Tuple[Any, Any, bool] = (None, None, False)) -> _Call:
    torch = pt.torch
    cos, sin, inter = rot
    for name, x in (("k_cache", k), ("v_cache", v), ("k", kn), ("v", vn), ("rotary_cos", cos),
                    ("rotary_sin", sin)):
        if (x is not None or name.endswith("cache")) and (
                not isinstance(x, torch.Tensor) or x.dtype != q.dtype or x.device != q.device):
            raise TypeError("%s: a torch.Tensor of q's dtype and device" % name)
    for name, x in (("cache_seqlens", seqlens), ("block_table", table), ("cache_batch_idx", cbi)):
        if x is not None and (not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or
                              x.device != q.device):
            raise TypeError("%s: a torch.Tensor of int32 on q's device" % name)
    _shapes(q, k, v, seqlens, table, cbi)
    _new_shapes(q, k, v, kn, vn)
    _rotary_shapes(q, kn, cos, sin)
    code = pt._CODES.get(q.dtype)
    if code is None:
        raise TypeError(_check.dtype_refused("q", q.dtype, False))
    if kn is not None and not (k.is_contiguous() and v.is_contiguous()):
        raise ValueError("k_cache and v_cache: contiguous, since the new keys and values go "
                         "into them in place")
    q, k, v, seqlens = (x.contiguous() for x in (q, k, v, seqlens))
    new = None if kn is None else [x.contiguous() for x in (kn, vn)]
    table = None if table is None else table.contiguous()
    cbi = None if cbi is None else cbi.contiguous()
    cos, sin = (None if x is None else x.contiguous() for x in (cos, sin))
    shape = tuple(q.shape[:3]) + (v.shape[3],)
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != q.dtype or
                            out.device != q.device or tuple(out.shape) != shape or
                            not out.is_contiguous()):
        raise ValueError("out: a contiguous torch.Tensor %s of q's dtype and device" % (shape,))
    o = torch.empty(shape, dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), device=q.device,
                      dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    ctx, stream = pt._context(q, db)

    def fields(t: Any) -> Fields:
        return (t.data_ptr(), code, tuple(t.shape), tuple(t.stride()))
    args = _args(stream, [fields(q), fields(k), fields(v), fields(o)], lse.data_ptr(),
                 0 if table is None else table.data_ptr(), 0 if table is None else table.shape[1],
                 seqlens.data_ptr(), max_k, causal, scale,
                 None if new is None else [fields(x) for x in new],
                 0 if cbi is None else cbi.data_ptr(),
                 (0, 0, 0, 0, False) if cos is None else
                 (cos.data_ptr(), sin.data_ptr(), cos.shape[0], 2 * cos.shape[1], inter))
    return _Call(ctx, args, o, lse, (q, k, v, seqlens, table, new, cbi, cos, sin))


def _prepare(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any,
             causal: bool, softmax_scale: Optional[float], max_seqlen_k: Optional[int],
             db: Optional[str], pt: Any, what: str, out: Any = None, k: Any = None,
             v: Any = None, cache_batch_idx: Any = None,
             rot: Tuple[Any, Any, bool] = (None, None, False), mod: Any = None) -> _Call:
    if not isinstance(causal, bool):
        raise TypeError("causal: True or False, not %r" % (causal,))
    scale = _check.scale(softmax_scale)
    spec = _check.mod(mod)
    max_k = 0 if max_seqlen_k is None else int(max_seqlen_k)
    if max_k < 0:
        raise ValueError("max_seqlen_k: %d is negative" % max_k)
    if pt is not None and isinstance(q, pt.torch.Tensor):
        if any(x is not None and x.requires_grad for x in (q, k_cache, v_cache)):
            raise ValueError("%s has no backward pass: give tensors that need no gradient "
                             "(torch.no_grad())" % what)
        call = _torch_call(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                           max_k, db, pt, out, k, v, cache_batch_idx, rot)
    elif isinstance(q, np.ndarray):
        call = _numpy_call(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                           max_k, db, out, k, v, cache_batch_idx, rot)
    else:
        raise TypeError("q: a NumPy array or a torch.Tensor, not %s" % type(q).__name__)
    if spec is not None:
        # the tensors are set here and stay set for the launch (a call of
        # another thread under the same modification with other contents
        # may set its own in between: give each thread its own)
        with _lib.modification(call.ctx, spec) as h:
            call.args.mod = h
    return call


_lib.LIB.fatune_decode_plan_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvcacheArgs),
                                               ctypes.POINTER(ctypes.c_void_p)]
_lib.LIB.fatune_decode_plan_create.restype = ctypes.c_int
_lib.LIB.fatune_decode_plan_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvcacheArgs)]
_lib.LIB.fatune_decode_plan_run.restype = ctypes.c_int
_lib.LIB.fatune_decode_plan_check.argtypes = [ctypes.c_void_p]
_lib.LIB.fatune_decode_plan_check.restype = ctypes.c_int
_lib.LIB.fatune_decode_plan_variant.argtypes = [ctypes.c_void_p]
_lib.LIB.fatune_decode_plan_variant.restype = ctypes.c_char_p
_lib.LIB.fatune_decode_plan_free.argtypes = [ctypes.c_void_p]
_lib.LIB.fatune_decode_plan_free.restype = None


class DecodePlan:
    """A decoding problem planned once (fatune.plan_decode): run() queues
    its kernels with no allocation in the library and no wait, so that a
    CUDA graph may capture it; check() reports what the kernels' checks of
    the block table and lengths met since the last check."""

    def __init__(self, call: _Call, planned: Tuple[Any, ...], pt: Any) -> None:
        self._handle: Optional[int] = None   # for __del__ when the plan is refused
        handle = ctypes.c_void_p()
        _lib.check(_lib.LIB.fatune_decode_plan_create(call.ctx, ctypes.byref(call.args),
                                                      ctypes.byref(handle)))
        self._handle, self._planned, self._pt = handle.value, planned, pt

    @property
    def variant(self) -> str:
        """The variant the plan runs."""
        return _lib.LIB.fatune_decode_plan_variant(self._handle).decode()

    def run(self, q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any,
            block_table: Any = None, out: Any = None, return_softmax_lse: bool = False,
            k: Any = None, v: Any = None, cache_batch_idx: Any = None,
            rotary_cos: Any = None, rotary_sin: Any = None,
            rotary_interleaved: bool = False) -> Any:
        """O for the planned problem over these tensors (their shapes the
        plan's; k and v, the new keys and values, when planned with them),
        into out when given (a fixed address for a graph)."""
        if self._handle is None:
            raise ValueError("the plan was closed")
        causal, softmax_scale, max_k, db, mod = self._planned
        call = _prepare(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                        max_k, db, self._pt, "plan_decode", out, k, v, cache_batch_idx,
                        (rotary_cos, rotary_sin, rotary_interleaved), mod)
        _lib.check(_lib.LIB.fatune_decode_plan_run(self._handle, ctypes.byref(call.args)))
        return (call.o, call.lse) if return_softmax_lse else call.o

    def check(self) -> None:
        """Waits for the device; fatune.Error when a kernel met a page outside
        the pool or a length past the capacity since the last check."""
        if self._handle is not None:
            _lib.check(_lib.LIB.fatune_decode_plan_check(self._handle))

    def close(self) -> None:
        if self._handle is not None:
            _lib.LIB.fatune_decode_plan_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()


def plan_decode(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any,
                causal: bool, softmax_scale: Optional[float], max_seqlen_k: Optional[int],
                db: Optional[str], pt: Any, k: Any = None, v: Any = None,
                cache_batch_idx: Any = None,
                rot: Tuple[Any, Any, bool] = (None, None, False), mod: Any = None) -> DecodePlan:
    call = _prepare(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                    max_seqlen_k, db, pt, "plan_decode", None, k, v, cache_batch_idx, rot, mod)
    return DecodePlan(call, (causal, softmax_scale, max_seqlen_k, db, mod), pt)


def attention_with_kvcache(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any,
                           block_table: Any, causal: bool, softmax_scale: Optional[float],
                           max_seqlen_k: Optional[int], return_softmax_lse: bool,
                           db: Optional[str], pt: Any, k: Any = None, v: Any = None,
                           cache_batch_idx: Any = None,
                           rot: Tuple[Any, Any, bool] = (None, None, False),
                           mod: Any = None) -> Any:
    call = _prepare(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                    max_seqlen_k, db, pt, "attention_with_kvcache", None, k, v,
                    cache_batch_idx, rot, mod)
    _lib.check(_lib.LIB.fatune_attention_kvcache(call.ctx, ctypes.byref(call.args)))
    return (call.o, call.lse) if return_softmax_lse else call.o
