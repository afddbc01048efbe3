"""Lowering rules for values from nothing (block ids, ranges, constants, array dims), elementwise math,
comparisons, select, casts and shape ops. Each follows the numpy rules the CUDA backend follows."""

from __future__ import annotations

from tilejit.backends.tileir.lower.core import I32, Lowerer, rule, unsupported
from tilejit.backends.tileir.module import Scalar, Tile, TOp, TValue, constant_bytes
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import TileType

_FLOAT_BIN: dict[str, str] = {"add": "addf", "sub": "subf", "mul": "mulf", "truediv": "divf"}
_INT_BIN: dict[str, str] = {"add": "addi", "sub": "subi", "mul": "muli"}
_BITWISE: dict[str, str] = {"and": "andi", "or": "ori", "xor": "xori"}
#: Unary fns whose Tile IR op computes exactly what the CUDA backend does (exact or correctly rounded).
_FLOAT_UNARY: dict[str, str] = {"neg": "negf", "abs": "absf", "floor": "floor", "ceil": "ceil", "sqrt": "sqrt"}
_INT_UNARY: dict[str, str] = {"neg": "negi", "abs": "absi"}
PREDICATES: dict[str, str] = {
    "eq": "equal", "ne": "not_equal", "lt": "less_than", "le": "less_than_or_equal", "gt": "greater_than",
    "ge": "greater_than_or_equal",
}


@rule(O.BlockIdOp)
def block_id(lo: Lowerer, op: O.BlockIdOp) -> None:
    """``bid(axis)``: one ``get_tile_block_id`` at the top of the entry serves every axis."""
    if not lo.block_ids:
        lo.block_ids = [TValue(I32, f"bid_{a}") for a in "xyz"]
        lo.prologue.append(TOp("get_tile_block_id", lo.block_ids, [], {}, op.loc))
    lo.vals[op.result] = lo.block_ids[op.axis]


@rule(O.NumBlocksOp)
def num_blocks(lo: Lowerer, op: O.NumBlocksOp) -> None:
    """``num_blocks(axis)``: one ``get_num_tile_blocks`` at the top of the entry."""
    if not lo.grid:
        lo.grid = [TValue(I32, f"num_blocks_{a}") for a in "xyz"]
        lo.prologue.append(TOp("get_num_tile_blocks", lo.grid, [], {}, op.loc))
    lo.vals[op.result] = lo.grid[op.axis]


@rule(O.ArangeOp)
def arange(lo: Lowerer, op: O.ArangeOp) -> None:
    """``arange(n)`` of an integer dtype: ``iota``."""
    r = lo.result(op)
    assert isinstance(r.type, Tile) and isinstance(r.type.elem, Scalar)
    if not r.type.elem.name.startswith("i"):
        raise unsupported(op, f"a {r.type.elem.name} range")
    lo.emit("iota", [r], [], op)


@rule(O.ArrayDimOp)
def array_dim(lo: Lowerer, op: O.ArrayDimOp) -> None:
    """An array's shape or stride: the entry parameter that carries it."""
    _, shape, strides = lo.arrays[op.array]
    lo.vals[op.result] = (shape if op.which == "shape" else strides)[op.axis]


@rule(O.ConstantOp)
def constant(lo: Lowerer, op: O.ConstantOp) -> None:
    """A constant tile: ``constant`` with one element of data (a splat)."""
    r = lo.result(op)
    assert isinstance(r.type, Tile) and isinstance(r.type.elem, Scalar)
    lo.emit("constant", [r], [], op, data=constant_bytes(op.value, r.type.elem), value=op.value)


@rule(O.UnaryOp)
def unary(lo: Lowerer, op: O.UnaryOp) -> None:
    """Elementwise ``fn(x)`` for the fns whose Tile IR op computes what the CUDA backend does."""
    dtype = op.result.type.dtype  # type: ignore[attr-defined]
    name = (_FLOAT_UNARY if dtype.is_float else _INT_UNARY if dtype.is_signed else {}).get(op.fn)
    if name is None:
        raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
    attrs = {"rounding": "nearest_even"} if name == "sqrt" else {"overflow": "none"} if name == "negi" else {}
    x = lo.value(op.x)
    lo.emit(name, [lo.result(op)], [x], op, **attrs)


