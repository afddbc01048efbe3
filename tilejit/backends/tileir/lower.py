"""tilejit IR ``Function`` → ``TModule`` (one entry function), for the first subset of ops.

Kernel parameters: an array becomes its base pointer (``tile<ptr<T>>``) followed by one ``tile<i64>``
per dimension for the shape, then one per dimension for the strides in elements; a scalar stays a
scalar tile. Loads and stores go through a tensor view and a partition view made once per array
at the top of the entry. Memory ops are ordered with tokens: a load waits for the last store, and a
store waits for that store and every load since it. Anything else raises a located
``TileCompileError`` that names the op and suggests ``backend="cuda"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tilejit.backends.cuda.plan import located
from tilejit.backends.tileir.module import (
    PartitionView,
    Ptr,
    Scalar,
    TBlock,
    TensorView,
    TFunction,
    Tile,
    TModule,
    Token,
    TOp,
    TValue,
    constant_bytes,
)
from tilejit.errors import TileCompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import UNKNOWN_LOC, Op, Value
from tilejit.language.ir.types import ArrayType, DType, TileType

I32 = Tile(Scalar("i32"))
I64 = Tile(Scalar("i64"))
TOKEN = Token()

#: tilejit dtypes the subset stores in memory and computes with: dtype name -> Tile IR element.
ELEMENTS: dict[str, str] = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64", "bool": "i1",
}
_FLOAT_BIN: dict[str, str] = {"add": "addf", "sub": "subf", "mul": "mulf", "truediv": "divf"}
_INT_BIN: dict[str, str] = {"add": "addi", "sub": "subi", "mul": "muli"}
_BITWISE: dict[str, str] = {"and": "andi", "or": "ori", "xor": "xori"}
#: Unary fns whose Tile IR op computes exactly what the CUDA backend does (exact or correctly rounded).
_FLOAT_UNARY: dict[str, str] = {"neg": "negf", "abs": "absf", "floor": "floor", "ceil": "ceil", "sqrt": "sqrt"}
_INT_UNARY: dict[str, str] = {"neg": "negi", "abs": "absi"}
_PREDICATES: dict[str, str] = {
    "eq": "equal", "ne": "not_equal", "lt": "less_than", "le": "less_than_or_equal", "gt": "greater_than",
    "ge": "greater_than_or_equal",
}


def unsupported(op: Op, detail: str = "") -> TileCompileError:
    """The located refusal for an op (or a form of one) Tile IR lowering does not cover."""
    what = f"'{op.NAME}'" + (f" ({detail})" if detail else "")
    return located(
        op.loc, f'the Tile IR backend cannot express {what} yet; compile this kernel with backend="cuda"'
    )


def element(dtype: DType, op: Op) -> Scalar:
    """The Tile IR element type of ``dtype``; refuses types the subset does not cover."""
    name = ELEMENTS.get(dtype.name)
    if name is None:
        raise unsupported(op, f"dtype {dtype.name}")
    return Scalar(name)


#: Reductions: fn -> {"f": (combining op, identity), "i": (combining op, placeholder: see _int_identity)}.
_REDUCE: dict[str, dict[str, tuple[str, object]]] = {
    "sum": {"f": ("addf", 0.0), "i": ("addi", 0)},
    "prod": {"f": ("mulf", 1.0), "i": ("muli", 1)},
    "max": {"f": ("maxf", -math.inf), "i": ("maxi", 0)},
    "min": {"f": ("minf", math.inf), "i": ("mini", 0)},
}


def _int_identity(fn: str, dtype: DType) -> int:
    """The identity of an integer reduction in ``dtype``'s range (max starts at its lowest value)."""
    lo = -(1 << (dtype.bits - 1)) if dtype.is_signed else 0
    hi = (1 << (dtype.bits - 1)) - 1 if dtype.is_signed else (1 << dtype.bits) - 1
    return {"sum": 0, "prod": 1, "max": lo, "min": hi}[fn]


def padding_name(value: object) -> str | None:
    """The partition-view padding that reads ``value``, or ``None`` when Tile IR has none for it."""
    v = float(value)  # type: ignore[arg-type]
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "pos_inf" if v > 0 else "neg_inf"
    if v == 0:
        return "neg_zero" if math.copysign(1.0, v) < 0 else "zero"
    return None


