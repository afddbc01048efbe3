"""Per-dtype C++ facts and the op → C++ expression tables the code generator renders from.

Elementwise ops compute in ``compute_type`` (float for 16-bit floats) and convert the result back
with ``tj::cast``; each table entry is a format string over the operand expressions ``{x}``, ``{y}``
and ``{t}``, the C++ compute type of the operands. ``PACKED`` ops of 16-bit float tiles compute on
element pairs in their own dtype instead (the same bits).
"""

from __future__ import annotations

import math
import struct
import sys
from fractions import Fraction
from typing import Any

from tilejit.errors import CompileError
from tilejit.language.ir.float8 import float8_bits
from tilejit.language.ir.types import DType, bfloat16, float16, float32

C_TYPES: dict[str, str] = {
    "bool": "bool", "int8": "tj::i8", "int16": "tj::i16", "int32": "tj::i32", "int64": "tj::i64",
    "uint8": "tj::u8", "uint16": "tj::u16", "uint32": "tj::u32", "uint64": "tj::u64",
    "float16": "tj::half", "bfloat16": "tj::bf16", "float32": "float", "float64": "double",
    "float8_e4m3fn": "tj::e4m3", "float8_e5m2": "tj::e5m2",
}


def ctype(dt: DType) -> str:
    """The C++ type of one element of ``dt``."""
    return C_TYPES[dt.name]


def compute_dtype(dt: DType) -> DType:
    """The dtype arithmetic on ``dt`` happens in: 16- and 8-bit floats compute in float32."""
    return float32 if dt.is_float and dt.bits <= 16 else dt


def _f32_bits(v: float) -> int:
    """The float32 bit pattern of ``v`` rounded to nearest-even (beyond float32's range: +-inf)."""
    try:
        return int(struct.unpack("<I", struct.pack("<f", v))[0])
    except OverflowError:
        return 0xFF800000 if v < 0 else 0x7F800000


def _bf16_bits(v: float) -> int:
    """bfloat16 bits of ``v`` as numpy/ml_dtypes round it: to float32 first, then to nearest-even."""
    u = _f32_bits(v)
    if math.isnan(v):
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def _f32_text(y: float) -> str | None:
    """A short decimal literal that NVRTC converts to exactly float32 ``y`` (finite, normal), else None."""
    bits = _f32_bits(y)
    if (bits & 0x7F800000) == 0:  # zero or subnormal: decimal literals of subnormals are "out of range"
        return ("-0.0f" if bits >> 31 else "0.0f") if bits & 0x7FFFFFFF == 0 else None
    exact = Fraction(y)
    mag = bits & 0x7FFFFFFF
    lo = Fraction(struct.unpack("<f", struct.pack("<I", (bits & 0x80000000) | (mag - 1)))[0])
    hi_bits = mag + 1
    hi = Fraction(struct.unpack("<f", struct.pack("<I", (bits & 0x80000000) | hi_bits))[0]) if hi_bits < 0x7F800000 \
        else None
    for digits in range(1, 18):
        text = repr(float(f"{y:.{digits}g}"))  # same value (<= 15 digits survive float64); Python's spelling
        d = Fraction(text)
        # The literal converts (correctly rounded, decimal to float) to y iff it is strictly nearer y than both
        # neighbours, whatever the tie rule.
        if abs(d - exact) < abs(d - lo) and (hi is None or abs(d - exact) < abs(d - hi)):
            if hi is None and abs(d) > abs(exact):
                continue  # above FLT_MAX: some compilers reject it as out of range
            return text + "f"
    return None


def _bits_literal(bits: int, dt: DType) -> str:
    """A float32/float64 value by its bit pattern (inf, NaN, subnormals): always accepted by NVRTC."""
    if dt == float32:
        return f"__int_as_float({bits:#010x})"
    return f"__longlong_as_double({bits:#018x}LL)"


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
    if dt.is_float8:
        return f"{ctype(dt)}::from_bits({float8_bits(f, dt):#04x})"
    if math.isnan(f):
        return "tj::nan_f()" if dt == float32 else "tj::nan_d()"
    if dt == float32:
        bits = _f32_bits(f)  # numpy rounds the Python float to float32: 1e-50 -> 0, 1e39 -> inf
        if (bits & 0x7FFFFFFF) == 0x7F800000:
            return "(-tj::inf_f())" if bits >> 31 else "tj::inf_f()"
        text = _f32_text(struct.unpack("<f", struct.pack("<I", bits))[0])
        return text if text is not None else _bits_literal(bits, dt)
    if math.isinf(f):
        return "(-tj::inf_d())" if f < 0 else "tj::inf_d()"
    if f != 0 and abs(f) < sys.float_info.min:  # subnormal double
        return _bits_literal(struct.unpack("<Q", struct.pack("<d", f))[0], dt)
    return repr(f)


