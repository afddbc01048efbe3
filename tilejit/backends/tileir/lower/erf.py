"""erf for the Tile IR backend, which has no erf op: fdlibm's algorithm (Sun Microsystems 1993, as in
FreeBSD msun ``s_erf.c`` for float64 and its float version ``s_erff.c`` by Ian Lance Taylor for float32),
written once over a small arithmetic interface so the lowering emits it and the tests evaluate the very
same steps in numpy. Every branch is computed on every element and one is ``select``ed by ``|x|``.

Piecewise on ``a = |x|`` (thresholds are the sources' high-word bounds, as values):
  a < 2**-28:          ``0.125 * (8a + efx8 * a)``          (x + efx*x without underflow)
  a < 0.84375:         ``a + a * P(a²)/Q(a²)``
  a < 1.25:            ``erx + P1(a-1)/Q1(a-1)``
  a < 6:               ``1 - exp(-z*z - 0.5625) * exp((z-a)*(z+a) + R(1/a²)/S(1/a²)) / a``, z = a with its
                       low mantissa bits cleared, R/S one of two rational fits split at 1/0.35
  otherwise (and inf): ``1``
then the sign of x is put back (``erf(-0) = -0``); NaN fails every ``>=`` and keeps the first branch: NaN.
"""

from __future__ import annotations

import struct
from typing import Protocol, TypeVar

V = TypeVar("V")
M = TypeVar("M")


class FloatMath(Protocol[V, M]):
    """The operations the formula uses, on values ``V`` and masks ``M`` of one float type."""

    def const(self, value: float) -> V:
        """A value with every element ``value`` (already representable in the type)."""

    def add(self, x: V, y: V) -> V:
        """``x + y``, rounded once."""

    def sub(self, x: V, y: V) -> V:
        """``x - y``, rounded once."""

    def mul(self, x: V, y: V) -> V:
        """``x * y``, rounded once."""

    def div(self, x: V, y: V) -> V:
        """``x / y``, IEEE (rounded once)."""

    def neg(self, x: V) -> V:
        """``-x``."""

    def abs(self, x: V) -> V:
        """``|x|``."""

    def exp(self, x: V) -> V:
        """``e**x`` (the platform's accurate exp)."""

    def lt(self, x: V, y: V) -> M:
        """``x < y`` (false for NaN)."""

    def ge(self, x: V, y: V) -> M:
        """``x >= y`` (false for NaN)."""

    def select(self, c: M, x: V, y: V) -> V:
        """``c ? x : y``."""

    def clear_low_bits(self, x: V, n: int) -> V:
        """``x`` with the low ``n`` bits of its encoding cleared."""

    def copysign(self, x: V, s: V) -> V:
        """``x`` (with a clear sign bit) with the sign bit of ``s``."""


def _f64(high: int, low: int) -> float:
    """The float64 with the given high and low 32-bit words (the sources list their coefficients so)."""
    return float(struct.unpack("<d", struct.pack("<Q", (high << 32) | low))[0])


def _f32(bits: int) -> float:
    """The float32 with encoding ``bits``, as a Python float (exact)."""
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


