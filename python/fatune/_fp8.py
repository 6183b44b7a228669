"""fp8 (float8_e4m3fn) inputs made from wider ones: fatune.quantize_fp8."""
from typing import Any, Tuple

import numpy as np

from . import _check

E4M3_MAX = 448.0      # e4m3's largest finite value


def _hadamard_rotation(dim: int, seed: int) -> np.ndarray:
    """R = diag(s) H / sqrt(dim), float64: H the Sylvester-Hadamard matrix,
    s random signs from NumPy's default_rng(seed). R is orthogonal."""
    h = np.ones((1, 1))
    while h.shape[0] < dim:
        h = np.block([[h, h], [h, -h]])
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=dim)
    return signs[:, None] * h / np.sqrt(dim)


def _shapes(q: Any, k: Any, v: Any, layout: str, rotate: bool) -> int:
    """Checks the layout and shapes as fatune.attention does (ValueError
    naming the argument), and the rotation's head dim; K/V heads' group."""
    lay = _check.layout(layout)
    _check.shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), lay)
    d = q.shape[3]
    if rotate and d & (d - 1):
        raise ValueError("rotate: the Hadamard rotation needs a head dim that is a power of "
                         "2, and q's is %d" % d)
    hd = 1 if lay == "bhnd" else 2
    return q.shape[hd] // k.shape[hd]


