"""fatune: FlashAttention, forward and backward, with the kernels fatune tuned.

    import fatune
    o = fatune.attention(q, k, v, causal=True)

q, k and v are PyTorch tensors (CUDA ones run on their GPU, on the current
stream; CPU ones on fatune's CPU emulator), NumPy arrays (on the emulator),
or any arrays that speak DLPack. Gradients: autograd for tensors,
fatune.attention_backward for NumPy arrays. fatune.tune measures the variants for a
problem into the results database, fatune.best says what it holds; the
library then runs the best variant for each problem it is given.
"""
import importlib.util
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _check, _kvcache, _lib, _numpy, _varlen, mods
from ._fp8 import quantize_fp8
from ._kvcache import DecodePlan
from ._lib import Error

try:
    from importlib.metadata import PackageNotFoundError, version as _dist_version
    __version__ = _dist_version("fatune")
except PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

__all__ = ["Error", "attention", "attention_backward", "attention_varlen",
           "attention_varlen_backward", "mods", "quantize_fp8",
           "attention_with_kvcache", "plan_decode", "DecodePlan", "plan", "tune",
           "best", "reload", "executable", "__version__"]

_DLPACK_CPU, _DLPACK_CUDA = 1, 2

# PyTorch: its tensors are taken, and the operators fatune::attention and
# fatune::attention_out registered, when it can be imported (2.4 or later:
# torch.library.custom_op). The submodule is bound under another name than
# its own: `from . import _torch` returns an attribute of that name when
# the package has one, and never imports the submodule.
_pt: Any = None
_torch_error = ""     # why PyTorch's tensors cannot be taken, when it is installed
try:
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        from . import _torch as _pt
except ModuleNotFoundError as e:
    if e.name != "torch":
        _torch_error = str(e)
except (ValueError, ImportError) as e:
    # ValueError: find_spec of a module set to None in sys.modules (no torch).
    _torch_error = "" if isinstance(e, ValueError) else str(e)
except Exception as e:  # a broken install: said when a tensor comes
    _torch_error = "importing it failed: %s: %s" % (type(e).__name__, e)


def _is_torch(x: Any) -> bool:
    if _pt is not None:
        return isinstance(x, _pt.torch.Tensor)
    return False


def _torch_like(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _from_dlpack(name: str, x: Any) -> Any:
    """A NumPy array or torch tensor on the same memory as DLPack array x."""
    try:
        dev_type, _ = x.__dlpack_device__()
    except Exception as e:
        raise TypeError("%s: __dlpack_device__ failed: %s" % (name, e)) from None
    if dev_type == _DLPACK_CPU:
        try:
            return np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError) as e:
            raise TypeError("%s: NumPy cannot take this DLPack array: %s" % (name, e)) from None
    if dev_type == _DLPACK_CUDA and _pt is not None:
        return _pt.torch.from_dlpack(x)
    raise TypeError("%s: a DLPack array on device type %d; fatune takes CPU arrays, and CUDA "
                    "ones with PyTorch 2.4 or later installed" % (name, dev_type))


def _arrays(q: Any, k: Any, v: Any, out: Any) -> Tuple[Any, Any, Any, Any]:
    """The four as NumPy arrays or torch tensors."""
    named = {"q": q, "k": k, "v": v, "out": out}
    for name, x in named.items():
        if x is None and name == "out":
            continue
        if isinstance(x, np.ndarray) or _is_torch(x):
            continue
        if _pt is None and _torch_like(x):
            raise TypeError("%s: a PyTorch tensor, but fatune cannot take PyTorch's tensors "
                            "here: %s" % (name, _torch_error or "PyTorch did not load"))
        if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
            named[name] = _from_dlpack(name, x)
        else:
            raise TypeError("%s: a PyTorch tensor, a NumPy array or a DLPack array, not %s"
                            % (name, type(x).__name__))
    return named["q"], named["k"], named["v"], named["out"]


