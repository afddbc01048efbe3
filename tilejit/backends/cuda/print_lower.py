"""Device printing (``PrintOp``) → ``printf`` (a method of ``Lowering``, bound in lower.py).

A print of scalars is one ``printf`` by thread 0: ``pid (x, y, z) tid 0 <text>``. A print of tiles is one
``printf`` per element, by the thread owning it: ``pid (x, y, z) tid T idx (i, j) <text>``, the element's
values in the text (scalars repeated on each line). Numbers are formatted as ``backends/printf.py`` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.backends import printf
from tilejit.backends.cuda.layouts import log2
from tilejit.errors import CompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Value
from tilejit.language.ir.types import TileType

if TYPE_CHECKING:
    from tilejit.backends.cuda.lower import Lowering

#: The C type each dtype's value is passed to printf as (what its conversion reads).
_ARG_TYPES: dict[str, str] = {
    "bool": "int", "int8": "int", "int16": "int", "int32": "int", "int64": "long long",
    "uint8": "unsigned", "uint16": "unsigned", "uint32": "unsigned", "uint64": "unsigned long long",
    "float16": "double", "bfloat16": "double", "float32": "double", "float64": "double",
}


def c_string(text: str) -> str:
    """``text`` as a C string literal (its UTF-8 bytes; octal escapes for all but printable ASCII)."""
    out = []
    for b in text.encode():
        c = chr(b)
        out.append("\\" + c if c in '"\\' else c if 0x20 <= b < 0x7F else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _arg(v: Value, expr: str) -> str:
    """``expr`` (a value of ``v``'s dtype) as printf's argument: 16-bit floats through float."""
    t = v.type
    assert isinstance(t, TileType)
    inner = f"(float)({expr})" if t.dtype.name in ("float16", "bfloat16") else f"({expr})"
    return f"({_ARG_TYPES[t.dtype.name]}){inner}"


def op_PrintOp(lw: Lowering, op: O.PrintOp) -> None:
    """One ``printf`` per element of the printed tiles (per print when all values are scalars)."""
    if len(op.texts) != len(op.values) + 1:
        raise CompileError(f"print: {len(op.values)} values need {len(op.values) + 1} texts")
    tiles = [v for v in op.values if isinstance(v.type, TileType) and not v.type.is_scalar]
    fmt = printf.PID + "tid %d "
    args = ["(int)blockIdx.x", "(int)blockIdx.y", "(int)blockIdx.z", "tj_tid"]
    layout = lw.plan.layout_of(tiles[0]) if tiles else None
    if tiles:
        t0 = tiles[0].type
        assert isinstance(t0, TileType)
        shape = t0.shape
        fmt += "idx (" + ", ".join(["%d"] * len(shape)) + ") "
        for d, size in enumerate(shape):
            shift = sum(log2(s) for s in shape[d + 1:])
            args.append(f"(tj_f >> {shift}) & {size - 1}")
    for k, v in enumerate(op.values):
        t = v.type
        assert isinstance(t, TileType)
        fmt += printf.literal_text(op.texts[k]) + printf.conversion(t.dtype)
        args.append(_arg(v, lw.scalar(v) if t.is_scalar or layout is None else lw.elem(v, layout)))
    fmt += printf.literal_text(op.texts[-1])
    call = f"printf({c_string(fmt)}, {', '.join(args)});"
    if layout is None:
        lw.line(f"if (tj_tid == 0) {call}")
        return
    lname = lw.lname(layout)
    lw.line(f"if ({lname}::owner(tj_tid)) TJ_EACH(i, {lname}) {{")
    lw.line(f"  const int tj_f = {lname}::flat(tj_tid, i);")
    lw.line(f"  {call}")
    lw.line("}")
