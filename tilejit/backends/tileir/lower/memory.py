"""Lowering rules for memory: loads and stores through tensor and partition views (made once per array
and tile shape at the top of the entry), ordered with tokens (see ``Lowerer``)."""

from __future__ import annotations

import math

from tilejit.backends.tileir.lower.core import TOKEN, Lowerer, rule, unsupported
from tilejit.backends.tileir.module import PartitionView, Ptr, TensorView, Tile, TOp, TValue
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Op, Value
from tilejit.language.ir.types import ArrayType


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


def indices(lo: Lowerer, values: list[Value], op: Op) -> list[TValue]:
    """A load/store's tile indices, all of one integer type (narrower ones sign-extended to the widest)."""
    idx = [lo.value(i) for i in values]
    widest = max((v.type for v in idx), key=lambda t: int(t.elem.name[1:]), default=None)  # type: ignore[union-attr]
    out = []
    for v, src in zip(idx, values):
        if v.type != widest:
            assert widest is not None
            signed = src.type.dtype.is_signed  # type: ignore[attr-defined]
            wide = TValue(widest)
            lo.emit("exti", [wide], [v], op, signedness="signed" if signed else "unsigned")
            v = wide
        out.append(v)
    return out


def view(lo: Lowerer, op: Op, array: Value, tile: tuple[int, ...], padding: str | None) -> TValue:
    """The partition view of ``array`` in tiles of ``tile`` (made once, at the top of the entry)."""
    key = (array, tile, padding)
    if key in lo.views:
        return lo.views[key]
    at = array.type
    assert isinstance(at, ArrayType)
    base, shape, strides = lo.arrays[array]
    assert isinstance(base.type, Tile) and isinstance(base.type.elem, Ptr)
    n = at.ndim
    static = tuple(1 if at.contiguous and d == n - 1 else None for d in range(n))
    tv_type = TensorView(base.type.elem.elem, (None,) * n, static)
    dyn_strides = [s for s, st in zip(strides, static) if st is None]
    tv = TValue(tv_type, f"{base.name}_view")
    lo.prologue.append(TOp("make_tensor_view", [tv], [base, list(shape), dyn_strides], {}, op.loc))
    pv = TValue(PartitionView(tile, tv_type, tuple(range(n)), padding), f"{base.name}_tiles")
    lo.prologue.append(TOp("make_partition_view", [pv], [tv], {}, op.loc))
    lo.views[key] = pv
    return pv


@rule(O.LoadOp)
def load(lo: Lowerer, op: O.LoadOp) -> None:
    """``load``: ``load_view_tko`` through the array's padded partition view, after the last store."""
    t = lo.tile_type(op.result.type, op)
    pad = padding_name(op.padding)
    if pad is None:
        raise unsupported(op, f"padding={op.padding!r}; Tile IR pads only with 0, -0.0, nan, inf or -inf")
    pv = view(lo, op, op.array, t.shape, pad)
    idx = indices(lo, op.index, op)
    tok = TValue(TOKEN)
    lo.emit("load_view_tko", [lo.result(op), tok], [pv, idx, lo.last_store], op, ordering="weak",
            inbounds=(False,) * len(idx))
    lo.loads_since.append(tok)


@rule(O.StoreOp)
def store(lo: Lowerer, op: O.StoreOp) -> None:
    """``store``: ``store_view_tko`` through an unpadded view, after the last store and the loads since."""
    t = lo.tile_type(op.tile.type, op)
    pv = view(lo, op, op.array, t.shape, None)
    waits = ([lo.last_store] if lo.last_store is not None else []) + lo.loads_since
    token: TValue | None = waits[0] if len(waits) == 1 else None
    if len(waits) > 1:
        token = TValue(TOKEN)
        lo.emit("join_tokens", [token], [waits], op)
    tok = TValue(TOKEN)
    idx = indices(lo, op.index, op)
    lo.emit("store_view_tko", [tok], [lo.value(op.tile), pv, idx, token], op, ordering="weak",
            inbounds=(False,) * len(idx))
    lo.last_store, lo.loads_since = tok, []