def attention(q: Any, k: Any, v: Any, causal: Union[bool, str] = False,
              scale: Optional[float] = None, out: Any = None, return_lse: bool = False,
              layout: str = "bhnd", db: Optional[str] = None,
              max_rel_err: Optional[float] = None, deterministic: bool = False,
              mod: Any = None, score_mod: Any = None, mask_mod: Any = None,
              block_mask: Any = None, q_descale: Any = None, k_descale: Any = None,
              v_descale: Any = None, descale_rows: int = 0) -> Any:
    """Attention forward: softmax(scale * q k^T) v, per batch and head.

    q: (batch, heads, seq_q, dim) with layout "bhnd", (batch, seq_q, heads,
    dim) with layout "bnhd"; k and v likewise with seq_k rows and a number of
    heads that divides q's (grouped-query and multi-query attention: q head
    h reads k/v head h // (heads_q // heads_kv)); v's head dim may differ
    from q's and k's (192 and 128, as DeepSeek's), and O takes v's. Any strides; a strided
    head dim (or NumPy's byte-swapped or negatively strided arrays) is
    copied. Head dim 1 to 576 (past 256 on CUDA cores). dtype float16,
    bfloat16, float32 or float64, the same for all; or float8_e4m3fn (fp8,
    torch.float8_e4m3fn or ml_dtypes.float8_e4m3fn), as FlashAttention-3's
    fp8 forward pass: O in bfloat16, on an H100 or H200 (CUDA tensors) or
    the emulator, which runs it at sm_90a whatever $FATUNE_EMU_ARCH says;
    head dim a multiple of 8 up to 256, v's head dim q's, no gradient (a
    tensor that requires grad is refused outside torch.no_grad()).
    q_descale, k_descale, v_descale: fp8 only, each None (1) or float32
    (batch, heads_kv), a tensor on q's device or a NumPy array, as
    FlashAttention-3's: O = softmax(scale q_descale k_descale q k^T) v
    v_descale, the query heads of a K/V head taking its. descale_rows: 0,
    or R (a power of two from 64) for a descale per block of R rows of
    each head instead (FlashAttention-3's block quantization;
    fatune.quantize_fp8(..., block_rows=R) makes them): q_descale (batch,
    heads_q, ceil(seq_q / R)), k_descale and v_descale (batch, heads_kv,
    ceil(seq_k / R)); not with a top-left causal mask where seq_q != seq_k.

    PyTorch CUDA tensors run on their GPU, on its current stream, without
    waiting; CPU tensors and NumPy arrays run on the emulator. Other arrays
    come in through DLPack and the result is a NumPy array (CPU) or a torch
    tensor (CUDA). Tensors go through the operators fatune::attention
    (fatune::attention_out with out=), which torch.compile and torch.export
    see, with an autograd formula that runs fatune's backward pass; out=
    refuses inputs that require grad, as PyTorch's out= functions do.

    causal: False; True or "bottom_right" masks the keys after each query
    with the mask aligned to the bottom-right corner when seq_q != seq_k
    (query i sees keys up to i + seq_k - seq_q, as flash_attn 2.1 and
    later; rows that see no key give 0 and a logsumexp of -inf);
    "top_left" aligns it to the top-left corner (query i sees keys 0..i),
    as PyTorch's scaled_dot_product_attention(is_causal=True). scale: the
    softmax scale, 1/sqrt(dim) if None. out: where to write O (shaped as q
    with v's head dim, typed as q, sharing no memory with q, k or v), else a new array,
    contiguous in the layout given. return_lse: also return the
    logsumexp of each row, (batch, heads, seq_q), float32 (float64 for
    float64). db: the results database (default: $FATUNE_DB, else
    ~/.cache/fatune/fatune.db).

    max_rel_err, deterministic: run only a variant recorded within that
    error budget (its norm-relative error on its main case and on every
    case of the adversarial suite, 1e-16 to 1) and that gave the same bits
    every run, as `fatune best --max-error E --deterministic` chooses;
    fatune.Error (status FATUNE_ENOTUNED) when none is recorded, never the
    default. On tensors that require grad, the backward pass keeps the
    budget: its variant too must be recorded within it (`fatune --op bwd`).

    mod: a score or mask modification: a built-in ("window=256",
    "softcap=30", "alibi", "prefixlm=128", "chunked=1024"), the path of
    a NAME.lua file (the README's "Score and mask modifications") or a
    fatune.mods.Modification (fatune.mods.sliding_window(256), ...); the
    variant recorded best under it (`fatune --mod`), else the default under
    it. On NumPy arrays, and on tensors (eagerly and under torch.compile)
    with their gradients under it through autograd. Not with a top-left
    causal mask. score_mod(score, b, h, q_idx, kv_idx) and mask_mod(b, h,
    q_idx, kv_idx): FlexAttention-style Python functions instead, traced
    into one (fatune.mods.from_functions). block_mask: a FlexAttention
    BlockMask (torch.nn.attention.flex_attention.create_block_mask) for
    seq_q and seq_k, instead of mask_mod: its mask_mod, or where it has
    none its blocks (fatune.mods.from_block_mask).

    Returns O, or (O, lse). Raises TypeError or ValueError naming the
    argument that is wrong, fatune.Error when the library fails.
    """
    if block_mask is not None:
        if mod is not None or mask_mod is not None:
            raise ValueError("block_mask: not with mod= or mask_mod= (it brings its mask)")
        mod = mods.from_block_mask(block_mask, score_mod, _seq_lengths(q, k, layout))
    elif score_mod is not None or mask_mod is not None:
        if mod is not None:
            raise ValueError("score_mod, mask_mod: not with mod= (one modification a call)")
        mod = mods.from_functions(score_mod, mask_mod)
    o, lse, _ = _attention(q, k, v, causal, scale, out, return_lse, layout, db, False,
                           max_rel_err, deterministic, mod, (q_descale, k_descale, v_descale),
                           descale_rows)
    return (o, lse) if return_lse else o


