"""libfatune through ctypes: the structs of fatune.h and one context per
backend and device, opened on first use and kept for the process."""
import contextlib
import ctypes
import importlib.util
import os
import shlex
import shutil
import struct
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

FP32, FP64, FP16, BF16, E4M3 = 0, 1, 2, 3, 4
DTYPE_NAMES = {FP32: "fp32", FP64: "fp64", FP16: "fp16", BF16: "bf16", E4M3: "e4m3"}
# The emulator's target for fp8 (e4m3): the only one whose family computes it.
FP8_EMU_ARCH = "sm_90a"
DEVICE_CURRENT = -1

_STATUS = ["ok", "invalid argument", "no device", "database error", "compile error",
           "launch error", "out of memory", "internal error", "not tuned within the budget"]


class Error(RuntimeError):
    """A failure libfatune reported: its message, and its status in .status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("shape", ctypes.c_longlong * 4), ("stride", ctypes.c_longlong * 4)]


class AttentionArgs(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", ctypes.c_void_p), ("causal", ctypes.c_int), ("scale", ctypes.c_double),
                ("stream", ctypes.c_void_p), ("max_rel_err", ctypes.c_double),
                ("deterministic", ctypes.c_int), ("mod", ctypes.c_void_p),
                ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p),
                ("v_descale", ctypes.c_void_p), ("descale_rows", ctypes.c_int)]


# fatune_attention_args packed in one go (struct.pack, native alignment),
# for the hot path: building the ctypes structures field by field costs
# several times more. pack_args(q, k, v, o, lse, causal, scale, stream),
# each tensor (data, dtype, b, h, n, d, stride b, h, n, d); pointers are
# integers, 0 for NULL; then the error budget, determinism, the
# modification (a fatune_mod pointer, mod_handle's), fp8's three
# descales' addresses and their rows per block (0: per head), keywords;
# the struct's tail padding as C lays it out.
_ARGS = struct.Struct("@" + "Pi4q4q" * 4 + "PidPdiPPPPi0P")
if _ARGS.size != ctypes.sizeof(AttentionArgs):
    raise ImportError("fatune: fatune_attention_args is %d bytes, packed %d"
                      % (ctypes.sizeof(AttentionArgs), _ARGS.size))


def pack_args(*fields: object, max_rel_err: float = 0.0, deterministic: bool = False,
              mod: int = 0, descales: Tuple[int, int, int] = (0, 0, 0),
              descale_rows: int = 0) -> bytes:
    return _ARGS.pack(*fields, max_rel_err, 1 if deterministic else 0, mod, *descales,
                      descale_rows)


class BackwardArgs(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("dout", Tensor),
                ("dq", Tensor), ("dk", Tensor), ("dv", Tensor), ("lse", ctypes.c_void_p),
                ("causal", ctypes.c_int), ("scale", ctypes.c_double),
                ("stream", ctypes.c_void_p), ("dlse", ctypes.c_void_p),
                ("max_rel_err", ctypes.c_double), ("deterministic", ctypes.c_int),
                ("mod", ctypes.c_void_p)]


# fatune_backward_args packed as pack_args packs the forward's: eight
# tensors (q, k, v, o, dout, dq, dk, dv), lse, causal, scale, stream, dlse;
# then the error budget and the modification (mod_handle's), keywords.
_BWD_ARGS = struct.Struct("@" + "Pi4q4q" * 8 + "PidPPdi4xP")
if _BWD_ARGS.size != ctypes.sizeof(BackwardArgs):
    raise ImportError("fatune: fatune_backward_args is %d bytes, packed %d"
                      % (ctypes.sizeof(BackwardArgs), _BWD_ARGS.size))


def pack_backward_args(*fields: object, max_rel_err: float = 0.0,
                       deterministic: bool = False, mod: int = 0) -> bytes:
    return _BWD_ARGS.pack(*fields, max_rel_err, 1 if deterministic else 0, mod)


class Options(ctypes.Structure):
    _fields_ = [("db_path", ctypes.c_char_p), ("backend", ctypes.c_char_p),
                ("device", ctypes.c_int), ("emu_arch", ctypes.c_char_p)]


def bin_dir() -> Path:
    """Where the package keeps libfatune.so and the fatune command."""
    return Path(__file__).resolve().parent / "_bin"


def executable() -> str:
    """The fatune command: the package's, or $FATUNE_EXECUTABLE."""
    return os.environ.get("FATUNE_EXECUTABLE") or str(bin_dir() / "fatune")


def own_compiler() -> Optional[str]:
    """The emulator compiles kernels with $FATUNE_CC, else $CC, else cc. Where
    there is none, the C compiler of the ziglang wheel (a dependency of the
    wheel that stands alone, setup.py), set as $FATUNE_CC for libfatune and
    the fatune command: so a machine without a compiler runs the emulator.
    Returns the command set, or None."""
    if os.environ.get("FATUNE_CC") or os.environ.get("CC") or shutil.which("cc"):
        return None
    if importlib.util.find_spec("ziglang") is None:
        return None
    cc = "%s -m ziglang cc" % shlex.quote(sys.executable)
    os.environ["FATUNE_CC"] = cc
    return cc


