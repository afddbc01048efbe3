"""Lowering rules for values from nothing (block ids, ranges, constants, array dims), elementwise math,
comparisons, select, casts and shape ops. Each computes what the CUDA backend computes (its tables.py and
math.cuh): wrapping integers, Python floor division, NaN-propagating maximum, 16-bit floats computed in f32
and rounded once, float to integer casts that saturate with NaN giving 0."""

from __future__ import annotations

import math

from tilejit.backends.tileir.lower import erf as _erf
from tilejit.backends.tileir.lower.core import I32, Lowerer, rule, unsupported
from tilejit.backends.tileir.module import Scalar, Tile, TOp, TValue, constant_bytes
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Op
from tilejit.language.ir.types import DType, TileType, float32

_FLOAT_BIN: dict[str, str] = {"add": "addf", "sub": "subf", "mul": "mulf"}
_INT_BIN: dict[str, str] = {"add": "addi", "sub": "subi", "mul": "muli"}
_BITWISE: dict[str, str] = {"and": "andi", "or": "ori", "xor": "xori"}
#: bool + - * and maximum/minimum are logical: or, xor (``!=``), and; or, and.
_BOOL_BIN: dict[str, str] = {"add": "ori", "sub": "xori", "mul": "andi", "maximum": "ori", "minimum": "andi"}
#: Float math computed in the compute type (f32 for 16-bit floats): fn -> (Tile IR op, its attributes). The
#: ``full`` modes are the CUDA Math API functions the CUDA backend calls (expf, tanhf, ...); nothing flushes.
_FLOAT_MATH: dict[str, tuple[str, dict[str, object]]] = {
    "exp": ("exp", {"rounding": "full"}), "exp2": ("exp2", {}), "log": ("log", {}), "log2": ("log2", {}),
    "sqrt": ("sqrt", {"rounding": "nearest_even"}), "rsqrt": ("rsqrt", {}), "sin": ("sin", {}),
    "cos": ("cos", {}), "tanh": ("tanh", {"rounding": "full"}), "sinh": ("sinh", {}), "cosh": ("cosh", {}),
}
#: The IR's roundings (``ops.ROUNDINGS``) as Tile IR names them.
ROUNDING: dict[str, str] = {
    "rn": "nearest_even", "rz": "zero", "rm": "negative_inf", "rp": "positive_inf", "approx": "approx", "full": "full",
}
#: Unary fns that leave an integer or bool tile unchanged (numpy 2's floor/ceil; abs of unsigned and bool).
_IDENTITY_UNARY = ("floor", "ceil")
PREDICATES: dict[str, str] = {
    "eq": "equal", "ne": "not_equal", "lt": "less_than", "le": "less_than_or_equal", "gt": "greater_than",
    "ge": "greater_than_or_equal",
}
F32 = Scalar("f32")
BOOL = Scalar("i1")
FLOAT_BITS: dict[str, int] = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


# ------------------------------------------------------------------ helpers shared by the rules


def kind(dtype: DType) -> str:
    """The CUDA backend's table kind of ``dtype``: 'b' bool, 'f' float, 'i' signed, 'u' unsigned."""
    return "b" if dtype.is_bool else "f" if dtype.is_float else "i" if dtype.is_signed else "u"


def like(x: TValue, elem: Scalar) -> Tile:
    """A tile type of ``x``'s shape with element ``elem``."""
    assert isinstance(x.type, Tile)
    return Tile(elem, x.type.shape)


def elem_of(x: TValue) -> Scalar:
    """The element type of tile value ``x``."""
    assert isinstance(x.type, Tile) and isinstance(x.type.elem, Scalar)
    return x.type.elem


def new(lo: Lowerer, op: Op, name: str, t: Tile, operands: list[TValue], **attrs: object) -> TValue:
    """Emit Tile IR op ``name`` for ``op`` with one fresh result of type ``t``; the result."""
    r = TValue(t)
    lo.emit(name, [r], list(operands), op, **attrs)
    return r


def const(lo: Lowerer, op: Op, value: object, t: Tile) -> TValue:
    """A constant tile of type ``t`` with every element ``value``."""
    assert isinstance(t.elem, Scalar)
    return new(lo, op, "constant", t, [], data=constant_bytes(value, t.elem), value=value)


def splat(lo: Lowerer, op: Op, value: object, like_x: TValue) -> TValue:
    """A constant of ``like_x``'s type with every element ``value``."""
    return const(lo, op, value, like(like_x, elem_of(like_x)))


def fconvert(lo: Lowerer, op: Op, x: TValue, elem: Scalar) -> TValue:
    """Float ``x`` as float element type ``elem`` (rounded to nearest even; ``x`` itself when it already is)."""
    if elem_of(x) == elem:
        return x
    return new(lo, op, "ftof", like(x, elem), [x], rounding="nearest_even")


def compute_elem(elem: Scalar) -> Scalar:
    """The element type float arithmetic on ``elem`` happens in: 16-bit floats compute in f32."""
    return F32 if elem.name in ("f16", "bf16") else elem


def cmp(lo: Lowerer, op: Op, fn: str, x: TValue, y: TValue, signed: bool = True) -> TValue:
    """``x fn y`` as an i1 tile with C++'s answer for NaN (false, except ``!=`` which is true)."""
    t = like(x, BOOL)
    if elem_of(x).name in FLOAT_BITS:
        ordering = "unordered" if fn == "ne" else "ordered"
        return new(lo, op, "cmpf", t, [x, y], predicate=PREDICATES[fn], comparison=ordering)
    return new(lo, op, "cmpi", t, [x, y], predicate=PREDICATES[fn], signedness="signed" if signed else "unsigned")