class Lowerer:
    """Walks one tilejit ``Function`` and collects the entry's parameters, prologue and body."""

    def __init__(self, fn: O.Function) -> None:
        self.fn = fn
        self.params: list[TValue] = []
        self.prologue: list[TOp] = []
        self.body: list[TOp] = []
        self.vals: dict[Value, TValue] = {}
        self.arrays: dict[Value, tuple[TValue, list[TValue], list[TValue]]] = {}
        self.views: dict[tuple[Value, tuple[int, ...], str | None], TValue] = {}
        self.block_ids: list[TValue] = []
        self.grid: list[TValue] = []
        self.last_store: TValue | None = None
        self.loads_since: list[TValue] = []
        self.rules: dict[type[Op], Callable[[Op], None]] = {
            O.BlockIdOp: self.block_id,
            O.NumBlocksOp: self.num_blocks,
            O.ArangeOp: self.arange,
            O.UnaryOp: self.unary,
            O.CompareOp: self.compare,
            O.SelectOp: self.select,
            O.ArrayDimOp: self.array_dim,
            O.ConstantOp: self.constant,
            O.LoadOp: self.load,
            O.StoreOp: self.store,
            O.BinaryOp: self.binary,
            O.CastOp: self.cast,
            O.BroadcastOp: self.broadcast,
            O.ReshapeOp: self.reshape,
            O.ReduceOp: self.reduce,
            O.ReturnOp: self.ret,
        }

    # ------------------------------------------------------------------ helpers

    def emit(self, name: str, results: list[TValue], operands: list[object], op: Op, **attrs: object) -> TOp:
        """Append a Tile IR op for ``op`` (it takes ``op``'s location) to the body."""
        top = TOp(name, results, operands, dict(attrs), op.loc)  # type: ignore[arg-type]
        self.body.append(top)
        return top

    def tile_type(self, t: object, op: Op) -> Tile:
        """The Tile IR type of an IR tile (the front end keeps tile dimensions powers of two, as Tile IR needs)."""
        if not isinstance(t, TileType):
            raise unsupported(op, f"a value of type {t}")
        return Tile(element(t.dtype, op), tuple(t.shape))

    def indices(self, values: list[Value], op: Op) -> list[TValue]:
        """A load/store's tile indices, all of one integer type (narrower ones sign-extended to the widest)."""
        idx = [self.value(i) for i in values]
        widest = max((v.type for v in idx), key=lambda t: int(t.elem.name[1:]), default=None)  # type: ignore[union-attr]
        out = []
        for v, src in zip(idx, values):
            if v.type != widest:
                assert widest is not None
                signed = src.type.dtype.is_signed  # type: ignore[attr-defined]
                wide = TValue(widest)
                self.emit("exti", [wide], [v], op, signedness="signed" if signed else "unsigned")
                v = wide
            out.append(v)
        return out

    def value(self, v: Value) -> TValue:
        """The Tile IR value of an IR value already lowered."""
        return self.vals[v]

    # ------------------------------------------------------------------ entry

    def run(self) -> TModule:
        """Lower the parameters, then every op of the body, into one entry of a new module."""
        fn = self.fn
        def_loc = fn.body.ops[-1].loc if fn.body.ops else UNKNOWN_LOC  # the ReturnOp points at the def line
        for name, p in zip(fn.param_names, fn.params):
            t = p.type
            elem = ELEMENTS.get(t.dtype.name) if isinstance(t, (ArrayType, TileType)) else None
            # bool parameters wait for the launcher: arrays hold bytes, and how an i1 scalar is passed is open
            if elem is None or elem == "i1" or (isinstance(t, TileType) and t.shape):
                raise located(
                    def_loc,
                    f"the Tile IR backend cannot express parameter '{name}' of type {t} yet; "
                    'compile this kernel with backend="cuda"',
                )
            if isinstance(t, ArrayType):
                base = TValue(Tile(Ptr(Scalar(elem))), name)
                shape = [TValue(I64, f"{name}_shape{d}") for d in range(t.ndim)]
                strides = [TValue(I64, f"{name}_stride{d}") for d in range(t.ndim)]
                self.params += [base, *shape, *strides]
                self.arrays[p] = (base, shape, strides)
            else:
                tv = TValue(Tile(Scalar(elem)), name)
                self.params.append(tv)
                self.vals[p] = tv
        for op in fn.body.ops:
            rule = self.rules.get(type(op))
            if rule is None:
                fn_attr = op.attributes().get("fn")
                raise unsupported(op, f"fn='{fn_attr}'" if fn_attr else "")
            rule(op)
        return TModule(fn.name, [TFunction(fn.name, self.params, self.prologue + self.body, def_loc)])

    # ------------------------------------------------------------------ ops

    def block_id(self, op: Op) -> None:
        """``bid(axis)``: one ``get_tile_block_id`` at the top of the entry serves every axis."""
        assert isinstance(op, O.BlockIdOp)
        if not self.block_ids:
            self.block_ids = [TValue(I32, f"bid_{a}") for a in "xyz"]
            self.prologue.append(TOp("get_tile_block_id", self.block_ids, [], {}, op.loc))
        self.vals[op.result] = self.block_ids[op.axis]

    def num_blocks(self, op: Op) -> None:
        """``num_blocks(axis)``: one ``get_num_tile_blocks`` at the top of the entry."""
        assert isinstance(op, O.NumBlocksOp)
        if not self.grid:
            self.grid = [TValue(I32, f"num_blocks_{a}") for a in "xyz"]
            self.prologue.append(TOp("get_num_tile_blocks", self.grid, [], {}, op.loc))
        self.vals[op.result] = self.grid[op.axis]

    def arange(self, op: Op) -> None:
        """``arange(n)`` of an integer dtype: ``iota``."""
        r = TValue(self.tile_type(op.result.type, op), op.result.name)
        assert isinstance(r.type, Tile) and isinstance(r.type.elem, Scalar)
        if not r.type.elem.name.startswith("i"):
            raise unsupported(op, f"a {r.type.elem.name} range")
        self.emit("iota", [r], [], op)
        self.vals[op.result] = r

    def unary(self, op: Op) -> None:
        """Elementwise ``fn(x)`` for the fns whose Tile IR op computes what the CUDA backend does."""
        assert isinstance(op, O.UnaryOp)
        dtype = op.result.type.dtype  # type: ignore[attr-defined]
        name = (_FLOAT_UNARY if dtype.is_float else _INT_UNARY if dtype.is_signed else {}).get(op.fn)
        if name is None:
            raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
        r = TValue(self.tile_type(op.result.type, op), op.result.name)
        attrs = {"rounding": "nearest_even"} if name == "sqrt" else {"overflow": "none"} if name == "negi" else {}
        self.emit(name, [r], [self.value(op.x)], op, **attrs)
        self.vals[op.result] = r

    def compare(self, op: Op) -> None:
        """``cmpf`` (ordered, except ``!=`` which NaN makes true) or ``cmpi`` (signed or not) to an i1 tile."""
        assert isinstance(op, O.CompareOp)
        dtype = op.x.type.dtype  # type: ignore[attr-defined]
        if dtype.is_bool:
            raise unsupported(op, f"fn='{op.fn}' on bool")
        r = TValue(self.tile_type(op.result.type, op), op.result.name)
        x, y = self.value(op.x), self.value(op.y)
        if dtype.is_float:
            ordering = "unordered" if op.fn == "ne" else "ordered"
            self.emit("cmpf", [r], [x, y], op, predicate=_PREDICATES[op.fn], comparison=ordering)
        else:
            sign = "signed" if dtype.is_signed else "unsigned"
            self.emit("cmpi", [r], [x, y], op, predicate=_PREDICATES[op.fn], signedness=sign)
        self.vals[op.result] = r

    def select(self, op: Op) -> None:
        """``where(cond, x, y)``: ``select``."""
        assert isinstance(op, O.SelectOp)
        r = TValue(self.tile_type(op.result.type, op), op.result.name)
        self.emit("select", [r], [self.value(op.cond), self.value(op.x), self.value(op.y)], op)
        self.vals[op.result] = r

    def array_dim(self, op: Op) -> None:
        """An array's shape or stride: the entry parameter that carries it."""
        assert isinstance(op, O.ArrayDimOp)
        _, shape, strides = self.arrays[op.array]
        self.vals[op.result] = (shape if op.which == "shape" else strides)[op.axis]

    def constant(self, op: Op) -> None:
        """A constant tile: ``constant`` with one element of data (a splat)."""
        assert isinstance(op, O.ConstantOp)
        t = self.tile_type(op.result.type, op)
        assert isinstance(t.elem, Scalar)
        r = TValue(t, op.result.name)
        self.emit("constant", [r], [], op, data=constant_bytes(op.value, t.elem), value=op.value)
        self.vals[op.result] = r

    def view(self, op: Op, array: Value, tile: tuple[int, ...], padding: str | None) -> TValue:
        """The partition view of ``array`` in tiles of ``tile`` (made once, at the top of the entry)."""
        key = (array, tile, padding)
        if key in self.views:
            return self.views[key]
        at = array.type
        assert isinstance(at, ArrayType)
        base, shape, strides = self.arrays[array]
        assert isinstance(base.type, Tile) and isinstance(base.type.elem, Ptr)
        n = at.ndim
        static = tuple(1 if at.contiguous and d == n - 1 else None for d in range(n))
        tv_type = TensorView(base.type.elem.elem, (None,) * n, static)
        dyn_strides = [s for s, st in zip(strides, static) if st is None]
        tv = TValue(tv_type, f"{base.name}_view")
        self.prologue.append(TOp("make_tensor_view", [tv], [base, list(shape), dyn_strides], {}, op.loc))
        pv = TValue(PartitionView(tile, tv_type, tuple(range(n)), padding), f"{base.name}_tiles")
        self.prologue.append(TOp("make_partition_view", [pv], [tv], {}, op.loc))
        self.views[key] = pv
        return pv

    def load(self, op: Op) -> None:
        """``load``: ``load_view_tko`` through the array's padded partition view, after the last store."""
        assert isinstance(op, O.LoadOp)
        t = self.tile_type(op.result.type, op)
        pad = padding_name(op.padding)
        if pad is None:
            raise unsupported(op, f"padding={op.padding!r}; Tile IR pads only with 0, -0.0, nan, inf or -inf")
        pv = self.view(op, op.array, t.shape, pad)
        r, tok = TValue(t, op.result.name), TValue(TOKEN)
        idx = self.indices(op.index, op)
        self.emit("load_view_tko", [r, tok], [pv, idx, self.last_store], op, ordering="weak",
                  inbounds=(False,) * len(idx))
        self.loads_since.append(tok)
        self.vals[op.result] = r

    def store(self, op: Op) -> None:
        """``store``: ``store_view_tko`` through an unpadded view, after the last store and the loads since."""
        assert isinstance(op, O.StoreOp)
        t = self.tile_type(op.tile.type, op)
        pv = self.view(op, op.array, t.shape, None)
        waits = ([self.last_store] if self.last_store is not None else []) + self.loads_since
        token: TValue | None = waits[0] if len(waits) == 1 else None
        if len(waits) > 1:
            token = TValue(TOKEN)
            self.emit("join_tokens", [token], [waits], op)
        tok = TValue(TOKEN)
        idx = self.indices(op.index, op)
        self.emit("store_view_tko", [tok], [self.value(op.tile), pv, idx, token], op, ordering="weak",
                  inbounds=(False,) * len(idx))
        self.last_store, self.loads_since = tok, []

    def binary(self, op: Op) -> None:
        """Elementwise binary ops: float and int arithmetic, maximum/minimum, and/or/xor."""
        assert isinstance(op, O.BinaryOp)
        t = self.tile_type(op.result.type, op)
        dtype = op.result.type.dtype  # type: ignore[attr-defined]
        r = TValue(t, op.result.name)
        x, y = self.value(op.x), self.value(op.y)
        if dtype.is_float and op.fn in ("maximum", "minimum"):
            self.emit("maxf" if op.fn == "maximum" else "minf", [r], [x, y], op, propagate_nan=True)
        elif dtype.is_int and op.fn in ("maximum", "minimum"):
            sign = "signed" if dtype.is_signed else "unsigned"
            self.emit("maxi" if op.fn == "maximum" else "mini", [r], [x, y], op, signedness=sign)
        elif (dtype.is_int or dtype.is_bool) and op.fn in _BITWISE:
            self.emit(_BITWISE[op.fn], [r], [x, y], op)
        elif dtype.is_float and op.fn in _FLOAT_BIN:
            self.emit(_FLOAT_BIN[op.fn], [r], [x, y], op, rounding="nearest_even")
        elif dtype.is_int and op.fn in _INT_BIN:
            self.emit(_INT_BIN[op.fn], [r], [x, y], op, overflow="none")
        else:
            raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
        self.vals[op.result] = r

    def cast(self, op: Op) -> None:
        """``astype``: ftof, itof, exti or trunci (nothing when the Tile IR type is the same)."""
        assert isinstance(op, O.CastOp)
        src, dst = op.x.type, op.result.type
        assert isinstance(src, TileType) and isinstance(dst, TileType)
        t = self.tile_type(dst, op)
        s = self.tile_type(src, op)
        x = self.value(op.x)
        if s == t:
            self.vals[op.result] = x
            return
        r = TValue(t, op.result.name)
        sign = "signed" if src.dtype.is_signed else "unsigned"
        if src.dtype.is_float and dst.dtype.is_float:
            self.emit("ftof", [r], [x], op, rounding="nearest_even")
        elif src.dtype.is_int and dst.dtype.is_float:
            self.emit("itof", [r], [x], op, signedness=sign, rounding="nearest_even")
        elif src.dtype.is_int and dst.dtype.is_int and dst.dtype.bits > src.dtype.bits:
            self.emit("exti", [r], [x], op, signedness=sign)
        elif src.dtype.is_int and dst.dtype.is_int:
            self.emit("trunci", [r], [x], op, overflow="none")
        else:
            raise unsupported(op, f"{src.dtype.name} to {dst.dtype.name}")
        self.vals[op.result] = r

    def broadcast(self, op: Op) -> None:
        """Broadcast to the result shape (a lower-rank operand is reshaped to rank first)."""
        assert isinstance(op, O.BroadcastOp)
        t = self.tile_type(op.result.type, op)
        x = self.value(op.x)
        assert isinstance(x.type, Tile)
        if len(x.type.shape) != len(t.shape):
            ones = TValue(Tile(t.elem, (1,) * len(t.shape)))
            self.emit("reshape", [ones], [x], op)
            x = ones
        r = TValue(t, op.result.name)
        self.emit("broadcast", [r], [x], op)
        self.vals[op.result] = r

    def reshape(self, op: Op) -> None:
        """``reshape``: the same elements in a new shape."""
        assert isinstance(op, O.ReshapeOp)
        r = TValue(self.tile_type(op.result.type, op), op.result.name)
        self.emit("reshape", [r], [self.value(op.x)], op)
        self.vals[op.result] = r

    def convert(self, x: TValue, elem: Scalar, op: Op) -> TValue:
        """``x`` as float element type ``elem`` (``x`` itself when it already is)."""
        assert isinstance(x.type, Tile)
        if x.type.elem == elem:
            return x
        r = TValue(Tile(elem, x.type.shape))
        self.emit("ftof", [r], [x], op, rounding="nearest_even")
        return r

    def reduce(self, op: Op) -> None:
        """``reduce`` with a one-op body; floats under 32 bits accumulate in f32 (as the CUDA backend does)."""
        assert isinstance(op, O.ReduceOp)
        dtype = op.result.type.dtype  # type: ignore[attr-defined]
        if op.fn not in _REDUCE or dtype.is_bool:
            raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
        out = self.tile_type(op.result.type, op)
        assert isinstance(out.elem, Scalar)
        acc = Scalar("f32") if dtype.is_float and dtype.bits < 32 else out.elem
        x = self.value(op.x)
        if dtype.is_float:
            x = self.convert(x, acc, op)
        scalar = Tile(acc)
        elem, accum, combined = TValue(scalar, "elem"), TValue(scalar, "accum"), TValue(scalar, "combined")
        combine, identity = _REDUCE[op.fn]["f" if dtype.is_float else "i"]
        attrs: dict[str, object] = {"rounding": "nearest_even"} if dtype.is_float else {"overflow": "none"}
        if combine in ("maxf", "minf"):
            attrs = {"propagate_nan": True}
        elif combine in ("maxi", "mini"):
            attrs = {"signedness": "signed" if dtype.is_signed else "unsigned"}
        if not dtype.is_float:
            identity = _int_identity(op.fn, dtype)
        body = [
            TOp(combine, [combined], [elem, accum], attrs, op.loc),
            TOp("yield", [], [[combined]], {}, op.loc),
        ]
        r = TValue(Tile(acc, out.shape), op.result.name if acc == out.elem else "")
        top = self.emit("reduce", [r], [[x]], op, dim=op.axis, identities=[(identity, acc)])
        top.regions.append(TBlock([elem, accum], body))
        self.vals[op.result] = self.convert(r, out.elem, op) if dtype.is_float else r

    def ret(self, op: Op) -> None:
        """End of the kernel: ``return``."""
        self.emit("return", [], [[]], op)


def lower_function(fn: O.Function) -> TModule:
    """The Tile IR module of kernel ``fn`` (raises a located ``TileCompileError`` for what it can't express)."""
    return Lowerer(fn).run()
