"""Score and mask modifications from Python.

A modification rewrites attention's scores and says which keys a row sees
(the README's "Score and mask modifications"). This module gives them as
objects that fatune.attention(..., mod=) and the other calls take:

* the built-ins: sliding_window(256), softcap(30.0), alibi(), prefix_lm(128),
  chunked(1024), causal(top_left=True), and over tensors given at run time document(ids) and
  relative_bias(table);
* Python functions, FlexAttention's way: from_functions(score_mod, mask_mod)
  with score_mod(score, b, h, q_idx, kv_idx) -> a new score and
  mask_mod(b, h, q_idx, kv_idx) -> whether the key is seen, also given to
  fatune.attention as score_mod= and mask_mod=;
* a modification file with its captured tensors: from_file(path, doc=ids).

Tensors a function reads (doc[q_idx], bias[h, q_idx - kv_idx + 128]: a
torch tensor, or any array wrapped in captured()) are captured: the
kernel reads them at run time, so new contents, or a new tensor of the
same dtype in the same place, never compile again. They are read as int32
(integer dtypes) or float32; an index outside one reads 0 and fails the
call.

A function is traced once over symbolic arguments, never called on data:
its arithmetic (+ - * / // % **, unary -, abs()), comparisons, & | ~ on
truth values, and where, tanh, exp, exp2, log, log2, sqrt, minimum and
maximum (this module's, or torch's on the arguments) become an expression
of fatune's modification language, which the kernels run as C and the
float64 reference evaluates. Python numbers in it (a closure's cap) are
constants of the expression: another value is another kernel. A Python
`if`, `and`, `or`, `not` or `min()` on a traced value cannot be traced and
raises TypeError saying what to write instead. SEQ_Q, SEQ_K and HEADS
stand for the problem's lengths and head count (seq_k - seq_q aligns a
mask to the bottom-right corner, as fatune's causal mask is).
"""
import contextlib
import math
import re
import sys
import threading
from typing import Any, Callable, List, Optional, Tuple

__all__ = ["Modification", "from_functions", "from_file", "from_block_mask", "captured",
           "sliding_window", "causal",
           "softcap", "alibi", "prefix_lm", "chunked", "document", "relative_bias", "where",
           "tanh", "exp", "exp2", "log", "log2", "sqrt", "minimum", "maximum", "SEQ_Q", "SEQ_K",
           "HEADS"]


class Modification:
    """A modification as the library takes it: a built-in's spec
    ("window=256:0") with text None, or a modification file's name and text
    (what from_functions writes); with the contents of the tensors it
    captures as (name, values) pairs (values a torch tensor or an array)."""

    __slots__ = ("spec", "text", "tensors")

    def __init__(self, spec: str, text: Optional[str] = None,
                 tensors: Tuple[Tuple[str, Any], ...] = ()) -> None:
        self.spec, self.text, self.tensors = spec, text, tuple(tensors)

    def __repr__(self) -> str:
        parts = [repr(self.spec)] + ([repr(self.text)] if self.text is not None else [])
        if self.tensors:
            parts.append("tensors=(%s)" % ", ".join("%s: %s" % (n, _describe(t))
                                                     for n, t in self.tensors))
        return "Modification(%s)" % ", ".join(parts)

    def __eq__(self, other: object) -> bool:
        """The same expressions over the same tensor objects."""
        return isinstance(other, Modification) and \
            (self.spec, self.text) == (other.spec, other.text) and \
            len(self.tensors) == len(other.tensors) and \
            all(a[0] == b[0] and a[1] is b[1] for a, b in zip(self.tensors, other.tensors))

    def __hash__(self) -> int:
        return hash((self.spec, self.text))


def _describe(t: Any) -> str:
    shape = getattr(t, "shape", None)
    return "%s%s" % (type(t).__name__, tuple(shape) if shape is not None else "")


def _number(x: Any, what: str) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError("%s: a number, not %s" % (what, type(x).__name__))
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError("%s: a finite number, not %r" % (what, x))
    return repr(x)


