"""Random tile programs and a numpy model of what they must compute, for tests/test_fuzz_gpu.py.

``generate(seed)`` builds one ``@tj.kernel`` (its Python source), its input data, poisoned output
buffers and the values the model expects. The kernel runs on a 1-d grid of ``G`` blocks: each block
loads padded tiles from arrays whose sizes are not tile multiples, computes random expressions over
them (arithmetic, comparisons and bit operations with numpy promotion and weak Python numbers, casts,
``where``, math functions, broadcasting (size-1 ``arange``, ``[None, :]``, ``broadcast_to``,
``expand_dims``), reshapes and transposes, reductions, ``cumsum``, ``full``/``zeros``/``ones``/``arange``)
and stores some of them into views that sit inside larger poisoned buffers.

The model follows the rules written in ``tilejit/language/tile.py`` (numpy semantics, and the
deviations listed there: int with float gives the float, 32-bit sums wrap, ...), checked by numpy
where numpy decides (promotion of two dtypes, integer wraparound, float16 arithmetic). It evaluates
every value for all blocks at once (arrays of shape ``(G, *tile_shape)``) and keeps, for floats, an
elementwise bound on how far a correct GPU result may be from its value: CUDA's ulp bounds for math
functions and float32 division, FMA contraction of products, the order of reductions. The generator
evaluates every candidate op and drops it when tile.py says the front end refuses it (``Invalid``),
when its result is undefined (a float to integer cast of NaN or an out-of-range value) or when the
bounds cannot decide it (a comparison of two values closer than their error bounds, a floor next to
an integer) (``Reject``); what it keeps is decided exactly or within the bound.

``python tests/fuzz_model.py SEED`` prints one program.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BOOL = "bool"
SINTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SINTS + UINTS
FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = (BOOL, *INTS, *FLOATS)

F32, F64 = np.float32, np.float64

#: numpy dtype of the model's values (bfloat16 values are float32 numbers on the bfloat16 grid)
HOLD: dict[str, Any] = {BOOL: np.bool_, **{d: np.dtype(d).type for d in INTS}, "float16": np.float16,
                        "bfloat16": F32, "float32": F32, "float64": F64}
#: numpy dtype of the raw elements of host copies of device buffers (bfloat16 as its 16 bits)
STORE: dict[str, Any] = {**HOLD, "bfloat16": np.uint16}
#: the dtype float arithmetic happens in: 16-bit floats compute in float32 (as numpy and tile.py do)
COMPUTE: dict[str, Any] = {"float16": F32, "bfloat16": F32, "float32": F32, "float64": F64}
#: unit roundoff, smallest subnormal, smallest normal and largest finite value of each float dtype
U = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 2.0**-1074}
NORMAL = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126, "float64": 2.0**-1022}
FMAX = {"float16": 65504.0, "bfloat16": (2 - 2.0**-7) * 2.0**127, "float32": (2 - 2.0**-23) * 2.0**127,
        "float64": sys.float_info.max}
#: byte patterns of unwritten output elements: NaNs with a payload no computation produces, 0xAB bytes
POISON_BITS = {"float16": 0x7D5A, "bfloat16": 0x7FA5, "float32": 0x7FA5A5A5, "float64": 0x7FF5A5A5A5A5A5A5}

#: CUDA Math API maximum ulp errors (no fast math), float32 and float64; sigmoid is 1 / (1 + exp(-x)).
#: numpy's own float32 functions (SIMD, up to about 4 ulp) compute what the compiler folds at compile
#: time, and its float64 ones are the model's reference for float64: ``_math_slack`` adds both.
MATH_ULP = {
    "exp": (2, 1), "exp2": (2, 1), "log": (1, 1), "log2": (1, 1), "sqrt": (0, 0), "rsqrt": (2, 1),
    "sin": (2, 2), "cos": (2, 2), "tanh": (2, 1), "erf": (2, 2), "sigmoid": (4, 3), "pow": (4, 2),
}
NUMPY_ULP = 4
MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid")
MAX_ELEMENTS = 1024  # per generated tile: NVRTC time grows with tile size
MAX_RANK = 3


class Invalid(Exception):
    """tile.py's rules make the front end refuse this (a number that does not fit, bool - bool...)."""


class Reject(Exception):
    """Defined by nothing (a float to integer cast of NaN) or not decided by the model's error bounds."""


def int_range(dt: str) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def round_bf16(x: Any) -> np.ndarray:
    """Nearest bfloat16 (ties to even) of float32 values, as float32 numbers; NaN stays NaN."""
    f = np.array(x, dtype=F32, ndmin=1)
    bits = f.view(np.uint32).astype(np.uint64)
    out = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(F32)
    return np.where(np.isnan(f), F32(np.nan), out).reshape(np.shape(x))