def _grouped_amax(a: Any, layout: str, group: int, xp: Any) -> Any:
    """The largest |x| per (batch, K/V head), over the group's heads, rows and dim."""
    b = a.shape[0]
    if layout == "bhnd":
        g = a.reshape(b, a.shape[1] // group, group * a.shape[2] * a.shape[3])
    else:  # (b, n, h, d): the heads of a group are adjacent
        g = a.reshape(b, a.shape[1], a.shape[2] // group, group * a.shape[3])
        g = xp.moveaxis(g, 1, 2).reshape(b, a.shape[2] // group, -1)
    return xp.abs(g).max(-1) if xp is np else g.abs().amax(-1)


def _per_head(d: Any, a: Any, layout: str, group: int, xp: Any) -> Any:
    """Descales (batch, heads_kv) spread over a's heads, shaped to broadcast."""
    rep = np.repeat(d, group, axis=1) if xp is np else d.repeat_interleave(group, dim=1)
    return rep.reshape(a.shape[0], -1, 1, 1) if layout == "bhnd" else rep.reshape(a.shape[0], 1, -1, 1)


def _bhnd(a: Any, layout: str, xp: Any) -> Any:
    """a as (batch, heads, seq, dim): a view of a (b, n, h, d) array."""
    if layout == "bhnd":
        return a
    return np.swapaxes(a, 1, 2) if xp is np else a.transpose(1, 2)


def _block_amax(a: Any, layout: str, rows: int, xp: Any) -> Any:
    """The largest |x| per (batch, head, block of rows): (b, h, ceil(n / rows))."""
    x = _bhnd(a, layout, xp)
    b, h, n, d = x.shape
    nb = -(-n // rows)
    x = xp.abs(x)
    if nb * rows != n:   # the last block's missing rows as zeros
        pad = (b, h, nb * rows - n, d)
        x = np.concatenate([x, np.zeros(pad)], 2) if xp is np else \
            xp.cat([x, xp.zeros(pad, dtype=x.dtype, device=x.device)], 2)
    g = x.reshape(b, h, nb, rows * d)
    return g.max(-1) if xp is np else g.amax(-1)


def _per_block(d: Any, a: Any, layout: str, rows: int, xp: Any) -> Any:
    """Descales (batch, heads, blocks) spread over a's rows, shaped to broadcast."""
    n = a.shape[2 if layout == "bhnd" else 1]
    rep = (np.repeat(d, rows, axis=2) if xp is np else d.repeat_interleave(rows, dim=2))[:, :, :n]
    rep = rep[..., None]
    return rep if layout == "bhnd" else _bhnd(rep, layout, xp)


def _scales(name: str, a: Any, layout: str, grp: int, rows: int, xp: Any) -> Tuple[Any, Any]:
    """a's descales (per (batch, K/V head) over grp heads, or per block of
    rows of each head) and a divided by them, broadcast."""
    if rows:
        d = _descale_of(name, _block_amax(a, layout, rows, xp), xp)
        return d, a / _per_block(d, a, layout, rows, xp)
    d = _descale_of(name, _grouped_amax(a, layout, grp, xp), xp)
    return d, a / _per_head(d, a, layout, grp, xp)


def _descale_of(name: str, amax: Any, xp: Any) -> Any:
    """amax / 448, 1 for a block of zeros; ValueError when amax is not finite."""
    finite = bool(np.isfinite(amax).all()) if xp is np else bool(xp.isfinite(amax).all())
    if not finite:
        raise ValueError("%s: holds NaN or infinity, which no scale makes fp8" % name)
    d = amax / E4M3_MAX
    return xp.where(amax > 0, d, xp.ones_like(d))


def _numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, layout: str, group: int,
           r: Any, rows: int) -> Tuple[Any, ...]:
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("q: NumPy has float8_e4m3fn only through ml_dtypes: "
                        "pip install ml_dtypes") from None
    out, ds = [], []
    for name, x, grp in (("q", q, group), ("k", k, 1), ("v", v, 1)):
        if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
            raise TypeError("%s: dtype %s; fatune.quantize_fp8 takes floating-point inputs"
                            % (name, x.dtype))
        a = x.astype(np.float64)
        if r is not None and name != "v":
            a = a @ r
        d, y = _scales(name, a, layout, grp, rows, np)
        y = np.clip(y, -E4M3_MAX, E4M3_MAX)
        out.append(np.ascontiguousarray(y.astype(ml_dtypes.float8_e4m3fn)))
        ds.append(d.astype(np.float32))
    return (*out, *ds)


def _torch(q: Any, k: Any, v: Any, layout: str, group: int, r: Any,
           rows: int) -> Tuple[Any, ...]:
    import torch
    fp8 = getattr(torch, _check.FP8, None)
    if fp8 is None:
        raise TypeError("q: this PyTorch has no float8_e4m3fn")
    out, ds = [], []
    for name, x, grp in (("q", q, group), ("k", k, 1), ("v", v, 1)):
        if not x.is_floating_point() or x.dtype == fp8:
            raise TypeError("%s: dtype %s; fatune.quantize_fp8 takes float16, bfloat16, "
                            "float32 or float64" % (name, str(x.dtype).replace("torch.", "")))
        if x.device != q.device:
            raise ValueError("%s: on %s, but q is on %s" % (name, x.device, q.device))
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        a = x.detach().to(wide)
        if r is not None and name != "v":
            a = a @ torch.from_numpy(r).to(device=a.device, dtype=wide)
        d, y = _scales(name, a, layout, grp, rows, torch)
        y = y.clamp(-E4M3_MAX, E4M3_MAX)
        out.append(y.to(fp8).contiguous())
        ds.append(d.to(torch.float32).contiguous())
    return (*out, *ds)


def quantize_fp8(q: Any, k: Any, v: Any, layout: str = "bhnd", rotate: bool = False,
                 seed: int = 0, block_rows: int = 0) -> Tuple[Any, ...]:
    """q, k and v rounded to float8_e4m3fn for fatune.attention, with
    FlashAttention-3's scaling, and optionally its incoherent processing.

        q8, k8, v8, qd, kd, vd = fatune.quantize_fp8(q, k, v, rotate=True)
        o = fatune.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)

    q, k, v: PyTorch tensors (any device; computed there in float32, or
    float64 for float64) or NumPy arrays (float64; float8_e4m3fn through
    ml_dtypes), float16, bfloat16, float32 or float64, shaped as
    fatune.attention takes them in `layout` (GQA: q's heads a multiple of
    k's). Each (batch, K/V head) gets one scale, as FlashAttention-3's
    descales: d = amax / 448 over the K/V head's rows (for q, over the
    query heads that share it; 1 where all are 0), x8 = e4m3(x / d), to
    nearest even, so that the largest value becomes e4m3's largest, 448.

    rotate: q and k are first multiplied by R = diag(s) H / sqrt(dim), H
    the Sylvester-Hadamard matrix and s random signs from NumPy's
    default_rng(seed). R is orthogonal, so (q R)(k R)^T = q k^T and the
    attention is the same, while an outlier channel is spread over all
    dim channels, where the scale fits the rest better: lower error on
    inputs with outliers (`fatune explore --axis quant` measures it).
    The head dim must then be a power of 2.

    block_rows: 0, or R (a power of two from 64) for a scale per block of
    R rows of each head instead, FlashAttention-3's block quantization:
    q's descales (batch, heads_q, ceil(seq_q / R)), k's and v's (batch,
    heads_kv, ceil(seq_k / R)), for fatune.attention(..., descale_rows=R).
    A block's outlier then costs only its own rows precision.

    Returns (q8, k8, v8, q_descale, k_descale, v_descale): the inputs in
    float8_e4m3fn, contiguous, and the descales, float32 (batch, heads_kv)
    or per block, of q's kind and on its device. ValueError for shapes that do not fit,
    NaN or infinity in an input, or rotate with another head dim;
    TypeError for other dtypes or kinds.
    """
    rows = _check.descale_rows(block_rows)
    is_np = [isinstance(x, np.ndarray) for x in (q, k, v)]
    if all(is_np):
        group = _shapes(q, k, v, layout, rotate)
        r = _hadamard_rotation(q.shape[3], seed) if rotate else None
        return _numpy(q, k, v, layout, group, r, rows)
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not all(isinstance(x, torch.Tensor) for x in (q, k, v)) or any(is_np):
        raise TypeError("q, k, v: three PyTorch tensors or three NumPy arrays, not %s"
                        % ", ".join(type(x).__name__ for x in (q, k, v)))
    group = _shapes(q, k, v, layout, rotate)
    r = _hadamard_rotation(q.shape[3], seed) if rotate else None
    return _torch(q, k, v, layout, group, r, rows)