# ------------------------------------------------------------------ elementwise tables
# Kinds: 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool. A missing kind is unsupported.

UNARY: dict[str, dict[str, str]] = {
    "neg": {"f": "-{x}", "i": "tj::wneg<{t}>({x})", "u": "tj::wneg<{t}>({x})"},
    "not": {"b": "!{x}", "i": "({x} == 0)", "u": "({x} == 0)", "f": "({x} == 0)"},
    "invert": {"b": "!{x}", "i": "~{x}", "u": "~{x}"},
    "abs": {"f": "tj::abs({x})", "i": "tj::abs({x})", "u": "{x}", "b": "{x}"},
    "floor": {"f": "tj::floor({x})", "i": "{x}", "u": "{x}", "b": "{x}"},
    "ceil": {"f": "tj::ceil({x})", "i": "{x}", "u": "{x}", "b": "{x}"},
    **{fn: {"f": f"tj::{fn}({{x}})"} for fn in
       ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid", "asin", "acos",
        "atan", "sinh", "cosh", "log1p", "expm1", "cbrt", "erfinv", "isnan", "isinf", "signbit")},
    "popc": {"i": "tj::popc({x})", "u": "tj::popc({x})"},
    "clz": {"i": "tj::clz({x})", "u": "tj::clz({x})"},
}

BINARY: dict[str, dict[str, str]] = {
    # integers wrap as in numpy (computed unsigned: signed overflow is undefined behaviour in C++); float
    # + - * round once each, never fused into an FMA with a neighbouring op (math.cuh)
    "add": {"f": "tj::fadd({x}, {y})", "i": "tj::wadd<{t}>({x}, {y})", "u": "tj::wadd<{t}>({x}, {y})",
            "b": "({x} || {y})"},
    "sub": {"f": "tj::fsub({x}, {y})", "i": "tj::wsub<{t}>({x}, {y})", "u": "tj::wsub<{t}>({x}, {y})",
            "b": "({x} != {y})"},
    "mul": {"f": "tj::fmul({x}, {y})", "i": "tj::wmul<{t}>({x}, {y})", "u": "tj::wmul<{t}>({x}, {y})",
            "b": "({x} && {y})"},
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
    "mulhi": {"u": "tj::mulhi({x}, {y})"},
    "atan2": {"f": "tj::atan2({x}, {y})"},
}

#: Binary ops that 16-bit float tiles (both operands and the result of one dtype) compute on element pairs, one
#: packed instruction per pair (math.cuh ``tj::add2`` ...; the same bits as computing in float32 and rounding
#: once); ``{x}`` and ``{y}`` are ``tj::Pair``s.
PACKED: dict[str, str] = {
    "add": "tj::add2({x}, {y})", "sub": "tj::sub2({x}, {y})", "mul": "tj::mul2({x}, {y})",
    "maximum": "tj::max2({x}, {y})", "minimum": "tj::min2({x}, {y})",
}

#: ``x * y + z`` rounded once (float compute types only).
FMA = "tj::fma({x}, {y}, {z})"


def fast_math_entry(fn: str, rounding: str, ftz: bool, operands: str) -> str:
    """The format string of ``fn`` with a fast-math option (``ops.FAST_MATH``, float only): math.cuh's
    ``tj::<fn>_<rounding>[_ftz]``, e.g. ``tj::sqrt_rz_ftz({x})``."""
    return f"tj::{'_'.join(p for p in (fn, rounding, 'ftz' if ftz else '') if p)}({operands})"

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
    "BINARY", "COMPARE", "C_TYPES", "FMA", "PACKED", "REDUCE_OPS", "UNARY", "compute_dtype", "ctype", "fast_math_entry",
    "literal", "table_entry",
]