def round_to(x: Any, dt: str) -> np.ndarray:
    """Float values rounded to the float ``dt`` (bfloat16 through float32, as the GPU converts)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dt == "bfloat16":
            return round_bf16(np.asarray(x).astype(F32))
        return np.asarray(x).astype(HOLD[dt])


def to_bits(a: np.ndarray, dt: str) -> np.ndarray:
    """Model values of ``dt`` as the raw elements of a device buffer (``STORE[dt]``)."""
    if dt == "bfloat16":
        return (np.ascontiguousarray(a, dtype=F32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(a, dtype=STORE[dt])


def from_bits(a: np.ndarray, dt: str) -> np.ndarray:
    """Raw device elements of ``dt`` as model values."""
    if dt == "bfloat16":
        return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(F32)
    return np.asarray(a).view(HOLD[dt]) if dt != BOOL else np.asarray(a).view(np.uint8) != 0


def poison(shape: tuple[int, ...], dt: str) -> np.ndarray:
    """A host buffer of raw ``dt`` elements that all hold the poison pattern."""
    if dt in POISON_BITS:
        unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(STORE[dt]).itemsize]
        return np.full(shape, POISON_BITS[dt], dtype=unsigned).view(STORE[dt])
    return np.full(shape + (np.dtype(STORE[dt]).itemsize,), 0xAB, np.uint8).view(STORE[dt]).reshape(shape)


def rnd(a: Any, dt: str) -> np.ndarray:
    """A bound on one rounding to ``dt`` of numbers of magnitude ``a`` (half an ulp, or a subnormal)."""
    return U[dt] * np.asarray(a, dtype=F64) + TINY[dt]


# ==================================================================================== values


@dataclass
class Val:
    """One tile value for all blocks: ``v`` has shape ``(G, *shape)``; for floats ``e`` bounds
    elementwise how far a correct GPU result may be from ``v`` (0: exactly ``v``, NaN equal to NaN)."""

    dtype: str
    v: np.ndarray
    e: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.v = np.ascontiguousarray(self.v, dtype=HOLD[self.dtype])
        if self.dtype in FLOATS:
            self.e = np.zeros(self.v.shape, F64) if self.e is None else np.ascontiguousarray(self.e, dtype=F64)
        else:
            self.e = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.v.shape[1:])

    @property
    def blocks(self) -> int:
        return int(self.v.shape[0])

    @property
    def err(self) -> np.ndarray:
        return self.e if self.e is not None else np.zeros(self.v.shape, F64)

    def f64(self) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return self.v.astype(F64)

    def with_layout(self, fn: Callable[[np.ndarray], np.ndarray]) -> Val:
        """The same elements moved by ``fn`` (a reshape, transpose or broadcast of ``(G, ...)`` arrays)."""
        return Val(self.dtype, fn(self.v), None if self.e is None else fn(self.e))


@dataclass(frozen=True)
class Lit:
    """A Python number written in the kernel: a *weak* operand (it takes the tile's dtype)."""

    value: bool | int | float

    def text(self) -> str:
        v = self.value
        if isinstance(v, float) and not math.isfinite(v):
            return f'float("{v}")'
        s = repr(v)
        return f"({s})" if s.startswith("-") else s


Operand = Val | Lit


def finish(x: Val) -> Val:
    """``x`` if its bound decides it: no uncertain NaN/inf, nothing that a bound lets overflow."""
    if x.dtype in FLOATS:
        assert x.e is not None
        with np.errstate(invalid="ignore", over="ignore"):
            bad = np.isnan(x.e) | ((x.e > 0) & ~(np.abs(x.f64()) + x.e <= FMAX[x.dtype]))
        if bad.any():
            raise Reject("a float result whose error bound reaches inf or NaN")
    return x


def check_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if any(not isinstance(s, int) or s < 1 or s & (s - 1) for s in shape):
        raise Invalid(f"shape {shape} is not made of powers of two")
    if len(shape) > MAX_RANK or math.prod(shape) > MAX_ELEMENTS:
        raise Reject(f"shape {shape} is larger than the fuzzer makes")
    return shape


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise Invalid(f"shapes {shapes} do not broadcast") from None
    return check_shape(out)


def expand(x: Val, shape: tuple[int, ...]) -> Val:
    """``x`` broadcast to ``shape`` (numpy rules, leading dims added)."""
    if x.shape == shape:
        return x
    if len(shape) < len(x.shape) or broadcast_shapes(x.shape, shape) != shape:
        raise Invalid(f"cannot broadcast {x.shape} to {shape}")
    lead = (x.blocks,) + (1,) * (len(shape) - len(x.shape)) + x.shape
    return x.with_layout(lambda a: np.broadcast_to(a.reshape(lead), (x.blocks, *shape)))


# ==================================================================================== dtypes


def default_dtype(value: bool | int | float) -> str:
    """A lone Python number's dtype: bool, int32 (int64 when it needs it) or float32."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        for dt in ("int32", "int64"):
            lo, hi = int_range(dt)
            if lo <= value <= hi:
                return dt
        raise Invalid(f"{value} does not fit in int64")
    return "float32"


def weak_dtype(value: bool | int | float, other: str) -> str:
    """The dtype of ``number op tile-of-other`` (NEP 50; a float number with an int/bool tile: float32)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return default_dtype(value) if other == BOOL else other
    return other if other in FLOATS else "float32"


def join(a: str, b: str) -> str:
    """Promotion of two tile dtypes: numpy's, except that an int or bool with a float gives the float
    (tile.py), and bfloat16 with float16 gives float32."""
    if (a in FLOATS) != (b in FLOATS):
        return a if a in FLOATS else b
    if a == b:
        return a
    if "bfloat16" in (a, b):
        other = b if a == "bfloat16" else a
        return "float32" if other == "float16" else other
    return np.promote_types(a, b).name


def common_dtype(ops: Sequence[Operand]) -> str:
    """The dtype operands of one op take: tiles promote, numbers are weak."""
    tiles = [o for o in ops if isinstance(o, Val)]
    if not tiles:
        dt = default_dtype(ops[0].value)  # type: ignore[union-attr]
        for o in ops[1:]:
            dt = join(dt, default_dtype(o.value))  # type: ignore[union-attr]
        return dt
    dt = tiles[0].dtype
    for t in tiles[1:]:
        dt = join(dt, t.dtype)
    for o in ops:
        if isinstance(o, Lit):
            dt = weak_dtype(o.value, dt)
    return dt


def const_value(value: bool | int | float, dt: str) -> bool | int | float:
    """A number as an element of ``dt`` exactly (floats rounded); Invalid when it does not fit."""
    if dt == BOOL:
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise Invalid(f"{value!r} is not a bool")
    if dt in INTS:
        if isinstance(value, float):
            if not value.is_integer():
                raise Invalid(f"{value!r} is not an integer")
            value = int(value)
        lo, hi = int_range(dt)
        if not lo <= int(value) <= hi:
            raise Invalid(f"{value} does not fit in {dt}")
        return int(value)
    return float(round_to(np.array(float(value), F64), dt))


def convert_number(value: bool | int | float, dt: str) -> bool | int | float:
    """An explicit conversion of a number (``tj.full``, ``astype``): C++ cast semantics, floats truncate."""
    if dt == BOOL:
        return bool(value)
    if dt in INTS and isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid(f"cannot convert {value} to {dt}")
        value = math.trunc(value)
    return const_value(value, dt)


def literal(value: bool | int | float, dt: str, shape: tuple[int, ...], blocks: int) -> Val:
    return Val(dt, np.full((blocks, *shape), const_value(value, dt), dtype=HOLD[dt]))


def operand_as(o: Operand, dt: str, shape: tuple[int, ...], blocks: int) -> Val:
    """An operand cast to ``dt`` and broadcast to ``shape`` (what the front end's ``unify`` does)."""
    if isinstance(o, Lit):
        return literal(o.value, dt, shape, blocks)
    return expand(cast(o, dt), shape)


def blocks_of(ops: Sequence[Operand]) -> int:
    return next(o.blocks for o in ops if isinstance(o, Val))


# ==================================================================================== casts

#: set while ``Program.replay`` runs: every cast result, implicit ones too, is moved within its bound
#: there (on the GPU each is an op of its own, rounded once, not a slack of the op that uses it)
_REPLAY: list[np.random.Generator] = []


def cast(x: Val, dt: str) -> Val:
    """``x.astype(dt)``: C++ casts as numpy does them; float to int only when defined (in range)."""
    out = _cast(x, dt)
    return _moved(out, _REPLAY[0]) if _REPLAY and out is not x else out


def _cast(x: Val, dt: str) -> Val:
    src = x.dtype
    if src == dt:
        return x
    v = x.v
    if dt == BOOL:
        if src in FLOATS:
            with np.errstate(invalid="ignore"):
                if ((x.err > 0) & ~(np.abs(x.f64()) > x.err)).any():
                    raise Reject("the truth value of a float within its error bound of 0")
        return Val(BOOL, v != 0)
    if dt in INTS:
        if src not in FLOATS:
            return Val(dt, v.astype(HOLD[dt]))
        xs, e = x.f64(), x.err
        if not np.isfinite(xs).all():
            raise Reject("a float to integer cast of inf or NaN (undefined)")
        t = np.trunc(xs)
        if ((np.trunc(xs - e) != t) | (np.trunc(xs + e) != t)).any():
            raise Reject("a float to integer cast that the error bound can change")
        lo, hi = int_range(dt)
        if ((t < float(lo)) | (t >= float(hi + 1))).any():
            raise Reject("a float to integer cast out of range (undefined)")
        return Val(dt, t.astype(HOLD[dt]))
    if src not in FLOATS:
        if dt == "bfloat16":
            with np.errstate(over="ignore"):
                r = round_bf16(v.astype(F32))
            # the GPU converts through float32: two roundings for integers float32 cannot hold
            return finish(Val(dt, r, np.where(np.abs(v.astype(F64)) >= 2**24, 2 * rnd(np.abs(r), dt), 0.0)))
        with np.errstate(over="ignore"):
            return Val(dt, v.astype(HOLD[dt]))
    xs, e = x.f64(), x.err
    r = round_to(v if src != "float16" else v.astype(F32), dt)
    big = r.astype(F64)
    with np.errstate(over="ignore", invalid="ignore"):
        out_e = e + np.where(e > 0, 2 * rnd(np.abs(big) + e, dt), 0.0)
        if src == "float64" and dt == "bfloat16":  # through float32 on the GPU: two roundings
            out_e += np.where(xs.astype(F32).astype(F64) != xs, 2 * rnd(np.abs(big), dt), 0.0)
    return finish(Val(dt, r, out_e))


# ==================================================================================== element-wise

CMP: dict[str, Callable[[Any, Any], Any]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}


def binary(fn: str, a: Operand, b: Operand) -> Val:
    """``a fn b`` with broadcasting, promotion and tile.py's rules (at least one operand is a tile)."""
    dt = common_dtype([a, b])
    if fn == "truediv" and dt not in FLOATS:
        dt = "float32"
    elif fn in ("and", "or", "xor"):
        if dt in FLOATS:
            raise Invalid("bit operation on floats")
    elif fn in ("lshift", "rshift"):
        if dt not in INTS:
            raise Invalid("shift of non-integers")
    elif dt == BOOL and fn == "sub":
        raise Invalid("bool - bool")
    elif dt == BOOL and fn in ("floordiv", "mod", "pow"):
        dt = "int8"
    shape = broadcast_shapes(*(o.shape for o in (a, b) if isinstance(o, Val)))
    g = blocks_of([a, b])
    x, y = operand_as(a, dt, shape, g), operand_as(b, dt, shape, g)
    if dt in FLOATS:
        return finish(_float_binary(fn, x, y))
    return _int_binary(fn, x, y)


def _int_binary(fn: str, x: Val, y: Val) -> Val:
    dt, a, b = x.dtype, x.v, y.v
    if dt == BOOL:
        ops = {"add": np.logical_or, "mul": np.logical_and, "and": np.logical_and, "or": np.logical_or,
               "xor": np.logical_xor, "maximum": np.logical_or, "minimum": np.logical_and}
        return Val(BOOL, ops[fn](a, b))
    simple: dict[str, Callable[[Any, Any], Any]] = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or,
        "xor": np.bitwise_xor, "maximum": np.maximum, "minimum": np.minimum,
    }
    if fn in simple:
        return Val(dt, simple[fn](a, b))
    signed = dt in SINTS
    if fn in ("floordiv", "mod"):
        # x // 0 and x % 0 are 0 (tile.py, as numpy gives); MIN // -1 wraps to MIN, MIN % -1 is 0
        zero = b == 0
        minus_one = (b == -1) if signed else np.zeros(b.shape, bool)
        safe = np.where(zero | minus_one, 1, b).astype(b.dtype)
        if fn == "floordiv":
            r = np.where(zero, 0, np.where(minus_one, np.negative(a), np.floor_divide(a, safe)))
        else:
            r = np.where(zero | minus_one, 0, np.remainder(a, safe))
        return Val(dt, r.astype(HOLD[dt]))
    if fn == "pow":
        if signed and (b < 0).any():
            raise Reject("an integer to a negative power (numpy refuses it)")
        return Val(dt, np.power(a, b))
    bits = 8 * np.dtype(dt).itemsize
    inside = (b >= 0) & (b < bits)
    sh = np.where(inside, b, 0).astype(b.dtype)
    if fn == "lshift":  # numpy: bits shifted past the width are gone; a shift by >= the width gives 0
        unsigned = np.dtype(f"uint{bits}")
        r = np.left_shift(a.view(unsigned), sh.view(unsigned)).view(a.dtype)
        return Val(dt, np.where(inside, r, 0).astype(HOLD[dt]))
    r = np.right_shift(a, sh)  # arithmetic for signed; past the width: 0, or -1 for negative numbers
    return Val(dt, np.where(inside, r, np.where(a < 0, -1, 0) if signed else 0).astype(HOLD[dt]))


