"""NumPy arrays (and CPU arrays of any framework, through DLPack) on the
emulator."""
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _check, _lib

# By dtype.type, which is quick to get; bfloat16 and float8_e4m3fn
# (ml_dtypes) by name, once.
_CODES = {np.float32: _lib.FP32, np.float64: _lib.FP64, np.float16: _lib.FP16}
_BY_NAME = {"bfloat16": _lib.BF16, _check.FP8: _lib.E4M3}


def dtype_code(name: str, a: np.ndarray, fp8: bool = False) -> int:
    """The library's code for a's dtype; fp8: whether float8_e4m3fn is
    taken (fatune.attention's forward pass alone), else TypeError."""
    code = _CODES.get(a.dtype.type)
    if code is None:
        code = _BY_NAME.get(a.dtype.name)
        if code is None:
            raise TypeError(_check.dtype_refused(name, a.dtype, fp8))
        _CODES[a.dtype.type] = code
    if code == _lib.E4M3 and not fp8:
        raise TypeError(_check.dtype_refused(name, a.dtype, fp8))
    return code


def _bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16: O's dtype beside float8_e4m3fn inputs."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("q: float8_e4m3fn inputs give O in bfloat16, which NumPy has only "
                        "through ml_dtypes: pip install ml_dtypes") from None
    return np.dtype(ml_dtypes.bfloat16)


def _descales(given: Tuple[Any, Any, Any], want: Tuple[Tuple[int, ...], ...], code: int,
              q: np.ndarray, rows: int = 0) -> Tuple[List[np.ndarray], Tuple[int, int, int]]:
    """fp8's descales as the library takes them: (the arrays to keep alive,
    their addresses, 0 for None). Each None or a float32 array of its shape
    in want (_check.descale_shapes'), made contiguous and native; TypeError
    or ValueError naming it."""
    if code != _lib.E4M3:
        _check.no_descales(given, q.dtype)
        if rows:
            raise ValueError("descale_rows: descales scale float8_e4m3fn inputs only, and q "
                             "is %s" % q.dtype)
        return [], (0, 0, 0)
    keep, addr = [], []
    for name, x, shape in zip(_check.DESCALES, given, want):
        if x is None:
            addr.append(0)
            continue
        if not isinstance(x, np.ndarray):
            raise TypeError("%s: a NumPy array of float32, %s, like q, not %s"
                            % (name, _check.descale_text(rows), type(x).__name__))
        if x.dtype.newbyteorder("=") != np.float32:
            raise TypeError("%s: dtype %s; descales are float32, as FlashAttention-3's"
                            % (name, x.dtype))
        if x.shape != shape:
            raise ValueError("%s: shape %s; it must be %s = %s"
                             % (name, x.shape, _check.descale_text(rows), shape))
        x = np.ascontiguousarray(x, dtype=np.float32)
        keep.append(x)
        addr.append(x.ctypes.data)
    return keep, (addr[0], addr[1], addr[2])


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


def _input(name: str, a: Any, q: np.ndarray, fp8: bool = False) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError("%s: a NumPy array like q, not %s" % (name, type(a).__name__))
    if a.dtype != q.dtype and a.dtype.newbyteorder("=") != q.dtype.newbyteorder("="):
        raise TypeError("%s: dtype %s, but q's is %s" % (name, a.dtype, q.dtype))
    dtype_code(name, a, fp8)


def _native(a: np.ndarray) -> np.ndarray:
    """a as the kernels can read it: '>f4' on a little-endian host
    converted, strides they cannot take (negative, a strided head dim)
    copied."""
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a if usable(a) else np.ascontiguousarray(a)