def select(lo: Lowerer, op: Op, c: TValue, x: TValue, y: TValue) -> TValue:
    """``c ? x : y``."""
    return new(lo, op, "select", x.type, [c, x, y])  # type: ignore[arg-type]


def fbin(lo: Lowerer, op: Op, name: str, x: TValue, y: TValue, rounding: str = "nearest_even") -> TValue:
    """A float ``addf``/``subf``/``mulf``/``divf``, rounded once (no flush to zero)."""
    return new(lo, op, name, x.type, [x, y], rounding=rounding)  # type: ignore[arg-type]


def ibin(lo: Lowerer, op: Op, name: str, x: TValue, y: TValue, **attrs: object) -> TValue:
    """An integer op of two operands (``addi``... with wrapping overflow unless ``attrs`` say otherwise)."""
    if name in ("addi", "subi", "muli", "shli"):
        attrs.setdefault("overflow", "none")
    return new(lo, op, name, x.type, [x, y], **attrs)  # type: ignore[arg-type]


def set_result(lo: Lowerer, op: Op, r: TValue) -> None:
    """Record ``r`` as the lowering of ``op.result`` (named after it)."""
    r.name = op.result.name
    lo.vals[op.result] = r


def zero_with_sign_of(lo: Lowerer, op: Op, x: TValue) -> TValue:
    """``copysign(0, x)`` for float ``x``: its sign bit alone, through its integer bits."""
    e = elem_of(x)
    width = FLOAT_BITS[e.name]
    bits = Scalar(f"i{width}")
    xi = new(lo, op, "bitcast", like(x, bits), [x])
    mask = const(lo, op, -(1 << (width - 1)), like(x, bits))
    return new(lo, op, "bitcast", like(x, e), [new(lo, op, "andi", like(x, bits), [xi, mask])])


# ------------------------------------------------------------------ values from nothing


def block_ids(lo: Lowerer, op: Op) -> list[TValue]:
    """This block's index along x, y and z: one ``get_tile_block_id`` at the top of the entry, made on first use."""
    if not lo.block_ids:
        lo.block_ids = [TValue(I32, f"bid_{a}") for a in "xyz"]
        lo.prologue.append(TOp("get_tile_block_id", lo.block_ids, [], {}, op.loc))
    return lo.block_ids


@rule(O.BlockIdOp)
def block_id(lo: Lowerer, op: O.BlockIdOp) -> None:
    """``bid(axis)``: one ``get_tile_block_id`` at the top of the entry serves every axis."""
    lo.vals[op.result] = block_ids(lo, op)[op.axis]


@rule(O.NumBlocksOp)
def num_blocks(lo: Lowerer, op: O.NumBlocksOp) -> None:
    """``num_blocks(axis)``: one ``get_num_tile_blocks`` at the top of the entry."""
    if not lo.grid:
        lo.grid = [TValue(I32, f"num_blocks_{a}") for a in "xyz"]
        lo.prologue.append(TOp("get_num_tile_blocks", lo.grid, [], {}, op.loc))
    lo.vals[op.result] = lo.grid[op.axis]


@rule(O.ArangeOp)
def arange(lo: Lowerer, op: O.ArangeOp) -> None:
    """``arange(n)``: ``iota``; a float range converts an i32 ``iota`` (16-bit floats through f32, as
    the CUDA backend's ``tj::cast`` of the index does)."""
    r = lo.result(op)
    assert isinstance(r.type, Tile)
    elem = elem_of(r)
    if elem.name.startswith("i"):
        lo.emit("iota", [r], [], op)
        return
    idx = new(lo, op, "iota", Tile(I32.elem, r.type.shape), [])
    f = new(lo, op, "itof", like(idx, compute_elem(elem)), [idx], signedness="signed", rounding="nearest_even")
    set_result(lo, op, fconvert(lo, op, f, elem))


@rule(O.ArrayDimOp)
def array_dim(lo: Lowerer, op: O.ArrayDimOp) -> None:
    """An array's shape or stride: the entry parameter that carries it."""
    _, shape, strides = lo.arrays[op.array]
    lo.vals[op.result] = (shape if op.which == "shape" else strides)[op.axis]


@rule(O.ConstantOp)
def constant(lo: Lowerer, op: O.ConstantOp) -> None:
    """A constant tile: ``constant`` with one element of data (a splat)."""
    r = lo.result(op)
    assert isinstance(r.type, Tile) and isinstance(r.type.elem, Scalar)
    lo.emit("constant", [r], [], op, data=constant_bytes(op.value, r.type.elem), value=op.value)


@rule(O.AssumeOp)
def assume(lo: Lowerer, op: O.AssumeOp) -> None:
    """The user's facts (``tj.multiple_of``, ``tj.max_contiguous``) as Tile IR's ``assume div_by<n>``, with
    ``every <runs> along <last axis>`` for runs of consecutive values: the same promise in Tile IR's words."""
    t = op.x.type
    assert isinstance(t, TileType)
    pred: tuple[object, ...] = ("div_by", op.div_by)
    if op.contiguous > 1:
        pred += (op.contiguous, t.ndim - 1)
    r = lo.result(op)
    lo.emit("assume", [r], [lo.value(op.x)], op, predicate=pred)


# ------------------------------------------------------------------ unary