def _float_binary(fn: str, x: Val, y: Val) -> Val:
    dt = x.dtype
    ct = COMPUTE[dt]
    xs, ys, ex, ey = x.f64(), y.f64(), x.err, y.err
    inexact = (ex > 0) | (ey > 0)
    with np.errstate(all="ignore"):
        xc, yc = x.v.astype(ct), y.v.astype(ct)
        finite_in = np.isfinite(xs) & np.isfinite(ys)
        if fn in ("floordiv", "mod"):
            if inexact.any():
                raise Reject("floor division of floats that are not exact")
            rc = np.floor_divide(xc, yc) if fn == "floordiv" else np.remainder(xc, yc)
            return Val(dt, round_to(rc, dt))
        if fn in ("maximum", "minimum"):
            r = round_to((np.maximum if fn == "maximum" else np.minimum)(xc, yc), dt)
            # a NaN or an infinity picked is an exact operand (inexact ones are finite)
            e = np.where(np.isfinite(r), np.maximum(ex, ey), 0.0)
            # the sign of a zero picked between -0.0 and 0.0 is unspecified (tile.py)
            e = np.where((r == 0) & (xs == 0) & (ys == 0), np.maximum(e, TINY[dt]), e)
            return Val(dt, r, e)
        if fn == "pow":
            return _float_pow(x, y)
        rc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide}[fn](xc, yc)
        r = round_to(rc, dt)
        big = np.abs(r.astype(F64))
        if fn in ("add", "sub"):
            prop = ex + ey
        elif fn == "mul":
            prop = np.where(ey > 0, np.abs(xs) * ey, 0.0) + np.where(ex > 0, np.abs(ys) * ex, 0.0) + ex * ey
        else:
            if ((ey > 0) & ~(ey < np.abs(ys))).any():
                raise Reject("a division by a value within its error bound of 0")
            room = np.abs(ys) - ey
            prop = np.where(inexact, ex / room + np.abs(xs) / np.abs(ys) * ey / room, 0.0)
        # the bound's own arithmetic rounds (and underflows near subnormals): one subnormal more
        prop = np.where(inexact, prop * (1 + 2.0**-40) + TINY[dt], 0.0)
        reach = big + prop  # the largest magnitude the result may have
        e = prop + np.where(prop > 0, 2 * rnd(reach, dt), 0.0)
        if fn == "mul" and dt in ("float32", "float64"):
            # a product may feed an add unrounded (FMA contraction, NVRTC's default)
            e = e + np.where(finite_in, rnd(reach, dt), 0.0)
        if fn == "truediv":
            if (finite_in & (ys != 0) & ~np.isfinite(r)).any():
                raise Reject("a float division that overflows")
            if dt == "float32":  # div.full.f32: within 2 ulp (tile.py)
                e = e + np.where(np.isfinite(r), 6 * U[dt] * reach + 4 * TINY[dt], 0.0)
            elif dt != "float64":  # 16-bit: the float32 quotient (2 ulp) rounded to 16 bits
                e = e + np.where(np.isfinite(r), 2 * rnd(reach, dt), 0.0)
        # 0 * y and 0 / y take y's sign, which an inexact y (a zero from maximum, say) may not have
        e = np.where((r == 0) & inexact, np.maximum(e, TINY[dt]), e)
    return Val(dt, r, e)


def _float_pow(x: Val, y: Val) -> Val:
    """``x ** y`` for floats where it is smooth: a positive base, or an exact base to the power 2 or 3."""
    dt = x.dtype
    xs, ys, ex, ey = x.f64(), y.f64(), x.err, y.err
    with np.errstate(all="ignore"):
        positive = (xs - ex > 0) & np.isfinite(xs) & np.isfinite(ys) & (np.abs(ys) + ey <= 8)
        small_int = (ex == 0) & (ey == 0) & np.isfinite(xs) & ((ys == 2) | (ys == 3))
        if not (positive | small_int).all():
            raise Reject("a power that is not smooth here (base <= 0, or large exponent)")
        exact = np.power(xs, ys)
        r = round_to(exact, dt)
        if (~np.isfinite(r)).any():
            raise Reject("a power that overflows")
        prop = np.zeros(xs.shape, F64)
        for sx in (-1, 1):
            for sy in (-1, 1):
                corner = np.power(np.where(positive, xs + sx * ex, xs), ys + sy * ey)
                prop = np.maximum(prop, np.where((ex > 0) | (ey > 0), np.abs(corner - exact), 0.0))
        reach = np.abs(r.astype(F64)) + prop
        e = _math_slack("pow", dt, reach) + prop * (1 + 2.0**-30) + np.where(prop > 0, 2 * rnd(reach, dt), 0.0)
    return Val(dt, r, e)


def _math_slack(fn: str, dt: str, big: np.ndarray) -> np.ndarray:
    """How far a CUDA math function's result of magnitude up to ``big`` may be from the correctly
    rounded one."""
    if dt in ("float16", "bfloat16"):  # computed in float32, then one rounding to 16 bits
        slack = 2 * rnd(big, dt) + (NORMAL["float32"] if fn == "sigmoid" else 0.0)
        return np.where(np.isfinite(big), slack, 0.0)
    cuda = MATH_ULP[fn][0 if dt == "float32" else 1]
    ulps = (max(cuda, NUMPY_ULP) + 1) if dt == "float32" else cuda + NUMPY_ULP
    slack = 2 * ulps * U[dt] * big + ulps * TINY[dt]
    if fn == "sigmoid":  # exp(-x) overflows to inf for very negative x: 1 / inf is 0, not a subnormal
        slack = slack + NORMAL[dt]
    return np.where(np.isfinite(big), slack, 0.0)


_F64_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda v: 1.0 / np.sqrt(v), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[F64]), "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
}


def _float_math(fn: str, x: Val) -> Val:
    dt = x.dtype
    f = _F64_MATH[fn]
    xs, e = x.f64(), x.err
    with np.errstate(all="ignore"):
        exact = f(xs)
        r = round_to(exact, dt)
        special = ~np.isfinite(xs)
        if fn in ("log", "log2"):
            special |= xs <= 0
        elif fn in ("sqrt", "rsqrt"):
            special |= (xs < 0) | ((xs == 0) & (fn == "rsqrt"))
        if (~np.isfinite(r) & ~(special & (e == 0))).any():
            raise Reject(f"{fn} overflows")
        prop = np.zeros(xs.shape, F64)
        if (e > 0).any():
            lo, hi = xs - e, xs + e
            if fn in ("log", "log2", "rsqrt") and ((e > 0) & ~(lo > 0)).any():
                raise Reject(f"{fn} of a value within its error bound of 0")
            if fn == "sqrt" and ((e > 0) & ~(lo >= 0)).any():
                raise Reject("sqrt of a value within its error bound of 0")
            if fn in ("sin", "cos"):
                prop = np.where(e > 0, np.minimum(e, 2.0), 0.0)
            else:  # monotonic: the extremes are at the ends of the interval
                prop = np.where(e > 0, np.maximum(np.abs(f(lo) - exact), np.abs(f(hi) - exact)), 0.0)
        reach = np.abs(r.astype(F64)) + prop
        total = _math_slack(fn, dt, reach) + prop * (1 + 2.0**-30) + np.where(prop > 0, 2 * rnd(reach, dt), 0.0)
    return Val(dt, r, total)


