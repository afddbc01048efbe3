"""Counter-based random numbers in tile code: ``tj.umulhi``, ``tj.philox``, ``tj.randint4x``, ``tj.randint``,
``tj.rand`` and ``tj.randn``, giving the bits Triton's ``tl.*`` of the same names give (its
``python/triton/language/random.py``) for the same seed, offsets and ``n_rounds``.

Philox-4xW (Salmon, Moraes, Dror and Shaw, SC11; Random123): W-bit counters ``c0..c3`` and a key ``(k0, k1)``; each
round replaces the counter with ``(hi(B * c2) ^ c1 ^ k0, lo(B * c2), hi(A * c0) ^ c3 ^ k1, lo(A * c0))`` and then
adds the Weyl constants to the key. W is 32 for 32-bit counters (the key: the seed's uint64 value split into its low
and high words) and 64 for 64-bit ones (the key: the seed and 0), as in Triton; ``randint4x`` and what is built on
it always count in 32 bits (64-bit offsets: their two words as c0 and c1), as Triton 3 does. The rounds are written
with element-wise IR ops (``mulhi``, ``mul``, ``xor``, ``add`` on unsigned integers, which wrap), so both backends
compile them as any other integer arithmetic; the key stays a scalar and is folded when the seed is a constant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.language import tile
from tilejit.language.frontend.builder import broadcast_shapes
from tilejit.language.frontend.calls import builtin, const_int
from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import Tile, describe
from tilejit.language.ir.types import BY_NAME, DType, TileType, uint32, uint64

if TYPE_CHECKING:
    from tilejit.language.frontend.handlers import Translator

#: counter width -> (round multipliers A and B, key increments: the golden ratio and sqrt(3) - 1 in fixed point)
PHILOX_CONSTANTS: dict[int, tuple[int, int, int, int]] = {
    32: (0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85),
    64: (0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B),
}
#: counter width -> what ``rand`` multiplies the mirrored signed bits by (Triton's: below 2**-31 and 2**-63, so
#: that the largest value rounds to a float32 below 1)
UNIFORM_SCALE: dict[int, float] = {32: 4.6566127342e-10, 64: 1.0842020432385337e-19}
#: the most rounds a call may ask for (each adds about ten element-wise ops per counter word)
MAX_ROUNDS = 64


def _rounds(fn: str, n_rounds: object) -> int:
    """``n_rounds`` checked: a compile-time int from 0 to ``MAX_ROUNDS``."""
    n = const_int(n_rounds, f"tj.{fn}() n_rounds")
    if not 0 <= n <= MAX_ROUNDS:
        raise FrontendError(f"tj.{fn}(): n_rounds must be from 0 to {MAX_ROUNDS}, got {n}")
    return n


def _is_integer(v: object) -> bool:
    """Whether ``v`` is an integer tile or scalar, or a Python int (not a bool)."""
    return (isinstance(v, Tile) and v.dtype.is_int) or (isinstance(v, int) and not isinstance(v, bool))


def _number_width(v: int, fn: str, what: str) -> int:
    """The counter width a Python int takes, as Triton types it: 32 in the int32 range, else 64 (int64, uint64)."""
    if -(1 << 31) <= v < (1 << 31):
        return 32
    if -(1 << 63) <= v < (1 << 64):
        return 64
    raise FrontendError(f"tj.{fn}(): {what} {v} does not fit in 64 bits")


def _counters(tr: Translator, fn: str, values: dict[str, object], what: str) -> tuple[list[Tile], int]:
    """The counter words ``values`` (by name; integer tiles of one width, 32 or 64 bits, and ints; ``what`` names
    them all) as unsigned tiles of that width broadcast together (their bits: ``int32(-1)`` is ``0xffffffff``), and
    the width."""
    for name, v in values.items():
        if not _is_integer(v):
            raise FrontendError(f"tj.{fn}(): {name} must be an integer tile or int, got {describe(v)}")
    tiles = [v for v in values.values() if isinstance(v, Tile)]
    for t in tiles:
        if t.dtype.bits not in (32, 64):
            raise FrontendError(
                f"tj.{fn}(): {what} must be 32- or 64-bit integers (Philox-4x32 or Philox-4x64, as in Triton), got "
                f"{t.dtype.name}: convert with .astype(tj.int32)"
            )
    widths = {t.dtype.bits for t in tiles}
    if len(widths) > 1:
        raise FrontendError(f"tj.{fn}(): {what} must all be 32-bit or all 64-bit integers, got "
                            + ", ".join(t.dtype.name for t in tiles))
    numbers = [v for v in values.values() if isinstance(v, int)]
    width = widths.pop() if widths else max(_number_width(v, fn, what) for v in numbers)
    udt = uint32 if width == 32 else uint64
    shape = broadcast_shapes(*(t.shape for t in tiles))
    out = []
    for name, v in values.items():
        if isinstance(v, Tile):
            out.append(tr.b.broadcast(tr.b.cast(v, udt), shape))
            continue
        assert isinstance(v, int)
        if not -(1 << (width - 1)) <= v < (1 << width):
            raise FrontendError(f"tj.{fn}(): {name} {v} does not fit in a {width}-bit counter")
        out.append(tr.b.constant(v % (1 << width), TileType(udt, shape)))
    return out, width


def _key(tr: Translator, fn: str, seed: object, width: int) -> tuple[Tile, Tile]:
    """The Philox key of ``seed`` (an integer scalar or int, taken as uint64: negative ones sign-extend): its low
    and high words for 32-bit counters, itself and 0 for 64-bit ones."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        _number_width(seed, fn, "the seed")
        s = tr.b.constant(seed % (1 << 64), TileType(uint64))
    elif isinstance(seed, Tile) and seed.dtype.is_int and seed.type.is_scalar:
        s = tr.b.cast(seed, uint64)
    else:
        raise FrontendError(
            f"tj.{fn}(): seed must be an integer scalar (an int parameter, a constant or an integer scalar value), "
            f"got {describe(seed)}"
        )
    if width == 64:
        return s, tr.b.constant(0, TileType(uint64))
    return tr.b.cast(s, uint32), tr.b.cast(tr.b.binary("rshift", s, 32), uint32)


