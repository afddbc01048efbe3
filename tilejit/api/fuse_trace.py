"""Tracing a ``tj.fuse`` function: it is called once per argument signature with :class:`Traced` values, whose
operators and ``tj.*`` calls record a graph of elementwise operations (with the user's file:line of each) and type
it with the tile language's own rules: every operation runs the front end's ``Builder`` (or the ``tj.*`` builtin's
own implementation) on stand-in scalar tiles of the operands' dtypes, so promotion, weak Python numbers and the
errors are exactly a kernel's.

Run-time Python numbers passed as arguments stay *weak*, as literals in the function's code are: they travel as
64-bit kernel scalars (``float64``, ``int64``, ``bool``) and are cast, where they meet a typed value, to the dtype the
tile language gives a number there (found from the constant the ``Builder`` made for a stand-in number). Operations
between such numbers alone compute in their 64-bit dtypes and stay weak. numpy scalars are typed (NEP 50).
"""

from __future__ import annotations

import inspect
import linecache
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tilejit.errors import TileCompileError
from tilejit.language import tile
from tilejit.language.frontend.builder import Builder
from tilejit.language.frontend.calls import BUILTINS, bind, to_dtype
from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import Tile
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.ops import ConstantOp
from tilejit.language.ir.types import BY_NAME, DType, TileType, bool_, float64, int64

#: ``tj.*`` functions a fused function may call on traced values, and the reductions it may end with.
ELEMENTWISE = frozenset({
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "abs", "floor", "ceil", "erf", "sigmoid",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "log1p", "expm1", "cbrt", "erfinv", "fma", "truediv",
    "isnan", "isinf", "signbit", "popc", "clz", "maximum", "minimum", "pow", "where", "astype",
})
REDUCTIONS = frozenset({"sum", "max", "min", "prod", "mean"})
_FLOAT_MATH = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid",
                         "asin", "acos", "atan", "atan2", "sinh", "cosh", "log1p", "expm1", "cbrt", "erfinv",
                         "truediv"})

# ------------------------------------------------------------------------------------------ argument kinds


class ArraySpec(NamedTuple):
    """An array argument: its dtype and rank."""

    dtype: DType
    ndim: int


class WeakSpec(NamedTuple):
    """A Python number argument (weak): ``kind`` "bool", "int" or "float"; ``wide``: an int outside int32."""

    kind: str
    wide: bool = False


class ScalarSpec(NamedTuple):
    """A typed scalar argument (a numpy scalar or 0-d numpy array)."""

    dtype: DType


Spec = ArraySpec | WeakSpec | ScalarSpec

#: The kernel dtype a weak argument of each kind travels as, and the number that stands in for it while typing.
WEAK_DTYPE = {"bool": bool_, "int": int64, "float": float64}
_STAND_IN: dict[tuple[str, bool], bool | int | float] = {
    ("bool", False): True, ("int", False): 3, ("int", True): (1 << 40) + 3, ("float", False): 1.25,
}

# ------------------------------------------------------------------------------------------ locations


class Where(NamedTuple):
    """A place in the user's source: file, line, 0-based column and the line's text (None when unreadable)."""

    filename: str
    line: int
    col: int | None
    text: str | None

    def error(self, message: str) -> TileCompileError:
        """A located error at this place."""
        return TileCompileError(message, self.filename, self.line, self.col, self.text)

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}"


_SKIPPED = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)


def _skipped_folders() -> tuple[str, ...]:
    """Folders whose frames are never the user's: tilejit's and numpy's (``np.sum`` dispatches through Python)."""
    np_file = getattr(sys.modules.get("numpy"), "__file__", None)
    if not isinstance(np_file, str):
        return _SKIPPED
    return (*_SKIPPED, os.path.dirname(np_file) + os.sep)


def user_where() -> Where | None:
    """The place in the user's code (the first frame outside tilejit and numpy) that made the current call."""
    skipped = _skipped_folders()
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
    return None if frame is None else _where_in(frame.f_code, frame.f_lineno, frame.f_lasti)


def _where_in(code: Any, line: int, lasti: int) -> Where:
    """The place of instruction ``lasti`` of ``code`` (at ``line``): its line and column (Python 3.11+ records the
    columns of instructions)."""
    col = None
    positions = getattr(code, "co_positions", None)
    if positions is not None and lasti >= 0:
        for i, pos in enumerate(positions()):
            if i == lasti // 2:
                if pos[0] is not None:
                    line, col = pos[0], pos[2]
                break
    text = linecache.getline(code.co_filename, line).rstrip("\r\n") or None
    if col is not None and text is not None:  # a byte offset in UTF-8: count characters
        col = len(text.encode("utf-8")[:col].decode("utf-8", errors="replace"))
    return Where(code.co_filename, line, col, text)