def unary(fn: str, x: Val) -> Val:
    """``-x``, ``~x``, ``abs``, ``floor``/``ceil`` and the math functions, with tile.py's dtype rules."""
    dt = x.dtype
    if fn == "neg":
        if dt == BOOL:
            raise Invalid("unary - of bool")
        return Val(dt, np.negative(x.v), x.e)
    if fn == "invert":
        if dt in FLOATS:
            raise Invalid("~ of floats")
        return Val(dt, np.logical_not(x.v) if dt == BOOL else np.invert(x.v))
    if fn == "abs":
        return x if dt == BOOL or dt in UINTS else Val(dt, np.abs(x.v), x.e)
    if fn in ("floor", "ceil"):
        if dt not in FLOATS:
            return x  # numpy 2: integers and bools are their own floor and ceiling
        op = np.floor if fn == "floor" else np.ceil
        xs, e = x.f64(), x.err
        with np.errstate(invalid="ignore"):
            if ((e > 0) & (op(xs - e) != op(xs + e))).any():
                raise Reject(f"{fn} of a value within its error bound of an integer")
        return Val(dt, op(x.v))
    if dt not in FLOATS:
        x = cast(x, "float32")
    return finish(_float_math(fn, x))


def compare(fn: str, a: Operand, b: Operand) -> Val:
    """``a fn b`` as bool tiles; a signed integer against uint64 compares exactly (as numpy does)."""
    shape = broadcast_shapes(*(o.shape for o in (a, b) if isinstance(o, Val)))
    g = blocks_of([a, b])
    if isinstance(a, Val) and isinstance(b, Val) and {a.dtype, b.dtype} & {"uint64"} and \
            {a.dtype, b.dtype} & set(SINTS):
        s, u = (a, b) if a.dtype in SINTS else (b, a)
        sv, uv = expand(s, shape).v.astype(np.int64), expand(u, shape).v
        neg = sv < 0
        su = sv.view(np.uint64)
        base = CMP[fn](su, uv) if s is a else CMP[fn](uv, su)
        true_if_neg = ("lt", "le", "ne") if s is a else ("gt", "ge", "ne")
        return Val(BOOL, np.where(neg, fn in true_if_neg, base))
    dt = common_dtype([a, b])
    x, y = operand_as(a, dt, shape, g), operand_as(b, dt, shape, g)
    if dt in FLOATS:
        xs, ys, e = x.f64(), y.f64(), x.err + y.err
        with np.errstate(invalid="ignore"):
            bad = (e > 0) & ~(np.abs(xs - ys) > e) & ~(np.isnan(xs) | np.isnan(ys))
        if bad.any():
            raise Reject("a comparison of values closer than their error bounds")
    return Val(BOOL, CMP[fn](x.v, y.v))


def where(c: Val, a: Operand, b: Operand) -> Val:
    """``tj.where(c, a, b)``: ``c`` is true where nonzero; ``a`` and ``b`` promote (numbers are weak)."""
    cond = cast(c, BOOL)
    dt = common_dtype([a, b])
    shape = broadcast_shapes(cond.shape, *(o.shape for o in (a, b) if isinstance(o, Val)))
    g = c.blocks
    cond = expand(cond, shape)
    x, y = operand_as(a, dt, shape, g), operand_as(b, dt, shape, g)
    e = None if dt not in FLOATS else np.where(cond.v, x.err, y.err)
    return Val(dt, np.where(cond.v, x.v, y.v), e)


# ==================================================================================== reductions


def widen_for_sum(x: Val) -> Val:
    """sum/prod/cumsum of bool and of integers narrower than 32 bits accumulate in (u)int32."""
    if x.dtype == BOOL or (x.dtype in INTS and np.dtype(x.dtype).itemsize < 4):
        return cast(x, "uint32" if x.dtype in UINTS else "int32")
    return x


