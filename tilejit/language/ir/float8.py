"""The 8-bit float formats as torch (and ml_dtypes) define them: bit patterns of values and values of patterns.

Conversion to 8 bits is torch's ``float -> float8``: the value is first a float32, then rounded to nearest-even;
what lies beyond the largest finite value after rounding becomes NaN in ``float8_e4m3fn`` (which has no inf) and
inf in ``float8_e5m2``, NaN stays NaN (``0x7F`` with the sign), and zeros keep their sign. It does not saturate
(CUDA's ``__NV_SATFINITE`` would clamp to the largest finite value). Both backends convert this way.
"""

from __future__ import annotations

import math
import struct

from tilejit.language.ir.types import DType

#: name -> (mantissa bits, exponent bias, largest finite pattern, pattern of an overflow)
FORMATS: dict[str, tuple[int, int, int, int]] = {
    "float8_e4m3fn": (3, 7, 0x7E, 0x7F),
    "float8_e5m2": (2, 15, 0x7B, 0x7C),
}


def _float32(value: float) -> float:
    """``value`` rounded to float32 (beyond its range: +-inf)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def float8_bits(value: float, dtype: DType) -> int:
    """The 8-bit pattern of ``value`` in ``dtype`` (see the module's rounding rule)."""
    mbits, bias, largest, overflow = FORMATS[dtype.name]
    f = _float32(float(value))
    sign = 0x80 if math.copysign(1.0, f) < 0 else 0
    a = abs(f)
    if math.isnan(a):
        return sign | 0x7F
    if math.isinf(a):
        return sign | overflow
    if a == 0:
        return sign
    exp = max(math.frexp(a)[1] - 1, 1 - bias)  # a's binade, or the subnormal one
    steps = round(math.ldexp(a, mbits - exp))  # exact: a power-of-two scaling; round() ties to even
    bits = ((exp + bias - 1) << mbits) + steps  # a carry into the exponent lands where it should
    return sign | (overflow if bits > largest else bits)


def float8_value(bits: int, dtype: DType) -> float:
    """The value of the 8-bit pattern ``bits`` in ``dtype``."""
    mbits, bias, _, overflow = FORMATS[dtype.name]
    sign = -1.0 if bits & 0x80 else 1.0
    mag = bits & 0x7F
    if (dtype.name == "float8_e4m3fn" and mag == 0x7F) or (dtype.name == "float8_e5m2" and mag > overflow):
        return math.nan
    if dtype.name == "float8_e5m2" and mag == overflow:
        return sign * math.inf
    exp, man = mag >> mbits, mag & ((1 << mbits) - 1)
    if exp == 0:
        return sign * math.ldexp(man, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + man, exp - bias - mbits)


def round_float8(value: float, dtype: DType) -> float:
    """``value`` as the nearest ``dtype`` element gives it back (NaN where torch's conversion gives NaN)."""
    return float8_value(float8_bits(value, dtype), dtype)