def def_where(func: Callable[..., Any]) -> Where:
    """The place of ``func``'s ``def`` (its first line)."""
    code = func.__code__
    line = code.co_firstlineno
    return Where(code.co_filename, line, None, linecache.getline(code.co_filename, line).rstrip("\r\n") or None)


# ------------------------------------------------------------------------------------------ the graph


class Node:
    """One value of a traced function.

    ``kind``: "array" / "scalar" (argument ``param``), "const" (a typed number in the code), "op" (an elementwise
    operation: ``form`` is ("binary", fn, symbol), ("compare", fn, symbol), ("unary", fn, symbol), ("call", name)
    or ("astype",)) or "reduce" (``form`` ("reduce", fn, axes or None, keepdims)). ``operands`` are nodes or Python
    numbers (weak literals, dtypes); ``casts[i]``: the dtype a weak operand node is converted to there. ``weak``:
    the kind of a weak number ("bool", "int", "float") or None for typed values. ``deps``: the array arguments
    (by parameter index) the value reads elementwise (not through a reduction); ``reduced``: it depends on a
    reduction. ``tile``: the stand-in tile that typed it (its shape's length is the value's rank)."""

    __slots__ = ("casts", "deps", "dtype", "form", "index", "kind", "operands", "param", "rank", "reduced", "tile",
                 "weak", "where")

    def __init__(self, index: int, kind: str, tile: Tile, *, form: tuple[Any, ...] = (),
                 operands: Sequence[Any] = (), casts: Sequence[DType | None] = (), weak: str | None = None,
                 deps: frozenset[int] = frozenset(), reduced: bool = False, param: int = -1,
                 where: Where | None = None) -> None:
        self.index = index
        self.kind = kind
        self.tile = tile
        self.dtype: DType = tile.dtype
        self.rank = tile.ndim
        self.form = form
        self.operands = tuple(operands)
        self.casts = tuple(casts) or (None,) * len(self.operands)
        self.weak = weak
        self.deps = deps
        self.reduced = reduced
        self.param = param
        self.where = where

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.kind}, {self.form}, {self.dtype.name}, rank {self.rank})"


class Graph:
    """What tracing one argument signature found: the parameters (names, specs), every node in order, the outputs
    (``single``: the function returned one value, not a tuple) and the reduction all reduced outputs share, if
    any (its node)."""

    __slots__ = ("func", "names", "nodes", "outputs", "reduction", "single", "specs")

    def __init__(self, func: Callable[..., Any], names: Sequence[str], specs: Sequence[Spec], nodes: list[Node],
                 outputs: list[Node], single: bool, reduction: Node | None) -> None:
        self.func = func
        self.names = tuple(names)
        self.specs = tuple(specs)
        self.nodes = nodes
        self.outputs = outputs
        self.single = single
        self.reduction = reduction

    def subset(self, keep: Sequence[int]) -> Graph:
        """The same trace computing only the outputs ``keep`` (by index)."""
        return Graph(self.func, self.names, self.specs, self.nodes, [self.outputs[k] for k in keep], False,
                     self.reduction)

    def needed(self) -> list[Node]:
        """The nodes some output depends on (the outputs included), in trace order."""
        seen: set[int] = set()
        todo = list(self.outputs)
        while todo:
            n = todo.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            todo += [o for o in n.operands if isinstance(o, Node)]
        return [n for n in self.nodes if n.index in seen]

    def used_params(self) -> list[int]:
        """Indices of the parameters (arrays and scalars) some output reads, in parameter order."""
        return sorted({n.param for n in self.needed() if n.kind in ("array", "scalar")})


# ------------------------------------------------------------------------------------------ tracing


class _Types:
    """The stand-in of the front end's translator that ``tj.*`` builtin implementations read (``tr.b``)."""

    __slots__ = ("b",)

    def __init__(self) -> None:
        self.b = Builder(Block())


def _stand_in(dtype: DType, rank: int) -> Tile:
    """A tile of ``dtype`` whose rank stands for a value's rank (every extent 2)."""
    return Tile(Value(TileType(dtype, (2,) * rank)))