def _seq_lengths(q: Any, k: Any, layout: str) -> Tuple[int, int]:
    """seq_q and seq_k of q and k in the layout, for a block mask's check."""
    sd = 2 if layout == "bhnd" else 1
    if len(getattr(q, "shape", ())) != 4 or len(getattr(k, "shape", ())) != 4:
        raise ValueError("q, k: (batch, heads, seq, dim) arrays for a block_mask")
    return int(q.shape[sd]), int(k.shape[sd])


def attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                     softmax_scale: Optional[float] = None, return_softmax_lse: bool = False,
                     deterministic: bool = False, db: Optional[str] = None,
                     mod: Any = None) -> Any:
    """A variable-length batch, as flash_attn_varlen_func computes it (the
    README's "Variable-length batches"), with its names.

    q: (total_q, heads, dim), every sequence's query tokens packed one
    sequence after another; k, v: (total_k, kv_heads, dim), its keys and
    values; kv_heads divides heads; v's head dim may differ. cu_seqlens_q,
    cu_seqlens_k: (batch + 1,) int32 offsets, sequence b's tokens from
    cu_seqlens[b] up to cu_seqlens[b + 1]; lengths 0 allowed. max_seqlen_q,
    max_seqlen_k: the longest sequences, which pick the variant (the one
    tuned for that dense key, run with variable-length addressing). causal:
    each sequence on its own, bottom-right aligned. softmax_scale:
    1/sqrt(dim) if None.

    NumPy arrays run on the emulator; PyTorch CUDA tensors on their GPU and
    current stream (the call waits for the kernels: it reads their check of
    the offsets back), CPU tensors on the emulator. Tensors that require
    grad get their gradients through autograd (fatune's varlen backward
    pass; deterministic: only a variant recorded as giving the same bits
    every run); NumPy arrays through fatune.attention_varlen_backward.
    mod: a score or mask modification, as fatune.attention's, over each
    sequence on its own (seq_q, seq_k and the indices its own, b its index
    in the batch): flash_attn's window_size, softcap and alibi through it.
    Not (yet) as flash_attn: no dropout. Offsets that are negative,
    decreasing, past the tokens or wider than the maxima are never
    followed: fatune.Error says so after the call.

    Returns O (total_q, heads, dim_v), or (O, lse) with lse (heads,
    total_q), float32 (float64 for float64), -inf where a row sees no key.
    """
    return _varlen.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, causal, softmax_scale, return_softmax_lse,
                                    deterministic, db, _pt, mod)