own_compiler()


def _load() -> ctypes.CDLL:
    # $FATUNE_LIBRARY: another libfatune, e.g. a build's, with the package
    # used from its source folder (PYTHONPATH=python).
    path = os.environ.get("FATUNE_LIBRARY") or str(bin_dir() / "libfatune.so")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError("fatune: cannot load libfatune (%s): %s" % (path, e)) from None
    ctx = ctypes.c_void_p
    lib.fatune_open.argtypes = [ctypes.POINTER(Options), ctypes.POINTER(ctx)]
    lib.fatune_open.restype = ctypes.c_int
    lib.fatune_close.argtypes = [ctx]
    lib.fatune_close.restype = None
    lib.fatune_backend.argtypes = [ctx]
    lib.fatune_backend.restype = ctypes.c_char_p
    lib.fatune_forget.argtypes = [ctx]
    lib.fatune_forget.restype = ctypes.c_int
    lib.fatune_errmsg.argtypes = []
    lib.fatune_errmsg.restype = ctypes.c_char_p
    # The arguments as pack_args gives them.
    lib.fatune_attention.argtypes = [ctx, ctypes.c_char_p]
    lib.fatune_attention.restype = ctypes.c_int
    lib.fatune_attention_plan.argtypes = [ctx, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t]
    lib.fatune_attention_plan.restype = ctypes.c_int
    lib.fatune_attention_backward.argtypes = [ctx, ctypes.c_char_p]
    lib.fatune_attention_backward.restype = ctypes.c_int
    lib.fatune_mod_create.argtypes = [ctx, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(ctypes.c_void_p)]
    lib.fatune_mod_create.restype = ctypes.c_int
    lib.fatune_mod_free.argtypes = [ctypes.c_void_p]
    lib.fatune_mod_free.restype = None
    lib.fatune_mod_set_tensor.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                          ctypes.c_longlong]
    lib.fatune_mod_set_tensor.restype = ctypes.c_int
    lib.fatune_mod_tensor.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.POINTER(ctypes.c_int)]
    lib.fatune_mod_tensor.restype = ctypes.c_int
    lib.fatune_programs.argtypes = [ctx]
    lib.fatune_programs.restype = ctypes.c_longlong
    return lib


LIB = _load()


_name = threading.local()


def call(ctx: int, args: bytes, plan: bool) -> str:
    """fatune_attention, or with plan fatune_attention_plan: the variant's
    name, and nothing launched."""
    if not plan:
        check(LIB.fatune_attention(ctx, args))
        return ""
    buf = getattr(_name, "buf", None)
    if buf is None:
        buf = _name.buf = ctypes.create_string_buffer(256)
    check(LIB.fatune_attention_plan(ctx, args, buf, 256))
    return buf.value.decode()


def call_backward(ctx: int, args: bytes) -> None:
    """fatune_attention_backward on packed arguments."""
    check(LIB.fatune_attention_backward(ctx, args))


def check(status: int) -> None:
    """Raise Error with the library's message for a status that is not OK."""
    if status != 0:
        msg = LIB.fatune_errmsg().decode("utf-8", "replace")
        what = _STATUS[status] if 0 <= status < len(_STATUS) else "status %d" % status
        raise Error(msg or what, status)


_contexts: Dict[Tuple[str, int, Optional[str], Optional[str]], int] = {}
_lock = threading.Lock()


def context(backend: str, device: int = 0, db: Optional[str] = None,
            emu_arch: Optional[str] = None) -> int:
    """The context for this backend ("emu" or "cuda"), device and database;
    emu_arch: the emulator's target (FP8_EMU_ARCH for fp8), None for
    $FATUNE_EMU_ARCH, else the default."""
    key = (backend, device, db, emu_arch)
    c = _contexts.get(key)
    if c is not None:
        return c
    with _lock:
        c = _contexts.get(key)
        if c is None:
            opts = Options(db.encode() if db else None, backend.encode(), device,
                           emu_arch.encode() if emu_arch else None)
            h = ctypes.c_void_p()
            # The library's message is per thread: read it on this one.
            check(LIB.fatune_open(ctypes.byref(opts), ctypes.byref(h)))
            c = _contexts[key] = h.value
    return c


_mods: Dict[Tuple[int, str, Optional[str]], int] = {}


def mod_handle(ctx: int, spec: str, text: Optional[str]) -> int:
    """The context's fatune_mod for a built-in's spec (text None) or a
    modification file's text (spec its name), made once and kept for the
    process."""
    key = (ctx, spec, text)
    m = _mods.get(key)
    if m is not None:
        return m
    with _lock:
        m = _mods.get(key)
        if m is None:
            h = ctypes.c_void_p()
            check(LIB.fatune_mod_create(ctx, spec.encode(), text.encode() if text is not None
                                        else None, ctypes.byref(h)))
            m = _mods[key] = h.value
    return m


