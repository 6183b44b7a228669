"""libfatune through ctypes: the structs of fatune.h and one context per
backend and device, opened on first use and kept for the process."""
import ctypes
import importlib.util
import os
import shlex
import shutil
import struct
import sys
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

FP32, FP64, FP16, BF16 = 0, 1, 2, 3
DTYPE_NAMES = {FP32: "fp32", FP64: "fp64", FP16: "fp16", BF16: "bf16"}
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
                ("deterministic", ctypes.c_int), ("mod", ctypes.c_void_p)]


# fatune_attention_args packed in one go (struct.pack, native alignment),
# for the hot path: building the ctypes structures field by field costs
# several times more. pack_args(q, k, v, o, lse, causal, scale, stream),
# each tensor (data, dtype, b, h, n, d, stride b, h, n, d); pointers are
# integers, 0 for NULL; then the error budget, determinism and the
# modification (a fatune_mod pointer, mod_handle's), keywords.
_ARGS = struct.Struct("@" + "Pi4q4q" * 4 + "PidPdiP")
if _ARGS.size != ctypes.sizeof(AttentionArgs):
    raise ImportError("fatune: fatune_attention_args is %d bytes, packed %d"
                      % (ctypes.sizeof(AttentionArgs), _ARGS.size))


def pack_args(*fields: object, max_rel_err: float = 0.0, deterministic: bool = False,
              mod: int = 0) -> bytes:
    return _ARGS.pack(*fields, max_rel_err, 1 if deterministic else 0, mod)


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
                ("device", ctypes.c_int)]


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


_contexts: Dict[Tuple[str, int, Optional[str]], int] = {}
_lock = threading.Lock()


def context(backend: str, device: int = 0, db: Optional[str] = None) -> int:
    """The context for this backend ("emu" or "cuda"), device and database."""
    key = (backend, device, db)
    c = _contexts.get(key)
    if c is not None:
        return c
    with _lock:
        c = _contexts.get(key)
        if c is None:
            opts = Options(db.encode() if db else None, backend.encode(), device)
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


def forget() -> None:
    """Every open context's chosen variants dropped: the next call for each
    problem chooses again from the database."""
    with _lock:
        contexts = list(_contexts.values())
    for c in contexts:
        check(LIB.fatune_forget(c))