#: Coefficients of s_erf.c (float64), by name, from their hex words there.
_C64: dict[str, float] = {k: _f64(h, lw) for k, (h, lw) in {
    "erx": (0x3FEB0AC1, 0x60000000), "efx8": (0x3FF06EBA, 0x8214DB69),
    "pp0": (0x3FC06EBA, 0x8214DB68), "pp1": (0xBFD4CD7D, 0x691CB913), "pp2": (0xBF9D2A51, 0xDBD7194F),
    "pp3": (0xBF77A291, 0x236668E4), "pp4": (0xBEF8EAD6, 0x120016AC),
    "qq1": (0x3FD97779, 0xCDDADC09), "qq2": (0x3FB0A54C, 0x5536CEBA), "qq3": (0x3F74D022, 0xC4D36B0F),
    "qq4": (0x3F215DC9, 0x221C1A10), "qq5": (0xBED09C43, 0x42A26120),
    "pa0": (0xBF6359B8, 0xBEF77538), "pa1": (0x3FDA8D00, 0xAD92B34D), "pa2": (0xBFD7D240, 0xFBB8C3F1),
    "pa3": (0x3FD45FCA, 0x805120E4), "pa4": (0xBFBC6398, 0x3D3E28EC), "pa5": (0x3FA22A36, 0x599795EB),
    "pa6": (0xBF61BF38, 0x0A96073F),
    "qa1": (0x3FBB3E66, 0x18EEE323), "qa2": (0x3FE14AF0, 0x92EB6F33), "qa3": (0x3FB2635C, 0xD99FE9A7),
    "qa4": (0x3FC02660, 0xE763351F), "qa5": (0x3F8BEDC2, 0x6B51DD1C), "qa6": (0x3F888B54, 0x5735151D),
    "ra0": (0xBF843412, 0x600D6435), "ra1": (0xBFE63416, 0xE4BA7360), "ra2": (0xC0251E04, 0x41B0E726),
    "ra3": (0xC04F300A, 0xE4CBA38D), "ra4": (0xC0644CB1, 0x84282266), "ra5": (0xC067135C, 0xEBCCABB2),
    "ra6": (0xC0545265, 0x57E4D2F2), "ra7": (0xC023A0EF, 0xC69AC25C),
    "sa1": (0x4033A6B9, 0xBD707687), "sa2": (0x4061350C, 0x526AE721), "sa3": (0x407B290D, 0xD58A1A71),
    "sa4": (0x40842B19, 0x21EC2868), "sa5": (0x407AD021, 0x57700314), "sa6": (0x405B28A3, 0xEE48AE2C),
    "sa7": (0x401A47EF, 0x8E484A93), "sa8": (0xBFAEEFF2, 0xEE749A62),
    "rb0": (0xBF843412, 0x39E86F4A), "rb1": (0xBFE993BA, 0x70C285DE), "rb2": (0xC031C209, 0x555F995A),
    "rb3": (0xC064145D, 0x43C5ED98), "rb4": (0xC083EC88, 0x1375F228), "rb5": (0xC0900461, 0x6A2E5992),
    "rb6": (0xC07E384E, 0x9BDC383F),
    "sb1": (0x403E568B, 0x261D5190), "sb2": (0x40745CAE, 0x221B9F0A), "sb3": (0x409802EB, 0x189D5118),
    "sb4": (0x40A8FFB7, 0x688C246A), "sb5": (0x40A3F219, 0xCEDF3BE6), "sb6": (0x407DA874, 0xE79FE763),
    "sb7": (0xC03670E2, 0x42712D62),
    # bounds: the sources compare the high word with these (low word 0)
    "tiny": (0x3E300000, 0), "small": (0x3FEB0000, 0), "mid": (0x3FF40000, 0), "split": (0x4006DB6E, 0),
    "big": (0x40180000, 0),
}.items()}

#: Coefficients of s_erff.c (float32), by name, from their hex encodings there.
_C32: dict[str, float] = {k: _f32(b) for k, b in {
    "erx": 0x3F58560B, "efx8": 0x3F8375D4,
    "pp0": 0x3E0375D4, "pp1": 0xBEA66BEB, "pp2": 0xBCE9528F, "pp3": 0xBBBD1489, "pp4": 0xB7C756B1,
    "qq1": 0x3ECBBBCE, "qq2": 0x3D852A63, "qq3": 0x3BA68116, "qq4": 0x390AEE49, "qq5": 0xB684E21A,
    "pa0": 0xBB1ACDC6, "pa1": 0x3ED46805, "pa2": 0xBEBE9208, "pa3": 0x3EA2FE54, "pa4": 0xBDE31CC2,
    "pa5": 0x3D1151B3, "pa6": 0xBB0DF9C0,
    "qa1": 0x3DD9F331, "qa2": 0x3F0A5785, "qa3": 0x3D931AE7, "qa4": 0x3E013307, "qa5": 0x3C5F6E13,
    "qa6": 0x3C445AA3,
    "ra0": 0xBC21A093, "ra1": 0xBF31A0B7, "ra2": 0xC128F022, "ra3": 0xC2798057, "ra4": 0xC322658C,
    "ra5": 0xC3389AE7, "ra6": 0xC2A2932B, "ra7": 0xC11D077E,
    "sa1": 0x419D35CE, "sa2": 0x4309A863, "sa3": 0x43D9486F, "sa4": 0x442158C9, "sa5": 0x43D6810B,
    "sa6": 0x42D9451F, "sa7": 0x40D23F7C, "sa8": 0xBD777F97,
    "rb0": 0xBC21A092, "rb1": 0xBF4C9DD4, "rb2": 0xC18E104B, "rb3": 0xC320A2EA, "rb4": 0xC41F6441,
    "rb5": 0xC480230B, "rb6": 0xC3F1C275,
    "sb1": 0x41F2B459, "sb2": 0x43A2E571, "sb3": 0x44C01759, "sb4": 0x4547FDBB, "sb5": 0x451F90CE,
    "sb6": 0x43ED43A7, "sb7": 0xC1B38712,
    "tiny": 0x31800000, "small": 0x3F580000, "mid": 0x3FA00000, "split": 0x4036DB6E, "big": 0x40C00000,
}.items()}


