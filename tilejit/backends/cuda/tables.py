"""Per-dtype C++ facts and the op → C++ expression tables the code generator renders from.

Elementwise ops compute in ``compute_type`` (float for 16-bit floats) and convert the result back
with ``tj::cast``; each table entry is a format string over the operand expressions.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from tilejit.errors import CompileError
from tilejit.language.ir.types import DType, bfloat16, float16, float32

C_TYPES: dict[str, str] = {
    "bool": "bool", "int8": "tj::i8", "int16": "tj::i16", "int32": "tj::i32", "int64": "tj::i64",
    "uint8": "tj::u8", "uint16": "tj::u16", "uint32": "tj::u32", "uint64": "tj::u64",
    "float16": "tj::half", "bfloat16": "tj::bf16", "float32": "float", "float64": "double",
}


def ctype(dt: DType) -> str:
    """The C++ type of one element of ``dt``."""
    return C_TYPES[dt.name]


def compute_dtype(dt: DType) -> DType:
    """The dtype arithmetic on ``dt`` happens in: 16-bit floats compute in float32."""
    return float32 if dt in (float16, bfloat16) else dt


def _bf16_bits(v: float) -> int:
    u = struct.unpack("<I", struct.pack("<f", v))[0]
    if math.isnan(v):
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def literal(value: Any, dt: DType) -> str:
    """A C++ expression of type ``ctype(dt)`` with the value ``value`` (converted as numpy would)."""
    if dt.is_bool:
        return "true" if value else "false"
    if dt.is_int:
        v = int(value)
        if dt.kind == "u":
            v &= (1 << dt.bits) - 1
        else:
            v = (v + (1 << (dt.bits - 1))) % (1 << dt.bits) - (1 << (dt.bits - 1))
        if dt.bits == 64:
            if dt.kind == "u":
                return f"{v}ULL"
            return f"({v + 1}LL - 1)" if v == -(1 << 63) else f"{v}LL"
        if dt.bits == 32:
            return f"{v}u" if dt.kind == "u" else (f"({v + 1} - 1)" if v == -(1 << 31) else str(v))
        return f"(({ctype(dt)}){v})"
    f = float(value)
    if dt == float16:
        try:
            bits = struct.unpack("<H", struct.pack("<e", f))[0]
        except OverflowError:
            bits = 0xFC00 if f < 0 else 0x7C00
        return f"tj::half::from_bits({bits:#06x})"
    if dt == bfloat16:
        return f"tj::bf16::from_bits({_bf16_bits(f):#06x})"
    suffix = "f" if dt == float32 else ""
    if math.isnan(f):
        return "tj::nan_f()" if dt == float32 else "tj::nan_d()"
    if math.isinf(f):
        s = "-" if f < 0 else ""
        return f"({s}tj::inf_f())" if dt == float32 else f"({s}tj::inf_d())"
    text = repr(f)
    return f"{text}{suffix}" if dt == float32 else text


# ------------------------------------------------------------------ elementwise tables
# Kinds: 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool. A missing kind is unsupported.

UNARY: dict[str, dict[str, str]] = {
    "neg": {"f": "-{x}", "i": "-{x}", "u": "-{x}"},
    "not": {"b": "!{x}", "i": "({x} == 0)", "u": "({x} == 0)", "f": "({x} == 0)"},
    "invert": {"b": "!{x}", "i": "~{x}", "u": "~{x}"},
    "abs": {"f": "tj::abs({x})", "i": "tj::abs({x})", "u": "{x}", "b": "{x}"},
    "floor": {"f": "tj::floor({x})", "i": "{x}", "u": "{x}", "b": "{x}"},
    "ceil": {"f": "tj::ceil({x})", "i": "{x}", "u": "{x}", "b": "{x}"},
    **{fn: {"f": f"tj::{fn}({{x}})"} for fn in
       ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid")},
}

BINARY: dict[str, dict[str, str]] = {
    "add": {k: "{x} + {y}" for k in "fiu"} | {"b": "({x} || {y})"},
    "sub": {k: "{x} - {y}" for k in "fiu"} | {"b": "({x} != {y})"},
    "mul": {k: "{x} * {y}" for k in "fiu"} | {"b": "({x} && {y})"},
    "truediv": {"f": "tj::truediv({x}, {y})"},
    "floordiv": {k: "tj::floordiv({x}, {y})" for k in "fiub"},
    "mod": {k: "tj::mod({x}, {y})" for k in "fiub"},
    "pow": {"f": "tj::pow({x}, {y})", "i": "tj::ipow({x}, {y})", "u": "tj::ipow({x}, {y})"},
    "maximum": {k: "tj::maximum({x}, {y})" for k in "fiub"},
    "minimum": {k: "tj::minimum({x}, {y})" for k in "fiub"},
    "and": {"i": "{x} & {y}", "u": "{x} & {y}", "b": "({x} && {y})"},
    "or": {"i": "{x} | {y}", "u": "{x} | {y}", "b": "({x} || {y})"},
    "xor": {"i": "{x} ^ {y}", "u": "{x} ^ {y}", "b": "({x} != {y})"},
    "lshift": {"i": "tj::lshift({x}, {y})", "u": "tj::lshift({x}, {y})"},
    "rshift": {"i": "tj::rshift({x}, {y})", "u": "tj::rshift({x}, {y})"},
}

COMPARE: dict[str, str] = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

REDUCE_OPS: dict[str, str] = {"sum": "tj::SumOp", "prod": "tj::ProdOp", "max": "tj::MaxOp", "min": "tj::MinOp"}


def table_entry(table: dict[str, dict[str, str]], fn: str, dt: DType, what: str) -> str:
    """The format string for ``fn`` on ``dt``, or a CompileError naming what is unsupported."""
    entry = table.get(fn)
    if entry is None:
        raise CompileError(f"{what} '{fn}' is not known to the CUDA backend")
    fmt = entry.get(dt.kind)
    if fmt is None:
        raise CompileError(f"{what} '{fn}' is not supported for dtype {dt.name}")
    return fmt


__all__ = [
    "BINARY", "COMPARE", "C_TYPES", "REDUCE_OPS", "UNARY", "compute_dtype", "ctype", "literal",
    "table_entry",
]
