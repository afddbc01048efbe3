"""Lowering rules for reductions, arg-reductions and scans along one axis: ``reduce``/``scan`` with a small
region; floats narrower than 32 bits accumulate in f32 and integers in their own type (wrapping), as the CUDA
backend's reduce.cuh does."""

from __future__ import annotations

import math

from tilejit.backends.tileir.lower.core import I32, Lowerer, rule, unsupported
from tilejit.backends.tileir.lower.elementwise import (
    FLOAT_BITS,
    compute_elem,
    elem_of,
    fconvert,
    kind,
)
from tilejit.backends.tileir.module import Scalar, TBlock, Tile, TOp, TValue, constant_bytes
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Op
from tilejit.language.ir.types import DType
from tilejit.language.ir.types import TileType as IRTile

#: Combining op of a reduction or scan: fn -> {kind: Tile IR op} (bool max/min are or/and).
_COMBINE: dict[str, dict[str, str]] = {
    "sum": {"f": "addf", "i": "addi", "u": "addi"},
    "prod": {"f": "mulf", "i": "muli", "u": "muli"},
    "max": {"f": "maxf", "i": "maxi", "u": "maxi", "b": "ori"},
    "min": {"f": "minf", "i": "mini", "u": "mini", "b": "andi"},
}
_FLOAT_IDENTITY: dict[str, float] = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


def int_identity(fn: str, dtype: DType) -> int:
    """The identity of an integer (or bool) reduction in ``dtype``'s range (max starts at its lowest value)."""
    if dtype.is_bool:
        return {"max": 0, "min": 1}[fn]
    lo = -(1 << (dtype.bits - 1)) if dtype.is_signed else 0
    hi = (1 << (dtype.bits - 1)) - 1 if dtype.is_signed else (1 << dtype.bits) - 1
    return {"sum": 0, "prod": 1, "max": lo, "min": hi}[fn]


def _combine_attrs(name: str, dtype: DType) -> dict[str, object]:
    """The attributes of combining op ``name`` on ``dtype`` (NaN-propagating max/min, wrapping integers)."""
    if name in ("maxf", "minf"):
        return {"propagate_nan": True}
    if name in ("maxi", "mini"):
        return {"signedness": "signed" if dtype.is_signed else "unsigned"}
    if name in ("addf", "mulf"):
        return {"rounding": "nearest_even"}
    if name in ("addi", "muli"):
        return {"overflow": "none"}
    return {}


def _widened(lo: Lowerer, op: Op, x: TValue, dtype: DType) -> TValue:
    """``x`` in its accumulation type: 16-bit floats as f32, everything else as it is."""
    return fconvert(lo, op, x, compute_elem(elem_of(x))) if dtype.is_float else x


def fold(lo: Lowerer, op: Op, name: str, x: TValue, result: TValue, *, dim: int, combine: str, identity: object,
         dtype: DType, **attrs: object) -> TOp:
    """Emit a Tile IR ``reduce`` or ``scan`` (``name``, extra ``attrs``) of ``x`` along ``dim`` into ``result``,
    starting from ``identity``, with the one-op region ``combine(elem, accum)`` (its attributes for ``dtype``)."""
    scalar = Tile(elem_of(x))
    elem, accum, combined = TValue(scalar, "elem"), TValue(scalar, "accum"), TValue(scalar, "combined")
    body = [
        TOp(combine, [combined], [elem, accum], _combine_attrs(combine, dtype), op.loc),
        TOp("yield", [], [[combined]], {}, op.loc),
    ]
    top = lo.emit(name, [result], [[x]], op, dim=dim, identities=[(identity, elem_of(x))], **attrs)
    top.regions.append(TBlock([elem, accum], body))
    return top


def _fold(lo: Lowerer, op: O.ReduceOp | O.ScanOp, name: str) -> None:
    """A ``reduce`` or ``scan`` (``name``) of ``op.x`` along ``op.axis`` with ``op.fn``'s one-op body."""
    dtype = op.x.type.dtype  # type: ignore[attr-defined]
    combine = _COMBINE.get(op.fn, {}).get(kind(dtype))
    if combine is None:
        raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
    out = lo.tile_type(op.result.type, op)
    assert isinstance(out.elem, Scalar)
    x = _widened(lo, op, lo.value(op.x), dtype)
    acc = elem_of(x)
    identity = _FLOAT_IDENTITY[op.fn] if dtype.is_float else int_identity(op.fn, dtype)
    named = op.result.name if acc == out.elem else ""
    barrier = name == "scan" and math.prod(out.shape) < SMALL_SCAN
    r = TValue(Tile(acc, out.shape), "" if barrier else named)
    extra: dict[str, object] = {"reverse": False} if name == "scan" else {}
    fold(lo, op, name, x, r, dim=op.axis, combine=combine, identity=identity, dtype=dtype, **extra)
    if barrier:
        r = _layout_barrier(lo, op, r, dtype, named)
    lo.vals[op.result] = fconvert(lo, op, r, out.elem) if dtype.is_float else r


#: Scans of fewer elements than this pass through ``_layout_barrier`` (measured: tileiras 13.5 compiles every
#: reshape of a scan of 128 elements or more, of any dtype, for sm_80/90/100, with 128 or 256 threads).
SMALL_SCAN = 128


