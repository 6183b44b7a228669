"""NumPy arrays (and CPU arrays of any framework, through DLPack) on the
emulator."""
from typing import Optional, Tuple

import numpy as np

from . import _lib

_CODES = {"float32": _lib.FP32, "float64": _lib.FP64, "float16": _lib.FP16,
          "bfloat16": _lib.BF16}


def dtype_code(name: str, a: np.ndarray) -> int:
    code = _CODES.get(a.dtype.name)
    if code is None:
        raise TypeError("%s: dtype %s is not one fatune runs (float16, bfloat16, float32, "
                        "float64)" % (name, a.dtype))
    return code


def usable(a: np.ndarray) -> bool:
    """Whether the library takes a's strides as they are: in whole elements,
    none negative, the last one 1."""
    es = a.itemsize
    return (all(s % es == 0 and s >= 0 for s in a.strides)
            and (a.shape[-1] == 1 or a.strides[-1] == es))


def tensor(a: np.ndarray, code: int, layout: str) -> _lib.Tensor:
    es = a.itemsize
    shape = list(a.shape)
    stride = [s // es for s in a.strides]
    if layout == "bnhd":
        shape[1], shape[2] = shape[2], shape[1]
        stride[1], stride[2] = stride[2], stride[1]
    t = _lib.Tensor()
    t.data = a.ctypes.data
    t.dtype = code
    t.shape[:] = shape
    t.stride[:] = stride
    return t


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float,
              out: Optional[np.ndarray], return_lse: bool, layout: str,
              db: Optional[str], plan: bool = False
              ) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    arrays = {}
    code = dtype_code("q", q)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, np.ndarray):
            raise TypeError("%s: a NumPy array like q, not %s" % (name, type(a).__name__))
        if a.dtype != q.dtype:
            raise TypeError("%s: dtype %s, but q's is %s" % (name, a.dtype, q.dtype))
        # Strides the kernels cannot take (negative, a strided head dim): a copy.
        arrays[name] = a if usable(a) else np.ascontiguousarray(a)
    if out is None:
        out = np.empty_like(q)
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError("out: a NumPy array like q, not %s" % type(out).__name__)
        if out.dtype != q.dtype or out.shape != q.shape:
            raise ValueError("out: %s %s, but q is %s %s" % (out.dtype, out.shape, q.dtype,
                                                              q.shape))
        if not out.flags.writeable:
            raise ValueError("out: read-only")
        if not usable(out):
            raise ValueError("out: strides %s: they must be whole elements, not negative, "
                             "and 1 element along the head dim" % (out.strides,))
    b, h, n = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else \
              (q.shape[0], q.shape[2], q.shape[1])
    lse = np.empty((b, h, n), np.float64 if code == _lib.FP64 else np.float32) \
        if return_lse else None
    args = _lib.AttentionArgs()
    args.q = tensor(arrays["q"], code, layout)
    args.k = tensor(arrays["k"], code, layout)
    args.v = tensor(arrays["v"], code, layout)
    args.o = tensor(out, code, layout)
    args.lse = lse.ctypes.data if lse is not None else None
    args.causal = 1 if causal else 0
    args.scale = scale
    args.stream = None
    name = _lib.call(_lib.context("emu", 0, db), args, plan)
    return out, lse, name
