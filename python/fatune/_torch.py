"""PyTorch tensors: CUDA tensors on their GPU and current stream, CPU
tensors on the emulator; and the fatune::attention operator, with a fake
implementation for torch.compile and graphs."""
from typing import List, Optional, Tuple

import torch

from . import _lib

_CODES = {torch.float32: _lib.FP32, torch.float64: _lib.FP64, torch.float16: _lib.FP16,
          torch.bfloat16: _lib.BF16}


def _usable(t: torch.Tensor) -> bool:
    return t.shape[-1] == 1 or t.stride(-1) == 1


def _fields(t: torch.Tensor, code: int, layout: str) -> List[int]:
    """The tensor's fields for _lib.pack_args: data, dtype, shape, strides."""
    b, x, y, d = t.shape
    sb, sx, sy, sd = t.stride()
    if layout == "bnhd":
        x, y, sx, sy = y, x, sy, sx
    return [t.data_ptr(), code, b, x, y, d, sb, sx, sy, sd]


def _lse_shape(q: torch.Tensor, layout: str) -> Tuple[int, int, int]:
    if layout == "bhnd":
        return (q.shape[0], q.shape[1], q.shape[2])
    return (q.shape[0], q.shape[2], q.shape[1])


def _lse_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: Optional[torch.Tensor], causal: bool, scale: float, layout: str,
        db: Optional[str] = None, plan: bool = False) -> str:
    """out (and lse) for q, k, v; every argument already checked. With plan,
    the variant's name, and nothing launched."""
    code = _CODES[q.dtype]
    # Strides the kernels cannot take (a strided head dim): a copy, made on
    # the stream the kernel runs on, so it lives as long as the kernel needs.
    q, k, v = (t if _usable(t) else t.contiguous() for t in (q, k, v))
    if q.is_cuda:
        stream = torch.cuda.current_stream(q.device).cuda_stream
        ctx = _lib.context("cuda", q.device.index if q.device.index is not None
                           else torch.cuda.current_device(), db)
    else:
        stream = 0
        ctx = _lib.context("emu", 0, db)
    args = _lib.pack_args(*_fields(q, code, layout), *_fields(k, code, layout),
                          *_fields(v, code, layout), *_fields(out, code, layout),
                          lse.data_ptr() if lse is not None else 0, 1 if causal else 0,
                          scale, stream)
    return _lib.call(ctx, args, plan)


def check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          out: Optional[torch.Tensor]) -> None:
    """TypeError or ValueError naming the argument the kernels cannot take."""
    if q.dtype not in _CODES:
        raise TypeError("q: dtype %s is not one fatune runs (float16, bfloat16, float32, "
                        "float64)" % q.dtype)
    if q.device.type not in ("cuda", "cpu"):
        raise TypeError("q: on %s; fatune runs CUDA tensors, and CPU ones on its emulator"
                        % q.device)
    named = [("k", k), ("v", v)] + ([("out", out)] if out is not None else [])
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: a torch.Tensor like q, not %s" % (name, type(t).__name__))
        if t.dtype != q.dtype:
            raise TypeError("%s: dtype %s, but q's is %s" % (name, t.dtype, q.dtype))
        if t.device != q.device:
            raise ValueError("%s: on %s, but q is on %s" % (name, t.device, q.device))
    if out is not None:
        if out.shape != q.shape:
            raise ValueError("out: shape %s, but q's is %s" % (tuple(out.shape),
                                                              tuple(q.shape)))
        if not _usable(out):
            raise ValueError("out: stride %d along the head dim; it must be 1" % out.stride(-1))
        if out.requires_grad:
            raise ValueError("out: requires grad; fatune computes the forward pass only")


@torch.library.custom_op("fatune::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float, layout: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and the logsumexp ([batch][heads][seq_q], fp32; fp64 for fp64)."""
    out = torch.empty_like(q)
    lse = q.new_empty(_lse_shape(q, layout), dtype=_lse_dtype(q))
    run(q, k, v, out, lse, causal, scale, layout)
    return out, lse


@attention_op.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float, layout: str) -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), q.new_empty(_lse_shape(q, layout), dtype=_lse_dtype(q))