def _poly(m: FloatMath[V, M], c: dict[str, float], t: V, names: list[str]) -> V:
    """Horner's ``names[0] + t*(names[1] + t*(...))`` (a leading ``"one"`` is 1.0), as the sources nest it."""
    acc = m.const(c[names[-1]])
    for name in reversed(names[:-1]):
        acc = m.add(m.const(1.0 if name == "one" else c[name]), m.mul(t, acc))
    return acc


def erf(m: FloatMath[V, M], x: V, f64: bool) -> V:
    """erf(x) as fdlibm computes it (float64 when ``f64``, else float32), every branch evaluated."""
    c = _C64 if f64 else _C32
    one = m.const(1.0)
    a = m.abs(x)
    # a < 2**-28
    tiny = m.mul(m.const(0.125), m.add(m.mul(m.const(8.0), a), m.mul(m.const(c["efx8"]), a)))
    # a < 0.84375
    z = m.mul(a, a)
    r = _poly(m, c, z, ["pp0", "pp1", "pp2", "pp3", "pp4"])
    s = _poly(m, c, z, ["one", "qq1", "qq2", "qq3", "qq4", "qq5"])
    small = m.add(a, m.mul(a, m.div(r, s)))
    # a < 1.25
    s1 = m.sub(a, one)
    p = _poly(m, c, s1, ["pa0", "pa1", "pa2", "pa3", "pa4", "pa5", "pa6"])
    q = _poly(m, c, s1, ["one", "qa1", "qa2", "qa3", "qa4", "qa5", "qa6"])
    mid = m.add(m.const(c["erx"]), m.div(p, q))
    # a < 6
    s2 = m.div(one, z)
    near = m.lt(a, m.const(c["split"]))
    big_r = m.select(near, _poly(m, c, s2, ["ra0", "ra1", "ra2", "ra3", "ra4", "ra5", "ra6", "ra7"]),
                     _poly(m, c, s2, ["rb0", "rb1", "rb2", "rb3", "rb4", "rb5", "rb6"]))
    big_s = m.select(near, _poly(m, c, s2, ["one", "sa1", "sa2", "sa3", "sa4", "sa5", "sa6", "sa7", "sa8"]),
                     _poly(m, c, s2, ["one", "sb1", "sb2", "sb3", "sb4", "sb5", "sb6", "sb7"]))
    hz = m.clear_low_bits(a, 32 if f64 else 12)
    e1 = m.exp(m.sub(m.neg(m.mul(hz, hz)), m.const(0.5625)))
    e2 = m.exp(m.add(m.mul(m.sub(hz, a), m.add(hz, a)), m.div(big_r, big_s)))
    large = m.sub(one, m.div(m.mul(e1, e2), a))
    # NaN compares false everywhere: it keeps ``tiny``, which is NaN
    y = m.select(m.ge(a, m.const(c["tiny"])), small, tiny)
    y = m.select(m.ge(a, m.const(c["small"])), mid, y)
    y = m.select(m.ge(a, m.const(c["mid"])), large, y)
    y = m.select(m.ge(a, m.const(c["big"])), one, y)
    return m.copysign(y, x)