def _philox(tr: Translator, fn: str, seed: object, counters: list[Tile], width: int, n_rounds: int) -> list[Tile]:
    """``n_rounds`` Philox rounds of ``counters`` under the key of ``seed``."""
    a, b, ka, kb = PHILOX_CONSTANTS[width]
    k0, k1 = _key(tr, fn, seed, width)
    c0, c1, c2, c3 = counters
    bb = tr.b.binary
    for r in range(n_rounds):
        if r:
            k0, k1 = bb("add", k0, ka), bb("add", k1, kb)
        c0, c1, c2, c3 = (bb("xor", bb("xor", bb("mulhi", b, c2), c1), k0), bb("mul", b, c2),
                          bb("xor", bb("xor", bb("mulhi", a, c0), c3), k1), bb("mul", a, c0))
    return [c0, c1, c2, c3]


def _randint4x(tr: Translator, fn: str, seed: object, offsets: object, n_rounds: object) -> list[Tile]:
    """``philox(seed, lo(offsets), hi(offsets), 0, 0)`` with 32-bit counters, as Triton 3's ``randint4x``: 64-bit
    offsets give their low and high words (32-bit ones: themselves and 0), and the results are uint32."""
    n = _rounds(fn, n_rounds)
    (c0,), width = _counters(tr, fn, {"offsets": offsets}, "offsets")
    lo = tr.b.cast(c0, uint32)
    zero = tr.b.constant(0, lo.type)
    hi = tr.b.cast(tr.b.binary("rshift", c0, 32), uint32) if width == 64 else zero
    return _philox(tr, fn, seed, [lo, hi, zero, zero], 32, n)


def _uniform(tr: Translator, x: Tile) -> Tile:
    """Triton's ``uint_to_uniform_float``: ``x``'s bits as a signed integer, negatives mirrored onto the
    non-negatives (``-x - 1``, that is ``~x``), times the scale in float32."""
    signed: DType = BY_NAME[f"int{x.dtype.bits}"]
    s = tr.b.cast(x, signed)
    mirrored = tr.b.select(tr.b.compare("lt", s, 0), tr.b.unary("invert", s), s)
    return tr.b.binary("mul", mirrored, UNIFORM_SCALE[x.dtype.bits])


def _umulhi_values(tr: Translator, x: object, y: object) -> Tile:
    """``tj.umulhi``: the operands promoted, multiplied as unsigned numbers of their width, the high half back in
    the promoted dtype."""
    for v in (x, y):
        if not _is_integer(v):
            raise FrontendError(f"tj.umulhi() expects integer tiles or ints, got {describe(v)}")
    dtype = tr.b.common_dtype([x, y])
    unsigned = BY_NAME[f"uint{dtype.bits}"]
    a, b = (tr.b.cast(t, unsigned) for t in tr.b.unify([x, y], dtype))
    return tr.b.cast(tr.b.binary("mulhi", a, b, "tj.umulhi()"), dtype)


@builtin(tile.umulhi)
def _umulhi(tr: Translator, x: object, y: object) -> object:
    return _umulhi_values(tr, x, y)


@builtin(tile.philox)
def _philox_call(tr: Translator, seed: object, c0: object, c1: object, c2: object, c3: object,
                 n_rounds: object) -> object:
    n = _rounds("philox", n_rounds)
    counters, width = _counters(tr, "philox", {"c0": c0, "c1": c1, "c2": c2, "c3": c3}, "the counters c0..c3")
    return tuple(_philox(tr, "philox", seed, counters, width, n))


@builtin(tile.randint4x)
def _randint4x_call(tr: Translator, seed: object, offsets: object, n_rounds: object) -> object:
    return tuple(_randint4x(tr, "randint4x", seed, offsets, n_rounds))


@builtin(tile.randint)
def _randint(tr: Translator, seed: object, offsets: object, n_rounds: object) -> object:
    return _randint4x(tr, "randint", seed, offsets, n_rounds)[0]


@builtin(tile.rand)
def _rand(tr: Translator, seed: object, offsets: object, n_rounds: object) -> object:
    return _uniform(tr, _randint4x(tr, "rand", seed, offsets, n_rounds)[0])


@builtin(tile.randn)
def _randn(tr: Translator, seed: object, offsets: object, n_rounds: object) -> object:
    """Box-Muller as Triton writes it: ``sqrt(-2 log(max(u1, 1e-7))) * cos(2 pi u2)`` in float32."""
    i1, i2 = _randint4x(tr, "randn", seed, offsets, n_rounds)[:2]
    u1 = tr.b.binary("maximum", _uniform(tr, i1), 1.0e-7)
    r = tr.b.unary("sqrt", tr.b.binary("mul", -2.0, tr.b.unary("log", u1)))
    return tr.b.binary("mul", r, tr.b.unary("cos", tr.b.binary("mul", 6.283185307179586, _uniform(tr, i2))))
