"""The arguments of fatune.attention checked before anything reaches the
library, for NumPy arrays and PyTorch tensors alike: each failure a
TypeError or ValueError whose message starts with the argument's name."""
import math
import os
from typing import Any, List, Optional, Sequence, Tuple

LAYOUTS = ("bhnd", "bnhd")
DIM_MAX = 576                      # FA_DIM_MAX: the largest head dim of the kernels
SEQ_MAX = 1 << 24                  # rows, as libfatune takes them
# The kernels work in float32 on scale * log2(e) * score: a larger scale
# is no float32 (1e308 once gave NaN with status OK).
SCALE_MAX = 3.4028234663852886e38 / 1.4426950408889634

# causal: what a caller may pass, and the name the operator takes.
NONE, BOTTOM_RIGHT, TOP_LEFT = "none", "bottom_right", "top_left"
_CAUSAL = {False: NONE, True: BOTTOM_RIGHT, NONE: NONE, BOTTOM_RIGHT: BOTTOM_RIGHT,
           TOP_LEFT: TOP_LEFT}


def layout(value: Any) -> str:
    if value not in LAYOUTS:
        raise ValueError("layout: %r; it must be 'bhnd' or 'bnhd'" % (value,))
    return value


def causal(value: Any) -> str:
    """The mask's name: 'none', 'bottom_right' (True) or 'top_left'."""
    try:
        return _CAUSAL[value]
    except (KeyError, TypeError):
        raise ValueError("causal: %r; it must be False, True (= 'bottom_right') or "
                         "'top_left'" % (value,)) from None


def budget(max_rel_err: Any, deterministic: Any) -> Tuple[float, bool]:
    """The error budget as the library takes it: (0.0, False) for none."""
    if not isinstance(deterministic, bool):
        raise TypeError("deterministic: True or False, not %s" % type(deterministic).__name__)
    if max_rel_err is None:
        return 0.0, deterministic
    if isinstance(max_rel_err, bool) or not isinstance(max_rel_err, (int, float)):
        raise TypeError("max_rel_err: a number, not %s" % type(max_rel_err).__name__)
    e = float(max_rel_err)
    if not 1e-16 <= e <= 1:
        raise ValueError("max_rel_err: %r; a norm-relative error from 1e-16 to 1" % (max_rel_err,))
    return e, deterministic


def scale(value: Any) -> float:
    """The softmax scale as the library takes it: 0.0 for 1/sqrt(dim)."""
    if value is None:
        return 0.0
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise TypeError("scale: a number, not %s" % type(value).__name__) from None
    if not (0 < s <= SCALE_MAX and math.isfinite(s)):
        raise ValueError("scale: %r; it must be positive, finite and at most %.3g"
                         % (value, SCALE_MAX))
    return s


def shapes(q: Sequence[int], k: Sequence[int], v: Sequence[int], lay: str) -> None:
    """q, k, v's shapes against each other and the kernels' limits. v is
    shaped as k but for its head dim, which may differ (192/128)."""
    for name, s in (("q", q), ("k", k), ("v", v)):
        if len(s) != 4:
            raise ValueError("%s: shape %s; it must have 4 dims, (batch, %s, dim)"
                             % (name, tuple(s), "heads, seq" if lay == "bhnd"
                                else "seq, heads"))
    hd, sd = (1, 2) if lay == "bhnd" else (2, 1)
    for name, s in (("q", q), ("k", k), ("v", v)):
        if min(s) < 1:
            raise ValueError("%s: shape %s has an empty dim" % (name, tuple(s)))
        if s[sd] > SEQ_MAX:
            raise ValueError("%s: %d rows; at most 2^24" % (name, s[sd]))
    if tuple(v[:3]) != tuple(k[:3]):
        raise ValueError("v: shape %s, but k's is %s (they differ at most in the head dim)"
                         % (tuple(v), tuple(k)))
    if k[0] != q[0]:
        raise ValueError("k: batch %d, but q's is %d" % (k[0], q[0]))
    if q[3] > DIM_MAX:
        raise ValueError("q: head dim %d; fatune's kernels take 1 to %d" % (q[3], DIM_MAX))
    if k[3] != q[3]:
        raise ValueError("k: head dim %d, but q's is %d" % (k[3], q[3]))
    if v[3] > DIM_MAX:
        raise ValueError("v: head dim %d; fatune's kernels take 1 to %d" % (v[3], DIM_MAX))
    if q[hd] % k[hd]:
        raise ValueError("k: %d heads, which do not divide q's %d" % (k[hd], q[hd]))


FP8 = "float8_e4m3fn"               # the one 8-bit float fatune computes (e4m3)
DESCALES = ("q_descale", "k_descale", "v_descale")


def dtype_refused(name: str, dtype: Any, fp8: bool) -> str:
    """The message for a dtype fatune does not run here; fp8: whether
    float8_e4m3fn is one it runs here (fatune.attention's forward pass)."""
    text = str(dtype).replace("torch.", "")
    if text == FP8 and not fp8:
        return ("%s: dtype float8_e4m3fn (fp8) runs through fatune.attention alone: the "
                "forward pass over dense batches, O in bfloat16" % name)
    return ("%s: dtype %s is not one fatune runs (float16, bfloat16, float32, float64%s)"
            % (name, text, ", float8_e4m3fn" if fp8 else ""))


def descale_shape(q: Sequence[int], k: Sequence[int], lay: str) -> Tuple[int, int]:
    """The shape of fp8's descales: (batch, heads_kv), as FlashAttention-3's."""
    return (q[0], k[1 if lay == "bhnd" else 2])