def attention_varlen_backward(grad_o: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                              cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                              max_seqlen_k: int, causal: bool = False,
                              softmax_scale: Optional[float] = None, grad_lse: Any = None,
                              deterministic: bool = False, db: Optional[str] = None,
                              mod: Any = None) -> Tuple[Any, Any, Any]:
    """The gradients dq, dk, dv of a variable-length batch, for NumPy arrays
    on the emulator: grad_o the loss's gradient with respect to
    attention_varlen's output (and grad_lse, when given, to its logsumexp);
    out and lse what attention_varlen(..., return_softmax_lse=True)
    returned for q, k, v and the same offsets, maxima, causal,
    softmax_scale and mod. dk and dv are summed over the query heads that share a
    K/V head. Returns new arrays shaped as q, k and v. torch tensors get
    their gradients through autograd (.backward() on attention_varlen's
    output). Raises TypeError or ValueError naming the argument that is
    wrong, fatune.Error when the library fails (offsets the kernels would
    not follow among them).
    """
    return _varlen.attention_varlen_backward(grad_o, q, k, v, out, lse, cu_seqlens_q,
                                             cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                                             softmax_scale, grad_lse, deterministic, db, mod)


def attention_with_kvcache(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any,
                           block_table: Any = None, causal: bool = False,
                           softmax_scale: Optional[float] = None,
                           max_seqlen_k: Optional[int] = None, return_softmax_lse: bool = False,
                           db: Optional[str] = None, k: Any = None, v: Any = None,
                           cache_batch_idx: Any = None, rotary_cos: Any = None,
                           rotary_sin: Any = None, rotary_interleaved: bool = False,
                           mod: Any = None) -> Any:
    """The new tokens' attention over a KV cache, as flash_attn_with_kvcache
    computes it (the README's "Decoding over a KV cache"), with its names.

    q: (batch, seqlen_q, heads, dim), the new tokens of each sequence.
    k_cache, v_cache: (num_pages, page_size, kv_heads, dim) with a
    block_table, or (batch, capacity, kv_heads, dim) without one (a
    contiguous cache); kv_heads divides heads (query head h reads K/V head
    h // (heads // kv_heads)); v's head dim may differ from q's. cache_seqlens:
    (batch,) int32, each sequence's keys; block_table: (batch, pages per
    sequence) int32 page indices, any order, pages shared between
    sequences, any page size from 1 up (flash_attn's needs a multiple of
    256). causal: new token r of a sequence of n keys sees the keys up to
    r + n - seqlen_q. softmax_scale: 1/sqrt(dim) if None. max_seqlen_k:
    the longest sequence's keys, which picks the variant tuned for the
    nearest length (default: the capacity). k, v: the new tokens' keys and
    values, (batch, seqlen_q, kv_heads, dim), written into the cache in
    place at positions cache_seqlens[b] onward (through the block table)
    before attending over cache_seqlens[b] + seqlen_q keys, as flash_attn's
    k= and v=; cache_seqlens itself is not changed (the caller advances
    it), and the caches must be contiguous (NumPy: writeable).
    cache_batch_idx: (batch,) int32, with a contiguous cache the row of
    k_cache and v_cache each sequence's keys are in (the cache may then
    have any number of rows), as flash_attn's; not with a block_table.
    rotary_cos, rotary_sin: (positions, rotary_dim / 2) of q's dtype, with
    k and v only, as flash_attn's: the new keys are rotated at their cache
    positions before they go in, the queries at the same positions when
    causal, else all at cache_seqlens[b] (q itself is left as it is);
    rotary_interleaved: the pairs (2i, 2i + 1), else (i, i + rotary_dim / 2).

    mod: a score or mask modification, as fatune.attention's ("window=256",
    "softcap=30", "alibi", a NAME.lua file), over each sequence's keys
    (seq_k its own length); under a window the decoding kernels read only
    the blocks it reaches.

    64 or more new tokens (prefill; float16 and bfloat16) run the forward
    pass's kernel reading the cache through the table, where its grid fills
    half the GPU; fewer, the split-KV decoding kernels.

    NumPy arrays run on the emulator; PyTorch CUDA tensors on their GPU and
    current stream (the call waits for the kernels: it reads their check of
    the block table and the lengths back), CPU tensors on the emulator.
    Not (yet) as flash_attn: window, softcap and alibi through mod=, not
    window_size=, softcap= and alibi_slopes=; no gradient; k's tokens are
    q's. A page index (or a
    cache_batch_idx) outside the pool is never read and a length past the
    capacity is cut to it: fatune.Error says so after the call.

    Returns O (batch, seqlen_q, heads, dim_v), or (O, lse) with lse
    (batch, heads, seqlen_q), float32 (float64 for float64).
    """
    return _kvcache.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                                           causal, softmax_scale, max_seqlen_k,
                                           return_softmax_lse, db, _pt, k, v, cache_batch_idx,
                                           (rotary_cos, rotary_sin, rotary_interleaved), mod)


