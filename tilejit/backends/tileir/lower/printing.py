"""Lowering rule for device printing: a ``PrintOp`` is one ``print_tko`` of the whole values.

``print_tko`` prints a printf format with tile operands: a scalar as its conversion says, a tile as a nested
list of its elements in row order (``[[1, 2], [3, 4]]``), written by tileiras's code. The line starts with the
block's index (``pid (x, y, z) ``); numbers use the CUDA backend's conversions (``backends/printf.py``), bools
and 8/16-bit integers widened to i32 and 16-bit floats to f32 first. A print is ordered with tokens as a store
(after the block's earlier memory ops, before its later ones), so prints come out in program order. Bytecode
13.1 has no print token: there prints are unordered.
"""

from __future__ import annotations

from tilejit.backends import printf
from tilejit.backends.tileir.lower.core import TOKEN, Lowerer, rule
from tilejit.backends.tileir.lower.elementwise import block_ids, elem_of, fconvert, like, new
from tilejit.backends.tileir.lower.memory import waits
from tilejit.backends.tileir.module import Scalar, TValue
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import TileType

I32, F32 = Scalar("i32"), Scalar("f32")


def _printable(lo: Lowerer, op: O.PrintOp, v: TValue, signed: bool) -> TValue:
    """``v`` as printf reads it: i1, i8 and i16 extended to i32, f16 and bf16 converted to f32."""
    name = elem_of(v).name
    if name in ("i1", "i8", "i16"):
        return new(lo, op, "exti", like(v, I32), [v], signedness="signed" if signed and name != "i1" else "unsigned")
    if name in ("f16", "bf16"):
        return fconvert(lo, op, v, F32)
    return v


@rule(O.PrintOp)
def print_(lo: Lowerer, op: O.PrintOp) -> None:
    """``print_tko "pid (%d, %d, %d) <text>", %bid_x, %bid_y, %bid_z, %values...`` chained after the block's
    earlier memory ops."""
    fmt = printf.PID
    args = list(block_ids(lo, op))
    for text, v in zip(op.texts, op.values):
        t = v.type
        assert isinstance(t, TileType)
        fmt += printf.literal_text(text) + printf.conversion(t.dtype)
        args.append(_printable(lo, op, lo.value(v), t.dtype.is_signed))
    fmt += printf.literal_text(op.texts[-1])
    token = TValue(TOKEN)
    lo.emit("print_tko", [token], [args, waits(lo, op)], op, format=fmt)
    lo.last_store, lo.loads_since = token, []