def dtype_text(d: DType) -> str:
    """How generated code names a dtype: ``tj.float32``, ``tj.bool_``."""
    return "tj.bool_" if d.is_bool else f"tj.{d.name}"


def _numpy_scalar_dtype(v: object) -> DType | None:
    """The dtype of a numpy scalar or 0-d numpy array (a typed number), else None."""
    if type(v).__module__ != "numpy" or getattr(v, "shape", None) != ():
        return None
    return BY_NAME.get(str(getattr(v, "dtype", "")))


class Tracer:
    """Records the nodes of one trace; :class:`Traced` values call it."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.types = _Types()
        self.nodes: list[Node] = []
        self.reductions: list[Node] = []

    # -------------------------------------------------------------- nodes

    def add(self, kind: str, tile: Tile, **fields: Any) -> Node:
        node = Node(len(self.nodes), kind, tile, **fields)
        self.nodes.append(node)
        return node

    def param(self, index: int, name: str, spec: Spec) -> Traced:
        if isinstance(spec, ArraySpec):
            node = self.add("array", _stand_in(spec.dtype, spec.ndim), deps=frozenset({index}), param=index)
        elif isinstance(spec, WeakSpec):
            node = self.add("scalar", _stand_in(WEAK_DTYPE[spec.kind], 0), form=("weak", spec.wide), weak=spec.kind,
                            param=index)
        else:
            node = self.add("scalar", _stand_in(spec.dtype, 0), param=index)
        return Traced(self, node)

    def operand(self, v: Any, where: Where | None, what: str) -> Any:
        """A node, or a Python number (a weak literal) or option, for an operand the user passed."""
        if isinstance(v, Traced):
            if v._tracer is not self:
                raise _located(where, f"{what}: a value traced by another call of a fused function")
            return v._node
        if isinstance(v, bool | int | float | str | DType) or v is None:  # numbers, and options (rounding_mode=...)
            return v
        dt = _numpy_scalar_dtype(v)
        if dt is not None:
            item = v.item()  # type: ignore[attr-defined]
            return self.add("const", _stand_in(dt, 0), form=(item,), where=where)
        raise _located(where, f"{what}: unsupported operand {_describe(v)}; a fused function computes on its array "
                              "and number arguments, Python numbers and numpy scalars")

    # -------------------------------------------------------------- typing one operation

    def apply(self, form: tuple[Any, ...], values: Sequence[Any], run: Callable[[list[Any]], object],
              where: Where | None, what: str) -> Traced:
        """Record ``form`` on ``values`` (numbers, traced values, numpy scalars), typed by ``run`` (given the stand-in
        of each operand: a tile, or a Python number for a weak literal or argument)."""
        ops = [self.operand(v, where, what) for v in values]
        nodes = [o for o in ops if isinstance(o, Node)]
        reduced = [n for n in nodes if n.reduced]
        direct = [n for n in nodes if n.deps]
        if reduced and direct:
            raise _located(where, f"{what} combines the result of a reduction with arrays that are not reduced; a "
                                  "fused function may end with a reduction, and compute further only on its results "
                                  "and numbers")
        if len({keepdims_of(n) for n in reduced}) > 1:
            raise _located(where, f"{what} combines reductions with and without keepdims (their results have "
                                  "different ranks)")
        strong = any(n.weak is None for n in nodes)
        casts: list[DType | None] = [None] * len(ops)
        if strong:
            # a weak bool types as a bool tile does (bool is below every dtype); a condition is never a number
            stand_ins = [(_STAND_IN[(o.weak, o.weak == "int" and _wide(o))]
                          if o.weak and o.weak != "bool" and not (k == 0 and form[:2] == ("call", "where")) else o.tile)
                         if isinstance(o, Node) else o for k, o in enumerate(ops)]
        else:
            stand_ins = [self._weak_stand_in(o, form, casts, k) if isinstance(o, Node) else o
                         for k, o in enumerate(ops)]
        block = self.types.b.block
        start = len(block.ops)
        try:
            result = run(stand_ins)
        except FrontendError as exc:
            raise _located(where, exc.message) from None
        if not isinstance(result, Tile):  # numbers only: cannot happen with a traced operand
            raise _located(where, f"{what} did not give a traced value")
        if strong:
            made = [op for op in block.ops[start:] if isinstance(op, ConstantOp)]
            for k, o in enumerate(ops):
                if isinstance(o, Node) and o.weak and not isinstance(stand_ins[k], Tile):
                    number = stand_ins[k]
                    found = next((c.result.type.dtype for c in made if c.value == number), None)  # type: ignore[union-attr]
                    casts[k] = found if found is not None else result.dtype
        del block.ops[start:]  # the stand-ins' ops are not kept
        deps = frozenset().union(*(n.deps for n in nodes))
        weak = None
        if not strong:
            d = result.dtype
            weak = "float" if d.is_float else "int" if d.is_int else "bool"
        node = self.add("op", result, form=form, operands=ops, casts=casts, weak=weak, deps=deps,
                        reduced=bool(reduced), where=where)
        return Traced(self, node)

    def _weak_stand_in(self, o: Node, form: tuple[Any, ...], casts: list[DType | None], k: int) -> Tile:
        """The stand-in of a weak operand of an operation on weak numbers only: its 64-bit tile; an integer one of a
        true division or float math function is converted to float64 first, as Python computes it."""
        floaty = (form[:2] == ("binary", "truediv")) or (form[0] == "call" and form[1] in _FLOAT_MATH)
        if floaty and not o.dtype.is_float:
            casts[k] = float64
            return _stand_in(float64, 0)
        return o.tile

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                     where: Where | None) -> Traced:
        """``tj.<name>(*args, **kwargs)`` on traced values: an elementwise builtin or a reduction."""
        if name in REDUCTIONS:
            api = getattr(tile, name)
            try:
                bound = bind(api, f"tj.{name}", list(args), kwargs)
            except FrontendError as exc:
                raise _located(where, exc.message) from None
            return self.reduce(name, bound["x"], bound["axis"], bound["keepdims"], where)
        if name not in ELEMENTWISE:
            kind = "a memory operation" if name in ("load", "store", "gather", "scatter") or name.startswith("atomic") \
                else "not an elementwise operation"
            raise _located(where, f"tj.{name}() is {kind}: a fused function may use the elementwise tj.* functions "
                                  f"({', '.join(sorted(ELEMENTWISE))}), operators, and end with a reduction "
                                  "(tj.sum, tj.max, tj.min, tj.prod, .mean())")
        api = getattr(tile, name)
        try:
            bound = bind(api, f"tj.{name}", list(args), kwargs)
        except FrontendError as exc:
            raise _located(where, exc.message) from None
        impl = BUILTINS[id(api)][1]
        if name == "astype":
            try:
                dt = to_dtype(bound["dtype"], "astype() dtype")
            except FrontendError as exc:
                raise _located(where, exc.message) from None
            return self.apply(("astype", dt), (bound["x"],), lambda s: impl(self.types, x=s[0], dtype=dt), where,
                              f"astype({dt.name})")
        # the operands a kernel passes: every positional parameter, and the keyword-only ones not left at default
        params = inspect.signature(api).parameters
        keys = [k for k, p in params.items() if p.kind is not p.KEYWORD_ONLY]
        kws = tuple(k for k, p in params.items() if p.kind is p.KEYWORD_ONLY and bound[k] != p.default)
        rest = {k: bound[k] for k in bound if k not in keys and k not in kws}
        return self.apply(("call", name, kws), [bound[k] for k in (*keys, *kws)],
                          lambda s: impl(self.types, **dict(zip((*keys, *kws), s)), **rest), where, f"tj.{name}()")

    def reduce(self, fn: str, x: Any, axis: Any, keepdims: Any, where: Where | None) -> Traced:
        """Record a reduction (``fn``: sum, max, min, prod or mean) of ``x`` over ``axis``."""
        what = f"tj.{fn}()" if fn != "mean" else "mean()"
        node = self.operand(x, where, what)
        if isinstance(node, Node) and node.reduced:
            raise _located(where, f"{what} of the result of another reduction: a fused function may end with one "
                                  "reduction (nested reductions are not supported)")
        if not isinstance(node, Node) or not node.deps:
            raise _located(where, f"{what} reduces an array value; got {_describe(x)}")
        if not isinstance(keepdims, bool):
            raise _located(where, f"{what}: keepdims must be True or False, got {_describe(keepdims)}")
        rank = node.rank
        axes = _norm_axes(axis, rank, what, where)
        api = getattr(tile, "sum" if fn == "mean" else fn)
        try:
            t = BUILTINS[id(api)][1](self.types, x=node.tile, axis=None if axes is None else list(axes),
                                     keepdims=keepdims)
            if fn == "mean":
                t = self.types.b.binary("truediv", t, _stand_in(int64, 0))
        except FrontendError as exc:
            raise _located(where, exc.message) from None
        del self.types.b.block.ops[:]
        assert isinstance(t, Tile)
        out = self.add("reduce", t, form=("reduce", fn, axes, keepdims), operands=(node,), reduced=True, where=where)
        for other in self.reductions:
            o_axes = other.form[2]
            same = other.operands[0].rank == rank and set(o_axes or range(rank)) == set(axes or range(rank))
            if not same:
                raise _located(where, f"{what}: every reduction of a fused function must be over the same axes of "
                                      f"values of one rank as the one at {other.where}")
        self.reductions.append(out)
        return Traced(self, out)


def keepdims_of(node: Node) -> bool:
    """Whether the reduction a reduced value comes from kept the reduced axes (as size 1)."""
    if node.kind == "reduce":
        return bool(node.form[3])
    return any(keepdims_of(o) for o in node.operands if isinstance(o, Node) and o.reduced)


def _wide(node: Node) -> bool:
    """Whether a weak value may hold an int outside int32: a wide int argument, or computed from one."""
    if node.kind == "scalar":
        return bool(node.form and node.form[1])
    return any(_wide(o) for o in node.operands if isinstance(o, Node) and o.weak)


def _raised_at(exc: BaseException) -> Where | None:
    """The innermost place in the user's code (outside tilejit and numpy) on ``exc``'s traceback."""
    skipped = _skipped_folders()
    found = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(skipped):
            found = _where_in(code, tb.tb_lineno, tb.tb_lasti)
        tb = tb.tb_next
    return found


def _norm_axes(axis: Any, rank: int, what: str, where: Where | None) -> tuple[int, ...] | None:
    """``axis`` (None, an int or a tuple of ints) as sorted axes in ``range(rank)``; None for all of them."""
    if axis is None:
        return None
    items = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, int):
            raise _located(where, f"{what}: axis must be None, an int or a tuple of ints, got {_describe(axis)}")
        if not -rank <= a < rank:
            raise _located(where, f"{what}: axis {a} is out of range for a value of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise _located(where, f"{what}: repeated axis in {tuple(items)}")
    return tuple(sorted(out))


def _located(where: Where | None, message: str) -> TileCompileError:
    return where.error(message) if where is not None else TileCompileError(message)


def _describe(v: object) -> str:
    if isinstance(v, Traced):
        return f"a traced {v._node.dtype.name} value of rank {v._node.rank}"
    if isinstance(v, bool | int | float):
        return f"the number {v!r}"
    return f"a {type(v).__module__}.{type(v).__qualname__}"


# ------------------------------------------------------------------------------------------ traced values

_BINARY: dict[str, tuple[str, str]] = {
    "add": ("add", "+"), "sub": ("sub", "-"), "mul": ("mul", "*"), "truediv": ("truediv", "/"),
    "floordiv": ("floordiv", "//"), "mod": ("mod", "%"), "pow": ("pow", "**"), "and": ("and", "&"),
    "or": ("or", "|"), "xor": ("xor", "^"), "lshift": ("lshift", "<<"), "rshift": ("rshift", ">>"),
}
_COMPARE: dict[str, str] = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

#: numpy ufuncs a traced value takes: name -> (kind, the tile language's name)
_UFUNCS: dict[str, tuple[str, str]] = {
    **{u: ("binary", fn) for u, fn in (
        ("add", "add"), ("subtract", "sub"), ("multiply", "mul"), ("true_divide", "truediv"), ("divide", "truediv"),
        ("floor_divide", "floordiv"), ("remainder", "mod"), ("mod", "mod"), ("power", "pow"),
        ("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor"), ("left_shift", "lshift"),
        ("right_shift", "rshift"))},
    **{u: ("compare", fn) for u, fn in (
        ("less", "lt"), ("less_equal", "le"), ("greater", "gt"), ("greater_equal", "ge"), ("equal", "eq"),
        ("not_equal", "ne"))},
    **{u: ("call", u) for u in ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tanh", "floor", "ceil",
                                "maximum", "minimum")},
    "absolute": ("call", "abs"), "negative": ("unary", "neg"), "positive": ("unary", "pos"),
    "invert": ("unary", "invert"), "bitwise_not": ("unary", "invert"),
}
_NUMPY_FUNCTIONS = {"where": "where", "sum": "sum", "max": "max", "amax": "max", "min": "min", "amin": "min",
                    "prod": "prod", "mean": "mean", "abs": "abs", "absolute": "abs"}


class Traced:
    """A value of a fused function while it is traced: numpy-style operators, ``tj.*`` elementwise functions and
    numpy ufuncs on it record operations; its shape is not known (kernels are compiled for every size)."""

    __slots__ = ("_node", "_tracer")
    __array_priority__ = 1000  # numpy scalars defer to it

    def __init__(self, tracer: Tracer, node: Node) -> None:
        self._tracer = tracer
        self._node = node

    # -------------------------------------------------------------- what it is

    @property
    def dtype(self) -> DType:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return self._node.rank

    @property
    def shape(self) -> Any:
        raise user_where().error(  # type: ignore[union-attr]
            "the shape of a value is not known while a fused function is traced: its kernel is compiled once for "
            "every size (numpy broadcasting of the arguments decides the result's shape)")

    def __repr__(self) -> str:
        return f"<traced {self._node.dtype.name} value of rank {self._node.rank}>"

    # -------------------------------------------------------------- operators

    def _binary(self, fn: str, a: Any, b: Any) -> Traced:
        name, sym = _BINARY[fn]
        where = user_where()
        b_ = self._tracer.types.b
        return self._tracer.apply(("binary", name, sym), (a, b), lambda s: b_.binary(name, s[0], s[1], sym), where,
                                  f"operator {sym}")

    def _compare(self, fn: str, a: Any, b: Any) -> Traced:
        where = user_where()
        sym = _COMPARE[fn]
        return self._tracer.apply(("compare", fn, sym), (a, b), lambda s: self._tracer.types.b.compare(fn, s[0], s[1]),
                                  where, f"operator {sym}")

    def _unary(self, fn: str) -> Traced:
        where = user_where()
        sym = {"neg": "-", "invert": "~", "abs": "abs"}[fn]
        return self._tracer.apply(("unary", fn, sym), (self,), lambda s: self._tracer.types.b.unary(fn, s[0]),
                                  where, f"operator {sym}")

    def __add__(self, o: Any) -> Traced: return self._binary("add", self, o)
    def __radd__(self, o: Any) -> Traced: return self._binary("add", o, self)
    def __sub__(self, o: Any) -> Traced: return self._binary("sub", self, o)
    def __rsub__(self, o: Any) -> Traced: return self._binary("sub", o, self)
    def __mul__(self, o: Any) -> Traced: return self._binary("mul", self, o)
    def __rmul__(self, o: Any) -> Traced: return self._binary("mul", o, self)
    def __truediv__(self, o: Any) -> Traced: return self._binary("truediv", self, o)
    def __rtruediv__(self, o: Any) -> Traced: return self._binary("truediv", o, self)
    def __floordiv__(self, o: Any) -> Traced: return self._binary("floordiv", self, o)
    def __rfloordiv__(self, o: Any) -> Traced: return self._binary("floordiv", o, self)
    def __mod__(self, o: Any) -> Traced: return self._binary("mod", self, o)
    def __rmod__(self, o: Any) -> Traced: return self._binary("mod", o, self)
    def __pow__(self, o: Any) -> Traced: return self._binary("pow", self, o)
    def __rpow__(self, o: Any) -> Traced: return self._binary("pow", o, self)
    def __and__(self, o: Any) -> Traced: return self._binary("and", self, o)
    def __rand__(self, o: Any) -> Traced: return self._binary("and", o, self)
    def __or__(self, o: Any) -> Traced: return self._binary("or", self, o)
    def __ror__(self, o: Any) -> Traced: return self._binary("or", o, self)
    def __xor__(self, o: Any) -> Traced: return self._binary("xor", self, o)
    def __rxor__(self, o: Any) -> Traced: return self._binary("xor", o, self)
    def __lshift__(self, o: Any) -> Traced: return self._binary("lshift", self, o)
    def __rlshift__(self, o: Any) -> Traced: return self._binary("lshift", o, self)
    def __rshift__(self, o: Any) -> Traced: return self._binary("rshift", self, o)
    def __rrshift__(self, o: Any) -> Traced: return self._binary("rshift", o, self)
    def __lt__(self, o: Any) -> Traced: return self._compare("lt", self, o)
    def __le__(self, o: Any) -> Traced: return self._compare("le", self, o)
    def __gt__(self, o: Any) -> Traced: return self._compare("gt", self, o)
    def __ge__(self, o: Any) -> Traced: return self._compare("ge", self, o)
    def __eq__(self, o: Any) -> Traced: return self._compare("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Traced: return self._compare("ne", self, o)  # type: ignore[override]
    def __neg__(self) -> Traced: return self._unary("neg")
    def __invert__(self) -> Traced: return self._unary("invert")
    def __abs__(self) -> Traced: return self._unary("abs")

    def __pos__(self) -> Traced:
        return self

    __hash__ = None  # type: ignore[assignment]

    # -------------------------------------------------------------- what a traced value cannot do

    def _refuse(self, what: str, hint: str) -> TileCompileError:
        return _located(user_where(), f"{what}: {hint}")

    def __bool__(self) -> bool:
        raise self._refuse("the truth value of a traced value is not known while a fused function is traced",
                           "use tj.where(cond, x, y) for a choice per element, and tj.maximum / tj.minimum (not "
                           "Python's max / min) on arrays")

    def __float__(self) -> float:
        raise self._refuse("a traced value is not a Python number", "use the tj.* functions (tj.exp, not math.exp)")

    def __int__(self) -> int:
        raise self._refuse("a traced value is not a Python number", "use .astype(tj.int32) to convert elements")

    def __index__(self) -> int:
        raise self._refuse("a traced value cannot be an index or a size", "fused functions are elementwise")

    def __len__(self) -> int:
        raise self._refuse("a traced value has no length while it is traced", "its kernel is compiled for every size")

    def __iter__(self) -> Any:
        raise self._refuse("a traced value cannot be iterated", "fused functions are elementwise")

    def __getitem__(self, key: Any) -> Any:
        raise self._refuse("a traced value cannot be indexed or sliced",
                           "fused functions are elementwise: pass the slice (a view) as an argument instead")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise self._refuse("a traced value cannot be assigned to", "return the new values (or pass out=)")

    def __matmul__(self, o: Any) -> Any:
        raise self._refuse("operator @ is not elementwise", "tj.fuse fuses elementwise operations; write a tile "
                           "kernel (@tj.kernel) for a matrix product")

    __rmatmul__ = __matmul__

    @property
    def T(self) -> Any:
        raise self._refuse("a traced value cannot be transposed", "pass the transposed view as an argument instead")

    # -------------------------------------------------------------- methods

    def astype(self, dtype: Any) -> Traced:
        """The elements converted to ``dtype`` (a tj dtype, a numpy dtype or its name)."""
        return self._call("astype", (self, dtype), {}, user_where())

    def sum(self, axis: Any = None, keepdims: bool = False) -> Traced:
        """Sum over ``axis`` (all axes when None)."""
        return self._tracer.reduce("sum", self, axis, keepdims, user_where())

    def max(self, axis: Any = None, keepdims: bool = False) -> Traced:
        """Maximum over ``axis`` (all axes when None)."""
        return self._tracer.reduce("max", self, axis, keepdims, user_where())

    def min(self, axis: Any = None, keepdims: bool = False) -> Traced:
        """Minimum over ``axis`` (all axes when None)."""
        return self._tracer.reduce("min", self, axis, keepdims, user_where())

    def prod(self, axis: Any = None, keepdims: bool = False) -> Traced:
        """Product over ``axis`` (all axes when None)."""
        return self._tracer.reduce("prod", self, axis, keepdims, user_where())

    def mean(self, axis: Any = None, keepdims: bool = False) -> Traced:
        """Mean over ``axis``: the sum divided by the count (integers and bools give float32, as ``/`` does)."""
        return self._tracer.reduce("mean", self, axis, keepdims, user_where())

    # -------------------------------------------------------------- tj.* and numpy functions

    @classmethod
    def __tile_function__(cls, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``tj.<name>(...)`` called with a traced value (``tilejit.language.tile._on_host``)."""
        tracer = next(a._tracer for a in (*args, *kwargs.values()) if isinstance(a, Traced))
        return tracer.call(name, args, kwargs, user_where())

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], where: Where | None) -> Traced:
        return self._tracer.call(name, args, kwargs, where)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        name = getattr(ufunc, "__name__", str(ufunc))
        where = user_where()
        entry = _UFUNCS.get(name)
        if method != "__call__" or entry is None or kwargs:
            raise _located(where, f"numpy.{name}{'' if method == '__call__' else '.' + method} is not supported in a "
                                  "fused function" + (" (no keyword arguments)" if kwargs and entry else "") +
                                  f"; supported numpy ufuncs: {', '.join(sorted(_UFUNCS))}")
        kind, fn = entry
        t = self._tracer
        if kind == "binary":
            sym = _BINARY[fn][1]
            return t.apply(("binary", fn, sym), inputs, lambda s: t.types.b.binary(fn, s[0], s[1], sym), where,
                           f"numpy.{name}")
        if kind == "compare":
            return t.apply(("compare", fn, _COMPARE[fn]), inputs, lambda s: t.types.b.compare(fn, s[0], s[1]), where,
                           f"numpy.{name}")
        if kind == "unary":
            if fn == "pos":
                return inputs[0]
            return t.apply(("unary", fn, {"neg": "-", "invert": "~"}[fn]), inputs,
                           lambda s: t.types.b.unary(fn, s[0]), where, f"numpy.{name}")
        return t.call(fn, inputs, {}, where)

    def __array_function__(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = getattr(func, "__name__", str(func))
        where = user_where()
        fn = _NUMPY_FUNCTIONS.get(name)
        if fn is None:
            raise _located(where, f"numpy.{name} is not supported in a fused function; supported: numpy ufuncs, "
                                  f"{', '.join('numpy.' + n for n in sorted(_NUMPY_FUNCTIONS))}")
        tracer = next(a._tracer for a in (*args, *kwargs.values()) if isinstance(a, Traced))
        if fn in REDUCTIONS:
            extra = set(kwargs) - {"axis", "keepdims"}
            if extra or len(args) > 3:
                raise _located(where, f"numpy.{name}: only axis= and keepdims= are supported in a fused function")
            bound = dict(zip(("a", "axis", "keepdims"), args)) | kwargs
            return tracer.reduce(fn, bound["a"], bound.get("axis"), bound.get("keepdims", False), where)
        return tracer.call(fn, args, kwargs, where)




def trace(func: Callable[..., Any], names: Sequence[str], specs: Sequence[Spec]) -> Graph:
    """Call ``func`` with one traced value per parameter and return the graph of what it computed."""
    tracer = Tracer(func)
    values = [tracer.param(i, n, s) for i, (n, s) in enumerate(zip(names, specs))]
    code = func.__code__
    kwonly = code.co_kwonlyargcount if tuple(code.co_varnames[:len(names)]) == tuple(names) else 0
    npos = len(values) - kwonly  # keyword-only parameters are passed by name
    try:
        result = func(*values[:npos], **dict(zip(names[npos:], values[npos:])))
    except TileCompileError as exc:
        if exc.filename is not None:
            raise
        where = _raised_at(exc)  # e.g. tj.exp(2.0): a tj.* function of numbers alone, called from Python
        raise _located(where, exc.message + " (in a fused function, tj.* functions take traced values; use Python's "
                                            "math module for numbers)") from None
    single = not isinstance(result, tuple | list)
    items = [result] if single else list(result)
    where = def_where(func)
    if not items:
        raise where.error(f"{func.__name__}: a fused function must return a value or a tuple of values, got an "
                          "empty tuple")
    outputs: list[Node] = []
    for k, item in enumerate(items):
        if not isinstance(item, Traced):
            what = "its result" if single else f"item {k} of its result"
            raise where.error(f"{func.__name__}: {what} is {_describe(item)}, not a value computed from its "
                              "arguments (a fused function returns arrays computed elementwise)")
        if item._tracer is not tracer:
            raise where.error(f"{func.__name__}: it returned a value traced by another call")
        outputs.append(item._node)
    reduced = [o for o in outputs if o.reduced]
    if reduced and len(reduced) != len(outputs):
        plain = next(o for o in outputs if not o.reduced)
        made = f", from {plain.where}" if plain.where else ""
        raise where.error(f"{func.__name__} returns both a reduction and an elementwise result ({plain.dtype.name}, "
                          f"rank {plain.rank}{made}); a fused kernel computes one or the other: split it into two "
                          "fused functions")
    reduction = tracer.reductions[0] if reduced else None
    return Graph(func, names, specs, tracer.nodes, outputs, single, reduction)


def literal_text(v: bool | int | float) -> str:
    """A Python number as source text that reads back as the same value."""
    if isinstance(v, int):  # bool included
        return repr(v)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(v)


__all__ = ["ArraySpec", "ELEMENTWISE", "Graph", "Node", "REDUCTIONS", "ScalarSpec", "Spec", "Traced", "Tracer",
           "WEAK_DTYPE", "WeakSpec", "Where", "def_where", "dtype_text", "keepdims_of", "literal_text", "trace",
           "user_where"]