def plan_decode(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any = None,
                causal: bool = False, softmax_scale: Optional[float] = None,
                max_seqlen_k: Optional[int] = None, db: Optional[str] = None, k: Any = None,
                v: Any = None, cache_batch_idx: Any = None, rotary_cos: Any = None,
                rotary_sin: Any = None, rotary_interleaved: bool = False,
                mod: Any = None) -> DecodePlan:
    """attention_with_kvcache planned once for a server's decode step: the
    kernel chosen and built, the splits' workspace and the kernels' error
    flags allocated, for the problem these tensors describe (their values
    are not read; k and v, the new keys and values, plan their append).
    plan.run(q, k_cache, v_cache, cache_seqlens, block_table=None,
    out=None, return_softmax_lse=False, k=None, v=None,
    cache_batch_idx=None, rotary_cos=None, rotary_sin=None,
    rotary_interleaved=False) then queues the
    kernels on the current stream with no allocation in the library and no
    wait, so that torch.cuda.graph can capture it (give out= a tensor made
    before the capture to keep its address); its tensors must have the
    planned shapes. plan.check() waits for the device and raises
    fatune.Error if a kernel met a page outside the pool or a length past
    the capacity since the last check; mod= as attention_with_kvcache's,
    which every run applies; plan.variant names the kernel;
    plan.close() frees it (so does the garbage collector).
    """
    return _kvcache.plan_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal,
                                softmax_scale, max_seqlen_k, db, _pt, k, v, cache_batch_idx,
                                (rotary_cos, rotary_sin, rotary_interleaved), mod)


def plan(q: Any, k: Any, v: Any, causal: Union[bool, str] = False,
         scale: Optional[float] = None, out: Any = None, layout: str = "bhnd",
         db: Optional[str] = None) -> str:
    """The name of the variant fatune.attention would run on these arguments
    (two names joined by " + " where a top-left mask takes two calls):
    everything it does (the checks, the kernel chosen and built on first
    use, then taken from memory, the launch's arguments) but the launch.
    What a call costs on the host, timed without a GPU."""
    return _attention(q, k, v, causal, scale, out, False, layout, db, True)[2]