def sliding_window(left: int, right: int = 0) -> Modification:
    """Key k seen by row r when d - left <= k <= d + right, d = r + seq_k -
    seq_q (FlashAttention-2's window_size=(left, right))."""
    for name, x in (("left", left), ("right", right)):
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError("%s: an int, not %s" % (name, type(x).__name__))
    return Modification("window=%d:%d" % (left, right))


def softcap(cap: float) -> Modification:
    """Scores cap * tanh(score / cap) (Gemma 2)."""
    return Modification("softcap=" + _number(float(cap) if isinstance(cap, int) and
                                              not isinstance(cap, bool) else cap, "cap"))


def alibi() -> Modification:
    """ALiBi's linear bias with the paper's slopes 2^(-8 (h + 1) / heads)."""
    return Modification("alibi")


def prefix_lm(prefix: int) -> Modification:
    """The first `prefix` keys seen by every row, the rest causally."""
    if isinstance(prefix, bool) or not isinstance(prefix, int):
        raise TypeError("prefix: an int, not %s" % type(prefix).__name__)
    return Modification("prefixlm=%d" % prefix)


def chunked(size: int) -> Modification:
    """Causal within chunks of `size` keys, nothing across them."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError("size: an int, not %s" % type(size).__name__)
    return Modification("chunked=%d" % size)


def causal(top_left: bool = False) -> Modification:
    """The causal mask, bottom-right aligned as causal=True, or top-left as
    PyTorch's is_causal (row r sees keys 0..r)."""
    return Modification("causal=%d" % (1 if top_left else 0))


def document(ids: Any) -> Modification:
    """Document masking over packed sequences: row r sees key k when
    ids[r + seq_k - seq_q] == ids[k] (ids: a document id per key, ints;
    bottom-right aligned as the causal mask)."""
    return Modification("document", None, (("doc", ids),))


