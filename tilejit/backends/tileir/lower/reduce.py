"""Lowering rules for reductions along one axis: ``reduce`` with a one-op region; floats narrower than 32
bits accumulate in f32, as the CUDA backend does."""

from __future__ import annotations

import math

from tilejit.backends.tileir.lower.core import Lowerer, rule, unsupported
from tilejit.backends.tileir.module import Scalar, TBlock, Tile, TOp, TValue
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Op
from tilejit.language.ir.types import DType

#: Reductions: fn -> {"f": (combining op, identity), "i": (combining op, placeholder: see int_identity)}.
_REDUCE: dict[str, dict[str, tuple[str, object]]] = {
    "sum": {"f": ("addf", 0.0), "i": ("addi", 0)},
    "prod": {"f": ("mulf", 1.0), "i": ("muli", 1)},
    "max": {"f": ("maxf", -math.inf), "i": ("maxi", 0)},
    "min": {"f": ("minf", math.inf), "i": ("mini", 0)},
}


def int_identity(fn: str, dtype: DType) -> int:
    """The identity of an integer reduction in ``dtype``'s range (max starts at its lowest value)."""
    lo = -(1 << (dtype.bits - 1)) if dtype.is_signed else 0
    hi = (1 << (dtype.bits - 1)) - 1 if dtype.is_signed else (1 << dtype.bits) - 1
    return {"sum": 0, "prod": 1, "max": lo, "min": hi}[fn]


def convert(lo: Lowerer, x: TValue, elem: Scalar, op: Op) -> TValue:
    """``x`` as float element type ``elem`` (``x`` itself when it already is)."""
    assert isinstance(x.type, Tile)
    if x.type.elem == elem:
        return x
    r = TValue(Tile(elem, x.type.shape))
    lo.emit("ftof", [r], [x], op, rounding="nearest_even")
    return r


@rule(O.ReduceOp)
def reduce(lo: Lowerer, op: O.ReduceOp) -> None:
    """``reduce`` with a one-op body; floats under 32 bits accumulate in f32 (as the CUDA backend does)."""
    dtype = op.result.type.dtype  # type: ignore[attr-defined]
    if op.fn not in _REDUCE or dtype.is_bool:
        raise unsupported(op, f"fn='{op.fn}' on {dtype.name}")
    out = lo.tile_type(op.result.type, op)
    assert isinstance(out.elem, Scalar)
    acc = Scalar("f32") if dtype.is_float and dtype.bits < 32 else out.elem
    x = lo.value(op.x)
    if dtype.is_float:
        x = convert(lo, x, acc, op)
    scalar = Tile(acc)
    elem, accum, combined = TValue(scalar, "elem"), TValue(scalar, "accum"), TValue(scalar, "combined")
    combine, identity = _REDUCE[op.fn]["f" if dtype.is_float else "i"]
    attrs: dict[str, object] = {"rounding": "nearest_even"} if dtype.is_float else {"overflow": "none"}
    if combine in ("maxf", "minf"):
        attrs = {"propagate_nan": True}
    elif combine in ("maxi", "mini"):
        attrs = {"signedness": "signed" if dtype.is_signed else "unsigned"}
    if not dtype.is_float:
        identity = int_identity(op.fn, dtype)
    body = [
        TOp(combine, [combined], [elem, accum], attrs, op.loc),
        TOp("yield", [], [[combined]], {}, op.loc),
    ]
    r = TValue(Tile(acc, out.shape), op.result.name if acc == out.elem else "")
    top = lo.emit("reduce", [r], [[x]], op, dim=op.axis, identities=[(identity, acc)])
    top.regions.append(TBlock([elem, accum], body))
    lo.vals[op.result] = convert(lo, r, out.elem, op) if dtype.is_float else r