def _output(out: Any, q: np.ndarray, ins: List[np.ndarray], originals: List[Any],
            odt: np.dtype) -> np.ndarray:
    """O: out checked, else a new array of dtype odt (q's; bfloat16 beside
    float8_e4m3fn)."""
    shape = _check.o_shape(q.shape, originals[2].shape)
    if out is None:
        return np.empty(shape, odt)   # C order, whatever q's
    if not isinstance(out, np.ndarray):
        raise TypeError("out: a NumPy array like q, not %s" % type(out).__name__)
    if not out.dtype.isnative:
        raise TypeError("out: byte order of %s is not this machine's; fatune writes native "
                        "%s" % (out.dtype.str, out.dtype.newbyteorder("=").name))
    if out.dtype != odt or out.shape != shape:
        raise ValueError("out: %s %s, but q is %s %s (out takes v's head dim%s)"
                         % (out.dtype, out.shape, q.dtype, q.shape,
                            "; float8_e4m3fn's O is bfloat16" if odt != ins[0].dtype else ""))
    if not out.flags.writeable:
        raise ValueError("out: read-only")
    if not usable(out):
        raise ValueError("out: strides %s: they must be whole elements, not negative, "
                         "and 1 element along the head dim" % (out.strides,))
    if not _check.no_self_overlap(out.shape, [s // out.itemsize for s in out.strides]):
        raise ValueError("out: strides %s make its elements overlap" % (out.strides,))
    for name, a in zip("qkv", originals):
        if np.may_share_memory(out, a):
            raise ValueError("out: overlaps %s's memory; fatune writes O while it reads "
                             "q, k and v, so out must share no memory with them" % name)
    return out


def attention(q: np.ndarray, k: Any, v: Any, mask: str, scale: float,
              out: Optional[np.ndarray], return_lse: bool, layout: str,
              db: Optional[str], plan: bool = False, max_rel_err: float = 0.0,
              deterministic: bool = False, mod: _lib.Mod = None,
              descales: Tuple[Any, Any, Any] = (None, None, None), descale_rows: int = 0
              ) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    for name, a in (("q", q), ("k", k), ("v", v)):
        _input(name, a, q, fp8=True)
    _check.shapes(q.shape, k.shape, v.shape, layout)
    originals = [q, k, v]
    ins = [_native(a) for a in originals]
    code = dtype_code("q", ins[0], fp8=True)
    rows = _check.descale_rows(descale_rows)
    keep, ds = _descales(descales, _check.descale_shapes(q.shape, k.shape, layout, rows), code, q,
                         rows)
    # fp8: O in bfloat16, on the emulator's sm_90a (the one target that computes it).
    fp8 = code == _lib.E4M3
    ocode, arch = (_lib.BF16, _lib.FP8_EMU_ARCH) if fp8 else (code, None)
    out = _output(out, q, ins, originals, _bfloat16() if fp8 else q.dtype.newbyteorder("="))
    lse = None
    b, h, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else \
               (q.shape[0], q.shape[2], q.shape[1])
    if return_lse:
        lse = np.empty((b, h, nq), np.float64 if code == _lib.FP64 else np.float32)
    nk = ins[1].shape[2 if layout == "bhnd" else 1]
    ctx = _lib.context("emu", 0, db, arch)
    with _lib.modification(ctx, mod) as handle:
        segs = _check.segments(nq, nk, mask)
        _check.descale_segments(rows, segs, nk)
        if len(segs) == 1 and segs[0][:3] == (0, nq, nk):   # one call on the arrays as given
            args = _lib.pack_args(*fields(ins[0], code, layout), *fields(ins[1], code, layout),
                                  *fields(ins[2], code, layout), *fields(out, ocode, layout),
                                  lse.ctypes.data if lse is not None else 0,
                                  1 if segs[0][3] else 0, scale, 0, max_rel_err=max_rel_err,
                                  deterministic=deterministic, mod=handle, descales=ds,
                                  descale_rows=rows)
            name = _lib.call(ctx, args, plan)
            del keep
            return out, lse, name
        names = []
        for lo, hi, rows, causal in segs:
            part, keys = _rows(layout, lo, hi), _rows(layout, 0, rows)
            # The library's logsumexp is (batch, heads, its rows), contiguous.
            part_lse = np.empty((b, h, hi - lo), lse.dtype) if lse is not None else None
            args = _lib.pack_args(*fields(ins[0][part], code, layout),
                                  *fields(ins[1][keys], code, layout),
                                  *fields(ins[2][keys], code, layout),
                                  *fields(out[part], ocode, layout),
                                  part_lse.ctypes.data if part_lse is not None else 0,
                                  1 if causal else 0, scale, 0, max_rel_err=max_rel_err,
                                  deterministic=deterministic, descales=ds)
            names.append(_lib.call(ctx, args, plan))
            if lse is not None:
                lse[:, :, lo:hi] = part_lse
        del keep
        return out, lse, " + ".join(names)


def attention_backward(grad_o: np.ndarray, q: np.ndarray, k: Any, v: Any, out: Any, lse: Any,
                       grad_lse: Any, mask: str, scale: float, layout: str,
                       db: Optional[str], mod: _lib.Mod = None
                       ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dq, dk, dv (new arrays, C order, shaped as q, k, v) of attention's
    output out and logsumexp lse for q, k, v, under modification mod (as
    _check.mod gives it); one library call per segment of the mask, the
    key gradients of several summed."""
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out), ("grad_o", grad_o)):
        _input(name, a, q)
    _check.shapes(q.shape, k.shape, v.shape, layout)
    for name, a in (("out", out), ("grad_o", grad_o)):
        if a.shape != _check.o_shape(q.shape, v.shape):
            raise ValueError("%s: shape %s, but q's is %s and v's head dim %d"
                             % (name, a.shape, q.shape, v.shape[3]))
    ins = [_native(a) for a in (q, k, v, out, grad_o)]
    code = dtype_code("q", ins[0])
    b, h, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else \
               (q.shape[0], q.shape[2], q.shape[1])
    lt = np.float64 if code == _lib.FP64 else np.float32
    stats = []
    for name, a in (("lse", lse), ("grad_lse", grad_lse)):
        if a is None and name == "grad_lse":
            stats.append(None)
            continue
        if not isinstance(a, np.ndarray) or a.shape != (b, h, nq) or \
                a.dtype.newbyteorder("=") != np.dtype(lt):
            raise ValueError("%s: want a NumPy array of shape %s, dtype %s, as "
                             "fatune.attention(..., return_lse=True) returns lse"
                             % (name, (b, h, nq), np.dtype(lt).name))
        stats.append(np.ascontiguousarray(a, dtype=lt))
    nk = ins[1].shape[2 if layout == "bhnd" else 1]
    dt = ins[0].dtype
    segs = _check.segments(nq, nk, mask)
    whole = len(segs) == 1 and segs[0][2] == nk
    dq = np.empty(q.shape, dt)
    dk = np.empty(k.shape, dt) if whole else np.zeros(k.shape, dt)
    dv = np.empty(v.shape, dt) if whole else np.zeros(v.shape, dt)
    ctx = _lib.context("emu", 0, db)
    with _lib.modification(ctx, mod) as handle:
        for lo, hi, rows, causal in segs:
            part, keys = _rows(layout, lo, hi), _rows(layout, 0, rows)
            # The library's logsumexps are (batch, heads, its rows), contiguous.
            part_lse, part_dlse = (None if x is None else np.ascontiguousarray(x[:, :, lo:hi])
                                   for x in stats)
            pdk = dk if whole else np.empty(dk[keys].shape, dt)
            pdv = dv if whole else np.empty(dv[keys].shape, dt)
            args = _lib.pack_backward_args(
                *fields(ins[0][part], code, layout), *fields(ins[1][keys], code, layout),
                *fields(ins[2][keys], code, layout), *fields(ins[3][part], code, layout),
                *fields(ins[4][part], code, layout), *fields(dq[part], code, layout),
                *fields(pdk, code, layout), *fields(pdv, code, layout),
                part_lse.ctypes.data, 1 if causal else 0, scale, 0,
                part_dlse.ctypes.data if part_dlse is not None else 0, mod=handle)
            _lib.call_backward(ctx, args)
            if not whole:
                # Summed in float64: the two calls' shares, each rounded once.
                dk[keys] = (dk[keys].astype(np.float64) + pdk.astype(np.float64)).astype(dt)
                dv[keys] = (dv[keys].astype(np.float64) + pdv.astype(np.float64)).astype(dt)
        return dq, dk, dv


def _rows(layout: str, lo: int, hi: int) -> Tuple[slice, ...]:
    """The index of rows lo to hi along seq."""
    return (slice(None), slice(None), slice(lo, hi)) if layout == "bhnd" else \
           (slice(None), slice(lo, hi))
