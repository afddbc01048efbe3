"""Inserting IR ops at the current block with the current source location, plus the typing
rules every operation shares: weak Python scalars, numpy promotion and broadcasting, casts.

Errors about user values raise ``FrontendError``; the AST handler that is running locates them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import Tile, describe, is_number, shown
from tilejit.language.ir import ops
from tilejit.language.ir.core import UNKNOWN_LOC, Block, Loc, Op, Value
from tilejit.language.ir.passes import round_to_dtype
from tilejit.language.ir.types import (
    ArrayListType,
    ArrayType,
    DType,
    TileType,
    bool_,
    float32,
    int8,
    int32,
    int64,
    promote,
    uint64,
)

OpT = TypeVar("OpT", bound=Op)

#: The roundings each op with fast-math options takes (``rounding_mode=``), the first its default on float32.
ROUNDING_MODES: dict[str, tuple[str, ...]] = {
    "exp": ("full", "approx"), "tanh": ("full", "approx"), "sqrt": ("rn", "rz", "rm", "rp", "approx"),
    "truediv": ("full", "rn", "rz", "rm", "rp", "approx"), "exp2": (), "rsqrt": (),
}


def fast_math(fn: str, dtype: DType, rounding: str | None, ftz: bool) -> tuple[str, bool]:
    """The IR's ``(rounding, ftz)`` for ``tj.<fn>(..., rounding_mode=rounding, flush_to_zero=ftz)`` computed in
    ``dtype`` (the op's own default rounding is ""), or a FrontendError saying which modes and dtypes it takes."""
    modes = ROUNDING_MODES[fn]
    if rounding is not None and rounding not in modes:
        taken = ", ".join(repr(m) for m in modes)
        raise FrontendError(f"tj.{fn}() takes rounding_mode None, {taken}; got {rounding!r}")
    default = "rn" if fn == "truediv" and dtype.bits == 64 else (modes[0] if modes else "")
    mode = "" if rounding in (None, default) else rounding
    if not mode and not ftz:
        return "", False
    allowed = ops.FAST_MATH.get((fn, mode, ftz), ("f32",))
    if dtype.short not in allowed or (fn, mode, ftz) not in ops.FAST_MATH:
        what = " and ".join(x for x in (f"rounding_mode={mode!r}" if mode else "", "flush_to_zero=True" if ftz else "")
                            if x)
        names = " and ".join({"f32": "float32", "f64": "float64"}[d] for d in allowed)
        raise FrontendError(f"tj.{fn}(): {what} is for {names} only, not {dtype.name}"
                            + (" (16-bit floats compute in float32 and round again)" if dtype.bits == 16 else ""))
    return mode, ftz


def no_float8(what: str, *values: object) -> None:
    """A FrontendError when a tile among ``values`` holds 8-bit floats, which ``what`` (arithmetic, a comparison, a
    reduction...) does not take: they are for storage, casts and ``tj.mma``, as 16-bit floats compute in float32."""
    for v in values:
        if isinstance(v, Tile) and v.dtype.is_float8:
            raise FrontendError(f"{what} on {v.dtype.name} tiles is not supported: 8-bit floats are loaded, stored, "
                                "cast and multiplied with tj.mma; convert first, e.g. x.astype(tj.float32)")


def int_range(dtype: DType) -> tuple[int, int]:
    """The inclusive range of an integer (or bool) dtype."""
    if dtype.is_bool:
        return 0, 1
    if dtype.kind == "u":
        return 0, (1 << dtype.bits) - 1
    return -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1


#: the most elements one tile may have (each dimension included): tiles live in registers and
#: local memory, and larger ones make NVRTC run for minutes or overflow its 32-bit indices
MAX_TILE_ELEMENTS = 1 << 20


def is_pow2(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and (n & (n - 1)) == 0


def check_shape(shape: object, what: str) -> tuple[int, ...]:
    """A compile-time tile shape: a tuple (or one int) of powers of two."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, list):
        shape = tuple(shape)
    if isinstance(shape, tuple):
        for k, s in enumerate(shape):
            if isinstance(s, Tile):
                raise FrontendError(
                    f"{what} must be a tuple of compile-time constant ints, but item {k} is a run-time value "
                    f"({describe(s)}); tile shapes are fixed when the kernel compiles (pass sizes as tj.Constant)"
                )
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise FrontendError(f"{what} must be a compile-time constant tuple of ints, got {describe(shape)}")
    bad = [s for s in shape if not is_pow2(s)]
    if bad:
        raise FrontendError(f"{what} {shown(shape)} has a dimension that is not a power of two ({shown(bad[0])}): "
                            "tile dimensions must be powers of two (pad with a larger tile and mask)")
    if sum(s.bit_length() for s in shape) > 4096:  # the product of huge dimensions would be slow to compute
        size: object = "far more"
    else:
        size = 1
        for s in shape:
            size *= s
    if not isinstance(size, int) or size > MAX_TILE_ELEMENTS:
        raise FrontendError(
            f"{what} {shown(shape)} is too large: a tile holds at most {MAX_TILE_ELEMENTS} (2**20) elements, got "
            f"{shown(size) if isinstance(size, int) else size} (split the work over more blocks or a loop of "
            "smaller tiles)"
        )
    return shape


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of shapes, or a FrontendError naming them."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(dims) > 1:
            raise FrontendError(
                "shapes " + ", ".join(str(s) for s in shapes) + " cannot be broadcast together"
            )
        out.append(dims.pop() if dims else 1)
    size = 1
    for d in out:
        size *= d
    if size > MAX_TILE_ELEMENTS:
        raise FrontendError(
            "broadcasting shapes " + ", ".join(str(s) for s in shapes) + f" gives {tuple(out)}, too large: a tile "
            f"holds at most {MAX_TILE_ELEMENTS} (2**20) elements"
        )
    return tuple(out)


def default_dtype(value: object) -> DType:
    """The dtype a lone Python scalar gets: bool, int32 (int64 when too big), float32."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        lo, hi = int_range(int32)
        if lo <= value <= hi:
            return int32
        lo, hi = int_range(int64)
        if lo <= value <= hi:
            return int64
        raise FrontendError(f"the constant {shown(value)} does not fit in int64")
    if isinstance(value, float):
        return float32
    raise FrontendError(f"expected a number, got {describe(value)}")


def join(a: DType, b: DType) -> DType:
    """numpy promotion of two tile dtypes, except that an integer or bool with a float gives the
    float (numpy would widen float32 with int32 to float64, which is never what a GPU kernel wants)."""
    if a.is_float and not b.is_float:
        return a
    if b.is_float and not a.is_float:
        return b
    return promote(a, b)


def common_default(*items: object) -> DType:
    """The dtype joining numbers (weak) and dtypes: used when a constant must become a variable."""
    dtypes = [i for i in items if isinstance(i, DType)]
    numbers = [i for i in items if not isinstance(i, DType)]
    if dtypes:
        dtype = dtypes[0]
        for d in dtypes[1:]:
            dtype = join(dtype, d)
    else:
        dtype = default_dtype(numbers.pop(0))
    for n in numbers:
        dtype = weak_dtype(n, dtype)
    return dtype


def weak_dtype(value: object, other: DType) -> DType:
    """The dtype of ``value (weak Python scalar) op tile-of-other``, per NEP 50 (floats: float32)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        if other.is_bool:
            return default_dtype(value)
        if other.is_int:
            return other
        return other
    if isinstance(value, float):
        return other if other.is_float else float32
    raise FrontendError(f"expected a tile or a number, got {describe(value)}")


def const_value(value: object, dtype: DType) -> bool | int | float:
    """``value`` as an element of ``dtype`` (exact; a FrontendError when it does not fit)."""
    if not is_number(value):
        raise FrontendError(f"expected a number, got {describe(value)}")
    assert isinstance(value, bool | int | float)
    if dtype.is_bool:
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise FrontendError(f"the constant {shown(value)} is not a bool")
    if dtype.is_int:
        if isinstance(value, float):
            if not value.is_integer():
                raise FrontendError(f"the constant {shown(value)} is not an integer, so it cannot be {dtype.name}")
            value = int(value)
        lo, hi = int_range(dtype)
        if not lo <= int(value) <= hi:
            raise FrontendError(f"the constant {shown(value)} does not fit in {dtype.name} ({lo}..{hi})")
        return int(value)
    try:
        f = float(value)
    except OverflowError:
        raise FrontendError(f"the constant {shown(value)} does not fit {dtype.name}") from None
    return round_to_dtype(f, dtype)


class Builder:
    """Appends ops to ``block`` at ``loc`` and implements the typing rules of tile operations."""

    def __init__(self, block: Block, loc: Loc = UNKNOWN_LOC) -> None:
        self.block = block
        self.loc = loc

    @contextmanager
    def at(self, block: Block) -> Iterator[Block]:
        """Temporarily insert into ``block``."""
        saved = self.block
        self.block = block
        try:
            yield block
        finally:
            self.block = saved

    def emit(self, op: OpT) -> OpT:
        op.loc = self.loc
        self.block.append(op)
        return op

    def make(self, cls: type[OpT], result_type: TileType | None, **fields: Any) -> OpT:
        """Emit ``cls(**fields)`` with one result of ``result_type`` (or none)."""
        results = [Value(result_type)] if result_type is not None else []
        return self.emit(cls(results=results, **fields))

    def tile(self, cls: type[Op], result_type: TileType, **fields: Any) -> Tile:
        return Tile(self.make(cls, result_type, **fields).result)

    # ------------------------------------------------------------------ constants and conversions

    def constant(self, value: object, type: TileType) -> Tile:
        return self.tile(ops.ConstantOp, type, value=const_value(value, type.dtype))

    def as_tile(self, v: object, like: DType | None = None) -> Tile:
        """A tile from a tile or a number (weak: it takes ``like``'s dtype when given)."""
        if isinstance(v, Tile):
            return v
        if is_number(v):
            dtype = weak_dtype(v, like) if like is not None else default_dtype(v)
            return self.constant(v, TileType(dtype))
        raise FrontendError(f"expected a tile or a number, got {describe(v)}")

    def cast(self, t: Tile, dtype: DType) -> Tile:
        if t.dtype == dtype:
            return t
        return self.tile(ops.CastOp, t.type.with_dtype(dtype), x=t.value)

    def to_bool(self, t: Tile) -> Tile:
        """Truth value element-wise: ``x != 0`` for non-bool tiles."""
        if t.dtype.is_bool:
            return t
        no_float8("a truth value", t)
        zero = self.constant(0, t.type)
        return self.tile(ops.CompareOp, t.type.with_dtype(bool_), fn="ne", x=t.value, y=zero.value)

    def reshape(self, t: Tile, shape: tuple[int, ...]) -> Tile:
        if t.shape == shape:
            return t
        return self.tile(ops.ReshapeOp, t.type.with_shape(shape), x=t.value)

    def broadcast(self, t: Tile, shape: tuple[int, ...]) -> Tile:
        """numpy broadcast of ``t`` to ``shape`` (leading dims of size 1 added by a reshape)."""
        if t.shape == shape:
            return t
        if broadcast_shapes(t.shape, shape) != shape:
            raise FrontendError(f"cannot broadcast a tile of shape {t.shape} to shape {shape}")
        if t.shape and len(t.shape) < len(shape):
            t = self.reshape(t, (1,) * (len(shape) - len(t.shape)) + t.shape)
        if t.shape == shape:
            return t
        return self.tile(ops.BroadcastOp, t.type.with_shape(shape), x=t.value)

    def full(self, value: object, type: TileType) -> Tile:
        """A tile of ``type`` from a number (one ConstantOp) or a scalar tile (cast, broadcast)."""
        if isinstance(value, Tile):
            return self.broadcast(self.cast(value, type.dtype), type.shape)
        return self.constant(value, type)

    # ------------------------------------------------------------------ promotion

    def common_dtype(self, values: Sequence[object]) -> DType:
        """numpy promotion of tiles (int with float gives the float: see ``join``), with numbers weak
        (NEP 50; a float number with an integer tile gives float32)."""
        tiles = [v for v in values if isinstance(v, Tile)]
        for v in values:
            if not isinstance(v, Tile) and not is_number(v):
                raise FrontendError(f"expected a tile or a number, got {describe(v)}")
        if not tiles:
            dtype = default_dtype(values[0])
            for v in values[1:]:
                dtype = join(dtype, default_dtype(v))
            return dtype
        dtype = tiles[0].dtype
        for t in tiles[1:]:
            dtype = join(dtype, t.dtype)
        for v in values:
            if not isinstance(v, Tile):
                dtype = weak_dtype(v, dtype)
        return dtype

    def unify(self, values: Sequence[object], dtype: DType | None = None) -> list[Tile]:
        """Cast and broadcast tiles and numbers to one dtype and shape."""
        dtype = dtype if dtype is not None else self.common_dtype(values)
        shape = broadcast_shapes(*(v.shape for v in values if isinstance(v, Tile)))
        out = []
        for v in values:
            if isinstance(v, Tile):
                out.append(self.broadcast(self.cast(v, dtype), shape))
            else:
                out.append(self.constant(v, TileType(dtype, shape)))
        return out

    # ------------------------------------------------------------------ element-wise operations

    def binary(self, fn: str, a: object, b: object, symbol: str | None = None, rounding: str | None = None,
               ftz: bool = False) -> Tile:
        """``a fn b`` for tiles/numbers (at least one a tile) with promotion and broadcasting; ``rounding`` and
        ``ftz``: ``tj.truediv``'s fast-math options (``fast_math``)."""
        sym = symbol or fn
        no_float8(f"operator {sym}" if symbol else f"tj.{fn}()", a, b)
        dtype = self.common_dtype([a, b])
        if fn in ("truediv", "atan2") and not dtype.is_float:
            dtype = float32
        elif fn in ("and", "or", "xor"):
            if dtype.is_float:
                raise FrontendError(f"operator {sym} needs integer or bool operands, got {dtype.name}")
        elif fn in ("lshift", "rshift"):
            if not dtype.is_int:
                raise FrontendError(f"operator {sym} needs integer operands, got {dtype.name}")
        elif fn == "mulhi" and dtype.kind != "u":
            raise FrontendError(f"{sym} needs unsigned integer operands, got {dtype.name}")
        elif dtype.is_bool and fn == "sub":
            raise FrontendError(
                f"operator {sym} is not defined for bool tiles (as in numpy); use ^ or != for xor"
            )
        elif dtype.is_bool and fn in ("floordiv", "mod", "pow"):
            dtype = int8  # numpy: bool // bool, bool % bool and bool ** bool are int8
        if fn == "pow" and not dtype.is_float and isinstance(b, int) and b < 0:
            raise FrontendError(
                f"integers to negative integer powers are not allowed (as in numpy): the exponent is {shown(b)} and "
                f"the result would be {dtype.name}; use a float base, e.g. x.astype(tj.float32) ** {shown(b)}"
            )
        # bool + bool and bool * bool stay bool (logical or / and), as in numpy
        options = fast_math(fn, dtype, rounding, ftz) if fn in ROUNDING_MODES else ("", False)
        x, y = self.unify([a, b], dtype)
        return self.tile(ops.BinaryOp, x.type, fn=fn, x=x.value, y=y.value, rounding=options[0], ftz=options[1])

    def fma(self, a: object, b: object, c: object) -> Tile:
        """``a * b + c`` rounded once, promoted and broadcast (integers and bools compute in float32)."""
        no_float8("tj.fma()", a, b, c)
        dtype = self.common_dtype([a, b, c])
        x, y, z = self.unify([a, b, c], dtype if dtype.is_float else float32)
        return self.tile(ops.FmaOp, x.type, x=x.value, y=y.value, z=z.value)

    def compare(self, fn: str, a: object, b: object) -> Tile:
        no_float8("a comparison", a, b)
        if isinstance(a, Tile) and isinstance(b, Tile) and {a.dtype.kind, b.dtype.kind} == {"i", "u"} \
                and uint64 in (a.dtype, b.dtype):
            return self._compare_signed_u64(fn, a, b)
        x, y = self.unify([a, b])
        return self.tile(ops.CompareOp, x.type.with_dtype(bool_), fn=fn, x=x.value, y=y.value)

    def _compare_signed_u64(self, fn: str, a: Tile, b: Tile) -> Tile:
        """A signed integer tile against a uint64 one, exactly as numpy compares them (promotion
        would compare in float64, where 2**53 + 1 == 2**53): a negative signed value is below every
        uint64; otherwise both compare as uint64."""
        signed_left = a.dtype.kind == "i"
        s = self.cast(a if signed_left else b, int64)
        neg = self.compare("lt", s, 0)
        su = self.cast(s, uint64)
        x, y = self.unify([su, b] if signed_left else [a, su], uint64)
        c = self.tile(ops.CompareOp, x.type.with_dtype(bool_), fn=fn, x=x.value, y=y.value)
        true_if_neg = ("lt", "le", "ne") if signed_left else ("gt", "ge", "ne")
        if fn in true_if_neg:
            return self.binary("or", neg, c)
        return self.binary("and", self.unary("not", neg), c)

    def unary(self, fn: str, a: object, rounding: str | None = None, ftz: bool = False) -> Tile:
        """``fn(a)``: float math on int/bool tiles computes in float32; abs/neg/floor/ceil keep ints; isnan/isinf/
        signbit give bools (of integers: False, or ``x < 0``); popc/clz count bits of 32- and 64-bit integers into
        int32. ``rounding``/``ftz``: fast-math options (``fast_math``)."""
        t = self.as_tile(a)
        no_float8({"neg": "unary -", "invert": "operator ~"}.get(fn, f"tj.{fn}()"), t)
        if fn in ops.PREDICATE_FNS and not t.dtype.is_float:
            if fn == "signbit" and t.dtype.is_signed:
                return self.compare("lt", t, 0)
            return self.constant(False, t.type.with_dtype(bool_))
        if fn in ops.BIT_COUNT_FNS:
            if not t.dtype.is_int or t.dtype.bits not in (32, 64):
                raise FrontendError(f"tj.{fn}() counts the bits of int32, int64, uint32 or uint64 tiles, got "
                                    f"{t.dtype.name}" + (" (convert it with .astype)" if t.dtype.is_int else ""))
            return self.tile(ops.UnaryOp, t.type.with_dtype(int32), fn=fn, x=t.value)
        if fn == "neg":
            if t.dtype.is_bool:
                raise FrontendError("unary - is not defined for bool tiles; use ~ or 'not'")
        elif fn == "invert":
            if t.dtype.is_bool:
                fn = "not"
            elif not t.dtype.is_int:
                raise FrontendError(f"operator ~ needs integer or bool operands, got {t.dtype.name}")
        elif fn == "not":
            t = self.to_bool(t)
        elif fn == "abs":
            if t.dtype.is_bool or t.dtype.kind == "u":
                return t
        elif fn in ("floor", "ceil") and not t.dtype.is_float:
            return t  # numpy 2: integers and bools are their own floor and ceiling (no float32 rounding)
        elif not t.dtype.is_float:
            t = self.cast(t, float32)
        mode, flush = fast_math(fn, t.dtype, rounding, ftz) if fn in ROUNDING_MODES else ("", False)
        rt = t.type.with_dtype(bool_) if fn in ops.PREDICATE_FNS else t.type
        return self.tile(ops.UnaryOp, rt, fn=fn, x=t.value, rounding=mode, ftz=flush)

    def select(self, cond: object, x: object, y: object) -> Tile:
        no_float8("tj.where()", x, y)
        c = self.as_tile(cond)
        c = self.to_bool(c)
        dtype = self.common_dtype([x, y])
        shape = broadcast_shapes(c.shape, *(v.shape for v in (x, y) if isinstance(v, Tile)))
        c = self.broadcast(c, shape)
        tx, ty = (
            self.broadcast(self.cast(v, dtype), shape) if isinstance(v, Tile)
            else self.constant(v, TileType(dtype, shape))
            for v in (x, y)
        )
        return self.tile(ops.SelectOp, tx.type, cond=c.value, x=tx.value, y=ty.value)

    # ------------------------------------------------------------------ indices and arrays

    def index_scalar(self, v: object, what: str) -> Tile:
        """An integer scalar for an index or loop bound (numbers become int32, or int64 if needed)."""
        if isinstance(v, Tile):
            if not v.type.is_scalar:
                raise FrontendError(f"{what} must be a scalar, got a tile of shape {v.shape}")
            if not v.dtype.is_int:
                raise FrontendError(f"{what} must be an integer, got {v.dtype.name}")
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return self.constant(v, TileType(default_dtype(v)))
        raise FrontendError(f"{what} must be an integer, got {describe(v)}")

    def array_item(self, arrays: Value, index: Tile) -> Value:
        """Array ``index`` of the array list ``arrays`` (an empty array when out of range)."""
        assert isinstance(arrays.type, ArrayListType)
        op = self.emit(ops.ArrayItemOp(results=[Value(arrays.type.element)], arrays=arrays, index=index.value))
        return op.result

    def array_count(self, arrays: Value) -> Tile:
        """How many arrays the array list ``arrays`` holds (int32)."""
        return self.tile(ops.ArrayCountOp, TileType(int32), arrays=arrays)

    def array_dim(self, array: Value, axis: int, which: str) -> Tile:
        assert isinstance(array.type, ArrayType)
        return self.tile(ops.ArrayDimOp, TileType(int64), array=array, axis=axis, which=which)

