"""Casts to and from the 8-bit floats on the Tile IR backend, with the CUDA backend's (torch's) rounding.

Reading one (``ftof`` to f32) is exact. Making one rounds a float32 in integer ops and reinterprets the byte, so
that Tile IR rounds exactly as the CUDA backend does (``tilejit.language.ir.float8``): to nearest-even, past the
largest finite value NaN (e4m3fn) or inf (e5m2), never saturating as a hardware conversion with ``.satfinite``
would. Subnormal results round as torch's do, by adding a power of two whose float32 ulp is their spacing.
"""

from __future__ import annotations

from tilejit.backends.tileir.lower.core import Lowerer
from tilejit.backends.tileir.lower.elementwise import F32, cmp, const, ibin, like, new, select
from tilejit.backends.tileir.module import Scalar, TValue
from tilejit.language.ir.core import Op
from tilejit.language.ir.float8 import FORMATS
from tilejit.language.ir.types import DType

INT32 = Scalar("i32")


def to_float8(lo: Lowerer, op: Op, x: TValue, dtype: DType, elem: Scalar) -> TValue:
    """f32 ``x`` rounded to the 8-bit float ``dtype`` (Tile IR element ``elem``)."""
    mbits, bias, largest, overflow = FORMATS[dtype.name]

    def c(v: int) -> TValue:
        return const(lo, op, v, like(x, INT32))

    def shr(v: TValue, n: int) -> TValue:
        return ibin(lo, op, "shri", v, c(n), signedness="unsigned")

    u = new(lo, op, "bitcast", like(x, INT32), [x])
    a = ibin(lo, op, "andi", u, c(0x7FFFFFFF))
    sign = ibin(lo, op, "andi", shr(u, 24), c(0x80))
    # normal results: the 23 mantissa bits rounded to mbits (a carry moves into the exponent), rebiased
    half = ibin(lo, op, "addi", a, c((1 << (22 - mbits)) - 1))
    odd = ibin(lo, op, "andi", shr(a, 23 - mbits), c(1))
    r = ibin(lo, op, "subi", shr(ibin(lo, op, "addi", half, odd), 23 - mbits), c((127 - bias) << mbits))
    r = select(lo, op, cmp(lo, op, "gt", r, c(largest), signed=False), c(overflow), r)
    # subnormal results (|x| below the smallest normal): |x| + 2**(24 - bias - mbits) rounds to their spacing
    magic = (127 + 24 - bias - mbits) << 23
    absx = new(lo, op, "bitcast", like(x, F32), [a])
    summed = new(lo, op, "addf", like(x, F32), [absx, const(lo, op, 2.0 ** (24 - bias - mbits), like(x, F32))],
                 rounding="nearest_even")
    sub = ibin(lo, op, "subi", new(lo, op, "bitcast", like(x, INT32), [summed]), c(magic))
    r = select(lo, op, cmp(lo, op, "lt", a, c((128 - bias) << 23), signed=False), sub, r)
    r = select(lo, op, cmp(lo, op, "gt", a, c(0x7F800000), signed=False), c(0x7F), r)  # NaN
    byte = new(lo, op, "trunci", like(x, Scalar("i8")), [ibin(lo, op, "ori", r, sign)], overflow="none")
    return new(lo, op, "bitcast", like(x, elem), [byte])