def _attention(q: Any, k: Any, v: Any, causal: Any, scale: Any, out: Any, return_lse: bool,
               layout: str, db: Optional[str], plan: bool, max_rel_err: Optional[float] = None,
               deterministic: bool = False, mod: Any = None,
               descales: Tuple[Any, Any, Any] = (None, None, None),
               descale_rows: int = 0) -> Tuple[Any, Any, str]:
    q, k, v, out = _arrays(q, k, v, out)
    budget = _check.budget(max_rel_err, deterministic)
    spec = _check.mod(mod)
    if spec is not None and _check.causal(causal) == _check.TOP_LEFT:
        raise ValueError("mod: not with a top-left causal mask (write it into the "
                         "modification's mask instead)")
    if _is_torch(q):
        for name, x in (("k", k), ("v", v), ("out", out)):
            if x is not None and not _is_torch(x):
                raise TypeError("%s: a torch.Tensor like q, not %s" % (name, type(x).__name__))
        for name, x in zip(_check.DESCALES, descales):
            if x is not None and not _is_torch(x):
                raise TypeError("%s: a torch.Tensor like q, not %s" % (name, type(x).__name__))
        return _pt.attention(q, k, v, causal, scale, out, return_lse, layout, db, plan, budget,
                             spec, descales, descale_rows)
    if _is_torch(k) or _is_torch(v) or _is_torch(out):
        bad = "k" if _is_torch(k) else "v" if _is_torch(v) else "out"
        raise TypeError("%s: a torch.Tensor, but q is a NumPy array" % bad)
    mask = _check.causal(causal)
    _check.layout(layout)
    for name, x in zip(_check.DESCALES, descales):
        if _is_torch(x):
            raise TypeError("%s: a torch.Tensor, but q is a NumPy array" % name)
    return _numpy.attention(q, k, v, mask, _check.scale(scale), out, return_lse, layout, db,
                            plan, *budget, mod=spec, descales=descales, descale_rows=descale_rows)


def attention_backward(grad_o: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                       causal: Union[bool, str] = False, scale: Optional[float] = None,
                       grad_lse: Any = None, layout: str = "bhnd", db: Optional[str] = None,
                       mod: Any = None) -> Tuple[Any, Any, Any]:
    """Attention backward: the gradients dq, dk, dv of a loss whose gradient
    with respect to attention's output is grad_o (and, when given, with
    respect to its logsumexp grad_lse), for NumPy arrays on the emulator.

    out and lse are what fatune.attention(q, k, v, causal, scale,
    return_lse=True, layout=layout, mod=mod) returned; q, k, v, causal,
    scale, layout and mod as there (under a modification, the gradients of
    the modified scores; k and v may have fewer heads: their gradients are
    summed over the query heads that share them). FlashAttention-2's
    algorithm: nothing of size seq_q x seq_k is kept. Returns new arrays
    (dq, dk, dv), C order, shaped as q, k and v. torch tensors take their
    gradients through autograd instead (.backward() on fatune.attention's
    output). Raises TypeError or ValueError naming the argument that is
    wrong, fatune.Error when the library fails.
    """
    if any(_is_torch(x) for x in (grad_o, q, k, v, out, lse, grad_lse)):
        raise TypeError("fatune.attention_backward takes NumPy arrays; torch tensors get "
                        "their gradients through autograd (call .backward() on "
                        "fatune.attention's output)")
    if not isinstance(q, np.ndarray):
        raise TypeError("q: a NumPy array, not %s" % type(q).__name__)
    mask = _check.causal(causal)
    _check.layout(layout)
    spec = _check.mod(mod)
    if spec is not None and mask == _check.TOP_LEFT:
        raise ValueError("mod: not with a top-left causal mask (write it into the "
                         "modification's mask instead)")
    return _numpy.attention_backward(grad_o, q, k, v, out, lse, grad_lse, mask,
                                     _check.scale(scale), layout, db, spec)


def reload() -> None:
    """Forget the variants chosen so far in this process: the next call for
    each problem chooses again from the database. fatune.tune calls it;
    call it after tuning with the fatune command."""
    _lib.forget()