def axes_of(axis: int | tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    if any(not -ndim <= a < ndim for a in items):
        raise Invalid(f"axis {axis} out of range for rank {ndim}")
    out = tuple(a % ndim for a in items)
    if len(set(out)) != len(out):
        raise Invalid(f"repeated axis in {axis}")
    return out


def reduce(fn: str, x: Val, axis: int | tuple[int, ...] | None, keepdims: bool) -> Val:
    """``tj.sum/prod/max/min``: 16-bit floats accumulate in float32, narrow ints in (u)int32."""
    if fn in ("sum", "prod"):
        x = widen_for_sum(x)
    if x.shape == () and axis is None:
        return x
    ax = tuple(a + 1 for a in axes_of(axis, len(x.shape)))
    dt = x.dtype
    if dt not in FLOATS:
        if fn in ("sum", "prod"):
            op = np.sum if fn == "sum" else np.prod
            return Val(dt, op(x.v, axis=ax, dtype=HOLD[dt], keepdims=keepdims))
        return Val(dt, (np.max if fn == "max" else np.min)(x.v, axis=ax, keepdims=keepdims))
    n = math.prod(x.v.shape[a] for a in ax)
    xs, e = x.f64(), x.err
    acc = "float32" if dt in ("float16", "bfloat16") else dt
    with np.errstate(all="ignore"):
        finite = np.isfinite(xs).all(axis=ax, keepdims=keepdims)
        exact = (e == 0).all(axis=ax, keepdims=keepdims)
        if fn in ("max", "min"):
            r = (np.max if fn == "max" else np.min)(x.v, axis=ax, keepdims=keepdims)
            out_e = np.where(np.isfinite(r), e.max(axis=ax, keepdims=keepdims), 0.0)
            return Val(dt, r, np.where(r == 0, np.maximum(out_e, TINY[dt]), out_e))
        if fn == "sum":
            mag_finite = np.where(np.isfinite(xs), np.abs(xs), 0.0).sum(axis=ax, keepdims=keepdims)
            if (mag_finite > FMAX[acc] / 4).any():
                raise Reject("a sum whose partial sums may overflow")
            r = round_to(xs.sum(axis=ax, keepdims=keepdims), dt)
            prop = e.sum(axis=ax, keepdims=keepdims)
            big = np.abs(r.astype(F64))
            # the inputs' errors (and two roundings apart), then this sum's own: order and rounding
            out_e = prop + np.where(prop > 0, 2 * rnd(big + prop, dt), 0.0) + \
                2 * n * U[acc] * (mag_finite + prop) + 2 * rnd(big + prop, dt)
            out_e = np.where(~finite & exact, 0.0, out_e)  # inf and NaN sums do not depend on the order
            # the sign of a zero sum depends on the order and the start value (-0.0 + 0.0 is 0.0)
            return finish(Val(dt, r, np.where(r == 0, np.maximum(out_e, TINY[dt]), out_e)))
        # prod: partial products must stay normal and finite in the accumulator, in any order
        mag = np.abs(xs)
        high = np.where(np.isfinite(xs) & (mag > 1), mag + e, 1.0).prod(axis=ax, keepdims=keepdims)
        least = np.where(e > 0, np.maximum(mag - e, 0.0), mag)  # an inexact element may be near 0
        low = np.where((least < 1) & ((mag > 0) | (e > 0)), least, 1.0).prod(axis=ax, keepdims=keepdims)
        has_zero = ((xs == 0) & (e == 0)).any(axis=ax, keepdims=keepdims)
        if (high > FMAX[acc] / 4).any() or (~has_zero & finite & (low < NORMAL[acc] * 4)).any():
            raise Reject("a product whose partial products may overflow or underflow")
        r = round_to(xs.prod(axis=ax, keepdims=keepdims), dt)
        upper = np.where(np.isfinite(xs), mag + e, 1.0).prod(axis=ax, keepdims=keepdims)
        lower = np.where(np.isfinite(xs), mag, 1.0).prod(axis=ax, keepdims=keepdims)
        big = np.abs(r.astype(F64))
        prop = (upper - lower) * (1 + 2.0**-30)
        out_e = prop + np.where(prop > 0, 2 * rnd(big + prop, dt), 0.0) + 2 * n * U[acc] * upper + \
            2 * rnd(big + prop, dt)
        return finish(Val(dt, r, np.where(~finite & exact, 0.0, out_e)))


def argreduce(fn: str, x: Val, axis: int | None, keepdims: bool) -> Val:
    """``tj.argmax/argmin``: int32 index of the first extreme (the first NaN), flattened when axis is None."""
    nd = len(x.shape)
    g = x.blocks
    if nd == 0 and axis is None:
        return Val("int32", np.zeros((g,), np.int32))
    if axis is None:
        v, e, ax = x.v.reshape(g, -1), x.err.reshape(g, -1), 1
    else:
        ax = axes_of(axis, nd)[0] + 1
        v, e = x.v, x.err
    pick = np.argmax if fn == "argmax" else np.argmin
    idx = pick(v, axis=ax, keepdims=True)
    if x.dtype in FLOATS:
        xs = v.astype(F64)
        m = np.take_along_axis(xs, idx, axis=ax)
        em = np.take_along_axis(e, idx, axis=ax)
        others = np.arange(v.shape[ax]).reshape([-1 if d == ax else 1 for d in range(v.ndim)]) != idx
        with np.errstate(invalid="ignore"):
            close = others & ((em + e) > 0) & ~(np.abs(m - xs) > em + e) & ~np.isnan(m)
        if close.any():
            raise Reject(f"{fn} of values closer than their error bounds")
    r = idx if keepdims else np.squeeze(idx, axis=ax)
    if keepdims and axis is None:
        r = r.reshape((g,) + (1,) * nd)
    return Val("int32", r.astype(np.int32))


def cumsum(x: Val, axis: int) -> Val:
    """``tj.cumsum``: inclusive prefix sums, accumulating like ``tj.sum``."""
    if x.shape == ():
        raise Invalid("cumsum of a scalar")
    x = widen_for_sum(x)
    ax = axes_of(axis, len(x.shape))[0] + 1
    dt = x.dtype
    if dt not in FLOATS:
        return Val(dt, np.cumsum(x.v, axis=ax, dtype=HOLD[dt]))
    xs, e = x.f64(), x.err
    acc = "float32" if dt in ("float16", "bfloat16") else dt
    with np.errstate(all="ignore"):
        mag_finite = np.cumsum(np.where(np.isfinite(xs), np.abs(xs), 0.0), axis=ax)
        if (mag_finite > FMAX[acc] / 4).any():
            raise Reject("a cumsum whose partial sums may overflow")
        r = round_to(np.cumsum(xs, axis=ax), dt)
        k = np.cumsum(np.ones(xs.shape), axis=ax)
        finite = np.cumsum(~np.isfinite(xs), axis=ax) == 0
        exact = np.cumsum(e > 0, axis=ax) == 0
        prop = np.cumsum(e, axis=ax)
        reach = np.abs(r.astype(F64)) + prop
        out_e = prop + np.where(prop > 0, 2 * rnd(reach, dt), 0.0) + 2 * k * U[acc] * (mag_finite + prop) + \
            2 * rnd(reach, dt)
        out_e = np.where(~finite & exact, 0.0, out_e)
        return finish(Val(dt, r, np.where(r == 0, np.maximum(out_e, TINY[dt]), out_e)))


# ==================================================================================== shapes and creation


def reshape(x: Val, shape: tuple[int, ...]) -> Val:
    check_shape(shape)
    if math.prod(shape) != math.prod(x.shape):
        raise Invalid(f"cannot reshape {x.shape} into {shape}")
    return x.with_layout(lambda a: a.reshape((x.blocks, *shape)))


def transpose(x: Val, perm: tuple[int, ...]) -> Val:
    return x.with_layout(lambda a: a.transpose((0, *(p + 1 for p in perm))))


def arange(n: int, dt: str, blocks: int) -> Val:
    if dt == BOOL:
        raise Invalid("arange of bool")
    if dt in INTS and n - 1 > int_range(dt)[1]:
        raise Invalid(f"arange({n}) does not fit in {dt}")
    return Val(dt, np.broadcast_to(np.arange(n), (blocks, n)).astype(HOLD[dt]))


def full(shape: tuple[int, ...], value: Operand, dt: str | None, blocks: int) -> Val:
    """``tj.full``: a number converted like a C++ cast, or a scalar tile cast and broadcast."""
    check_shape(shape)
    if isinstance(value, Val):
        return expand(cast(value, dt or value.dtype), shape)
    dt = dt or default_dtype(value.value)
    return Val(dt, np.full((blocks, *shape), convert_number(value.value, dt), dtype=HOLD[dt]))


def load(data: np.ndarray, dt: str, tile: tuple[int, ...], index: tuple[int | str, ...], padding: float | int | bool,
         blocks: int) -> Val:
    """``tj.load`` in block ``g`` of the grid: index entries are ints or ``"b"`` (the block's id)."""
    pad = const_value(padding, dt)
    out = np.full((blocks, *tile), pad, dtype=HOLD[dt])
    for g in range(blocks):
        starts = [(g if i == "b" else int(i)) * t for i, t in zip(index, tile)]
        src = tuple(slice(min(s, n), min(s + t, n)) for s, t, n in zip(starts, tile, data.shape))
        dst = (g, *(slice(0, sl.stop - sl.start) for sl in src))
        out[dst] = data[src]
    return Val(dt, out)


def store(x: Val, shape: tuple[int, ...], bdim: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """What the blocks' ``tj.store(out, index, x)`` leave in an array of ``shape``, where ``index`` is
    the block id at ``bdim`` and 0 elsewhere: values, error bounds and which elements were written."""
    tile = x.shape or (1,) * len(shape)
    v = x.v.reshape((x.blocks, *tile))
    e = x.err.reshape(v.shape)
    value = np.zeros(shape, HOLD[x.dtype])
    err = np.zeros(shape, F64)
    written = np.zeros(shape, bool)
    for g in range(x.blocks):
        dst = tuple(slice(min(g * t if d == bdim else 0, n), min((g if d == bdim else 0) * t + t, n))
                    for d, (t, n) in enumerate(zip(tile, shape)))
        src = (g, *(slice(0, sl.stop - sl.start) for sl in dst))
        value[dst], err[dst], written[dst] = v[src], e[src], True
    return value, err if x.dtype in FLOATS else None, written


# ==================================================================================== programs


@dataclass
class Buffer:
    """A host copy of one device buffer (raw elements, ``STORE[dtype]``) and the view of it that the
    kernel gets as one of its arrays."""

    name: str
    dtype: str
    phys: np.ndarray
    view: tuple[slice, ...]


@dataclass
class Expect:
    """What an output view must hold: values and error bounds where written, the poison elsewhere."""

    value: np.ndarray
    err: np.ndarray | None
    written: np.ndarray


@dataclass
class Program:
    """One generated kernel: its source, grid, buffers and what the model says the outputs hold; and
    the model's steps (``replay``)."""

    seed: int
    name: str
    source: str
    grid: int
    inputs: list[Buffer]
    outputs: list[Buffer]
    expected: list[Expect]
    loads: dict[str, Val]
    steps: list[tuple[str, Thunk]]
    store_steps: list[tuple[str, str, tuple[int, ...], int]]

    def replay(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Output buffers of one run that a correct GPU may give, as the model sees it: every step
        recomputed from the replayed values, each float result moved anywhere within the bound that its
        own op may add (ulps, FMA, reduction order). ``check`` must accept them: the bounds are sound."""
        values: dict[str, Val] = dict(self.loads)

        def exact(n: Node) -> Val:
            return Val(values[n.name].dtype, values[n.name].v)

        outs = []
        _REPLAY.append(rng)
        try:
            for name, thunk in self.steps:
                values[name] = _moved(thunk(exact), rng)
            for buf, (name, dt, shape, bdim) in zip(self.outputs, self.store_steps):
                value, _, written = store(cast(exact(Node(name, values[name])), dt), shape, bdim)
                got = buf.phys.copy()
                got[buf.view][written] = to_bits(value, dt)[written]
                outs.append(got)
        finally:
            _REPLAY.pop()
        return outs

    def report(self) -> str:
        """How to see this program again, and its source."""
        return (f"fuzz program seed {self.seed} (print it: python tests/fuzz_model.py {self.seed}; run it: "
                f"TILEJIT_FUZZ_SEEDS={self.seed} pytest -m gpu tests/test_fuzz_gpu.py), grid {self.grid}:\n"
                f"{self.source}")


@dataclass
class Node:
    """A value of the program (a load ``t<k>`` or a computed ``v<k>``) and how often ops used it."""

    name: str
    val: Val
    uses: int = 0


Getter = Callable[[Node], Val]
Thunk = Callable[[Getter], Val]


def _model_value(n: Node) -> Val:
    return n.val


def _get(get: Getter, o: Node | Lit) -> Val | Lit:
    return get(o) if isinstance(o, Node) else o


@dataclass
class _Op:
    weight: float
    build: Callable[[], tuple[str, Thunk]]


DTYPE_TEXT = {d: f"tj.{d}" for d in DTYPES} | {BOOL: "tj.bool_"}
INT_LITS = [0, 1, 2, 3, -1, -2, 5, 7, 31, 100, -100, 127, -128, 255, 1000, 65535, 2**31 - 1, -(2**31), 2**40]
FLOAT_LITS = [0.5, -1.5, 2.0, 0.1, -0.25, 3.0, 1e-3, 10.0, 0.0, -0.0, 1e4, 2.5, math.inf, -math.inf, math.nan]
BIN_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
              "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}
CMP_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _shape_text(shape: tuple[int, ...]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"


class _Generator:
    """One random program: inputs and their loads, then ops that the model accepts, then stores."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.blocks = int(self.rng.choice([1, 2, 3], p=[0.2, 0.4, 0.4]))
        r = 2 ** int(self.rng.integers(0, 5))
        c = 2 ** int(self.rng.integers(0, 6))
        while r * c > 256:
            r //= 2
        self.R, self.C = r, c
        self.lines: list[str] = []
        self.nodes: list[Node] = []
        self.inputs: list[Buffer] = []
        self.steps: list[tuple[str, Thunk]] = []
        self.store_steps: list[tuple[str, str, tuple[int, ...], int]] = []
        self.count = 0

    # ------------------------------------------------------------------ random helpers

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, items: Sequence[Any], weights: Sequence[float] | None = None) -> Any:
        if weights is None:
            return items[int(self.rng.integers(0, len(items)))]
        w = np.asarray(weights, F64)
        return items[int(self.rng.choice(len(items), p=w / w.sum()))]

    def pow2(self, hi: int) -> int:
        return 2 ** int(self.rng.integers(0, hi + 1))

    def dtype(self) -> str:
        weights = [1.0] + [0.9] * 8 + [1.5, 1.2, 3.0, 1.5]
        return str(self.pick(DTYPES, weights))

    def tile_shape(self, rank: int | None = None) -> tuple[int, ...]:
        r, c = self.R, self.C
        ones = [(1,), (1, 1)]
        menu1 = [(c,), (r,), (r * c,), (c,), (1,)]
        menu2 = [(r, c), (r, c), (1, c), (r, 1), (c, r), (2 * r, c) if 2 * r * c <= 512 else (r, c), (1, 1)]
        if rank == 1:
            return tuple(self.pick(menu1))
        if rank == 2:
            return tuple(self.pick(menu2))
        return tuple(self.pick(menu1 + menu2 + ones))

    def data(self, dt: str, shape: tuple[int, ...], specials: bool, tiny: bool) -> np.ndarray:
        """Random values of ``dt`` (model values): small numbers, full-range and edge values, and for
        floats sometimes zeros of both signs, subnormals, huge values, inf and NaN."""
        rng = self.rng
        size = math.prod(shape)
        if dt == BOOL:
            return rng.integers(0, 2, size).astype(bool).reshape(shape)
        if dt in INTS:
            lo, hi = int_range(dt)
            small = rng.integers(max(lo, -20), min(hi, 40) + 1, size).astype(object)
            wide = rng.integers(lo, hi, size, dtype=np.dtype(dt), endpoint=True).astype(object)
            edges = np.array([v for v in (lo, lo + 1, -1, 0, 1, hi - 1, hi) if lo <= v <= hi], dtype=object)
            kind = rng.choice(3, size, p=[0.6, 0.25, 0.15])
            out = np.where(kind == 0, small, np.where(kind == 1, wide, rng.choice(edges, size)))
            return np.array([int(v) for v in out], dtype=HOLD[dt]).reshape(shape)
        scale = float(rng.choice([1.0, 3.0, 100.0, 0.01]))
        base = rng.standard_normal(size) * scale
        base = np.where(rng.random(size) < 0.25, rng.integers(-8, 9, size).astype(F64), base)
        base = np.where(rng.random(size) < 0.1, rng.uniform(-1, 1, size), base)
        if tiny:
            low = {"float16": -10, "bfloat16": -66, "float32": -66, "float64": -520}[dt]
            # ldexp, not 2.0 ** x: the same values with every numpy (its pow differs in the last bit)
            mags = np.ldexp(rng.uniform(0.5, 1.0, size), rng.integers(low - 8, low + 1, size)) * \
                rng.choice([-1.0, 1.0], size)
            base = np.where(rng.random(size) < 0.3, mags, base)
        if specials:
            pool = np.array([0.0, -0.0, TINY[dt], -TINY[dt], NORMAL[dt], FMAX[dt] / 2, math.inf, -math.inf,
                             math.nan, 3 * TINY[dt]])
            base = np.where(rng.random(size) < 0.12, rng.choice(pool, size), base)
        return round_to(base, dt).reshape(shape)

    def lit(self, like: str | None) -> Lit:
        """A Python number, mostly of the kind that keeps ``like``'s dtype."""
        kind = self.pick(["int", "float", "bool"], [5, 4, 1])
        if like in FLOATS and self.chance(0.5):
            kind = "float"
        if kind == "int":
            return Lit(int(self.pick(INT_LITS, [6, 6, 5, 4, 5, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5])))
        if kind == "float":
            return Lit(float(self.pick(FLOAT_LITS, [5, 5, 5, 3, 3, 3, 2, 2, 2, 1, 1, 2, 0.5, 0.5, 0.3])))
        return Lit(bool(self.chance(0.5)))

    def node(self, want: Callable[[Node], bool] | None = None) -> Node:
        """A value computed so far: later ones and unused ones more likely (chains, few dead values)."""
        nodes = [n for n in self.nodes if want is None or want(n)]
        if not nodes:
            raise Reject("no value of the kind wanted")
        return self.pick(nodes, [(1.0 + k) * (3.0 if n.uses == 0 else 1.0) for k, n in enumerate(nodes)])

    def partner(self, a: Node) -> Node:
        """A value that broadcasts with ``a``'s (rarely ``a`` itself)."""
        itself = self.chance(0.1)

        def fits(n: Node) -> bool:
            if (n is a) != itself:
                return False
            try:
                broadcast_shapes(a.val.shape, n.val.shape)
            except (Invalid, Reject):
                return False
            return True

        return self.node(fits)

    # ------------------------------------------------------------------ program parts

    def add_input(self, k: int) -> None:
        dt = self.dtype()
        rank = 1 if self.chance(0.4) else 2
        tile = self.tile_shape(rank)
        index: list[int | str] = ["b" if self.chance(0.75) else int(self.rng.integers(0, 2)) for _ in tile]
        shape = []
        for i, t in zip(index, tile):
            # mostly a partial last tile; sometimes tiles wholly past the end, or one element
            reach = (self.blocks if i == "b" else int(i) + 1) * t
            n = int(self.rng.integers(reach - t + 1, reach + 2)) if self.chance(0.8) else \
                int(self.rng.integers(1, reach + t + 1))
            shape.append(max(1, n))
        values = self.data(dt, tuple(shape), self.chance(0.3), self.chance(0.3))
        pads = self.layout(tuple(shape))
        phys_shape, view = pads
        phys = to_bits(self.data(dt, phys_shape, True, False), dt)
        phys[view] = to_bits(values, dt)
        self.inputs.append(Buffer(f"a{k}", dt, phys, view))
        padding = self.padding(dt)
        val = load(values, dt, tile, tuple(index), padding if padding is not None else 0, self.blocks)
        idx = ", ".join(str(i) for i in index)
        idx_text = f"({idx},)" if len(index) == 1 else f"({idx})"
        pad_text = "" if padding is None else f", padding={Lit(padding).text()}"
        name = f"t{k}"
        self.lines.append(f"{name} = tj.load(a{k}, index={idx_text}, shape={_shape_text(tile)}{pad_text})")
        self.nodes.append(Node(name, val))

    def padding(self, dt: str) -> bool | int | float | None:
        if self.chance(0.3):
            return None
        if dt == BOOL:
            return bool(self.chance(0.5))
        if dt in INTS:
            lo, hi = int_range(dt)
            return int(self.pick([v for v in (0, 1, -1, 7, hi, lo) if lo <= v <= hi]))
        return float(self.pick([0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, -0.0, 0.1]))

    def layout(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[slice, ...]]:
        """A buffer larger than ``shape`` and the view of ``shape`` in it: offset, padded rows, and
        sometimes every second element of the last dimension."""
        phys, view = [], []
        for d, n in enumerate(shape):
            lo = int(self.rng.integers(0, 3)) if self.chance(0.6) else 0
            hi = int(self.rng.integers(1, 4))
            step = 2 if d == len(shape) - 1 and self.chance(0.2) else 1
            phys.append(lo + n * step + hi)
            view.append(slice(lo, lo + n * step, step))
        return tuple(phys), tuple(view)

    def emit(self, text: str, thunk: Thunk) -> None:
        """Add ``v<k> = text`` (and an assert of its dtype and shape) if the model accepts it."""
        val = thunk(_model_value)
        check_shape(val.shape)
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {text}")
        self.lines.append(f"assert {name}.dtype == {DTYPE_TEXT[val.dtype]} and {name}.shape == "
                          f"{_shape_text(val.shape) if val.shape else '()'}, \"{name}\"")
        self.nodes.append(Node(name, val))
        self.steps.append((name, thunk))

    def operand(self, a: Node) -> tuple[Node | Lit, str]:
        """A second operand for ``a``: another value (that broadcasts with it) or a Python number."""
        if self.chance(0.3):
            lit = self.lit(a.val.dtype)
            return lit, lit.text()
        b = self.partner(a)
        b.uses += 1
        return b, b.name

    # ------------------------------------------------------------------ ops: (source text, how to compute it)

    def op_binary(self) -> tuple[str, Thunk]:
        a = self.node()
        b, bt = self.operand(a)
        fn = self.pick(list(BIN_SYMBOL) + ["maximum", "minimum"],
                       [5, 4, 5, 3, 2, 2, 1.5, 1.5, 1.5, 1.5, 1, 1, 2, 2])
        operands, texts = (a, b), (a.name, bt)
        if self.chance(0.3):
            operands, texts = (b, a), (bt, a.name)
        a.uses += 1

        def thunk(get: Getter) -> Val:
            return binary(fn, _get(get, operands[0]), _get(get, operands[1]))

        if fn in ("maximum", "minimum") or (fn == "pow" and self.chance(0.3)):
            return f"tj.{fn}({texts[0]}, {texts[1]})", thunk
        return f"{texts[0]} {BIN_SYMBOL[fn]} {texts[1]}", thunk

    def op_compare(self) -> tuple[str, Thunk]:
        a = self.node()
        b, bt = self.operand(a)
        fn = self.pick(list(CMP_SYMBOL))
        a.uses += 1
        if self.chance(0.3):
            return f"{bt} {CMP_SYMBOL[fn]} {a.name}", lambda get: compare(fn, _get(get, b), get(a))
        return f"{a.name} {CMP_SYMBOL[fn]} {bt}", lambda get: compare(fn, get(a), _get(get, b))

    def op_where(self) -> tuple[str, Thunk]:
        c = self.node(lambda n: n.val.dtype == BOOL) if self.chance(0.7) else self.node()
        ops: list[tuple[Node | Lit, str]] = []
        for _ in range(2):
            if self.chance(0.35):
                lit = self.lit(None)
                ops.append((lit, lit.text()))
            else:
                n = self.partner(c)
                n.uses += 1
                ops.append((n, n.name))
        c.uses += 1
        return (f"tj.where({c.name}, {ops[0][1]}, {ops[1][1]})",
                lambda get: where(get(c), _get(get, ops[0][0]), _get(get, ops[1][0])))

    def op_unary(self) -> tuple[str, Thunk]:
        a = self.node()
        fn = self.pick(["neg", "invert", "abs", "floor", "ceil", *MATH],
                       [3, 2, 2, 1.5, 1.5, 2, 1, 1.5, 1, 1.5, 1, 1, 1, 1.5, 1, 1.5])
        a.uses += 1

        def thunk(get: Getter) -> Val:
            return unary(fn, get(a))

        if fn == "neg":
            return f"-{a.name}", thunk
        if fn == "invert":
            return f"~{a.name}", thunk
        if fn == "abs" and self.chance(0.5):
            return f"abs({a.name})", thunk
        return f"tj.{fn}({a.name})", thunk

    def op_astype(self) -> tuple[str, Thunk]:
        a = self.node()
        dt = self.dtype()
        a.uses += 1
        form = self.pick([f"{a.name}.astype({DTYPE_TEXT[dt]})", f"tj.astype({a.name}, {DTYPE_TEXT[dt]})",
                          f"{DTYPE_TEXT[dt]}({a.name})"])
        return form, lambda get: cast(get(a), dt)

    def op_reduce(self) -> tuple[str, Thunk]:
        a = self.node()
        nd = len(a.val.shape)
        fn = self.pick(["sum", "max", "min", "prod", "argmax", "argmin"], [4, 2, 2, 1, 1.5, 1.5])
        axis: int | tuple[int, ...] | None = None
        if nd and self.chance(0.75):
            axis = int(self.rng.integers(-nd, nd))
            if nd > 1 and fn not in ("argmax", "argmin") and self.chance(0.25):
                axis = tuple(int(i) for i in self.rng.permutation(nd)[: int(self.rng.integers(1, nd + 1))])
        keepdims = self.chance(0.3)
        a.uses += 1

        def thunk(get: Getter) -> Val:
            if fn in ("argmax", "argmin"):
                assert not isinstance(axis, tuple)
                return argreduce(fn, get(a), axis, keepdims)
            return reduce(fn, get(a), axis, keepdims)

        args = [] if axis is None else [f"axis={axis}" if self.chance(0.6) else str(axis)]
        if keepdims:
            args.append("keepdims=True")
        if self.chance(0.4):
            return f"{a.name}.{fn}({', '.join(args)})", thunk
        return f"tj.{fn}({', '.join([a.name, *args])})", thunk

    def op_cumsum(self) -> tuple[str, Thunk]:
        a = self.node(lambda n: len(n.val.shape) > 0)
        nd = len(a.val.shape)
        axis = int(self.rng.integers(-nd, nd))
        a.uses += 1

        def thunk(get: Getter) -> Val:
            return cumsum(get(a), axis)

        if axis == 0 and self.chance(0.3):
            return f"tj.cumsum({a.name})", thunk
        return (f"{a.name}.cumsum({axis})" if self.chance(0.4) else f"tj.cumsum({a.name}, axis={axis})"), thunk

    def op_shape(self) -> tuple[str, Thunk]:
        a = self.node()
        shape, nd = a.val.shape, len(a.val.shape)
        kind = self.pick(["reshape", "transpose", "expand", "broadcast"], [3, 2 if nd >= 2 else 0, 3, 3])
        a.uses += 1
        if kind == "reshape":
            dims = self.factor(math.prod(shape))
            shown = list(map(str, dims))
            if len(dims) > 1 and self.chance(0.3):
                shown[int(self.rng.integers(0, len(dims)))] = "-1"

            def thunk(get: Getter) -> Val:
                return reshape(get(a), dims)

            if self.chance(0.4) and len(dims) > 1:
                return f"{a.name}.reshape({', '.join(shown)})", thunk
            return f"tj.reshape({a.name}, ({', '.join(shown)}{',' if len(dims) == 1 else ''}))", thunk
        if kind == "transpose":
            perm = tuple(int(p) for p in self.rng.permutation(nd))

            def thunk(get: Getter) -> Val:
                return transpose(get(a), perm)

            if perm == tuple(reversed(range(nd))) and self.chance(0.5):
                return (f"{a.name}.T" if self.chance(0.5) else f"tj.transpose({a.name})"), thunk
            if self.chance(0.3):
                return f"{a.name}.transpose({', '.join(map(str, perm))})", thunk
            return f"tj.transpose({a.name}, {_shape_text(perm)})", thunk
        if kind == "expand":
            if nd >= MAX_RANK:
                raise Reject("rank limit")
            pos = int(self.rng.integers(0, nd + 1))
            new = shape[:pos] + (1,) + shape[pos:]

            def thunk(get: Getter) -> Val:
                return reshape(get(a), new)

            style = self.pick(["fn", "index", "ellipsis"])
            if style == "fn":
                axis = pos if self.chance(0.7) else pos - nd - 1
                return f"tj.expand_dims({a.name}, {axis})", thunk
            if style == "ellipsis" and pos == nd:
                return f"{a.name}[..., None]", thunk
            items = [":"] * nd
            items.insert(pos, "None")
            while items and items[-1] == ":" and self.chance(0.5):
                items.pop()
            return f"{a.name}[{', '.join(items)}]", thunk
        target = [self.pow2(4) if s == 1 else s for s in shape]
        if len(target) < MAX_RANK and self.chance(0.3):
            target.insert(0, self.pow2(3))
        to = check_shape(tuple(target))
        return f"tj.broadcast_to({a.name}, {_shape_text(to) if to else '()'})", lambda get: expand(get(a), to)

    def factor(self, size: int) -> tuple[int, ...]:
        """A random shape of ``size`` elements (powers of two, rank 1 to 3)."""
        bits = size.bit_length() - 1
        rank = int(self.rng.integers(1, MAX_RANK + 1))
        cuts = sorted(int(c) for c in self.rng.integers(0, bits + 1, rank - 1))
        edges = [0, *cuts, bits]
        return tuple(2 ** (edges[i + 1] - edges[i]) for i in range(rank))

    def op_create(self) -> tuple[str, Thunk]:
        kind = self.pick(["arange", "full", "zeros", "bid"], [4, 3, 1, 1])
        g = self.blocks
        if kind == "bid":
            return "tj.bid(0)", lambda get: Val("int32", np.arange(g))
        if kind == "arange":
            n = int(self.pick([1, 1, self.C, self.R, 2, 4, 8, 16, 32]))
            dt = "int32" if self.chance(0.6) else self.dtype()
            text = f"tj.arange({n})" if dt == "int32" and self.chance(0.7) else f"tj.arange({n}, {DTYPE_TEXT[dt]})"
            how = self.pick(["row", "col", "broadcast", "plain"], [3, 2, 2, 2])
            if how == "row":
                return f"{text}[None, :]", lambda get: reshape(arange(n, dt, g), (1, n))
            if how == "col":
                return f"{text}[:, None]", lambda get: reshape(arange(n, dt, g), (n, 1))
            if how == "broadcast":
                target = (self.pow2(3), n) if n > 1 else (self.pow2(5),)
                return (f"tj.broadcast_to({text}, {_shape_text(target)})",
                        lambda get: expand(arange(n, dt, g), check_shape(target)))
            return text, lambda get: arange(n, dt, g)
        shape = self.tile_shape()
        if kind == "zeros":
            word = self.pick(["zeros", "ones"])
            dt = self.dtype() if self.chance(0.7) else None
            lit = Lit(0 if word == "zeros" else 1)
            return (f"tj.{word}({_shape_text(shape)}{'' if dt is None else ', ' + DTYPE_TEXT[dt]})",
                    lambda get: full(shape, lit, dt or "float32", g))
        dt = self.dtype() if self.chance(0.5) else None
        dt_text = "" if dt is None else ", " + DTYPE_TEXT[dt]
        scalars = [n for n in self.nodes if n.val.shape == ()]
        if scalars and self.chance(0.3):
            s = self.pick(scalars)
            s.uses += 1
            return f"tj.full({_shape_text(shape)}, {s.name}{dt_text})", lambda get: full(shape, get(s), dt, g)
        lit = self.lit(None)
        return f"tj.full({_shape_text(shape)}, {lit.text()}{dt_text})", lambda get: full(shape, lit, dt, g)

    # ------------------------------------------------------------------ the program

    def build(self) -> Program:
        for k in range(int(self.rng.integers(1, 5))):
            self.add_input(k)
        ops = [_Op(30, self.op_binary), _Op(8, self.op_compare), _Op(7, self.op_where), _Op(12, self.op_unary),
               _Op(9, self.op_astype), _Op(10, self.op_reduce), _Op(3, self.op_cumsum), _Op(10, self.op_shape),
               _Op(7, self.op_create)]
        target = int(self.rng.integers(4, 13))
        made = tries = 0
        while made < target and tries < 40 * target:
            tries += 1
            op = self.pick(ops, [o.weight for o in ops])
            try:
                self.emit(*op.build())
            except (Invalid, Reject):
                continue
            made += 1
        outputs, expected, stores = self.stores()
        name = f"fuzz_{self.seed}"
        params = ", ".join([b.name for b in self.inputs] + [b.name for b in outputs])
        body = ["b = tj.bid(0)", *self.lines, *stores]
        source = "import tilejit as tj\n\n\n@tj.kernel\ndef {}({}):\n{}\n".format(
            name, params, "\n".join("    " + line for line in body))
        loads = {n.name: n.val for n in self.nodes if n.name.startswith("t")}
        return Program(self.seed, name, source, self.blocks, self.inputs, outputs, expected, loads, self.steps,
                       self.store_steps)

    def stores(self) -> tuple[list[Buffer], list[Expect], list[str]]:
        """Store the values nothing used (the latest first, at most 4), else the latest ones."""
        computed = [n for n in self.nodes if n.name.startswith("v")] or self.nodes
        order = sorted(computed, key=lambda n: (n.uses > 0, -self.nodes.index(n)))
        unused = sum(n.uses == 0 for n in computed)
        chosen = order[: min(4, max(unused, int(self.rng.integers(1, 3))))]
        outputs, expected, lines = [], [], []
        for k, node in enumerate(chosen):
            dt = node.val.dtype
            if self.chance(0.15):
                other = self.dtype()  # the store converts to the array's dtype
                try:
                    cast(node.val, other)
                    dt = other
                except (Invalid, Reject):
                    pass
            val = cast(node.val, dt)
            rank = max(1, len(val.shape))
            tile = val.shape or (1,)
            bdim = int(self.rng.integers(0, rank))
            shape = []
            for d, t in enumerate(tile):
                full_n = self.blocks * t if d == bdim else t
                n = full_n + int(self.rng.integers(1, 3)) if self.chance(0.12) else \
                    full_n - int(self.rng.integers(0, t))
                shape.append(max(1, n))
            value, err, written = store(val, tuple(shape), bdim)
            phys_shape, view = self.layout(tuple(shape))
            outputs.append(Buffer(f"o{k}", dt, poison(phys_shape, dt), view))
            expected.append(Expect(value, err, written))
            self.store_steps.append((node.name, dt, tuple(shape), bdim))
            idx = ["b" if d == bdim else "0" for d in range(rank)]
            idx_text = f"({idx[0]},)" if rank == 1 else f"({', '.join(idx)})"
            lines.append(f"tj.store(o{k}, index={idx_text}, tile={node.name})")
        return outputs, expected, lines


def _moved(x: Val, rng: np.random.Generator) -> Val:
    """``x`` with each float element moved to a random value of its dtype within its error bound."""
    if x.dtype not in FLOATS or not (x.err > 0).any():
        return x
    xs, e = x.f64(), x.err
    u = np.where(rng.random(xs.shape) < 0.3, rng.choice([-0.999, 0.999], xs.shape), rng.uniform(-1, 1, xs.shape))
    with np.errstate(invalid="ignore", over="ignore"):
        moved = round_to(xs + u * e, x.dtype)
        inside = np.abs(moved.astype(F64) - xs) <= e
    return Val(x.dtype, np.where(inside & (e > 0), moved, x.v))


def generate(seed: int) -> Program:
    """The program of ``seed`` (the same on every machine: numpy's PCG64 streams are portable)."""
    return _Generator(seed).build()


# ==================================================================================== checking results


def _as_unsigned(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def check(out: Buffer, want: Expect, got: np.ndarray, limit: int = 6) -> list[str]:
    """Differences between a device buffer read back (``got``, raw elements) and what the model says it
    must hold: the poison outside the view and in unwritten elements, the model's values (within their
    error bounds; exact ones bit for bit, but NaN equals NaN) where the kernel stored."""
    problems: list[str] = []
    dt = out.dtype
    bits, before = _as_unsigned(np.ascontiguousarray(got)), _as_unsigned(out.phys)
    outside = np.ones(out.phys.shape, bool)
    outside[out.view] = False
    for idx in np.argwhere(outside & (bits != before))[:limit]:
        problems.append(f"{out.name}: element {tuple(int(i) for i in idx)} of the buffer, outside the array, "
                        f"was overwritten")
    vbits, vbefore = bits[out.view], before[out.view]
    for idx in np.argwhere(~want.written & (vbits != vbefore))[:limit]:
        problems.append(f"{out.name}{list(map(int, idx))}: written, but no store covers it")
    values = from_bits(got[out.view], dt)
    if dt in FLOATS:
        with np.errstate(invalid="ignore", over="ignore"):  # the poison is a signalling NaN
            g, w = values.astype(F64), want.value.astype(F64)
            close = np.abs(g - w) <= want.err
        assert want.err is not None
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        same &= ~((g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w)))
        # no computation makes the poison's NaN payload: an element holding it was not written
        ok = np.where(want.err == 0, same, close) & (vbits != vbefore)
    elif dt == BOOL:
        ok = vbits == want.value.astype(np.uint8)  # a byte other than 0 or 1 is not a bool the kernel wrote
    else:
        ok = values == want.value
    unwritten = want.written & (vbits == vbefore)
    for idx in np.argwhere(want.written & ~ok)[:limit]:
        i = tuple(int(k) for k in idx)
        tol = "" if want.err is None else f" (error bound {want.err[i]:.3g})"
        if dt in FLOATS and 0 < abs(float(want.value[i])) < NORMAL[dt]:
            tol += ", a subnormal"
        what = "was not written (still poison)" if unwritten[i] else f"is {values[i]!r}"
        problems.append(f"{out.name}{list(i)} {what}, the model says {want.value[i]!r}{tol}")
    bad = int((want.written & ~ok).sum())
    if bad > limit:
        problems.append(f"{out.name}: {bad} wrong elements in all")
    return problems


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["0"]:
        prog = generate(int(arg))
        print(prog.report())
        for buf in prog.inputs:
            values = from_bits(buf.phys[buf.view], buf.dtype)
            print(f"{buf.name}: {buf.dtype} view {buf.view} of {buf.phys.shape}:\n{values}")
        for buf, exp in zip(prog.outputs, prog.expected):
            print(f"{buf.name}: {buf.dtype} view {buf.view} of {buf.phys.shape}, model:\n"
                  f"{np.where(exp.written, exp.value, 0)}\nerror bounds:\n{exp.err}")