@rule(O.CompareOp)
def compare(lo: Lowerer, op: O.CompareOp) -> None:
    """``cmpf`` (ordered, except ``!=`` which NaN makes true) or ``cmpi`` (signed or not) to an i1 tile."""
    dtype = op.x.type.dtype  # type: ignore[attr-defined]
    if dtype.is_bool:
        raise unsupported(op, f"fn='{op.fn}' on bool")
    x, y = lo.value(op.x), lo.value(op.y)
    r = lo.result(op)
    if dtype.is_float:
        ordering = "unordered" if op.fn == "ne" else "ordered"
        lo.emit("cmpf", [r], [x, y], op, predicate=PREDICATES[op.fn], comparison=ordering)
    else:
        sign = "signed" if dtype.is_signed else "unsigned"
        lo.emit("cmpi", [r], [x, y], op, predicate=PREDICATES[op.fn], signedness=sign)


@rule(O.SelectOp)
def select(lo: Lowerer, op: O.SelectOp) -> None:
    """``where(cond, x, y)``: ``select``."""
    operands = [lo.value(op.cond), lo.value(op.x), lo.value(op.y)]
    lo.emit("select", [lo.result(op)], operands, op)


@rule(O.BinaryOp)
def binary(lo: Lowerer, op: O.BinaryOp) -> None:
    """Elementwise binary ops: float and int arithmetic, maximum/minimum, and/or/xor."""
    dtype = op.result.type.dtype  # type: ignore[attr-defined]
    x, y = lo.value(op.x), lo.value(op.y)
    if dtype.is_float and op.fn in ("maximum", "minimum"):
        lo.emit("maxf" if op.fn == "maximum" else "minf", [lo.result(op)], [x, y], op, propagate_nan=True)
    elif dtype.is_int and op.fn in ("maximum", "minimum"):
        sign = "signed" if dtype.is_signed else "unsigned"
        lo.emit("maxi" if op.fn == "maximum" else "mini", [lo.result(op)], [x, y], op, signedness=sign)
    elif (dtype.is_int or dtype.is_bool) and op.fn in _BITWISE:
        lo.emit(_BITWISE[op.fn], [lo.result(op)], [x, y], op)
    elif dtype.is_float and op.fn in _FLOAT_BIN:
        lo.emit(_FLOAT_BIN[op.fn], [lo.result(op)], [x, y], op, rounding="nearest_even")
    elif dtype.is_int and op.fn in _INT_BIN:
        lo.emit(_INT_BIN[op.fn], [lo.result(op)], [x, y], op, overflow="none")
    else:
        raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")


@rule(O.CastOp)
def cast(lo: Lowerer, op: O.CastOp) -> None:
    """``astype``: ftof, itof, exti or trunci (nothing when the Tile IR type is the same)."""
    src, dst = op.x.type, op.result.type
    assert isinstance(src, TileType) and isinstance(dst, TileType)
    t = lo.tile_type(dst, op)
    x = lo.value(op.x)
    if lo.tile_type(src, op) == t:
        lo.vals[op.result] = x
        return
    sign = "signed" if src.dtype.is_signed else "unsigned"
    if src.dtype.is_float and dst.dtype.is_float:
        lo.emit("ftof", [lo.result(op)], [x], op, rounding="nearest_even")
    elif src.dtype.is_int and dst.dtype.is_float:
        lo.emit("itof", [lo.result(op)], [x], op, signedness=sign, rounding="nearest_even")
    elif src.dtype.is_int and dst.dtype.is_int and dst.dtype.bits > src.dtype.bits:
        lo.emit("exti", [lo.result(op)], [x], op, signedness=sign)
    elif src.dtype.is_int and dst.dtype.is_int:
        lo.emit("trunci", [lo.result(op)], [x], op, overflow="none")
    else:
        raise unsupported(op, f"{src.dtype.name} to {dst.dtype.name}")


@rule(O.BroadcastOp)
def broadcast(lo: Lowerer, op: O.BroadcastOp) -> None:
    """Broadcast to the result shape (a lower-rank operand is reshaped to rank first)."""
    t = lo.tile_type(op.result.type, op)
    x = lo.value(op.x)
    assert isinstance(x.type, Tile)
    if len(x.type.shape) != len(t.shape):
        ones = TValue(Tile(t.elem, (1,) * len(t.shape)))
        lo.emit("reshape", [ones], [x], op)
        x = ones
    lo.emit("broadcast", [lo.result(op)], [x], op)


@rule(O.ReshapeOp)
def reshape(lo: Lowerer, op: O.ReshapeOp) -> None:
    """``reshape``: the same elements in a new shape."""
    x = lo.value(op.x)
    lo.emit("reshape", [lo.result(op)], [x], op)