def _layout_barrier(lo: Lowerer, op: O.ReduceOp | O.ScanOp, r: TValue, dtype: DType, named: str) -> TValue:
    """``r`` unchanged, through a ``max`` ``reduce`` over a leading unit dimension: tileiras 13.5 aborts (or exits
    5) on a reshape that splits the scan axis of a scan of fewer than 128 elements, and the reduce stops the
    scan's layout from reaching the reshape. Exact: max of ``r`` and the identity (-inf, the type's lowest
    integer) is ``r``, NaN included; without a reshape after it, tileiras emits the same CUBIN."""
    assert isinstance(r.type, Tile) and isinstance(r.type.elem, Scalar)
    acc, shape = r.type.elem, r.type.shape
    identity = -math.inf if dtype.is_float else int_identity("max", dtype)
    unit = TValue(Tile(acc, (1, *shape)))
    lo.emit("reshape", [unit], [r], op)
    out = TValue(r.type, named)
    fold(lo, op, "reduce", unit, out, dim=0, combine=_COMBINE["max"][kind(dtype)], identity=identity, dtype=dtype)
    return out


@rule(O.ReduceOp)
def reduce(lo: Lowerer, op: O.ReduceOp) -> None:
    """sum/prod/max/min: ``reduce`` with a one-op body (bool max/min: or/and)."""
    _fold(lo, op, "reduce")


@rule(O.ScanOp)
def scan(lo: Lowerer, op: O.ScanOp) -> None:
    """cumsum: an inclusive forward ``scan`` with an add body (16-bit floats accumulate in f32)."""
    _fold(lo, op, "scan")


def _arg_body(lo: Lowerer, op: O.ArgReduceOp, acc: Scalar, is_max: bool) -> TBlock:
    """The combining region of tj::ArgOp: keep the pair with the larger (smaller) value, a NaN over any
    number, and of equals (or of two NaNs) the smaller index."""
    v_t, i_t, b_t = Tile(acc), I32, Tile(Scalar("i1"))
    av, ai, bv, bi = TValue(v_t, "value"), TValue(i_t, "index"), TValue(v_t, "acc_value"), TValue(i_t, "acc_index")
    ops: list[TOp] = []

    def emit(name: str, t: Tile, operands: list[TValue], **attrs: object) -> TValue:
        r = TValue(t)
        ops.append(TOp(name, [r], list(operands), dict(attrs), op.loc))
        return r

    def compare(fn: str, x: TValue, y: TValue, signed: bool = True) -> TValue:
        if acc.name in FLOAT_BITS and x.type == v_t:
            ordering = "unordered" if fn == "not_equal" else "ordered"  # NaN != NaN
            return emit("cmpf", b_t, [x, y], predicate=fn, comparison=ordering)
        return emit("cmpi", b_t, [x, y], predicate=fn, signedness="signed" if signed else "unsigned")

    signed = acc.name.startswith("i") and op.x.type.dtype.is_signed  # type: ignore[attr-defined]
    b_first = compare("less_than", bi, ai)
    better = compare("greater_than" if is_max else "less_than", bv, av, signed)
    take_b = emit("select", b_t, [compare("equal", bv, av, signed), b_first, better])
    if acc.name in FLOAT_BITS:
        an, bn = compare("not_equal", av, av), compare("not_equal", bv, bv)
        true = emit("constant", b_t, [], data=constant_bytes(True, Scalar("i1")), value=True)
        a_num = emit("xori", b_t, [an, true])
        nan_take_b = emit("andi", b_t, [bn, emit("ori", b_t, [a_num, b_first])])
        take_b = emit("select", b_t, [emit("ori", b_t, [an, bn]), nan_take_b, take_b])
    rv = emit("select", v_t, [take_b, bv, av])
    ri = emit("select", i_t, [take_b, bi, ai])
    ops.append(TOp("yield", [], [[rv, ri]], {}, op.loc))
    return TBlock([av, bv, ai, bi], ops)


@rule(O.ArgReduceOp)
def argreduce(lo: Lowerer, op: O.ArgReduceOp) -> None:
    """argmax/argmin: a two-operand ``reduce`` of (value, index) pairs; the index tile is an i32 ``iota`` along
    the axis, broadcast to the input's shape."""
    dtype = op.x.type.dtype  # type: ignore[attr-defined]
    rt = op.result.type
    if op.fn not in ("argmax", "argmin") or not isinstance(rt, IRTile) or rt.dtype.name != "int32":
        raise unsupported(op, f"fn='{op.fn}' to {getattr(rt, 'dtype', rt)}")
    is_max = op.fn == "argmax"
    x = _widened(lo, op, lo.value(op.x), dtype)
    acc = elem_of(x)
    assert isinstance(x.type, Tile)
    shape = x.type.shape
    idx = TValue(Tile(I32.elem, (shape[op.axis],)))
    lo.emit("iota", [idx], [], op)
    if len(shape) > 1:
        col = TValue(Tile(I32.elem, tuple(s if d == op.axis else 1 for d, s in enumerate(shape))))
        lo.emit("reshape", [col], [idx], op)
        idx = TValue(Tile(I32.elem, shape))
        lo.emit("broadcast", [idx], [col], op)
    if dtype.is_float:
        start: object = -math.inf if is_max else math.inf
    else:
        start = int_identity("max" if is_max else "min", dtype)
    out = lo.tile_type(rt, op)
    value = TValue(Tile(acc, out.shape))
    index = lo.result(op)
    top = lo.emit("reduce", [value, index], [[x, idx]], op, dim=op.axis,
                  identities=[(start, acc), ((1 << 31) - 1, I32.elem)])
    top.regions.append(_arg_body(lo, op, acc, is_max))