def division_rounding(x: TValue) -> str:
    """``divf``'s rounding for ``/`` of ``x``'s float type: ``full`` (2 ulp, what GPU compilers use without
    -prec-div) for float32, IEEE for float64."""
    return "full" if elem_of(x) == F32 else "nearest_even"


def _sigmoid(lo: Lowerer, op: Op, x: TValue) -> TValue:
    """tj::sigmoid: ``e = exp(-|x|)``, then ``(x < 0 ? e : 1) / (1 + e)`` divided as ``/`` divides (float32:
    ``full``, 2 ulp, as the CUDA backend's div.full.f32; float64: IEEE)."""
    e = new(lo, op, "exp", x.type, [new(lo, op, "negf", x.type, [new(lo, op, "absf", x.type, [x])])],  # type: ignore[arg-type]
            rounding="full")
    one = splat(lo, op, 1.0, x)
    num = select(lo, op, cmp(lo, op, "lt", x, splat(lo, op, 0.0, x)), e, one)
    return fbin(lo, op, "divf", num, fbin(lo, op, "addf", one, e), division_rounding(x))


class _ErfMath:
    """lower/erf.py's arithmetic as Tile IR ops on tiles like ``x`` (IEEE-rounded, no flush to zero)."""

    def __init__(self, lo: Lowerer, op: Op, x: TValue) -> None:
        self.lo, self.op, self.x = lo, op, x
        self.consts: dict[float, TValue] = {}
        self.width = FLOAT_BITS[elem_of(x).name]
        self.bits = Scalar(f"i{self.width}")

    def const(self, value: float) -> TValue:
        """A splat of ``value`` (one per value)."""
        if value not in self.consts:
            self.consts[value] = splat(self.lo, self.op, value, self.x)
        return self.consts[value]

    def add(self, x: TValue, y: TValue) -> TValue:
        """``addf``."""
        return fbin(self.lo, self.op, "addf", x, y)

    def sub(self, x: TValue, y: TValue) -> TValue:
        """``subf``."""
        return fbin(self.lo, self.op, "subf", x, y)

    def mul(self, x: TValue, y: TValue) -> TValue:
        """``mulf``."""
        return fbin(self.lo, self.op, "mulf", x, y)

    def div(self, x: TValue, y: TValue) -> TValue:
        """``divf`` rounded to nearest (IEEE, as the C sources divide)."""
        return fbin(self.lo, self.op, "divf", x, y)

    def neg(self, x: TValue) -> TValue:
        """``negf``."""
        return new(self.lo, self.op, "negf", x.type, [x])  # type: ignore[arg-type]

    def abs(self, x: TValue) -> TValue:
        """``absf``."""
        return new(self.lo, self.op, "absf", x.type, [x])  # type: ignore[arg-type]

    def exp(self, x: TValue) -> TValue:
        """``exp rounding<full>`` (expf / exp of the CUDA Math API)."""
        return new(self.lo, self.op, "exp", x.type, [x], rounding="full")  # type: ignore[arg-type]

    def lt(self, x: TValue, y: TValue) -> TValue:
        """``cmpf less_than ordered``."""
        return cmp(self.lo, self.op, "lt", x, y)

    def ge(self, x: TValue, y: TValue) -> TValue:
        """``cmpf greater_than_or_equal ordered``."""
        return cmp(self.lo, self.op, "ge", x, y)

    def select(self, c: TValue, x: TValue, y: TValue) -> TValue:
        """``select``."""
        return select(self.lo, self.op, c, x, y)

    def _int(self, x: TValue) -> TValue:
        """The encoding of float ``x`` as an integer tile."""
        return new(self.lo, self.op, "bitcast", like(x, self.bits), [x])

    def clear_low_bits(self, x: TValue, n: int) -> TValue:
        """``x`` with its low ``n`` encoding bits cleared (``andi`` of the bits)."""
        r = ibin(self.lo, self.op, "andi", self._int(x), const(self.lo, self.op, -(1 << n), like(x, self.bits)))
        return new(self.lo, self.op, "bitcast", like(x, elem_of(x)), [r])

    def copysign(self, x: TValue, s: TValue) -> TValue:
        """``x | (s & sign bit)`` on the encodings (``x``'s sign bit is clear)."""
        sign = const(self.lo, self.op, -(1 << (self.width - 1)), like(x, self.bits))
        r = ibin(self.lo, self.op, "ori", self._int(x), ibin(self.lo, self.op, "andi", self._int(s), sign))
        return new(self.lo, self.op, "bitcast", like(x, elem_of(x)), [r])


def fast_math(op: O.UnaryOp | O.BinaryOp, attrs: dict[str, object]) -> dict[str, object]:
    """``attrs`` of a float op with ``op``'s fast-math options (a rounding, flush to zero) in place of defaults."""
    out = dict(attrs)
    if op.rounding:
        out["rounding"] = ROUNDING[op.rounding]
    if op.ftz:
        out["ftz"] = True
    return out


def _atan2(lo: Lowerer, op: Op, y: TValue, x: TValue) -> TValue:
    """``atan2(y, x)``: Tile IR's ``atan2`` (the arc tangent of its first operand over its second)."""
    return new(lo, op, "atan2", y.type, [y, x])  # type: ignore[arg-type]


