"""Reductions, arg-reductions and scans → C++ (methods of ``Lowering``, bound in lower.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.backends.cuda import tables
from tilejit.backends.cuda.layouts import Layout, log2, slice_layout
from tilejit.backends.cuda.values import CV
from tilejit.errors import CompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Value
from tilejit.language.ir.types import DType, TileType, int32, int64

if TYPE_CHECKING:
    from tilejit.backends.cuda.lower import Lowering


def _axis_bits(t: TileType, axis: int) -> tuple[int, int]:
    if not 0 <= axis < t.ndim:
        raise CompileError(f"axis {axis} is out of range for a {t.ndim}-d tile")
    lo = sum(log2(s) for s in t.shape[axis + 1:])
    return lo, lo + log2(t.shape[axis])


def _acc_copy(lw: Lowering, x: Value, acc: DType, layout: Layout, conv: str | None = None) -> str:
    name = lw.fresh("t")
    lw.line(f"{lw.tile_t(acc, layout)} {name};")
    expr = conv or f"tj::cast<{tables.ctype(acc)}>({lw.elem(x, layout)})"
    lw.line(f"TJ_EACH(i, {lw.lname(layout)}) {name}.v[i] = {expr};")
    return name


def _finish(lw: Lowering, res: Value, acc: DType, acc_name: str, layout: Layout, field: str = "") -> None:
    """Bind ``res`` to the reduced accumulator tile (converted to the result dtype)."""
    rdt = lw._dtype(res)
    if not field and rdt == acc:
        if isinstance(res.type, TileType) and res.type.is_scalar:
            lw.vals[res] = CV("scalar", f"{acc_name}.v[0]", rdt)
        else:
            lw.vals[res] = CV("tile", acc_name, rdt, layout)
        return
    if isinstance(res.type, TileType) and res.type.is_scalar:
        lw.define_scalar(res, f"tj::cast<{tables.ctype(rdt)}>({acc_name}.v[0]{field})")
        return
    name = lw.define_tile(res, layout)
    conv = f"tj::cast<{tables.ctype(rdt)}>({acc_name}.v[i]{field})"
    lw.line(f"TJ_EACH(i, {lw.lname(layout)}) {name}.v[i] = {conv};")


def _reduce(lw: Lowering, op: O.ReduceOp | O.ArgReduceOp, opname: str, acc: DType, pair: bool) -> None:
    xt = op.x.type
    assert isinstance(xt, TileType)
    lo, hi = _axis_bits(xt, op.axis)
    c = lw.vals[op.x]
    lx = c.layout if c.kind == "tile" and c.layout is not None else lw.plan.layout_of(op.x)
    lo_layout = lw.plan.layout_of(op.result)
    a_t = tables.ctype(acc)
    if pair:
        conv = (f"tj::ArgPair<{a_t}>{{tj::cast<{a_t}>({lw.elem(op.x, lx)}), "
                f"({lw.lname(lx)}::flat(tj_tid, i) >> {lo}) & {(1 << (hi - lo)) - 1}}}")
        src = lw.fresh("t")
        lw.line(f"tj::Tile<tj::ArgPair<{a_t}>, {lw.lname(lx)}> {src};")
        lw.line(f"TJ_EACH(i, {lw.lname(lx)}) {src}.v[i] = {conv};")
        out = lw.fresh("t")
        lw.line(f"tj::Tile<tj::ArgPair<{a_t}>, {lw.lname(lo_layout)}> {out};")
        item = acc.itemsize + 4 + (4 if acc.itemsize == 8 else 0)
    else:
        src = lw._acc_copy(op.x, acc, lx)
        out = lw.fresh("t")
        lw.line(f"{lw.tile_t(acc, lo_layout)} {out};")
        item = acc.itemsize
    if lx.warp_axis_groups(lo, hi) == 1 and lo_layout == slice_layout(lx, lo, hi):  # in registers and shuffles
        lw.line(f"tj::reduce_local<{opname}, {lo}, {hi}, {lw.lname(lo_layout)}>({out}, {src});")
        lw._finish(op.result, acc, out, lo_layout, ".i" if pair else "")
        return
    if not (lo_layout.is_single and lx.warp_axis_groups(lo, hi) == 1):
        lw.need_smem(lx.warp_axis_groups(lo, hi) * lo_layout.size * item)
    lw.line(f"tj::reduce<{opname}, {lo}, {hi}, {lw.lname(lo_layout)}>({out}, {src}, tj_smem);")
    lw._finish(op.result, acc, out, lo_layout, ".i" if pair else "")


def op_ReduceOp(lw: Lowering, op: O.ReduceOp) -> None:
    opname = tables.REDUCE_OPS.get(op.fn)
    if opname is None:
        raise CompileError(f"reduction '{op.fn}' is not one of {', '.join(tables.REDUCE_OPS)}")
    rdt = lw._dtype(op.result)
    lw._reduce(op, opname, tables.compute_dtype(rdt), False)


def op_ArgReduceOp(lw: Lowering, op: O.ArgReduceOp) -> None:
    if op.fn not in ("argmax", "argmin"):
        raise CompileError(f"arg-reduction '{op.fn}' is not argmax or argmin")
    if lw._dtype(op.result) not in (int32, int64):
        raise CompileError(f"{op.fn} gives int32 indices, not {lw._dtype(op.result).name}")
    acc = tables.compute_dtype(lw._dtype(op.x))
    lw._reduce(op, f"tj::ArgOp<{'true' if op.fn == 'argmax' else 'false'}>", acc, True)


def op_ScanOp(lw: Lowering, op: O.ScanOp) -> None:
    if op.fn != "sum":
        raise CompileError(f"scan '{op.fn}' is not supported (only sum)")
    xt = op.x.type
    assert isinstance(xt, TileType)
    lo, hi = _axis_bits(xt, op.axis)
    layout = lw.plan.layout_of(op.result)
    acc = tables.compute_dtype(lw._dtype(op.result))
    name = lw._acc_copy(op.x, acc, layout)
    lw.need_smem(2 * xt.size * acc.itemsize)
    lw.line(f"tj::scan_sum<{lo}, {hi}, {xt.size}>({name}, tj_smem);")
    lw._finish(op.result, acc, name, layout)
