"""The lowering's frame: the ``Lowerer`` that walks a tilejit IR ``Function``, the rule registry, and the
facts every rule shares (element types, the located refusal).

Kernel parameters: an array becomes its base pointer (``tile<ptr<T>>``) followed by one ``tile<i64>``
per dimension for the shape, then one per dimension for the strides in elements; a scalar stays a
scalar tile. Bools are bytes in memory and as parameters (the launcher's ``?``): ``ptr<i8>`` and
``tile<i8>``, read as ``!= 0``. The rules for each kind of op live in their own module (``elementwise``, ``memory``,
``reduce``, ``control``, ``mma``) and register themselves with ``@rule``. An op with no rule, or a
form of one a rule does not cover, raises a located ``TileIRUnsupportedError`` (a ``TileCompileError``) that
names the op and suggests ``backend="cuda"``; ``backend="auto"`` compiles such a kernel with CUDA C++ instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from tilejit.backends.base import NO_HINTS, KernelHints
from tilejit.backends.cuda.plan import located
from tilejit.backends.tileir.lower.occupancy import entry_hints
from tilejit.backends.tileir.module import (
    Ptr,
    Scalar,
    TFunction,
    Tile,
    TModule,
    Token,
    TOp,
    TValue,
    constant_bytes,
)
from tilejit.compiler.targets import parse_target
from tilejit.errors import TileIRUnsupportedError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import UNKNOWN_LOC, Loc, Op, Value
from tilejit.language.ir.types import ArrayHint, ArrayListType, ArrayType, DType, TileType

I1 = Tile(Scalar("i1"))
I32 = Tile(Scalar("i32"))
I64 = Tile(Scalar("i64"))
TOKEN = Token()

#: tilejit dtypes the lowering stores in memory and computes with: dtype name -> Tile IR element.
ELEMENTS: dict[str, str] = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64", "bool": "i1",
    "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2",
}
#: Element types held in memory (and passed as parameters) as another: a bool is one byte, 0 or 1.
STORED: dict[str, str] = {"i1": "i8"}

Rule = Callable[["Lowerer", Any], None]
#: IR op type -> the function that lowers it (filled by the rule modules through ``@rule``).
RULES: dict[type[Op], Rule] = {}
R = TypeVar("R", bound=Rule)


def rule(*op_types: type[Op]) -> Callable[[R], R]:
    """Register the decorated function as the lowering of ``op_types``."""

    def register(fn: R) -> R:
        for t in op_types:
            assert t not in RULES, f"two Tile IR lowering rules for {t.__name__}"
            RULES[t] = fn
        return fn

    return register


def unsupported(op: Op, detail: str = "") -> TileIRUnsupportedError:
    """The located refusal for an op (or a form of one) the Tile IR lowering does not cover."""
    what = f"'{op.NAME}'" + (f" ({detail})" if detail else "")
    return refusal(op.loc, f"the Tile IR backend cannot express {what} yet")


def refusal(loc: Loc, message: str) -> TileIRUnsupportedError:
    """The located refusal ``message`` (what Tile IR cannot express), suggesting the CUDA backend."""
    error = located(loc, f'{message}; compile this kernel with backend="cuda"', TileIRUnsupportedError)
    assert isinstance(error, TileIRUnsupportedError)
    return error


def element(dtype: DType, op: Op) -> Scalar:
    """The Tile IR element type of ``dtype``; refuses types the lowering does not cover."""
    name = ELEMENTS.get(dtype.name)
    if name is None:
        raise unsupported(op, f"dtype {dtype.name}")
    return Scalar(name)


class Lowerer:
    """Walks one tilejit ``Function`` and collects the entry's parameters, prologue and body.

    ``prologue`` holds what is made once at the top of the entry (block ids, views); ``emit`` appends to
    the innermost block being lowered (the entry body, or a region's block inside ``in_block``).
    Memory ordering state: ``last_store`` is the token of the last store (``None``: none yet) and
    ``loads_since`` the tokens of the loads after it; a load waits for ``last_store``, a store for both.
    """

    def __init__(self, fn: O.Function, target: str = "", hints: Mapping[str, ArrayHint] | None = None,
                 kernel_hints: KernelHints = NO_HINTS) -> None:
        self.fn = fn
        self.target = target
        self.kernel_hints = kernel_hints  # the user's num_ctas / occupancy, for the entry's hints
        self.hints: Mapping[str, ArrayHint] = {} if hints is None else hints
        self.array_hints: dict[Value, ArrayHint] = {}  # each array parameter's launch facts, if any
        self.stated: set[Value] = set()  # arrays whose facts are stated (memory.view, once per array)
        self.params: list[TValue] = []
        self.prologue: list[TOp] = []
        self.blocks: list[list[TOp]] = [[]]
        self.vals: dict[Value, TValue] = {}
        self.arrays: dict[Value, tuple[TValue, list[TValue], list[TValue]]] = {}
        self.views: dict[tuple[Any, ...], TValue] = {}
        self.block_ids: list[TValue] = []
        self.grid: list[TValue] = []
        self.last_store: TValue | None = None
        self.loads_since: list[TValue] = []
        self.control: list[Any] = []  # the enclosing loops and if branches, innermost last (control.py)
        self.no_tma: bool | None = None  # view accesses without TMA (memory.access_hints), decided on first use

    # ------------------------------------------------------------------ helpers

    def emit(self, name: str, results: list[TValue], operands: list[Any], op: Op, **attrs: Any) -> TOp:
        """Append a Tile IR op for ``op`` (it takes ``op``'s location) to the current block."""
        top = TOp(name, results, operands, dict(attrs), op.loc)
        self.blocks[-1].append(top)
        return top

    @contextmanager
    def in_block(self) -> Iterator[list[TOp]]:
        """Collect the ops emitted inside the ``with`` into a new list (a region's block)."""
        self.blocks.append([])
        try:
            yield self.blocks[-1]
        finally:
            self.blocks.pop()

    def lower_ops(self, ops: list[Op]) -> None:
        """Lower ``ops`` in order into the current block."""
        for op in ops:
            fn = RULES.get(type(op))
            if fn is None:
                fn_attr = op.attributes().get("fn")
                raise unsupported(op, f"fn='{fn_attr}'" if fn_attr else "")
            fn(self, op)

    def tile_type(self, t: object, op: Op) -> Tile:
        """The Tile IR type of an IR tile (the front end keeps tile dimensions powers of two, as Tile IR needs)."""
        if not isinstance(t, TileType):
            raise unsupported(op, f"a value of type {t}")
        self.check_float8(t.dtype, op.loc)
        return Tile(element(t.dtype, op), tuple(t.shape))

    def check_float8(self, dtype: DType, loc: Loc) -> None:
        """Refuses 8-bit floats for targets before sm_89 (tileiras 13.5 rejects f8E4M3FN and f8E5M2 there)."""
        if dtype.is_float8 and self.target and parse_target(self.target).number < 89:
            raise refusal(loc, f"Tile IR has {dtype.name} from sm_89 on, not for {self.target}")

    def result(self, op: Op, value: Value | None = None) -> TValue:
        """A new Tile IR value for ``value`` (default: ``op.result``), typed and named after it, recorded as
        its lowering."""
        v = op.result if value is None else value
        r = TValue(self.tile_type(v.type, op), v.name)
        self.vals[v] = r
        return r

    def value(self, v: Value) -> TValue:
        """The Tile IR value of an IR value already lowered."""
        return self.vals[v]

    def nonzero(self, x: TValue, loc: Loc, into: list[TOp], name: str = "") -> TValue:
        """``x != 0`` as an i1 tile, appended to ``into``: a bool read as its byte (any non-zero byte is true)."""
        assert isinstance(x.type, Tile) and isinstance(x.type.elem, Scalar)
        zero = TValue(x.type)
        r = TValue(Tile(Scalar("i1"), x.type.shape), name)
        into.append(TOp("constant", [zero], [], {"data": constant_bytes(0, x.type.elem), "value": 0}, loc))
        into.append(TOp("cmpi", [r], [x, zero], {"predicate": "not_equal", "signedness": "unsigned"}, loc))
        return r

    # ------------------------------------------------------------------ entry

    def run(self) -> TModule:
        """Lower the parameters, then every op of the body, into one entry of a new module."""
        fn = self.fn
        def_loc = fn.body.ops[-1].loc if fn.body.ops else UNKNOWN_LOC  # the ReturnOp points at the def line
        for name, p in zip(fn.param_names, fn.params):
            t = p.type
            elem = ELEMENTS.get(t.dtype.name) if isinstance(t, (ArrayType, ArrayListType, TileType)) else None
            if elem is None or (isinstance(t, TileType) and t.shape):
                raise refusal(def_loc, f"the Tile IR backend cannot express parameter '{name}' of type {t} yet")
            self.check_float8(t.dtype, def_loc)
            stored = STORED.get(elem, elem)
            if isinstance(t, ArrayType | ArrayListType):  # an array list: its table, a rank-2 int64 array
                ndim = t.ndim if isinstance(t, ArrayType) else 2
                base = TValue(Tile(Ptr(Scalar(stored if isinstance(t, ArrayType) else "i64"))), name)
                shape = [TValue(I64, f"{name}_shape{d}") for d in range(ndim)]
                strides = [TValue(I64, f"{name}_stride{d}") for d in range(ndim)]
                self.params += [base, *shape, *strides]
                self.arrays[p] = (base, shape, strides)
                hint = self.hints.get(name)
                if hint is not None:
                    self.array_hints[p] = hint
            else:
                tv = TValue(Tile(Scalar(stored)), f"{name}_byte" if stored != elem else name)
                self.params.append(tv)
                self.vals[p] = tv if stored == elem else self.nonzero(tv, def_loc, self.prologue, name)
        self.lower_ops(fn.body.ops)
        body = self.prologue + self.blocks[0]
        hints = entry_hints(fn, self.target, self.kernel_hints)  # occupancy, cluster (lower/occupancy.py)
        return TModule(fn.name, [TFunction(fn.name, self.params, body, def_loc, hints)])


def lower_function(fn: O.Function, target: str = "", hints: Mapping[str, ArrayHint] | None = None,
                   kernel_hints: KernelHints = NO_HINTS) -> TModule:
    """The Tile IR module of kernel ``fn`` for ``target`` (``sm_NN``; ``""``: any), stating the launch-checked
    facts of ``hints`` (array parameter name -> ``ArrayHint``) about its arrays and the user's ``kernel_hints`` as
    entry hints (raises a located ``TileIRUnsupportedError`` for what it can't express)."""
    from tilejit.backends.tileir.lower import control, elementwise, memory, mma, printing, reduce  # noqa: F401

    return Lowerer(fn, target, hints, kernel_hints).run()