def _composed(lo: Lowerer, op: Op, fn: str, x: TValue) -> TValue:
    """The float fns Tile IR has no op for, from those it has (``x`` in its compute type), each within a few ulp
    of the CUDA Math API function: atan as ``atan2(x, 1)``; asin and acos as ``atan2`` of ``x`` and
    ``sqrt((1 - x) (1 + x))``; log1p and expm1 by Kahan's corrections, ``log(u) * (x / (u - 1))`` with
    ``u = 1 + x`` and ``(u - 1) * (x / log(u))`` with ``u = exp(x)``, exact where ``u`` rounds to 1."""
    one = splat(lo, op, 1.0, x)
    if fn == "atan":
        return _atan2(lo, op, x, one)
    if fn in ("asin", "acos"):
        s = new(lo, op, "sqrt", x.type, [fbin(lo, op, "mulf", fbin(lo, op, "subf", one, x),  # type: ignore[arg-type]
                                                fbin(lo, op, "addf", one, x))], rounding="nearest_even")
        return _atan2(lo, op, x, s) if fn == "asin" else _atan2(lo, op, s, x)
    inf = splat(lo, op, math.inf, x)
    if fn == "log1p":
        u = fbin(lo, op, "addf", one, x)
        d = fbin(lo, op, "subf", u, one)
        r = fbin(lo, op, "mulf", new(lo, op, "log", x.type, [u]), fbin(lo, op, "divf", x, d))  # type: ignore[arg-type]
        r = select(lo, op, cmp(lo, op, "eq", d, splat(lo, op, 0.0, x)), x, r)
        return select(lo, op, cmp(lo, op, "eq", x, inf), x, r)
    assert fn == "expm1"
    u = new(lo, op, "exp", x.type, [x], rounding="full")  # type: ignore[arg-type]
    um1 = fbin(lo, op, "subf", u, one)
    r = fbin(lo, op, "mulf", um1, fbin(lo, op, "divf", x, new(lo, op, "log", x.type, [u])))  # type: ignore[arg-type]
    r = select(lo, op, cmp(lo, op, "eq", u, one), x, r)
    r = select(lo, op, cmp(lo, op, "eq", um1, splat(lo, op, -1.0, x)), um1, r)
    return select(lo, op, cmp(lo, op, "eq", u, inf), u, r)


_COMPOSED = ("atan", "asin", "acos", "log1p", "expm1")


def _predicate(lo: Lowerer, op: Op, fn: str, x: TValue) -> TValue:
    """isnan (``x != x``), isinf (``|x| == inf``), signbit (the encoding, as a signed integer, below 0)."""
    if fn == "isnan":
        return cmp(lo, op, "ne", x, x)
    if fn == "isinf":
        return cmp(lo, op, "eq", new(lo, op, "absf", x.type, [x]), splat(lo, op, math.inf, x))  # type: ignore[arg-type]
    bits = new(lo, op, "bitcast", like(x, Scalar(f"i{FLOAT_BITS[elem_of(x).name]}")), [x])
    return cmp(lo, op, "lt", bits, splat(lo, op, 0, bits))