def relative_bias(table: Any) -> Modification:
    """A learned relative-position bias: score + table[h, d + span], d the
    distance k - r - (seq_k - seq_q) clamped to -span..span; table is
    (heads, 2 span + 1) floats."""
    shape = tuple(getattr(table, "shape", ()))
    if len(shape) != 2 or shape[1] % 2 != 1:
        raise ValueError("table: (heads, 2 span + 1) values, not shape %s" % (shape,))
    return Modification("relbias=%d" % (shape[1] // 2), None, (("bias", table),))


def from_file(path: Any, **tensors: Any) -> Modification:
    """The modification of file NAME.lua, with the contents of the tensors it
    captures by their names: from_file("docs.lua", doc=ids)."""
    import os
    p = os.fspath(path)
    with open(p, "r", encoding="utf-8") as f:
        text = f.read()
    return Modification(p, text, tuple(tensors.items()))


def from_block_mask(block_mask: Any, score_mod: Optional[Callable[..., Any]] = None,
                    seq: Optional[Tuple[int, int]] = None) -> Modification:
    """The modification of a FlexAttention BlockMask (and a score_mod, if
    any): its mask_mod traced, or where it has none (BlockMask.from_kv_blocks'
    noop_mask) the blocks it lists, a captured tensor read as
    blocks[b, h, q_idx // BLOCK_Q, kv_idx // BLOCK_K] != 0. fatune builds
    its own block classification from either. seq: the call's (seq_q,
    seq_k), which the mask's lengths must be."""
    for attr in ("mask_mod", "BLOCK_SIZE", "seq_lengths", "to_dense"):
        if not hasattr(block_mask, attr):
            raise TypeError("block_mask: a FlexAttention BlockMask, not %s"
                            % type(block_mask).__name__)
    if seq is not None and tuple(int(n) for n in block_mask.seq_lengths) != tuple(seq):
        raise ValueError("block_mask: made for seq_q, seq_k = %s, the call's are %s"
                         % (tuple(block_mask.seq_lengths), tuple(seq)))
    mask_mod = block_mask.mask_mod
    if mask_mod is None or getattr(mask_mod, "__name__", "") == "noop_mask":
        blocks = block_mask.to_dense()
        bq, bk = (int(n) for n in block_mask.BLOCK_SIZE)
        nb, nh = int(blocks.shape[0]), int(blocks.shape[1])

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return blocks[b if nb > 1 else 0, h if nh > 1 else 0, q_idx // bq, kv_idx // bk] != 0
    return from_functions(score_mod, mask_mod)


class captured:  # noqa: N801 (reads as a function call)
    """values (a NumPy array, a list) read by a traced function, as a torch
    tensor is without it: captured(ids)[q_idx]."""

    __slots__ = ("values",)

    def __init__(self, values: Any) -> None:
        if not hasattr(values, "shape"):
            import numpy as np
            values = np.asarray(values)
        self.values = values

    def __getitem__(self, index: Any) -> "_Sym":
        return _read(self.values, index)


# Tracing ------------------------------------------------------------------

_INT_MAX = 2 ** 31 - 1
_lock = threading.Lock()   # one trace at a time: _captures is the module's
_NOT_TRACEABLE = ("a traced value has no truth value: Python's if, and, or, not, min() and "
                  "max() cannot be traced; write where(c, a, b), & | ~, minimum or maximum "
                  "(fatune.mods' or torch's)")


class _Sym:
    """A traced value: its expression in the modification language and its
    type ("int", "float" or "bool")."""

    __slots__ = ("text", "kind")
    __hash__ = None  # type: ignore[assignment]  # == builds an expression

    def __init__(self, text: str, kind: str) -> None:
        self.text, self.kind = text, kind

    def __bool__(self) -> bool:
        raise TypeError(_NOT_TRACEABLE)

    def __index__(self) -> int:
        raise TypeError(_NOT_TRACEABLE)

    __int__ = __float__ = __index__  # type: ignore[assignment]

    # arithmetic
    def __add__(self, o: Any) -> "_Sym": return _arith("+", self, o)
    def __radd__(self, o: Any) -> "_Sym": return _arith("+", o, self)
    def __sub__(self, o: Any) -> "_Sym": return _arith("-", self, o)
    def __rsub__(self, o: Any) -> "_Sym": return _arith("-", o, self)
    def __mul__(self, o: Any) -> "_Sym": return _arith("*", self, o)
    def __rmul__(self, o: Any) -> "_Sym": return _arith("*", o, self)
    def __truediv__(self, o: Any) -> "_Sym": return _div(self, o)
    def __rtruediv__(self, o: Any) -> "_Sym": return _div(o, self)
    def __floordiv__(self, o: Any) -> "_Sym": return _floordiv(self, o)
    def __rfloordiv__(self, o: Any) -> "_Sym": return _floordiv(o, self)
    def __mod__(self, o: Any) -> "_Sym": return _mod(self, o)
    def __rmod__(self, o: Any) -> "_Sym": return _mod(o, self)
    def __pow__(self, o: Any) -> "_Sym": return _pow(self, o)

    def __neg__(self) -> "_Sym":
        _numeric(self, "-")
        return _Sym("(-" + self.text + ")", self.kind)

    def __pos__(self) -> "_Sym":
        _numeric(self, "+")
        return self

    def __abs__(self) -> "_Sym":
        _numeric(self, "abs")
        return _Sym("abs(" + self.text + ")", self.kind)

    # comparisons
    def __lt__(self, o: Any) -> "_Sym": return _compare("<", self, o)
    def __le__(self, o: Any) -> "_Sym": return _compare("<=", self, o)
    def __gt__(self, o: Any) -> "_Sym": return _compare(">", self, o)
    def __ge__(self, o: Any) -> "_Sym": return _compare(">=", self, o)
    def __eq__(self, o: Any) -> "_Sym": return _compare("==", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> "_Sym": return _compare("!=", self, o)  # type: ignore[override]

    # truth values
    def __and__(self, o: Any) -> "_Sym": return _logic("&&", self, o)
    def __rand__(self, o: Any) -> "_Sym": return _logic("&&", o, self)
    def __or__(self, o: Any) -> "_Sym": return _logic("||", self, o)
    def __ror__(self, o: Any) -> "_Sym": return _logic("||", o, self)

    def __invert__(self) -> "_Sym":
        if self.kind != "bool":
            raise TypeError("~: on a truth value (a comparison), not an %s" % self.kind)
        return _Sym("(!" + self.text + ")", "bool")

    # torch.tanh(score), torch.where(...) on traced values
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name == "__getitem__" and not kwargs and len(args) == 2:
            return _read(args[0], args[1])
        fn = _TORCH.get(name)
        if fn is None or kwargs:
            raise TypeError("torch.%s is not traceable into a modification (traceable: %s)"
                            % (name, ", ".join(sorted(_TORCH))))
        return fn(*args)


def _lift(x: Any, op: str) -> _Sym:
    """x as a traced value: a Python int or float becomes a constant."""
    if isinstance(x, _Sym):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError("%s: on a traced value and a number, not %s" % (op, type(x).__name__))
    if isinstance(x, int):
        if abs(x) > _INT_MAX:
            raise ValueError("%s: the constant %d is past a 32-bit int" % (op, x))
        return _Sym("(%d)" % x if x < 0 else "%d" % x, "int")
    if not math.isfinite(x):
        raise ValueError("%s: the constant %r is not finite" % (op, x))
    text = repr(x)
    if not re.search(r"[.eE]", text):
        text += ".0"
    return _Sym("(%s)" % text if x < 0 else text, "float")


def _numeric(a: _Sym, op: str) -> None:
    if a.kind == "bool":
        raise TypeError("%s: on numbers, not a truth value (a comparison)" % op)


def _arith(op: str, a: Any, b: Any) -> _Sym:
    x, y = _lift(a, op), _lift(b, op)
    _numeric(x, op), _numeric(y, op)
    kind = "int" if x.kind == y.kind == "int" else "float"
    return _Sym("(%s %s %s)" % (x.text, op, y.text), kind)


def _div(a: Any, b: Any) -> _Sym:
    """Python's true division: floats, whatever the operands."""
    x, y = _lift(a, "/"), _lift(b, "/")
    _numeric(x, "/"), _numeric(y, "/")
    if x.kind == "int":
        x = _Sym("float(%s)" % x.text, "float")
    return _Sym("(%s / %s)" % (x.text, y.text), "float")


def _positive_constant(y: _Sym, op: str) -> int:
    if y.kind != "int" or not re.fullmatch(r"[0-9]+", y.text) or int(y.text) <= 0:
        raise TypeError("%s: an int by a positive int constant (the modification language "
                        "divides integers by constants only)" % op)
    return int(y.text)


def _floordiv(a: Any, b: Any) -> _Sym:
    """Python's a // c for an int a and a positive constant c: floored, as
    Python floors it (C truncates: the language's / on a negative a)."""
    x, y = _lift(a, "//"), _lift(b, "//")
    if x.kind != "int":
        raise TypeError("//: on ints (a float's floor is not in the modification language)")
    c = _positive_constant(y, "//")
    t = x.text
    return _Sym("(%s >= 0 ? %s / %d : -((-%s + %d) / %d))" % (t, t, c, t, c - 1, c), "int")


def _mod(a: Any, b: Any) -> _Sym:
    """Python's a % c for an int a and a positive constant c: in [0, c)."""
    x, y = _lift(a, "%"), _lift(b, "%")
    if x.kind != "int":
        raise TypeError("%: on ints")
    c = _positive_constant(y, "%")
    return _Sym("((%s %% %d + %d) %% %d)" % (x.text, c, c, c), "int")


def _pow(a: _Sym, b: Any) -> _Sym:
    """x ** n for a constant n of 0 to 4 (products), or 0.5 (sqrt)."""
    _numeric(a, "**")
    if isinstance(b, float) and b == 0.5:
        return sqrt(a)
    if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= 4:
        raise TypeError("**: by a constant 0 to 4, or 0.5")
    if b == 0:
        return _lift(1 if a.kind == "int" else 1.0, "**")
    return _Sym("(" + " * ".join([a.text] * b) + ")", a.kind)


def _compare(op: str, a: Any, b: Any) -> _Sym:
    x, y = _lift(a, op), _lift(b, op)
    _numeric(x, op), _numeric(y, op)
    return _Sym("(%s %s %s)" % (x.text, op, y.text), "bool")


def _logic(op: str, a: Any, b: Any) -> _Sym:
    if isinstance(a, bool) or isinstance(b, bool):
        raise TypeError("%s: between comparisons, not a Python bool" % ("&" if op == "&&" else "|"))
    x, y = _lift(a, op), _lift(b, op)
    if x.kind != "bool" or y.kind != "bool":
        raise TypeError("%s: between truth values (comparisons); on ints it is not traced"
                        % ("&" if op == "&&" else "|"))
    return _Sym("(%s %s %s)" % (x.text, op, y.text), "bool")


def where(cond: Any, a: Any, b: Any) -> Any:
    """a where cond holds, else b (C's cond ? a : b)."""
    if not isinstance(cond, _Sym) or cond.kind != "bool":
        raise TypeError("where: the condition is a comparison of traced values")
    x, y = _lift(a, "where"), _lift(b, "where")
    if (x.kind == "bool") != (y.kind == "bool"):
        raise TypeError("where: both a truth value, or both numbers")
    kind = x.kind if x.kind == y.kind else "float"
    return _Sym("(%s ? %s : %s)" % (cond.text, x.text, y.text), kind)


def _unary(name: str) -> Callable[[Any], Any]:
    def fn(x: Any) -> Any:
        if not isinstance(x, _Sym):
            return getattr(math, name)(x) if name != "exp2" else 2.0 ** x
        _numeric(x, name)
        return _Sym("%s(%s)" % (name, x.text), "float")
    fn.__name__ = name
    fn.__doc__ = "%s of a traced value, in floats." % name
    return fn


tanh, exp, exp2, log, log2, sqrt = (_unary(n) for n in ("tanh", "exp", "exp2", "log", "log2",
                                                        "sqrt"))


def minimum(a: Any, b: Any) -> _Sym:
    """The smaller of a and b."""
    x, y = _lift(a, "minimum"), _lift(b, "minimum")
    _numeric(x, "minimum"), _numeric(y, "minimum")
    return _Sym("min(%s, %s)" % (x.text, y.text), "int" if x.kind == y.kind == "int" else "float")


def maximum(a: Any, b: Any) -> _Sym:
    """The larger of a and b."""
    x, y = _lift(a, "maximum"), _lift(b, "maximum")
    _numeric(x, "maximum"), _numeric(y, "maximum")
    return _Sym("max(%s, %s)" % (x.text, y.text), "int" if x.kind == y.kind == "int" else "float")


def _clamp(x: Any, min: Any = None, max: Any = None) -> _Sym:  # noqa: A002 (torch's names)
    y = _lift(x, "clamp")
    if min is not None:
        y = maximum(y, min)
    if max is not None:
        y = minimum(y, max)
    return y


# torch's functions on traced values.
_TORCH = {"tanh": tanh, "exp": exp, "exp2": exp2, "log": log, "log2": log2, "sqrt": sqrt,
          "abs": abs, "where": where, "minimum": minimum, "maximum": maximum, "clamp": _clamp}

SEQ_Q, SEQ_K, HEADS = _Sym("seq_q", "int"), _Sym("seq_k", "int"), _Sym("heads", "int")


# The tensors the functions being traced read, in order (values, kind).
_captures: List[Tuple[Any, str]] = []
_MAX_TENSORS = 4


def _read(values: Any, index: Any) -> _Sym:
    """values[index] in a traced function: a read of a captured tensor, its
    indices (one per dim, row-major) ints or traced ints."""
    if isinstance(values, _Sym):
        raise TypeError("a traced value is no tensor to index")
    shape = tuple(int(n) for n in getattr(values, "shape", (len(values),)))
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) != len(shape):
        raise TypeError("a captured tensor of %d dims indexed by %d" % (len(shape), len(idx)))
    flat: Any = 0
    for i, n in zip(idx, shape):
        if isinstance(i, slice) or i is None or i is Ellipsis:
            raise TypeError("a captured tensor is read one element at a time")
        x = _lift(i, "[]")
        if x.kind != "int":
            raise TypeError("a captured tensor's index is an int, not a %s" % x.kind)
        flat = x if isinstance(flat, int) and flat == 0 else flat * n + x
    dtype = str(getattr(values, "dtype", "float"))
    kind = "int" if any(w in dtype for w in ("int", "bool")) else "float"
    for slot, (v, _) in enumerate(_captures):
        if v is values:
            break
    else:
        slot = len(_captures)
        if slot == _MAX_TENSORS:
            raise TypeError("more than %d captured tensors" % _MAX_TENSORS)
        _captures.append((values, kind))
    return _Sym("t%d[%s]" % (slot, _lift(flat, "[]").text), kind)


def _tracing() -> Any:
    """The lock of one trace at a time; none under torch.compile, which
    traces this code itself, in one thread (and enters no lock)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return _lock


def _traced(fn: Callable[..., Any], names: Tuple[str, ...], what: str, kinds: str) -> str:
    args = [_Sym(n, "float" if n == "score" else "int") for n in names]
    try:
        r = fn(*args)
    except TypeError as e:
        raise TypeError("%s: %s" % (what, e)) from None
    if what == "mask_mod" and r is True:
        return ""
    if not isinstance(r, _Sym) and what == "score_mod" and not isinstance(r, bool) and \
            isinstance(r, (int, float)):
        r = _lift(r, what)
    if not isinstance(r, _Sym) or (r.kind == "bool") != (kinds == "bool"):
        want = "a truth value (a comparison of its arguments)" if kinds == "bool" else \
            "a number (the new score)"
        raise TypeError("%s: returns %s, not %s" % (what, want, type(r).__name__ if not
                        isinstance(r, _Sym) else "a traced " + r.kind))
    return r.text


def from_functions(score_mod: Optional[Callable[..., Any]] = None,
                   mask_mod: Optional[Callable[..., Any]] = None,
                   name: Optional[str] = None) -> Modification:
    """The modification of FlexAttention-style functions: score_mod(score,
    b, h, q_idx, kv_idx) gives a row's new score for a key (score is the
    scaled q.k, in natural units), mask_mod(b, h, q_idx, kv_idx) whether
    the row sees it; either may be None. Traced once (see the module's
    doc); name (default: the functions') names it in fatune's output."""
    if score_mod is None and mask_mod is None:
        raise ValueError("from_functions: a score_mod, a mask_mod or both")
    with _tracing():
        del _captures[:]
        try:
            return _from_functions(score_mod, mask_mod, name)
        finally:
            del _captures[:]


def _from_functions(score_mod: Optional[Callable[..., Any]],
                    mask_mod: Optional[Callable[..., Any]], name: Optional[str]) -> Modification:
    parts = []
    for fn, what, names, kind in ((score_mod, "score_mod", ("score", "b", "h", "q_idx", "kv_idx"),
                                   "num"),
                                  (mask_mod, "mask_mod", ("b", "h", "q_idx", "kv_idx"), "bool")):
        if fn is None:
            continue
        if not callable(fn):
            raise TypeError("%s: a function, not %s" % (what, type(fn).__name__))
        text = _traced(fn, names, what, kind)
        if text:
            parts.append("  %s = \"%s\"," % ("score" if what == "score_mod" else "mask", text))
    if not parts:  # a mask that keeps every key, and no score: nothing to do
        parts.append("  mask = \"0 == 0\",")
    if _captures:
        parts.insert(0, "  tensors = { %s }," % ", ".join(
            "{ \"t%d\", \"%s\" }" % (i, kind) for i, (_, kind) in enumerate(_captures)))
    if name is None:
        name = "_".join(f.__name__ if getattr(f, "__name__", "<lambda>") != "<lambda>" else what
                        for f, what in ((score_mod, "score_mod"), (mask_mod, "mask_mod")) if f)
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64] or "python"
    text = "-- traced from Python by fatune.mods\nreturn {\n  doc = \"%s\",\n%s\n}\n" % (
        name, "\n".join(parts))
    return Modification(name + ".lua", text,
                        tuple(("t%d" % i, v) for i, (v, _) in enumerate(_captures)))