def descale_rows(rows: Any) -> int:
    """descale_rows checked: 0 (a descale per (batch, K/V head)) or a power
    of two from 64 to 2^24 (a descale per block of that many rows)."""
    if isinstance(rows, bool) or not isinstance(rows, int):
        raise TypeError("descale_rows: an int, not %s" % type(rows).__name__)
    if rows and (rows < 64 or rows > 1 << 24 or rows & (rows - 1)):
        raise ValueError("descale_rows: %d; 0 (a descale per (batch, heads_kv)) or a power of "
                         "two from 64 to 2^24 (per block of that many rows)" % rows)
    return rows


def descale_shapes(q: Sequence[int], k: Sequence[int], lay: str, rows: int
                   ) -> Tuple[Tuple[int, ...], ...]:
    """The shapes of q's, k's and v's descales: each (batch, heads_kv); with
    rows, q's (batch, heads_q, ceil(seq_q / rows)) and k's and v's (batch,
    heads_kv, ceil(seq_k / rows))."""
    if not rows:
        one = descale_shape(q, k, lay)
        return (one, one, one)
    h, n = (1, 2) if lay == "bhnd" else (2, 1)
    kb = (k[0], k[h], -(-k[n] // rows))
    return ((q[0], q[h], -(-q[n] // rows)), kb, kb)


def descale_segments(rows: int, segs: List[Tuple[int, int, int, bool]], nk: int) -> None:
    """ValueError when descales per block of rows meet calls on parts of q's
    rows or k's (segments': a top-left causal mask where seq_q != seq_k),
    whose blocks the library would count from the part."""
    if rows and (len(segs) > 1 or segs[0][2] != nk):
        raise ValueError("descale_rows: not with a top-left causal mask where seq_q != "
                         "seq_k, which runs on parts of q's rows or k's")


def descale_text(rows: int) -> str:
    """What descale_shapes' shapes are, in words."""
    return ("(batch, heads_kv)" if not rows else
            "(batch, heads, ceil(seq / descale_rows)) of its own heads")


def no_descales(given: Sequence[Any], dtype: Any) -> None:
    """ValueError naming the first descale given beside inputs that are not fp8."""
    for name, x in zip(DESCALES, given):
        if x is not None:
            raise ValueError("%s: descales scale float8_e4m3fn inputs only, and q is %s"
                             % (name, str(dtype).replace("torch.", "")))


def o_shape(q: Sequence[int], v: Sequence[int]) -> Tuple[int, ...]:
    """O's shape (and dO's): q's, with v's head dim."""
    return tuple(q[:3]) + (v[3],)


def no_self_overlap(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no two elements of a tensor (strides in elements) share
    memory: each dim's stride, smallest first, steps past all the dims
    below it."""
    span = 0
    for st, n in sorted((st, n) for st, n in zip(strides, shape) if n > 1):
        if st <= span:
            return False
        span += (n - 1) * st
    return True


def extent(ptr: int, shape: Sequence[int], strides: Sequence[int], itemsize: int
           ) -> Tuple[int, int]:
    """The bytes [lo, hi) a tensor with non-negative strides (in elements)
    spans."""
    last = sum((n - 1) * st for n, st in zip(shape, strides))
    return ptr, ptr + (last + 1) * itemsize


def overlaps(out: Tuple[int, int], inputs: List[Tuple[str, Tuple[int, int]]]) -> None:
    """ValueError naming the first input whose bytes out's share."""
    for name, (lo, hi) in inputs:
        if lo < out[1] and out[0] < hi:
            raise ValueError("out: overlaps %s's memory; fatune writes O while it reads "
                             "q, k and v, so out must share no memory with them" % name)


def segments(nq: int, nk: int, mask: str) -> List[Tuple[int, int, int, bool]]:
    """The library's calls that make one mask: (first q row, end, k rows,
    causal). The library's causal mask is bottom-right; top-left is the
    same mask on the first seq_q keys when seq_q <= seq_k, else the first
    seq_k rows causal and the rest over every key."""
    if mask == NONE:
        return [(0, nq, nk, False)]
    if mask == BOTTOM_RIGHT or nq == nk:
        return [(0, nq, nk, True)]
    if nq < nk:
        return [(0, nq, nq, True)]
    return [(0, nk, nk, True), (nk, nq, nk, False)]


MOD_MAX_TEXT = 16384   # core/fa_mod.h's FA_MOD_MAX_TEXT


def mod(m: Any) -> Optional[Tuple[str, Optional[str], Tuple[Tuple[str, Any], ...]]]:
    """mod= as (spec, text, tensors): None; a built-in's spec ("window=256"),
    text None; the path of a modification file NAME.lua, read here, its
    name the spec; or a fatune.mods.Modification's, with its captured
    tensors as (name, values) pairs (() for the others). Raises TypeError
    or ValueError naming mod."""
    if m is None:
        return None
    if type(m).__name__ == "Modification" and type(m).__module__ == "fatune.mods":
        return (m.spec, m.text, m.tensors)
    if isinstance(m, os.PathLike):
        m = os.fspath(m)
    if not isinstance(m, str):
        raise TypeError("mod: a built-in such as 'window=256', a path to a NAME.lua file, or "
                        "a fatune.mods.Modification, not %s" % type(m).__name__)
    if not m.endswith(".lua"):
        return (m, None, ())
    try:
        with open(m, "rb") as f:
            data = f.read(MOD_MAX_TEXT + 1)
    except OSError as e:
        raise ValueError("mod: %s: %s" % (m, e.strerror)) from None
    if len(data) > MOD_MAX_TEXT:
        raise ValueError("mod: %s: longer than %d bytes" % (m, MOD_MAX_TEXT))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("mod: %s: not UTF-8 text" % m) from None
    if "\0" in text:
        raise ValueError("mod: %s: holds a NUL byte" % m)
    return (m, text, ())