def _bit_count(lo: Lowerer, op: Op, fn: str, x: TValue) -> TValue:
    """popc (the SWAR sum of bits in ever wider fields) or clz (a binary search for the leading one: shift left
    by half the width while the top half is zero, and so on), on 32- or 64-bit ``x``, as i32."""
    width = int(elem_of(x).name[1:])

    def c(v: int) -> TValue:
        return splat(lo, op, v, x)

    def shr(v: TValue, n: int) -> TValue:
        return ibin(lo, op, "shri", v, c(n), signedness="unsigned")

    ones = (1 << width) - 1
    if fn == "popc":
        m1, m2, m4 = (ones // 3, ones // 5, ones // 17)  # 0x55.., 0x33.., 0x0f..
        v = ibin(lo, op, "subi", x, ibin(lo, op, "andi", shr(x, 1), c(m1)))
        v = ibin(lo, op, "addi", ibin(lo, op, "andi", v, c(m2)), ibin(lo, op, "andi", shr(v, 2), c(m2)))
        v = ibin(lo, op, "andi", ibin(lo, op, "addi", v, shr(v, 4)), c(m4))
        r = shr(ibin(lo, op, "muli", v, c(ones // 255)), width - 8)  # the bytes' sum lands in the top byte
    else:
        r, v, s = c(0), x, width // 2
        while s:
            top_clear = cmp(lo, op, "eq", shr(v, width - s), c(0))
            r = select(lo, op, top_clear, ibin(lo, op, "addi", r, c(s)), r)
            v = select(lo, op, top_clear, ibin(lo, op, "shli", v, c(s)), v)
            s //= 2
        r = select(lo, op, cmp(lo, op, "eq", v, c(0)), ibin(lo, op, "addi", r, c(1)), r)  # x == 0: the width
    if width == 64:
        r = new(lo, op, "trunci", like(r, Scalar("i32")), [r], overflow="none")
    return r


@rule(O.UnaryOp)
def unary(lo: Lowerer, op: O.UnaryOp) -> None:
    """Elementwise ``fn(x)`` as the CUDA backend's UNARY table computes it."""
    dtype = op.x.type.dtype  # type: ignore[attr-defined]
    k, fn = kind(dtype), op.fn
    x = lo.value(op.x)
    if fn == "neg" and k in "iu":
        r = new(lo, op, "negi", x.type, [x], overflow="none")  # type: ignore[arg-type]
    elif fn == "neg" and k == "f":
        r = new(lo, op, "negf", x.type, [x])  # type: ignore[arg-type]
    elif fn in ("not", "invert") and k == "b":
        r = ibin(lo, op, "xori", x, splat(lo, op, True, x))
    elif fn == "not":  # (x == 0) as C++ converts it to the result's type (IR builders keep x's dtype)
        r = cmp(lo, op, "eq", x, splat(lo, op, 0, x))
        out = lo.tile_type(op.result.type, op)
        if out.elem != BOOL:
            to_int = elem_of(TValue(out)).name.startswith("i")
            r = new(lo, op, "exti" if to_int else "itof", out, [r], signedness="unsigned",
                    **({} if to_int else {"rounding": "nearest_even"}))
    elif fn == "invert" and k in "iu":
        r = ibin(lo, op, "xori", x, splat(lo, op, -1, x))
    elif fn == "abs" and k == "f":
        r = new(lo, op, "absf", x.type, [x])  # type: ignore[arg-type]
    elif fn == "abs" and k == "i":
        r = new(lo, op, "absi", x.type, [x])  # type: ignore[arg-type]  # |MIN| wraps to MIN, as tj::abs
    elif (fn == "abs" and k in "ub") or (fn in _IDENTITY_UNARY and k in "iub"):
        lo.vals[op.result] = x
        return
    elif fn in _IDENTITY_UNARY:
        r = new(lo, op, fn, x.type, [x])  # type: ignore[arg-type]
    elif k == "f" and fn in O.PREDICATE_FNS:
        r = _predicate(lo, op, fn, x)
    elif k in "iu" and fn in O.BIT_COUNT_FNS:
        r = _bit_count(lo, op, fn, x)
    elif k == "f" and (fn in _FLOAT_MATH or fn in _COMPOSED or fn == "sigmoid"):
        elem = elem_of(x)
        xc = fconvert(lo, op, x, compute_elem(elem))
        if fn == "sigmoid":
            rc = _sigmoid(lo, op, xc)
        elif fn in _COMPOSED:
            rc = _composed(lo, op, fn, xc)
        else:
            name, attrs = _FLOAT_MATH[fn]
            rc = new(lo, op, name, xc.type, [xc], **fast_math(op, attrs))  # type: ignore[arg-type]
        r = fconvert(lo, op, rc, elem)
    elif fn == "erf" and k == "f":  # no erf op: fdlibm's erf/erff from Tile IR ops (f16/bf16 through f32)
        xc = fconvert(lo, op, x, compute_elem(elem_of(x)))
        r = fconvert(lo, op, _erf.erf(_ErfMath(lo, op, xc), xc, elem_of(xc).name == "f64"), elem_of(x))
    else:
        raise unsupported(op, f"fn='{fn}' on {dtype.name}")
    set_result(lo, op, r)


# ------------------------------------------------------------------ binary


def _int_floordiv_mod(lo: Lowerer, op: Op, fn: str, a: TValue, b: TValue, signed: bool) -> TValue:
    """tj::floordiv / tj::mod on integers: Python's floor semantics, ``x // 0 == x % 0 == 0`` and
    ``MIN // -1`` wrapping to MIN; ``divi``/``remi`` never see a zero or (signed) -1 divisor."""
    sign = "signed" if signed else "unsigned"
    zero, one = splat(lo, op, 0, a), splat(lo, op, 1, a)
    bzero = cmp(lo, op, "eq", b, zero)
    special = bneg1 = bzero
    if signed:
        bneg1 = cmp(lo, op, "eq", b, splat(lo, op, -1, a))
        special = ibin(lo, op, "ori", bzero, bneg1)
    bs = select(lo, op, special, one, b)
    r = ibin(lo, op, "remi", a, bs, signedness=sign)
    if fn == "mod":
        if not signed:
            return r
        # r != 0 and sign(r) != sign(b): r + b
        fix = ibin(lo, op, "andi", cmp(lo, op, "ne", r, zero),
                   ibin(lo, op, "xori", cmp(lo, op, "lt", r, zero), cmp(lo, op, "lt", bs, zero)))
        return select(lo, op, fix, ibin(lo, op, "addi", r, bs), r)
    q = ibin(lo, op, "divi", a, bs, signedness=sign, rounding="zero")
    if signed:
        fix = ibin(lo, op, "andi", cmp(lo, op, "ne", r, zero),
                   ibin(lo, op, "xori", cmp(lo, op, "lt", a, zero), cmp(lo, op, "lt", bs, zero)))
        q = select(lo, op, fix, ibin(lo, op, "subi", q, one), q)
        q = select(lo, op, bneg1, new(lo, op, "negi", a.type, [a], overflow="none"), q)  # type: ignore[arg-type]
    return select(lo, op, bzero, zero, q)


def _float_floordiv_mod(lo: Lowerer, op: Op, fn: str, a: TValue, b: TValue) -> TValue:
    """tj::floordiv / tj::mod on floats: numpy's npy_divmod, step for step (fmod is ``remf``)."""
    m = new(lo, op, "remf", a.type, [a, b])  # type: ignore[arg-type]
    zero = splat(lo, op, 0.0, a)
    mnz = cmp(lo, op, "ne", m, zero)  # NaN != 0, as in C++
    adj = ibin(lo, op, "andi", mnz, ibin(lo, op, "xori", cmp(lo, op, "lt", b, zero), cmp(lo, op, "lt", m, zero)))
    bzero = cmp(lo, op, "eq", b, zero)
    if fn == "mod":
        m1 = select(lo, op, adj, fbin(lo, op, "addf", m, b), select(lo, op, mnz, m, zero_with_sign_of(lo, op, b)))
        return select(lo, op, bzero, m, m1)
    one = splat(lo, op, 1.0, a)
    div = fbin(lo, op, "divf", fbin(lo, op, "subf", a, m), b)
    div = select(lo, op, adj, fbin(lo, op, "subf", div, one), div)
    fd = new(lo, op, "floor", div.type, [div])  # type: ignore[arg-type]
    up = cmp(lo, op, "gt", fbin(lo, op, "subf", div, fd), splat(lo, op, 0.5, a))
    fd = select(lo, op, up, fbin(lo, op, "addf", fd, one), fd)
    q = fbin(lo, op, "divf", a, b)
    fd = select(lo, op, cmp(lo, op, "ne", div, zero), fd, zero_with_sign_of(lo, op, q))
    return select(lo, op, bzero, q, fd)


def _ipow(lo: Lowerer, op: Op, a: TValue, b: TValue, signed: bool) -> TValue:
    """tj::ipow: wrapping power by squaring over every bit of the exponent (unrolled); a negative exponent
    gives 1 for a == 1, +-1 for a == -1 and 0 otherwise."""
    bits = int(elem_of(a).name[1:])
    steps = bits - 1 if signed else bits  # a signed exponent that counts here has its top bit clear
    zero, one = splat(lo, op, 0, a), splat(lo, op, 1, a)
    r, base, e = one, a, b
    for i in range(steps):
        odd = cmp(lo, op, "ne", ibin(lo, op, "andi", e, one), zero)
        r = select(lo, op, odd, ibin(lo, op, "muli", r, base), r)
        if i < steps - 1:
            base = ibin(lo, op, "muli", base, base)
            e = ibin(lo, op, "shri", e, one, signedness="unsigned")
    if not signed:
        return r
    minus_one = splat(lo, op, -1, a)
    odd_b = cmp(lo, op, "ne", ibin(lo, op, "andi", b, one), zero)
    neg = select(lo, op, cmp(lo, op, "eq", a, one), one,
                 select(lo, op, cmp(lo, op, "eq", a, minus_one), select(lo, op, odd_b, minus_one, one), zero))
    return select(lo, op, cmp(lo, op, "lt", b, zero), neg, r)


def _shift(lo: Lowerer, op: Op, fn: str, a: TValue, b: TValue, signed: bool) -> TValue:
    """tj::lshift / tj::rshift: a count < 0 or >= the width gives 0 (-1 for ``>>`` of a negative); the
    Tile IR shift only ever sees counts inside the width."""
    bits = int(elem_of(a).name[1:])
    out = cmp(lo, op, "ge", b, splat(lo, op, bits, a), signed=False)  # a negative count is huge unsigned
    if fn == "rshift" and signed:  # shifting by width - 1 gives the sign fill, 0 or -1
        return ibin(lo, op, "shri", a, select(lo, op, out, splat(lo, op, bits - 1, a), b), signedness="signed")
    zero = splat(lo, op, 0, a)
    count = select(lo, op, out, zero, b)
    if fn == "lshift":
        r = ibin(lo, op, "shli", a, count)
    else:
        r = ibin(lo, op, "shri", a, count, signedness="unsigned")
    return select(lo, op, out, zero, r)


@rule(O.BinaryOp)
def binary(lo: Lowerer, op: O.BinaryOp) -> None:
    """Elementwise binary ops as the CUDA backend's BINARY table computes them."""
    dtype = op.result.type.dtype  # type: ignore[attr-defined]
    k, fn = kind(dtype), op.fn
    x, y = lo.value(op.x), lo.value(op.y)
    signed = k == "i"
    if k == "b" and fn in _BOOL_BIN:
        r = ibin(lo, op, _BOOL_BIN[fn], x, y)
    elif k in "iub" and fn in _BITWISE:
        r = ibin(lo, op, _BITWISE[fn], x, y)
    elif k == "b" and fn == "floordiv":
        r = ibin(lo, op, "andi", x, y)  # b ? a : false
    elif k == "b" and fn == "mod":
        r = splat(lo, op, False, x)
    elif k == "f" and fn in ("maximum", "minimum"):
        r = new(lo, op, "maxf" if fn == "maximum" else "minf", x.type, [x, y], propagate_nan=True)  # type: ignore[arg-type]
    elif k in "iu" and fn in ("maximum", "minimum"):
        r = ibin(lo, op, "maxi" if fn == "maximum" else "mini", x, y, signedness="signed" if signed else "unsigned")
    elif k == "f" and fn in _FLOAT_BIN:
        r = fbin(lo, op, _FLOAT_BIN[fn], x, y)  # a 16-bit result rounded once equals tj's f32 op then cast
    elif k in "iu" and fn in _INT_BIN:
        r = ibin(lo, op, _INT_BIN[fn], x, y)
    elif k == "u" and fn == "mulhi":
        r = ibin(lo, op, "mulhii", x, y)
    elif k in "iu" and fn in ("floordiv", "mod"):
        r = _int_floordiv_mod(lo, op, fn, x, y, signed)
    elif k in "iu" and fn == "pow":
        r = _ipow(lo, op, x, y, signed)
    elif k in "iu" and fn in ("lshift", "rshift"):
        r = _shift(lo, op, fn, x, y, signed)
    elif k == "f" and fn in ("truediv", "floordiv", "mod", "pow", "atan2"):
        elem = elem_of(x)
        xc, yc = fconvert(lo, op, x, compute_elem(elem)), fconvert(lo, op, y, compute_elem(elem))
        if fn == "truediv":  # tj::truediv: div.full.f32 (2 ulp) for f32, IEEE for f64 (or the op's own rounding)
            default = {"rounding": division_rounding(xc)}
            rc = new(lo, op, "divf", xc.type, [xc, yc], **fast_math(op, default))  # type: ignore[arg-type]
        elif fn == "atan2":
            rc = _atan2(lo, op, xc, yc)
        elif fn == "pow":
            rc = new(lo, op, "fpowf", xc.type, [xc, yc])  # type: ignore[arg-type]
        else:
            rc = _float_floordiv_mod(lo, op, fn, xc, yc)
        r = fconvert(lo, op, rc, elem)
    else:
        raise unsupported(op, f"fn='{fn}' on {dtype.name}")
    set_result(lo, op, r)


@rule(O.FmaOp)
def fma(lo: Lowerer, op: O.FmaOp) -> None:
    """``x * y + z`` rounded once: ``fma`` (16-bit floats in f32, then rounded, as the CUDA backend's)."""
    x, y, z = (lo.value(v) for v in (op.x, op.y, op.z))
    elem = elem_of(x)
    xc, yc, zc = (fconvert(lo, op, v, compute_elem(elem)) for v in (x, y, z))
    rc = new(lo, op, "fma", xc.type, [xc, yc, zc], rounding="nearest_even")  # type: ignore[arg-type]
    set_result(lo, op, fconvert(lo, op, rc, elem))


# ------------------------------------------------------------------ compare, select


@rule(O.CompareOp)
def compare(lo: Lowerer, op: O.CompareOp) -> None:
    """``cmpf`` (ordered, except ``!=`` which NaN makes true) or ``cmpi`` (signed or not; bool unsigned)."""
    dtype = op.x.type.dtype  # type: ignore[attr-defined]
    x, y = lo.value(op.x), lo.value(op.y)
    set_result(lo, op, cmp(lo, op, op.fn, x, y, signed=dtype.is_signed))


@rule(O.SelectOp)
def select_op(lo: Lowerer, op: O.SelectOp) -> None:
    """``where(cond, x, y)``: ``select``."""
    operands = [lo.value(op.cond), lo.value(op.x), lo.value(op.y)]
    lo.emit("select", [lo.result(op)], operands, op)


# ------------------------------------------------------------------ casts


def _float_to_int(lo: Lowerer, op: Op, x: TValue, dst: DType) -> TValue:
    """tj::cast float -> int: NaN gives 0; truncate toward zero, saturating at the 32-bit range (64-bit for
    64-bit results; unsigned at 0 and 2**N - 1); 8- and 16-bit results keep the low bits of the 32-bit value.
    ``ftoi`` only ever sees values inside the range (elsewhere it is undefined)."""
    x = fconvert(lo, op, x, compute_elem(elem_of(x)))
    bits = 64 if dst.bits == 64 else 32
    lo_v, hi_v = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if dst.is_signed else (0, 2 ** bits)
    wide = Scalar(f"i{bits}")
    hi_below = math.nextafter(float(hi_v), 0.0)
    if elem_of(x) == F32:
        hi_below = float(hi_v) * (1 - 2.0 ** -24)  # the float32 just below 2**N
    x = select(lo, op, cmp(lo, op, "ne", x, x), splat(lo, op, 0.0, x), x)
    clamped = new(lo, op, "maxf", x.type, [x, splat(lo, op, float(lo_v), x)])  # type: ignore[arg-type]
    clamped = new(lo, op, "minf", x.type, [clamped, splat(lo, op, hi_below, x)])  # type: ignore[arg-type]
    sign = "signed" if dst.is_signed else "unsigned"
    r = new(lo, op, "ftoi", like(x, wide), [clamped], signedness=sign, rounding="nearest_int_to_zero")
    r = select(lo, op, cmp(lo, op, "ge", x, splat(lo, op, float(hi_v), x)), splat(lo, op, hi_v - 1, r), r)
    if dst.bits < bits:
        r = new(lo, op, "trunci", like(r, Scalar(f"i{dst.bits}")), [r], overflow="none")
    return r


@rule(O.CastOp)
def cast(lo: Lowerer, op: O.CastOp) -> None:
    """``astype`` as tj::cast: to bool is ``!= 0`` (NaN is true), bool is 0 or 1, 16-bit floats go through f32
    (an f64 -> f16 cast rounds once, as the CUDA backend's), float -> int as ``_float_to_int``."""
    src, dst = op.x.type, op.result.type
    assert isinstance(src, TileType) and isinstance(dst, TileType)
    t = lo.tile_type(dst, op)
    x = lo.value(op.x)
    s, d = src.dtype, dst.dtype
    assert isinstance(t.elem, Scalar)
    if lo.tile_type(src, op) == t:
        lo.vals[op.result] = x
        return
    if s.is_float8:  # exact in f32, then as from f32
        x, s = fconvert(lo, op, x, F32), float32
    if d.is_float8:  # from f32 in integer ops (lower/float8.py), so as the CUDA backend rounds
        from tilejit.backends.tileir.lower.float8 import to_float8

        f32 = TileType(float32, dst.shape)
        mid = x if s == float32 else _cast_value(lo, op, x, s, float32, lo.tile_type(f32, op))
        set_result(lo, op, to_float8(lo, op, mid, d, t.elem))
        return
    set_result(lo, op, _cast_value(lo, op, x, s, d, t))


def _cast_value(lo: Lowerer, op: O.CastOp, x: TValue, s: DType, d: DType, t: Tile) -> TValue:
    """``x`` (of dtype ``s``) as dtype ``d`` (Tile IR type ``t``), by ``cast``'s rules."""
    assert isinstance(t.elem, Scalar)
    if d.is_bool:
        r = cmp(lo, op, "ne", x, splat(lo, op, 0, x))
    elif s.is_bool and d.is_float:
        r = select(lo, op, x, const(lo, op, 1.0, t), const(lo, op, 0.0, t))
    elif s.is_bool:
        r = new(lo, op, "exti", t, [x], signedness="unsigned")
    elif s.is_float and d.is_float:  # widening is exact; only f64 -> f16 rounds once, the rest go through f32
        direct = d.bits > s.bits or (s.name == "float64" and d.name != "bfloat16")
        r = fconvert(lo, op, x if direct else fconvert(lo, op, x, F32), t.elem)
    elif s.is_int and d.is_float:
        sign = "signed" if s.is_signed else "unsigned"
        f = new(lo, op, "itof", like(x, compute_elem(t.elem)), [x], signedness=sign, rounding="nearest_even")
        r = fconvert(lo, op, f, t.elem)
    elif s.is_float:
        r = _float_to_int(lo, op, x, d)
    elif d.bits > s.bits:
        r = new(lo, op, "exti", t, [x], signedness="signed" if s.is_signed else "unsigned")
    else:
        r = new(lo, op, "trunci", t, [x], overflow="none")
    return r


# ------------------------------------------------------------------ shape


@rule(O.BroadcastOp)
def broadcast(lo: Lowerer, op: O.BroadcastOp) -> None:
    """Broadcast to the result shape (a lower-rank operand is reshaped to rank first)."""
    t = lo.tile_type(op.result.type, op)
    x = lo.value(op.x)
    assert isinstance(x.type, Tile)
    if len(x.type.shape) != len(t.shape):
        ones = TValue(Tile(t.elem, (1,) * len(t.shape)))
        lo.emit("reshape", [ones], [x], op)
        x = ones
    lo.emit("broadcast", [lo.result(op)], [x], op)


@rule(O.ReshapeOp)
def reshape(lo: Lowerer, op: O.ReshapeOp) -> None:
    """``reshape``: the same elements in a new shape."""
    x = lo.value(op.x)
    lo.emit("reshape", [lo.result(op)], [x], op)


@rule(O.PermuteOp)
def permute(lo: Lowerer, op: O.PermuteOp) -> None:
    """``transpose(x, perm)``: ``permute`` (result dimension i is source dimension perm[i], as numpy)."""
    x = lo.value(op.x)
    lo.emit("permute", [lo.result(op)], [x], op, permutation=list(op.perm))


# ------------------------------------------------------------------ slicing and joining


def _extract(lo: Lowerer, op: Op, x: TValue, index: tuple[int, ...], r: TValue) -> TValue:
    """``r`` = block ``index`` (in units of ``r``'s shape) of ``x``: Tile IR's ``extract``, the indices i32
    constants."""
    made = {i: const(lo, op, i, I32) for i in sorted(set(index))}
    lo.emit("extract", [r], [[x, *(made[i] for i in index)]], op)
    return r


@rule(O.ExtractOp)
def extract(lo: Lowerer, op: O.ExtractOp) -> None:
    """``extract`` of one block of the tile, one dim at a time, leading dims first: tileiras 13.5 ran for minutes on
    a kernel with an extract that cut two dims of a large tile (the (1, 1) block at (127, 3) of a (128, 64) tile,
    besides blocks of its rows) and compiled the same block cut in two steps in a second."""
    x = lo.value(op.x)
    rt = op.result.type
    assert isinstance(x.type, Tile) and isinstance(rt, TileType)
    cuts = [d for d, (s, b) in enumerate(zip(x.type.shape, rt.shape)) if s != b]
    if not cuts:
        lo.vals[op.result] = x
    for k, d in enumerate(cuts):
        shape = (*x.type.shape[:d], rt.shape[d], *x.type.shape[d + 1:])
        index = tuple(op.index[d] if e == d else 0 for e in range(len(shape)))
        x = _extract(lo, op, x, index, lo.result(op) if k == len(cuts) - 1 else TValue(Tile(x.type.elem, shape)))


@rule(O.CatOp)
def cat(lo: Lowerer, op: O.CatOp) -> None:
    """``cat`` along the axis."""
    lo.emit("cat", [lo.result(op)], [lo.value(op.x), lo.value(op.y)], op, dim=op.axis)


@rule(O.JoinOp)
def join(lo: Lowerer, op: O.JoinOp) -> None:
    """Each operand reshaped to a last dim of 1, then ``cat`` along it."""
    t = lo.tile_type(op.result.type, op)
    unit = Tile(t.elem, (*t.shape[:-1], 1))
    halves = [new(lo, op, "reshape", unit, [lo.value(v)]) for v in (op.x, op.y)]
    lo.emit("cat", [lo.result(op)], halves, op, dim=len(t.shape) - 1)


@rule(O.SplitOp)
def split(lo: Lowerer, op: O.SplitOp) -> None:
    """Each half an ``extract`` of block 0 or 1 along the last dim (of 2), reshaped to drop it."""
    x = lo.value(op.x)
    assert isinstance(x.type, Tile)
    unit = Tile(x.type.elem, (*x.type.shape[:-1], 1))
    for half, r in enumerate(op.results):
        part = _extract(lo, op, x, (0,) * (len(unit.shape) - 1) + (half,), TValue(unit))
        lo.emit("reshape", [lo.result(op, r)], [part], op)