def executable() -> str:
    """The path of the fatune command that came with this package
    ($FATUNE_EXECUTABLE names another)."""
    return _lib.executable()


_DTYPES = ("fp32", "fp64", "fp16", "bf16")


def _problem_args(dim: int, seq: int, seq_k: Optional[int], dtype: str, causal: bool,
                  db: Optional[str], dim_v: Optional[int] = None) -> List[str]:
    for name, val in (("dim", dim), ("seq", seq)) + ((("seq_k", seq_k),) if seq_k else ()) \
            + ((("dim_v", dim_v),) if dim_v is not None else ()):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError("%s: %r; it must be a positive integer" % (name, val))
    if dtype not in _DTYPES:
        raise ValueError("dtype: %r; it must be one of %s" % (dtype, ", ".join(_DTYPES)))
    args = ["--dim", str(dim), "--seq", str(seq), "--dtype", dtype]
    if seq_k:
        args += ["--seq-k", str(seq_k)]
    if dim_v is not None:
        args += ["--dim-v", str(dim_v)]
    if causal:
        args.append("--causal")
    if db:
        args += ["--db", os.fspath(db)]
    return args


def _command(args: Sequence[str]) -> str:
    r = subprocess.run([executable()] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        raise Error(lines[-1] if lines else "fatune exited with status %d" % r.returncode,
                    r.returncode)
    return r.stdout


def tune(dim: int = 64, seq: int = 4096, dtype: str = "bf16", causal: bool = False,
         seq_k: Optional[int] = None, batch: int = 4, heads: int = 16,
         backend: str = "auto", db: Optional[str] = None, retune: bool = False,
         extra: Sequence[str] = (), dim_v: Optional[int] = None) -> List[Dict[str, Any]]:
    """Measure every variant of the default space for a problem, as the
    fatune command's main job does (it runs the command shipped with this
    package), and record them in the database that fatune.attention reads.

    dim_v: V's head dim when it is not dim (192 with dim_v=128). backend:
    "auto" (the GPU, else the emulator), "cuda" or "emu". extra:
    further command-line flags (e.g. ["--trial-ms", "100"]). Returns one
    dict per variant (the command's --json rows). Raises fatune.Error with
    the command's message when it fails.
    """
    args = _problem_args(dim, seq, seq_k, dtype, causal, db, dim_v)
    for name, val in (("batch", batch), ("heads", heads)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError("%s: %r; it must be a positive integer" % (name, val))
    if backend not in ("auto", "cuda", "emu"):
        raise ValueError("backend: %r; it must be 'auto', 'cuda' or 'emu'" % (backend,))
    args += ["--batch", str(batch), "--heads", str(heads), "--backend", backend, "--json"]
    if retune:
        args.append("--retune")
    rows = json.loads(_command(args + [str(a) for a in extra]))
    reload()
    return rows if isinstance(rows, list) else [rows]


def best(dim: int = 64, seq: int = 4096, dtype: str = "bf16", causal: bool = False,
         seq_k: Optional[int] = None, device: Optional[str] = None,
         db: Optional[str] = None, dim_v: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """The best variant the database holds for a problem (`fatune best
    --json`, run with the command shipped with this package): a dict with
    its name ("variant"), config, device, timings and whether it was tuned
    for this very seq ("exact"); None when nothing is recorded for it.
    device: a device's name, UUID or part of its name. dim_v: V's head dim
    when it is not dim.
    """
    args = ["best"] + _problem_args(dim, seq, seq_k, dtype, causal, db, dim_v) + ["--json"]
    if device:
        args += ["--device", device]
    try:
        text = _command(args).strip()
    except Error as e:
        # An answer, not a failure: the command says so and exits 1.
        if "nothing recorded" in str(e) or "no database at" in str(e):
            return None
        raise
    if not text:
        return None
    row: Union[Dict[str, Any], None, List[Any]] = json.loads(text)
    if isinstance(row, list):
        return row[0] if row else None
    return row