# A modification as _check.mod gives it: spec, text, and its captured
# tensors as (name, values) pairs.
Mod = Optional[Tuple[str, Optional[str], Tuple[Tuple[str, Any], ...]]]

# Per handle with captured tensors: a lock held from setting them to the
# launch (calls of other threads may set others), and what each was set
# from (_stamp's), so that unchanged tensors are not sent again.
_bound: Dict[int, Tuple[threading.Lock, Dict[str, Any]]] = {}


def _declared(h: int) -> List[Tuple[str, bool]]:
    """The handle's captured tensors in order: (name, holds ints)."""
    out = []
    name, is_int = ctypes.c_char_p(), ctypes.c_int()
    while LIB.fatune_mod_tensor(h, len(out), ctypes.byref(name), ctypes.byref(is_int)) == 0:
        out.append(((name.value or b"").decode(), bool(is_int.value)))
    return out


def _stamp(values: Any) -> Any:
    """What identifies values' contents without reading them: a torch
    tensor itself (kept, so that no other takes its place) with its
    version, storage and shape; anything else is read (None)."""
    if hasattr(values, "_version") and hasattr(values, "data_ptr"):
        return (values, values.data_ptr(), values._version, tuple(values.shape),
                tuple(values.stride()), str(values.dtype), str(values.device))
    return None


def _same(a: Any, b: Any) -> bool:
    """Two stamps alike: the same tensor object in the same state, or the
    same bytes."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a[0] is b[0] and a[1:] == b[1:]
    return isinstance(a, bytes) and isinstance(b, bytes) and a == b


def _host(name: str, values: Any, ints: bool) -> Tuple[Any, int, int]:
    """values on the host as contiguous int32 or float32: (keep-alive,
    address, elements). Raises TypeError or ValueError naming the tensor."""
    what = "captured tensor %s" % name
    if hasattr(values, "detach") and hasattr(values, "is_floating_point"):   # torch
        import torch
        t = values.detach().reshape(-1)
        if ints:
            if t.is_floating_point() or t.is_complex():
                raise TypeError("%s: integers (the modification reads it as int), not %s"
                                % (what, t.dtype))
            if t.numel() and (int(t.min()) < -2 ** 31 or int(t.max()) > 2 ** 31 - 1):
                raise ValueError("%s: values past a 32-bit int" % what)
        t = t.to(device="cpu", dtype=torch.int32 if ints else torch.float32).contiguous()
        return t, t.data_ptr(), t.numel()
    import numpy as np
    a = np.asarray(values).reshape(-1)
    if ints:
        if a.dtype.kind not in "iub":
            raise TypeError("%s: integers (the modification reads it as int), not %s"
                            % (what, a.dtype))
        if a.size and (int(a.min()) < -2 ** 31 or int(a.max()) > 2 ** 31 - 1):
            raise ValueError("%s: values past a 32-bit int" % what)
    elif a.dtype.kind not in "iubf":
        raise TypeError("%s: numbers, not %s" % (what, a.dtype))
    a = np.ascontiguousarray(a, dtype=np.int32 if ints else np.float32)
    return a, a.ctypes.data, int(a.size)


def _set_tensors(h: int, label: str, tensors: Tuple[Tuple[str, Any], ...],
                 last: Dict[str, Any]) -> None:
    given = dict(tensors)
    declared = _declared(h)
    for name in given:
        if name not in dict(declared):
            raise ValueError("mod: %s captures no tensor %r (it captures %s)"
                             % (label, name, ", ".join(n for n, _ in declared) or "none"))
    for name, ints in declared:
        if name not in given:
            raise ValueError("mod: %s captures tensor %r and it was not given" % (label, name))
        values = given[name]
        stamp = _stamp(values)
        if stamp is not None and _same(last.get(name), stamp):
            continue
        keep, address, n = _host(name, values, ints)
        if stamp is None:   # compared by contents
            stamp = bytes(ctypes.string_at(address, 4 * n)) if n else b""
            if _same(last.get(name), stamp):
                continue
        check(LIB.fatune_mod_set_tensor(h, name.encode(), address, n))
        last[name] = stamp
        del keep


@contextlib.contextmanager
def modification(ctx: int, mod: Mod) -> Iterator[int]:
    """The context's fatune_mod for mod (0 for None), its captured tensors
    set as mod gives them; held for the calls inside the block."""
    if mod is None:
        yield 0
        return
    h = mod_handle(ctx, mod[0], mod[1])
    if not mod[2] and not _declared(h):
        yield h
        return
    with _lock:
        lock, last = _bound.setdefault(h, (threading.Lock(), {}))
    with lock:
        _set_tensors(h, mod[0], mod[2], last)
        yield h


def programs(ctx: int) -> int:
    """Kernels the context has made ready (compiled or loaded)."""
    return int(LIB.fatune_programs(ctx))


def forget() -> None:
    """Every open context's chosen variants dropped: the next call for each
    problem chooses again from the database."""
    with _lock:
        contexts = list(_contexts.values())
    for c in contexts:
        check(LIB.fatune_forget(c))
