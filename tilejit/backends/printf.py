"""What both backends print for a ``PrintOp``: C ``printf`` conversions of each dtype and the line's header.

Integers are written in decimal (bools as 1 and 0), floats with ``%.Ng`` and the N significant digits that read
back to the same value (float16 5, bfloat16 4, float32 9, float64 17). A line starts with the block that prints
it, ``pid (x, y, z) ``; the CUDA backend adds the thread and, for tiles, the element's index.
"""

from __future__ import annotations

from tilejit.language.ir.types import DType

#: dtype name -> the printf conversion of its values (16-bit and 32-bit floats are passed as double, small
#: integers as int or unsigned, 64-bit ones as long long).
CONVERSIONS: dict[str, str] = {
    "bool": "%d", "int8": "%d", "int16": "%d", "int32": "%d", "int64": "%lld",
    "uint8": "%u", "uint16": "%u", "uint32": "%u", "uint64": "%llu",
    "float16": "%.5g", "bfloat16": "%.4g", "float32": "%.9g", "float64": "%.17g",
}

#: The start of every printed line: the printing block's index along x, y and z.
PID = "pid (%d, %d, %d) "


def conversion(dtype: DType) -> str:
    """The printf conversion of one ``dtype`` value."""
    return CONVERSIONS[dtype.name]


def literal_text(text: str) -> str:
    """``text`` as printf prints it literally: ``%`` doubled."""
    return text.replace("%", "%%")


__all__ = ["CONVERSIONS", "PID", "conversion", "literal_text"]
