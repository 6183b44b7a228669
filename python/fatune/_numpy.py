"""NumPy arrays (and CPU arrays of any framework, through DLPack) on the
emulator."""
from typing import List, Optional, Tuple

import numpy as np

from . import _lib

# By dtype.type, which is quick to get; bfloat16 (ml_dtypes) by name, once.
_CODES = {np.float32: _lib.FP32, np.float64: _lib.FP64, np.float16: _lib.FP16}


def dtype_code(name: str, a: np.ndarray) -> int:
    code = _CODES.get(a.dtype.type)
    if code is None:
        if a.dtype.name != "bfloat16":
            raise TypeError("%s: dtype %s is not one fatune runs (float16, bfloat16, float32, "
                            "float64)" % (name, a.dtype))
        code = _CODES[a.dtype.type] = _lib.BF16
    return code


def usable(a: np.ndarray) -> bool:
    """Whether the library takes a's strides as they are: in whole elements,
    none negative, the last one 1."""
    es = a.itemsize
    s = a.strides
    return (s[0] % es == 0 and s[1] % es == 0 and s[2] % es == 0 and min(s) >= 0
            and (s[3] == es or a.shape[3] == 1))


def fields(a: np.ndarray, code: int, layout: str) -> List[int]:
    """The tensor's fields for _lib.pack_args: data, dtype, shape, strides."""
    es = a.itemsize
    b, x, y, d = a.shape
    sb, sx, sy, sd = a.strides
    if layout == "bnhd":
        x, y, sx, sy = y, x, sy, sx
    return [a.ctypes.data, code, b, x, y, d, sb // es, sx // es, sy // es, sd // es]


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float,
              out: Optional[np.ndarray], return_lse: bool, layout: str,
              db: Optional[str], plan: bool = False
              ) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    code = dtype_code("q", q)
    ins = []
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, np.ndarray):
            raise TypeError("%s: a NumPy array like q, not %s" % (name, type(a).__name__))
        if a.dtype != q.dtype:
            raise TypeError("%s: dtype %s, but q's is %s" % (name, a.dtype, q.dtype))
        # Strides the kernels cannot take (negative, a strided head dim): a copy.
        ins.append(a if usable(a) else np.ascontiguousarray(a))
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
    lse = None
    if return_lse:
        b, h, n = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else \
                  (q.shape[0], q.shape[2], q.shape[1])
        lse = np.empty((b, h, n), np.float64 if code == _lib.FP64 else np.float32)
    args = _lib.pack_args(*fields(ins[0], code, layout), *fields(ins[1], code, layout),
                          *fields(ins[2], code, layout), *fields(out, code, layout),
                          lse.ctypes.data if lse is not None else 0, 1 if causal else 0,
                          scale, 0)
    name = _lib.call(_lib.context("emu", 0, db), args, plan)
    return out, lse, name
