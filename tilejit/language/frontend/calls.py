"""What calls, attributes and subscripts mean in tile code: one small function per ``tj.*``
builtin, tile methods, and the few Python builtins that work on compile-time values (``abs``, ``min``
and ``max`` also on run-time values, as ``tj.abs``, ``tj.minimum`` and ``tj.maximum``).

Builtins are found by identity of the function object (``tilejit.language.tile.load`` however it
was imported). Arguments are bound against the user-facing signature in ``tile.py``, so defaults
and keyword names are defined once and errors name the function.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from tilejit.language import tile
from tilejit.language.frontend.builder import (
    broadcast_shapes,
    check_shape,
    const_value,
    default_dtype,
    int_range,
    is_pow2,
    no_float8,
)
from tilejit.language.frontend.limits import check_iterable, check_math_call, range_len
from tilejit.language.frontend.printing import device_print
from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import (
    Array,
    ArrayDims,
    ArrayList,
    BoundMethod,
    Tile,
    Undefined,
    describe,
    is_const,
    is_number,
    shown,
)
from tilejit.language.ir import ops
from tilejit.language.ir.core import Value
from tilejit.language.ir.passes import NUMPY_MATH, bit_count
from tilejit.language.ir.types import (
    BY_NAME,
    DType,
    TileType,
    bfloat16,
    bool_,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int32,
    normalize_const,
    uint8,
    uint32,
)

if TYPE_CHECKING:
    from tilejit.language.frontend.handlers import Translator

Impl = Callable[..., object]

#: id(user-facing function) -> (that function, its implementation): every function of ``tile.__all__``
#: (the one list of the tile language's names, which ``tj.*`` also reads) but those of ``HOST_ONLY``.
BUILTINS: dict[int, tuple[Callable[..., Any], Impl]] = {}

#: The names of ``tile.__all__`` that tile code does not call: ``tj.Constant`` annotates a parameter,
#: ``tj.function`` decorates a helper outside any kernel (whose ``TileFunction`` kernels call, inlined), and
#: ``tj.RoundingMode``'s members are values of ``rounding_mode=``, ``tj.array_list`` names a parameter type for
#: ``tj.compile``. The dtypes of ``tile.__all__`` are called as
#: conversions (``tj.float16(x)``).
HOST_ONLY = frozenset({"Constant", "function", "TileFunction", "RoundingMode", "array_list"})


def builtin(api: Callable[..., Any]) -> Callable[[Impl], Impl]:
    """Register the implementation of a ``tj.*`` function (same parameter names, plus ``tr`` first)."""

    def deco(impl: Impl) -> Impl:
        BUILTINS[id(api)] = (api, impl)
        return impl

    return deco


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


def bind(api: Callable[..., Any], label: str, args: list[object], kwargs: dict[str, object]) -> dict[str, Any]:
    """Bind call arguments to ``api``'s signature (defaults applied) or raise a clear error."""
    try:
        bound = _signature(api).bind(*args, **kwargs)
    except TypeError as exc:
        raise FrontendError(f"{label}(): {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


# ====================================================================== helpers


def to_dtype(v: object, what: str = "dtype") -> DType:
    """A DType from ``tj.float32``, a name ("float32"), numpy dtypes, or Python bool/int/float."""
    if isinstance(v, DType):
        return v
    if v is bool:
        return bool_
    if v is int:
        return int32
    if v is float:
        return float32
    for name in (v if isinstance(v, str) else None, getattr(v, "name", None), getattr(v, "__name__", None)):
        if isinstance(name, str) and name in BY_NAME:
            return BY_NAME[name]
    raise FrontendError(f"{what} must be a dtype such as tj.float32, got {describe(v)}")


def const_int(v: object, what: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise FrontendError(f"{what} must be a compile-time int, got {describe(v)}")


def norm_axis(axis: object, ndim: int, what: str) -> int:
    a = const_int(axis, what)
    if not -ndim <= a < ndim:
        raise FrontendError(f"{what} {a} is out of range for a tile of rank {ndim}")
    return a % ndim


def as_array(v: object, fn: str) -> Array:
    if isinstance(v, Array):
        return v
    hint = f"; index it for one of its arrays: {v.name}[i]" if isinstance(v, ArrayList) else ""
    raise FrontendError(f"tj.{fn}() expects a kernel array parameter as its first argument, got {describe(v)}{hint}")


def as_tile(tr: Translator, v: object, fn: str, what: str = "argument") -> Tile:
    if isinstance(v, Tile):
        return v
    if is_number(v):
        return tr.b.as_tile(v)
    raise FrontendError(f"tj.{fn}(): {what} must be a tile or a number, got {describe(v)}")


def convert_number(value: object, dtype: DType) -> bool | int | float:
    """An explicit conversion of a number to ``dtype`` (C++ cast semantics; out of range is an error)."""
    if not is_number(value):
        raise FrontendError(f"expected a number, got {describe(value)}")
    assert isinstance(value, bool | int | float)
    if dtype.is_bool:
        return bool(value)
    if dtype.is_float:
        return const_value(value, dtype)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FrontendError(f"cannot convert {value} to {dtype.name}")
        value = math.trunc(value)
    return const_value(int(value), dtype)


def tile_index(tr: Translator, arr: Array, index: object, fn: str) -> list[Any]:
    """Tile-grid index operands for load/store: one integer scalar per array dim."""
    if not isinstance(index, tuple | list):
        if arr.ndim != 1:
            raise FrontendError(
                f"tj.{fn}(): index must be a tuple of {arr.ndim} indices (one per dim of '{arr.name}')"
            )
        index = (index,)
    if len(index) != arr.ndim:
        raise FrontendError(
            f"tj.{fn}(): index has {len(index)} entries but the array '{arr.name}' has {arr.ndim} dims"
        )
    return [tr.b.index_scalar(i, f"tj.{fn}() index {k}").value for k, i in enumerate(index)]


def element_indices(
    tr: Translator, arr: Array, indices: object, fn: str, others: list[object]
) -> tuple[list[Any], tuple[int, ...]]:
    """Element index tiles for gather/scatter/atomics, broadcast with ``others`` to one shape."""
    if not isinstance(indices, tuple | list):
        if arr.ndim != 1:
            raise FrontendError(
                f"tj.{fn}(): indices must be a tuple of {arr.ndim} index tiles (one per dim of '{arr.name}')"
            )
        indices = (indices,)
    if len(indices) != arr.ndim:
        raise FrontendError(
            f"tj.{fn}(): indices has {len(indices)} entries but the array '{arr.name}' has {arr.ndim} dims"
        )
    for k, i in enumerate(indices):
        ok = (isinstance(i, Tile) and i.dtype.is_int) or (isinstance(i, int) and not isinstance(i, bool))
        if not ok:
            raise FrontendError(f"tj.{fn}(): index {k} must be an integer tile or int, got {describe(i)}")
    shape = broadcast_shapes(*(v.shape for v in (*indices, *others) if isinstance(v, Tile)))
    out = []
    for i in indices:
        if isinstance(i, Tile):
            out.append(tr.b.broadcast(i, shape).value)
        else:
            out.append(tr.b.constant(i, TileType(default_dtype(i), shape)).value)
    return out, shape


def values_as(tr: Translator, v: object, dtype: DType, shape: tuple[int, ...], fn: str, what: str) -> Any:
    """``v`` (tile or number) cast to ``dtype`` and broadcast to ``shape``, as an IR value."""
    if isinstance(v, Tile):
        return tr.b.broadcast(tr.b.cast(v, dtype), shape).value
    if is_number(v):
        return tr.b.constant(convert_number(v, dtype), TileType(dtype, shape)).value
    raise FrontendError(f"tj.{fn}(): {what} must be a tile or a number, got {describe(v)}")


def widen_for_sum(tr: Translator, t: Tile) -> Tile:
    """Sums of bool and of integers narrower than 32 bits accumulate in (u)int32."""
    if t.dtype.is_bool or (t.dtype.is_int and t.dtype.bits < 32):
        return tr.b.cast(t, uint32 if t.dtype.kind == "u" else int32)
    return t


# ====================================================================== block ids and sizes


@builtin(tile.bid)
def _bid(tr: Translator, axis: object) -> object:
    a = const_int(axis, "tj.bid() axis")
    if a not in (0, 1, 2):
        raise FrontendError(f"tj.bid() axis must be 0, 1 or 2, got {a}")
    return tr.b.tile(ops.BlockIdOp, TileType(int32), axis=a)


@builtin(tile.num_blocks)
def _num_blocks(tr: Translator, axis: object) -> object:
    a = const_int(axis, "tj.num_blocks() axis")
    if a not in (0, 1, 2):
        raise FrontendError(f"tj.num_blocks() axis must be 0, 1 or 2, got {a}")
    return tr.b.tile(ops.NumBlocksOp, TileType(int32), axis=a)


@builtin(tile.num_tiles)
def _num_tiles(tr: Translator, array: object, axis: object, shape: object, order: object) -> object:
    arr = as_array(array, "num_tiles")
    ax = const_int(axis, "tj.num_tiles() axis")
    if not -arr.ndim <= ax < arr.ndim:
        raise FrontendError(f"tj.num_tiles() axis {ax} is out of range for the {arr.ndim}-d array '{arr.name}'")
    ax %= arr.ndim
    shp = check_shape(shape, "tj.num_tiles() shape")
    if len(shp) != arr.ndim:
        raise FrontendError(f"tj.num_tiles(): shape {shp} has {len(shp)} dims but the array '{arr.name}' has "
                            f"{arr.ndim}")
    dim = tr.b.array_dim(arr.value, axis_order(order, arr, "num_tiles")[ax], "shape")
    n = tr.b.binary("floordiv", tr.b.binary("add", dim, shp[ax] - 1), shp[ax])
    return tr.b.cast(n, int32)


@builtin(tile.cdiv)
def _cdiv(tr: Translator, a: object, b: object) -> object:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise FrontendError("tj.cdiv(): division by zero")
        return -(-a // b)
    for v in (a, b):
        if not (isinstance(v, Tile) or (isinstance(v, int) and not isinstance(v, bool))):
            raise FrontendError(f"tj.cdiv() expects integers, got {describe(v)}")
        if isinstance(v, Tile) and not v.dtype.is_int:
            raise FrontendError(f"tj.cdiv() expects integers, got {v.dtype.name}")
    bm1 = b - 1 if isinstance(b, int) else tr.b.binary("sub", b, 1)
    return tr.b.binary("floordiv", tr.b.binary("add", a, bm1), b)


@builtin(tile.static_range)
def _static_range(tr: Translator, args: tuple[object, ...]) -> object:
    bounds = [const_int(a, "tj.static_range() argument") for a in args]
    if not 1 <= len(bounds) <= 3:
        raise FrontendError(f"tj.static_range() takes 1 to 3 arguments (stop or start, stop, step), got {len(bounds)}")
    if len(bounds) == 3 and bounds[2] == 0:
        raise FrontendError("tj.static_range() step must not be zero")
    return range(*bounds)


# ====================================================================== memory


def axis_order(order: object, arr: Array, fn: str) -> tuple[int, ...]:
    """The permutation ``order`` of load/store/num_tiles names: "C" (none), "F" (reversed) or a tuple of the
    array's dims (each once; negative ones count from the end)."""
    n = arr.ndim
    if isinstance(order, str) and order in ("C", "F"):
        return tuple(range(n)) if order == "C" else tuple(reversed(range(n)))
    if not isinstance(order, tuple | list) or not all(isinstance(a, int) and not isinstance(a, bool) for a in order):
        raise FrontendError(f'tj.{fn}(): order must be "C", "F" or a compile-time tuple of the dims of \'{arr.name}\', '
                            f"got {describe(order)}")
    perm = tuple(a % n if -n <= a < n else a for a in order)
    if sorted(perm) != list(range(n)):
        raise FrontendError(f"tj.{fn}(): order {shown(tuple(order))} is not a permutation of the {n} dims of the "
                            f"array '{arr.name}'")
    return perm


def _in_array_order(perm: tuple[int, ...], items: list[Any] | tuple[int, ...]) -> list[Any]:
    """Per-tile-dim ``items`` (an index, a shape) rearranged per array dim: tile dim ``d`` is array dim ``perm[d]``."""
    out: list[Any] = [None] * len(perm)
    for d, a in enumerate(perm):
        out[a] = items[d]
    return out


@builtin(tile.load)
def _load(tr: Translator, array: object, index: object, shape: object, padding: object, order: object) -> object:
    arr = as_array(array, "load")
    shp = check_shape(shape, "tj.load() shape")
    if len(shp) != arr.ndim:
        raise FrontendError(
            f"tj.load(): shape {shp} has {len(shp)} dims but the array '{arr.name}' has {arr.ndim}"
        )
    perm = axis_order(order, arr, "load")
    idx = tile_index(tr, arr, index, "load")
    pad = _padding(padding, arr, "load")
    if perm == tuple(range(arr.ndim)):
        return tr.b.tile(ops.LoadOp, TileType(arr.dtype, shp), array=arr.value, index=idx, padding=pad)
    stored = TileType(arr.dtype, tuple(_in_array_order(perm, shp)))
    t = tr.b.tile(ops.LoadOp, stored, array=arr.value, index=_in_array_order(perm, idx), padding=pad)
    return tr.b.tile(ops.PermuteOp, stored.with_shape(shp), x=t.value, perm=perm)


def _padding(padding: object, arr: Array, what: str) -> object:
    """The value out-of-range elements of a load/gather read, checked against the array's dtype."""
    if not is_number(padding):
        raise FrontendError(f"tj.{what}(): padding must be a compile-time number, got {describe(padding)}")
    try:
        return const_value(padding, arr.dtype)
    except FrontendError as exc:
        raise FrontendError(
            f"tj.{what}(): padding {padding!r} is not a valid {arr.dtype.name}: {exc.message}"
        ) from None


@builtin(tile.store)
def _store(tr: Translator, array: object, index: object, tile: object, order: object) -> object:
    arr = as_array(array, "store")
    perm = axis_order(order, arr, "store")
    idx = tile_index(tr, arr, index, "store")
    if is_number(tile):
        t = tr.b.constant(convert_number(tile, arr.dtype), TileType(arr.dtype))
    elif isinstance(tile, Tile):
        t = tile
    else:
        raise FrontendError(f"tj.store(): tile must be a tile, got {describe(tile)}")
    if t.ndim == 0:
        t = tr.b.reshape(t, (1,) * arr.ndim)
    elif t.ndim != arr.ndim:
        raise FrontendError(
            f"tj.store(): the tile has rank {t.ndim} (shape {t.shape}) but the array '{arr.name}' has rank "
            f"{arr.ndim}; the tile's rank must equal the array's (reshape it)"
        )
    t = tr.b.cast(t, arr.dtype)
    if perm != tuple(range(arr.ndim)):  # tile dim d runs along array dim perm[d]: store the tile in array order
        if t.type.size > 1:
            inverse = tuple(_in_array_order(perm, tuple(range(arr.ndim))))
            t = tr.b.tile(ops.PermuteOp, t.type.with_shape(tuple(_in_array_order(perm, t.shape))), x=t.value,
                          perm=inverse)
        idx = _in_array_order(perm, idx)
    tr.b.make(ops.StoreOp, None, array=arr.value, index=idx, tile=t.value)
    return None


@builtin(tile.gather)
def _gather(tr: Translator, array: object, indices: object, padding: object) -> object:
    arr = as_array(array, "gather")
    idx, shape = element_indices(tr, arr, indices, "gather", [])
    pad = _padding(padding, arr, "gather")
    return tr.b.tile(ops.GatherOp, TileType(arr.dtype, shape), array=arr.value, indices=idx, padding=pad)


@builtin(tile.scatter)
def _scatter(tr: Translator, array: object, indices: object, tile: object) -> object:
    arr = as_array(array, "scatter")
    idx, shape = element_indices(tr, arr, indices, "scatter", [tile])
    val = values_as(tr, tile, arr.dtype, shape, "scatter", "tile")
    tr.b.make(ops.ScatterOp, None, array=arr.value, indices=idx, tile=val)
    return None


_ATOMIC_DTYPES: dict[str, tuple[str, ...]] = {
    "add": ("i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64"),
    "max": ("i32", "u32", "i64", "u64", "f32", "f64"),
    "min": ("i32", "u32", "i64", "u64", "f32", "f64"),
    "xchg": ("i32", "u32", "i64", "u64", "f32", "f64"),
    "cas": ("i32", "u32", "i64", "u64", "f32", "f64"),
}


def memory_order(fn: str, sem: object, scope: object) -> tuple[str, str]:
    """``sem`` and ``scope`` of ``tj.{fn}()`` checked: compile-time strings naming a memory order and a scope."""
    for what, value, allowed in (("sem", sem, ops.MEMORY_ORDERS), ("scope", scope, ops.MEMORY_SCOPES)):
        if not isinstance(value, str) or value not in allowed:
            names = ", ".join(f'"{a}"' for a in allowed)
            raise FrontendError(f"tj.{fn}(): {what} must be one of {names}, got {describe(value)}")
    assert isinstance(sem, str) and isinstance(scope, str)
    return sem, scope


def _atomic(tr: Translator, kind: str, array: object, indices: object, value: object, sem: object,
            scope: object, expected: object = None) -> Tile:
    fn = f"atomic_{kind}"
    arr = as_array(array, fn)
    if arr.dtype.short not in _ATOMIC_DTYPES[kind]:
        allowed = ", ".join(BY_NAME[s].name for s in _ATOMIC_DTYPES[kind])
        raise FrontendError(f"tj.{fn}() does not support {arr.dtype.name} arrays (supported: {allowed})")
    order, where = memory_order(fn, sem, scope)
    others = [value] + ([expected] if kind == "cas" else [])
    idx, shape = element_indices(tr, arr, indices, fn, others)
    val = values_as(tr, value, arr.dtype, shape, fn, "desired" if kind == "cas" else "value")
    compare = [values_as(tr, expected, arr.dtype, shape, fn, "expected")] if kind == "cas" else []
    return tr.b.tile(ops.AtomicOp, TileType(arr.dtype, shape), kind=kind, array=arr.value, indices=idx,
                     value=val, compare=compare, sem=order, scope=where)


@builtin(tile.atomic_add)
def _atomic_add(tr: Translator, array: object, indices: object, value: object, sem: object, scope: object) -> object:
    return _atomic(tr, "add", array, indices, value, sem, scope)


@builtin(tile.atomic_max)
def _atomic_max(tr: Translator, array: object, indices: object, value: object, sem: object, scope: object) -> object:
    return _atomic(tr, "max", array, indices, value, sem, scope)


@builtin(tile.atomic_min)
def _atomic_min(tr: Translator, array: object, indices: object, value: object, sem: object, scope: object) -> object:
    return _atomic(tr, "min", array, indices, value, sem, scope)


@builtin(tile.atomic_xchg)
def _atomic_xchg(tr: Translator, array: object, indices: object, value: object, sem: object,
                 scope: object) -> object:
    return _atomic(tr, "xchg", array, indices, value, sem, scope)


@builtin(tile.atomic_cas)
def _atomic_cas(tr: Translator, array: object, indices: object, expected: object, desired: object, sem: object,
                scope: object) -> object:
    return _atomic(tr, "cas", array, indices, desired, sem, scope, expected)


@builtin(tile.fence)
def _fence(tr: Translator, sem: object, scope: object) -> object:
    order, where = memory_order("fence", sem, scope)
    if order == "relaxed":
        raise FrontendError('tj.fence(): a relaxed fence orders nothing; sem must be "acquire", "release" or '
                            '"acq_rel"')
    tr.b.make(ops.FenceOp, None, sem=order, scope=where)
    return None


@builtin(tile.barrier)
def _barrier(tr: Translator) -> object:
    tr.b.make(ops.BarrierOp, None)
    return None


@builtin(tile.print)
def _print(tr: Translator, prefix: object, values: tuple[object, ...], sep: object, end: object) -> object:
    if not isinstance(prefix, str):
        raise FrontendError(f"tj.print(): prefix must be a compile-time string, got {describe(prefix)}")
    device_print(tr, [prefix, *values], sep, end)
    return None


# ====================================================================== creation


@builtin(tile.full)
def _full(tr: Translator, shape: object, value: object, dtype: object) -> object:
    shp = check_shape(shape, "tj.full() shape")
    if dtype is None:
        if isinstance(value, Tile):
            dt = value.dtype
        elif is_number(value):
            dt = default_dtype(value)
        else:
            raise FrontendError(f"tj.full(): value must be a number or a scalar, got {describe(value)}")
    else:
        dt = to_dtype(dtype, "tj.full() dtype")
    if isinstance(value, Tile):
        return tr.b.broadcast(tr.b.cast(value, dt), shp)
    return tr.b.constant(convert_number(value, dt), TileType(dt, shp))


@builtin(tile.zeros)
def _zeros(tr: Translator, shape: object, dtype: object) -> object:
    dt = to_dtype(dtype, "tj.zeros() dtype")
    return tr.b.constant(convert_number(0, dt), TileType(dt, check_shape(shape, "tj.zeros() shape")))


@builtin(tile.ones)
def _ones(tr: Translator, shape: object, dtype: object) -> object:
    dt = to_dtype(dtype, "tj.ones() dtype")
    return tr.b.constant(convert_number(1, dt), TileType(dt, check_shape(shape, "tj.ones() shape")))


@builtin(tile.arange)
def _arange(tr: Translator, n: object, dtype: object) -> object:
    size = const_int(n, "tj.arange() n")
    if not is_pow2(size):
        raise FrontendError(f"tj.arange() n must be a power of two, got {size}")
    check_shape((size,), "tj.arange() shape")
    dt = to_dtype(dtype, "tj.arange() dtype")
    if dt.is_bool:
        raise FrontendError("tj.arange() dtype must be numeric, got bool")
    if dt.is_int and size - 1 > int_range(dt)[1]:
        raise FrontendError(f"tj.arange({size}) does not fit in {dt.name}")
    return tr.b.tile(ops.ArangeOp, TileType(dt, (size,)))


# ====================================================================== element-wise


def _rounding_mode(fn: str, value: object) -> str | None:
    """The rounding a ``rounding_mode=`` argument names: None, a ``tj.RoundingMode`` or its string."""
    if value is None:
        return None
    if isinstance(value, tile.RoundingMode):
        return value.value
    if isinstance(value, str) and value in {m.value for m in tile.RoundingMode}:
        return value
    names = ", ".join(repr(m.value) for m in tile.RoundingMode)
    raise FrontendError(f"tj.{fn}(): rounding_mode must be None, a tj.RoundingMode or one of {names}; got "
                        f"{describe(value)}")


def _flag(fn: str, what: str, value: object) -> bool:
    """A keyword that must be a compile-time True or False."""
    if not isinstance(value, bool):
        raise FrontendError(f"tj.{fn}(): {what} must be a compile-time True or False, got {describe(value)}")
    return value


def _unary(tr: Translator, fn: str, x: object, rounding_mode: object = None, flush_to_zero: object = False) -> object:
    """``tj.<fn>(x)`` with its fast-math options: folded for a compile-time number, else a unary op."""
    rounding, ftz = _rounding_mode(fn, rounding_mode), _flag(fn, "flush_to_zero", flush_to_zero)
    if is_number(x):
        return _fold_unary(fn, x)
    return tr.b.unary(fn, as_tile(tr, x, fn, "x"), rounding, ftz)


def _unary_impl(fn: str) -> Impl:
    def impl(tr: Translator, x: object) -> object:
        return _unary(tr, fn, x)

    return impl


@builtin(tile.exp)
def _exp(tr: Translator, x: object, rounding_mode: object) -> object:
    return _unary(tr, "exp", x, rounding_mode)


@builtin(tile.tanh)
def _tanh(tr: Translator, x: object, rounding_mode: object) -> object:
    return _unary(tr, "tanh", x, rounding_mode)


@builtin(tile.exp2)
def _exp2(tr: Translator, x: object, flush_to_zero: object) -> object:
    return _unary(tr, "exp2", x, flush_to_zero=flush_to_zero)


@builtin(tile.rsqrt)
def _rsqrt(tr: Translator, x: object, flush_to_zero: object) -> object:
    return _unary(tr, "rsqrt", x, flush_to_zero=flush_to_zero)


@builtin(tile.sqrt)
def _sqrt(tr: Translator, x: object, rounding_mode: object, flush_to_zero: object) -> object:
    return _unary(tr, "sqrt", x, rounding_mode, flush_to_zero)


def _fold_unary(fn: str, x: object) -> object:
    """A math function of a compile-time number, computed in float64 (domain errors give nan/inf); the bit
    counts of an integer in its default dtype (int32, or int64 when it needs 64 bits)."""
    assert isinstance(x, bool | int | float)
    if fn == "abs":
        return builtins.abs(x)
    if fn in ops.PREDICATE_FNS:
        if not isinstance(x, float):
            return fn == "signbit" and x < 0
        return math.isnan(x) if fn == "isnan" else math.isinf(x) if fn == "isinf" else math.copysign(1, x) < 0
    if fn in ops.BIT_COUNT_FNS:
        if not isinstance(x, int) or isinstance(x, bool):
            raise FrontendError(f"tj.{fn}() counts the bits of integers, got {describe(x)}")
        return bit_count(fn, x, default_dtype(x).bits)
    import numpy as np

    with np.errstate(all="ignore"):
        try:
            return float(NUMPY_MATH[fn](np.float64(x)))
        except OverflowError:
            raise FrontendError(f"tj.{fn}(): the constant {shown(x)} does not fit float64") from None


#: The unary tj functions without options (``tj.abs`` too); those with fast-math options are above.
_UNARY = (
    "log", "log2", "sin", "cos", "floor", "ceil", "erf", "sigmoid", "abs", "asin", "acos", "atan", "sinh", "cosh",
    "log1p", "expm1", "cbrt", "erfinv", "isnan", "isinf", "signbit", "popc", "clz",
)
for _fn in _UNARY:
    builtin(getattr(tile, _fn))(_unary_impl(_fn))


def _binary_impl(fn: str, name: str, pyfn: Callable[[Any, Any], Any]) -> Impl:
    def impl(tr: Translator, x: object, y: object) -> object:
        if is_number(x) and is_number(y):
            if fn == "pow":
                tr.budget.check_binary("**", x, y)
            try:
                result = normalize_const(pyfn(x, y))
            except (ZeroDivisionError, OverflowError, ValueError) as exc:
                raise FrontendError(f"tj.{name}() of compile-time values failed: {exc}") from None
            return tr.budget.check(result, f"the result of tj.{name}()")
        for v in (x, y):
            if not isinstance(v, Tile) and not is_number(v):
                raise FrontendError(f"tj.{name}() expects tiles or numbers, got {describe(v)}")
        return tr.b.binary(fn, x, y)

    return impl


def _nan_first(pick: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``pick`` (Python's max or min) of two compile-time numbers, NaN when either is NaN: what tj.maximum and
    tj.minimum do at run time (Python's own rule depends on the order: ``min(1, nan)`` is 1, ``min(nan, 1)`` NaN)."""
    def fold(x: Any, y: Any) -> Any:
        return x if x != x else y if y != y else pick(x, y)

    return fold


builtin(tile.maximum)(_binary_impl("maximum", "maximum", _nan_first(builtins.max)))
builtin(tile.minimum)(_binary_impl("minimum", "minimum", _nan_first(builtins.min)))
builtin(tile.pow)(_binary_impl("pow", "pow", builtins.pow))
_atan2 = _binary_impl("atan2", "atan2", math.atan2)  # its (x, y) are tj.atan2's (y, x): BinaryOp's x over y


@builtin(tile.atan2)
def _atan2_impl(tr: Translator, y: object, x: object) -> object:
    return _atan2(tr, y, x)


@builtin(tile.truediv)
def _truediv(tr: Translator, x: object, y: object, rounding_mode: object, flush_to_zero: object) -> object:
    rounding, ftz = _rounding_mode("truediv", rounding_mode), _flag("truediv", "flush_to_zero", flush_to_zero)
    if is_number(x) and is_number(y):
        if y == 0:
            raise FrontendError("tj.truediv() of compile-time values failed: division by zero")
        return x / y  # type: ignore[operator]
    for v in (x, y):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"tj.truediv() expects tiles or numbers, got {describe(v)}")
    return tr.b.binary("truediv", x, y, "tj.truediv()", rounding, ftz)


def _fma_number(x: float, y: float, z: float) -> float:
    """``x * y + z`` rounded once to float64 (exactly, through fractions, when all are finite)."""
    if not all(math.isfinite(v) for v in (x, y, z)):
        return x * y + z
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    try:
        return float(exact) if exact else x * y + z  # an exact zero keeps IEEE's sign of zero
    except OverflowError:
        return math.copysign(math.inf, exact)


@builtin(tile.fma)
def _fma(tr: Translator, x: object, y: object, z: object) -> object:
    for v in (x, y, z):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"tj.fma() expects tiles or numbers, got {describe(v)}")
    if is_number(x) and is_number(y) and is_number(z):
        try:
            return _fma_number(float(x), float(y), float(z))  # type: ignore[arg-type]
        except OverflowError:
            raise FrontendError("tj.fma(): a compile-time argument does not fit float64") from None
    return tr.b.fma(x, y, z)


@builtin(tile.where)
def _where(tr: Translator, cond: object, x: object, y: object) -> object:
    if isinstance(cond, bool | int | float):
        return x if cond else y
    if not isinstance(cond, Tile):
        raise FrontendError(f"tj.where(): cond must be a tile, got {describe(cond)}")
    for v in (x, y):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"tj.where() expects tiles or numbers, got {describe(v)}")
    return tr.b.select(cond, x, y)


@builtin(tile.astype)
def _astype(tr: Translator, x: object, dtype: object) -> object:
    dt = to_dtype(dtype, "astype() dtype")
    if is_number(x):
        return tr.b.constant(convert_number(x, dt), TileType(dt))
    if not isinstance(x, Tile):
        raise FrontendError(f"astype() expects a tile or a number, got {describe(x)}")
    return tr.b.cast(x, dt)


# ====================================================================== hints


def _hint_size(n: object, label: str) -> int:
    """A hint's ``n``: a compile-time power of two (alignment and run lengths are powers of two)."""
    k = const_int(n, f"{label} n")
    if not is_pow2(k):
        raise FrontendError(f"{label}: n must be a positive power of two, got {k} (hints state alignments and run "
                            "lengths, which backends use in powers of two)")
    return k


def _integers(x: object, label: str) -> Tile:
    """The run-time integer scalar or tile a hint is about."""
    if not isinstance(x, Tile) or not x.dtype.is_int:
        raise FrontendError(f"{label} states a fact of an integer scalar or tile (an offset, an index), got "
                            f"{describe(x)}")
    return x


@builtin(tile.multiple_of)
def _multiple_of(tr: Translator, x: object, n: object) -> object:
    k = _hint_size(n, "tj.multiple_of()")
    if isinstance(x, int) and not isinstance(x, bool):  # a compile-time number: the promise is checked now
        if x % k:
            raise FrontendError(f"tj.multiple_of({x}, {k}): {x} is not a multiple of {k}")
        return x
    t = _integers(x, "tj.multiple_of()")
    return t if k == 1 else tr.b.tile(ops.AssumeOp, t.type, x=t.value, div_by=k)


@builtin(tile.max_contiguous)
def _max_contiguous(tr: Translator, x: object, n: object) -> object:
    k = _hint_size(n, "tj.max_contiguous()")
    t = _integers(x, "tj.max_contiguous()")
    if not t.shape:
        raise FrontendError(f"tj.max_contiguous(): x is a scalar ({describe(x)}); runs of consecutive values are "
                            "a fact of a tile's elements along its last axis (use tj.multiple_of for a scalar)")
    k = min(k, t.shape[-1])
    return t if k == 1 else tr.b.tile(ops.AssumeOp, t.type, x=t.value, contiguous=k)


# ====================================================================== shape


@builtin(tile.reshape)
def _reshape(tr: Translator, x: object, shape: object) -> object:
    t = as_tile(tr, x, "reshape", "x")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple | list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise FrontendError(f"tj.reshape(): shape must be a compile-time tuple of ints, got {describe(shape)}")
    dims = list(shape)
    if dims.count(-1) > 1:
        raise FrontendError("tj.reshape(): only one dimension can be -1")
    if -1 in dims:
        known = 1
        for d in dims:
            if d != -1:
                known *= d
                if not 0 < known <= t.type.size:  # cannot divide the size (and huge dimensions stop early)
                    break
        if known <= 0 or known > t.type.size or t.type.size % known:
            raise FrontendError(f"tj.reshape(): cannot reshape a tile of shape {t.shape} into {shown(tuple(shape))}")
        dims[dims.index(-1)] = t.type.size // known
    new = check_shape(tuple(dims), "tj.reshape() shape")
    size = 1
    for d in new:
        size *= d
    if size != t.type.size:
        raise FrontendError(
            f"tj.reshape(): cannot reshape a tile of shape {t.shape} ({t.type.size} elements) into {new} "
            f"({size} elements)"
        )
    return tr.b.reshape(t, new)


@builtin(tile.transpose)
def _transpose(tr: Translator, x: object, axes: object) -> object:
    t = as_tile(tr, x, "transpose", "x")
    if axes is None:
        perm = tuple(reversed(range(t.ndim)))
    else:
        if not isinstance(axes, tuple | list):
            raise FrontendError(f"tj.transpose(): axes must be a tuple of ints, got {describe(axes)}")
        perm = tuple(norm_axis(a, t.ndim, "tj.transpose() axis") for a in axes)
        if sorted(perm) != list(range(t.ndim)):
            raise FrontendError(f"tj.transpose(): axes {tuple(axes)} is not a permutation of the {t.ndim} dims")
    if perm == tuple(range(t.ndim)):
        return t
    shape = tuple(t.shape[p] for p in perm)
    return tr.b.tile(ops.PermuteOp, t.type.with_shape(shape), x=t.value, perm=perm)


@builtin(tile.expand_dims)
def _expand_dims(tr: Translator, x: object, axis: object) -> object:
    t = as_tile(tr, x, "expand_dims", "x")
    a = norm_axis(axis, t.ndim + 1, "tj.expand_dims() axis")
    shape = t.shape[:a] + (1,) + t.shape[a:]
    return tr.b.reshape(t, shape)


@builtin(tile.broadcast_to)
def _broadcast_to(tr: Translator, x: object, shape: object) -> object:
    t = as_tile(tr, x, "broadcast_to", "x")
    return tr.b.broadcast(t, check_shape(shape, "tj.broadcast_to() shape"))


# ====================================================================== slicing and joining


def _static_ints(v: object, n: int, what: str, run_time_hint: str) -> tuple[int, ...]:
    """``v`` as ``n`` compile-time ints (one int for ``n == 1``), or a FrontendError naming ``what``."""
    items = v if isinstance(v, tuple | list) else (v,) if n == 1 else None
    if items is None:
        raise FrontendError(f"{what} must be a tuple of {n} compile-time ints, got {describe(v)}")
    for k, i in enumerate(items):
        if isinstance(i, Tile):
            raise FrontendError(f"{what} must be compile-time ints, but item {k} is a run-time value "
                                f"({describe(i)}); {run_time_hint}")
        if not isinstance(i, int) or isinstance(i, bool):
            raise FrontendError(f"{what} must be compile-time ints, got {describe(i)} as item {k}")
    if len(items) != n:
        raise FrontendError(f"{what} has {len(items)} entries for a tile of rank {n}")
    return tuple(items)


@builtin(tile.extract)
def _extract(tr: Translator, x: object, index: object, shape: object) -> object:
    t = as_tile(tr, x, "extract", "x")
    if t.ndim == 0:
        raise FrontendError("tj.extract() needs a tile of rank >= 1, got a scalar")
    shp = check_shape(shape, "tj.extract() shape")
    block = shp or (1,) * t.ndim  # shape=(): one element, as a scalar
    if len(block) != t.ndim:
        raise FrontendError(f"tj.extract(): shape {shp} has {len(block)} dims but the tile has rank {t.ndim} "
                            f"(shape {t.shape})")
    for d, (b, s) in enumerate(zip(block, t.shape)):
        if b > s:
            raise FrontendError(f"tj.extract(): shape {shp} does not fit in the tile of shape {t.shape} (dim {d}: "
                                f"{b} > {s})")
    idx = _static_ints(index, t.ndim, "tj.extract() index",
                       "blocks of a tile are chosen when the kernel compiles (for a run-time choice, tj.where)")
    for d, (i, b, s) in enumerate(zip(idx, block, t.shape)):
        if not 0 <= i < s // b:
            raise FrontendError(f"tj.extract(): index {i} of dim {d} is out of range: the tile of shape {t.shape} "
                                f"has {s // b} blocks of {b} along dim {d} (indices are in units of shape)")
    r = t if block == t.shape else tr.b.tile(ops.ExtractOp, t.type.with_shape(block), x=t.value, index=idx)
    return tr.b.reshape(r, shp) if not shp else r


def _pair_of_tiles(tiles: object) -> tuple[Tile, ...]:
    """``tj.cat``'s ``tiles``: one or two tiles of rank >= 1."""
    if not isinstance(tiles, tuple | list):
        raise FrontendError(f"tj.cat(): tiles must be a pair of tiles (a, b), got {describe(tiles)}")
    if not 1 <= len(tiles) <= 2:
        raise FrontendError(f"tj.cat() concatenates two tiles (so that the result's shape stays a power of two), got "
                            f"{len(tiles)} (nest tj.cat calls)")
    for k, t in enumerate(tiles):
        if not isinstance(t, Tile) or t.ndim == 0:
            raise FrontendError(f"tj.cat(): tile {k} must be a tile of rank >= 1, got {describe(t)}")
    return tuple(tiles)


@builtin(tile.cat)
def _cat(tr: Translator, tiles: object, axis: object) -> object:
    pair = _pair_of_tiles(tiles)
    if len(pair) == 1:
        return pair[0]
    a, b = pair
    if a.shape != b.shape:
        raise FrontendError(f"tj.cat(): the tiles must have one shape (so that the result's stays a power of two), "
                            f"got {a.shape} and {b.shape}")
    ax = norm_axis(axis, a.ndim, "tj.cat() axis")
    shape = check_shape(tuple(2 * s if d == ax else s for d, s in enumerate(a.shape)), "tj.cat() result shape")
    dtype = tr.b.common_dtype([a, b])
    a, b = tr.b.cast(a, dtype), tr.b.cast(b, dtype)
    return tr.b.tile(ops.CatOp, a.type.with_shape(shape), x=a.value, y=b.value, axis=ax)


@builtin(tile.join)
def _join(tr: Translator, a: object, b: object) -> object:
    for v in (a, b):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"tj.join() expects tiles or numbers, got {describe(v)}")
    ta, tb = tr.b.unify([a, b])
    shape = check_shape(ta.shape + (2,), "tj.join() result shape")
    return tr.b.tile(ops.JoinOp, ta.type.with_shape(shape), x=ta.value, y=tb.value)


@builtin(tile.split)
def _split(tr: Translator, x: object) -> object:
    t = as_tile(tr, x, "split", "x")
    if t.ndim == 0 or t.shape[-1] != 2:
        hint = f" (reshape it to {(*t.shape[:-1], t.shape[-1] // 2, 2)} first)" if t.ndim and t.shape[-1] > 2 else ""
        raise FrontendError(f"tj.split() needs a tile whose last dim has size 2, got shape {t.shape}{hint}")
    half = t.type.with_shape(t.shape[:-1])
    op = tr.b.emit(ops.SplitOp(results=[Value(half), Value(half)], x=t.value))
    return Tile(op.results[0]), Tile(op.results[1])


# ====================================================================== reductions, scans, mma


def _axes(axis: object, ndim: int, fn: str) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, tuple | list):
        axes = [norm_axis(a, ndim, f"tj.{fn}() axis") for a in axis]
        if len(set(axes)) != len(axes):
            raise FrontendError(f"tj.{fn}(): repeated axis in {tuple(axis)}")
        return axes
    return [norm_axis(axis, ndim, f"tj.{fn}() axis")]


def _reduce_impl(fn: str) -> Impl:
    def impl(tr: Translator, x: object, axis: object, keepdims: object) -> object:
        if not isinstance(keepdims, bool):
            raise FrontendError(f"tj.{fn}() keepdims must be a compile-time True or False, got {describe(keepdims)}")
        t = as_tile(tr, x, fn, "x")
        no_float8(f"tj.{fn}()", t)
        if fn in ("sum", "prod"):
            t = widen_for_sum(tr, t)
        ndim, shape = t.ndim, t.shape
        axes = _axes(axis, ndim, fn)
        if axes is None:
            if ndim == 0:
                return t
            if ndim > 1:
                t = tr.b.reshape(t, (t.type.size,))
            axes_to_do = [0]
        else:
            axes_to_do = sorted(axes, reverse=True)
        for a in axes_to_do:
            new_shape = t.shape[:a] + t.shape[a + 1:]
            t = tr.b.tile(ops.ReduceOp, t.type.with_shape(new_shape), fn=fn, x=t.value, axis=a)
        if keepdims:
            kept = axes if axes is not None else list(range(ndim))
            t = tr.b.reshape(t, tuple(1 if i in kept else s for i, s in enumerate(shape)))
        return t

    return impl


for _fn in ("sum", "max", "min", "prod"):
    builtin(getattr(tile, _fn))(_reduce_impl(_fn))


def _argreduce_impl(fn: str) -> Impl:
    def impl(tr: Translator, x: object, axis: object, keepdims: object) -> object:
        if not isinstance(keepdims, bool):
            raise FrontendError(f"tj.{fn}() keepdims must be a compile-time True or False, got {describe(keepdims)}")
        t = as_tile(tr, x, fn, "x")
        no_float8(f"tj.{fn}()", t)
        ndim, shape = t.ndim, t.shape
        if axis is None:
            if ndim == 0:
                return tr.b.constant(0, TileType(int32))
            if ndim > 1:
                t = tr.b.reshape(t, (t.type.size,))
            a = 0
        else:
            a = norm_axis(axis, ndim, f"tj.{fn}() axis")
        new_shape = t.shape[:a] + t.shape[a + 1:]
        r = tr.b.tile(ops.ArgReduceOp, TileType(int32, new_shape), fn=fn, x=t.value, axis=a)
        if keepdims:
            r = tr.b.reshape(r, tuple(1 if axis is None or i == a else s for i, s in enumerate(shape)))
        return r

    return impl


builtin(tile.argmax)(_argreduce_impl("argmax"))
builtin(tile.argmin)(_argreduce_impl("argmin"))


@builtin(tile.cumsum)
def _cumsum(tr: Translator, x: object, axis: object) -> object:
    t = as_tile(tr, x, "cumsum", "x")
    no_float8("tj.cumsum()", t)
    if t.ndim == 0:
        raise FrontendError("tj.cumsum() needs a tile of rank >= 1, got a scalar")
    a = norm_axis(axis, t.ndim, "tj.cumsum() axis")
    t = widen_for_sum(tr, t)
    return tr.b.tile(ops.ScanOp, t.type, fn="sum", x=t.value, axis=a)


_MMA_ACC: dict[DType, DType] = {
    float16: float32, bfloat16: float32, float32: float32, float64: float64, int8: int32, uint8: int32,
    float8_e4m3fn: float32, float8_e5m2: float32,
}


def _check_matrix(v: object, fn: str, what: str) -> Tile:
    if not isinstance(v, Tile) or v.ndim != 2:
        raise FrontendError(f"{fn}: {what} must be a 2-d tile, got {describe(v)}")
    return v


def _tf32(fn: str, precision: object, dtype: DType) -> bool:
    """Whether ``precision=`` of ``tj.mma``/``tj.matmul`` asks for tf32 (float32 inputs only)."""
    if precision not in ("ieee", "tf32"):
        raise FrontendError(f"{fn}: precision must be 'ieee' (full float32 products) or 'tf32', got "
                            f"{describe(precision)}")
    if precision == "tf32" and dtype != float32:
        raise FrontendError(f"{fn}: precision='tf32' is for float32 inputs, got {dtype.name}")
    return precision == "tf32"


@builtin(tile.mma)
def _mma(tr: Translator, a: object, b: object, acc: object, precision: object) -> object:
    ta, tb = _check_matrix(a, "tj.mma()", "a"), _check_matrix(b, "tj.mma()", "b")
    (m, k), (k2, n) = ta.shape, tb.shape
    if k != k2:
        raise FrontendError(f"tj.mma(): inner dimensions differ: a is {ta.shape} (M, K) and b is {tb.shape} (K, N)")
    if ta.dtype != tb.dtype:
        hint = "convert both to tj.float16, which holds either exactly" if ta.dtype.is_float8 and tb.dtype.is_float8 \
            else "convert one with .astype"
        raise FrontendError(
            f"tj.mma(): a and b must have the same dtype, got {ta.dtype.name} and {tb.dtype.name} ({hint})"
        )
    want = _MMA_ACC.get(ta.dtype)
    if want is None:
        raise FrontendError(
            f"tj.mma() does not support {ta.dtype.name} inputs (float16, bfloat16, float32, float64, int8, uint8, "
            "float8_e4m3fn, float8_e5m2)"
        )
    if is_number(acc):
        tacc = tr.b.constant(convert_number(acc, want), TileType(want, (m, n)))
    elif isinstance(acc, Tile):
        tacc = acc
    else:
        raise FrontendError(f"tj.mma(): acc must be a tile, got {describe(acc)}")
    if tacc.shape != (m, n):
        raise FrontendError(f"tj.mma(): acc has shape {tacc.shape} but a @ b has shape {(m, n)}")
    if tacc.dtype != want:
        raise FrontendError(
            f"tj.mma(): the accumulator must be {want.name} for {ta.dtype.name} inputs, got {tacc.dtype.name}"
        )
    tf32 = _tf32("tj.mma()", precision, ta.dtype)
    return tr.b.tile(ops.MmaOp, tacc.type, a=ta.value, b=tb.value, acc=tacc.value, tf32=tf32)


def matmul_values(tr: Translator, a: object, b: object, precision: object = "ieee", fn: str = "@") -> Tile:
    """``a @ b``: promote, accumulate from zeros like ``mma``, floats cast back to the input dtype."""
    ta, tb = _check_matrix(a, fn, "the left operand"), _check_matrix(b, fn, "the right operand")
    dtype = tr.b.common_dtype([ta, tb])
    if dtype not in _MMA_ACC:
        raise FrontendError(f"{fn} does not support {dtype.name} tiles (float16, bfloat16, float32, float64, int8, "
                            "uint8, float8_e4m3fn, float8_e5m2)")
    tf32 = _tf32(fn, precision, dtype)
    ta, tb = tr.b.cast(ta, dtype), tr.b.cast(tb, dtype)
    (m, k), (k2, n) = ta.shape, tb.shape
    if k != k2:
        raise FrontendError(f"{fn}: inner dimensions differ: {ta.shape} @ {tb.shape}")
    acc = tr.b.constant(convert_number(0, _MMA_ACC[dtype]), TileType(_MMA_ACC[dtype], (m, n)))
    r = tr.b.tile(ops.MmaOp, acc.type, a=ta.value, b=tb.value, acc=acc.value, tf32=tf32)
    return tr.b.cast(r, dtype) if dtype.is_float else r


@builtin(tile.matmul)
def _matmul(tr: Translator, a: object, b: object, precision: object) -> object:
    return matmul_values(tr, a, b, precision, "tj.matmul()")


# ====================================================================== compile time


def static_text(v: object) -> str:
    """How ``tj.static_print`` shows a value: tiles and arrays by type and shape, constants as ``print`` would."""
    if isinstance(v, Tile):
        return f"tile[{v.dtype.name}, {v.shape}]"
    if isinstance(v, Array):
        return f"array[{v.dtype.name}, {v.ndim}-d]"
    if isinstance(v, ArrayList):
        return f"array_list[{v.type.dtype.name}, {v.type.ndim}-d]"
    if isinstance(v, tuple | list) and not is_const(v):
        items = ", ".join(static_text(x) for x in v) + ("," if len(v) == 1 and isinstance(v, tuple) else "")
        return f"({items})" if isinstance(v, tuple) else f"[{items}]"
    if isinstance(v, ArrayDims | BoundMethod | Undefined):
        return describe(v)
    if isinstance(v, DType):
        return v.name
    try:
        return str(v)
    except Exception as exc:  # a user object whose __str__ raises
        raise FrontendError(f"tj.static_print(): str() of {describe(v)} raised {type(exc).__name__}: {exc}") from None


@builtin(tile.static_print)
def _static_print(tr: Translator, values: tuple[object, ...]) -> object:
    tr.static_output.append(" ".join(static_text(v) for v in values))
    return None


@builtin(tile.static_assert)
def _static_assert(tr: Translator, cond: object, msg: object) -> object:
    if not is_const(cond):
        raise FrontendError(
            f"tj.static_assert(): the condition must be known at compile time, got {describe(cond)} (a value known "
            "only at run time; compare constants, shapes or dtypes)"
        )
    try:
        holds = bool(cond)
    except Exception as exc:
        raise FrontendError(f"tj.static_assert(): the truth of {describe(cond)} is unknown: {exc}") from None
    if not holds:
        raise FrontendError("static assertion failed" + ("" if msg is None else f": {static_text(msg)}"))
    return None


# ====================================================================== attributes and subscripts

_METHODS: dict[str, Callable[..., Any]] = {
    "astype": tile.astype, "reshape": tile.reshape, "transpose": tile.transpose, "expand_dims": tile.expand_dims,
    "broadcast_to": tile.broadcast_to, "sum": tile.sum, "max": tile.max, "min": tile.min, "prod": tile.prod,
    "argmax": tile.argmax, "argmin": tile.argmin, "cumsum": tile.cumsum, "extract": tile.extract, "split": tile.split,
}


def get_attribute(tr: Translator, obj: object, attr: str) -> object:
    """``obj.attr`` for tiles (shape, dtype, ndim, T, methods), arrays and compile-time objects."""
    if isinstance(obj, Tile):
        if attr == "shape":
            return obj.shape
        if attr == "dtype":
            return obj.dtype
        if attr == "ndim":
            return obj.ndim
        if attr == "size":
            return obj.type.size
        if attr == "T":
            return _transpose(tr, obj, None)
        if attr in _METHODS:
            return BoundMethod(obj, attr)
        raise FrontendError(f"a tile has no attribute '{attr}'")
    if isinstance(obj, Array):
        if attr == "shape":
            return ArrayDims(obj, "shape")
        if attr == "strides":
            return ArrayDims(obj, "stride")
        if attr == "ndim":
            return obj.ndim
        if attr == "dtype":
            return obj.dtype
        raise FrontendError(f"the array '{obj.name}' has no attribute '{attr}' (shape, strides, ndim, dtype)")
    if isinstance(obj, ArrayList):
        if attr == "ndim":
            return obj.type.ndim
        if attr == "dtype":
            return obj.type.dtype
        raise FrontendError(
            f"the array list '{obj.name}' has no attribute '{attr}' (ndim, dtype; len({obj.name}) counts its "
            f"arrays, {obj.name}[i] is one of them)"
        )
    if isinstance(obj, ArrayDims | BoundMethod | Undefined) or not is_const(obj):
        raise FrontendError(f"{describe(obj)} has no attribute '{attr}'")
    if attr.startswith("__"):
        raise FrontendError(f"attribute '{attr}' cannot be used in tile code")
    try:
        return normalize_const(getattr(obj, attr))
    except AttributeError:
        raise FrontendError(f"{describe(obj)} has no attribute '{attr}'") from None
    except Exception as exc:  # a property of a user's object that raises
        raise FrontendError(
            f"reading attribute '{attr}' of {describe(obj)} raised {type(exc).__name__}: {exc}"
        ) from None


def as_sequence(tr: Translator, v: object) -> tuple[object, ...] | None:
    """``v`` as a tuple of items when it can be iterated at compile time (``array.shape`` too)."""
    if isinstance(v, tuple | list | range):
        check_iterable(v)
        return tuple(v)
    if isinstance(v, ArrayDims):
        return tuple(tr.b.array_dim(v.array.value, i, v.which) for i in range(v.array.ndim))
    return None


def _array_item(tr: Translator, arrays: ArrayList, index: object) -> Array:
    """``arrays[index]``: one array of an array list, by an integer scalar known at compile or run time (out of
    range: an empty array, so loads read the padding and stores write nothing)."""
    if (isinstance(index, Tile) and (not index.type.is_scalar or not index.dtype.is_int)) or (
        not isinstance(index, Tile) and (isinstance(index, bool) or not isinstance(index, int))
    ):
        raise FrontendError(
            f"the index into the array list '{arrays.name}' must be an integer scalar, got {describe(index)}"
        )
    ix = tr.b.index_scalar(index, f"the index into '{arrays.name}'")
    shown_ix = str(index) if isinstance(index, int) else "i"
    return Array(tr.b.array_item(arrays.value, ix), f"{arrays.name}[{shown_ix}]")


def subscript(tr: Translator, obj: object, index: object) -> object:
    """``obj[index]``: tuples and constants, ``array.shape[i]``, ``tile[None, :]`` and ``arrays[i]``."""
    if isinstance(obj, ArrayList):
        return _array_item(tr, obj, index)
    if isinstance(index, Tile):
        raise FrontendError(
            f"the index into {describe(obj)} must be a compile-time constant, got {describe(index)} (a range() "
            "loop variable is a run-time value: loop with tj.static_range(...) to unroll at compile time)"
        )
    if isinstance(obj, ArrayDims):
        arr = obj.array
        i = const_int(index, f"{arr.name}.{'shape' if obj.which == 'shape' else 'strides'} index")
        if not -arr.ndim <= i < arr.ndim:
            raise FrontendError(f"index {i} is out of range for the {arr.ndim}-d array '{arr.name}'")
        return tr.b.array_dim(arr.value, i % arr.ndim, obj.which)
    if isinstance(obj, Tile):
        return _tile_subscript(tr, obj, index)
    if isinstance(obj, Array):
        raise FrontendError(
            f"arrays cannot be indexed in tile code; read '{obj.name}' with tj.load(array, index=..., shape=...) "
            "or tj.gather"
        )
    if isinstance(obj, tuple | list | str | range | dict) or is_const(obj):
        if not is_const(index):
            raise FrontendError(f"the index into {describe(obj)} must be a compile-time constant")
        try:
            return normalize_const(obj[index])  # type: ignore[index]
        except (IndexError, KeyError, TypeError) as exc:
            raise FrontendError(f"cannot index {describe(obj)} with {index!r}: {exc}") from None
    raise FrontendError(f"{describe(obj)} cannot be indexed")


def _tile_subscript(tr: Translator, t: Tile, index: object) -> Tile:
    items = index if isinstance(index, tuple) else (index,)
    full = slice(None)
    if not all(i is None or i is Ellipsis or i == full for i in items if not isinstance(i, Tile)) or any(
        isinstance(i, Tile) for i in items
    ):
        raise FrontendError(
            "tiles can only be indexed with None and ':' (to add dimensions); read elements with reductions, "
            "tj.where, or load/gather from an array"
        )
    if builtins.sum(1 for i in items if i is Ellipsis) > 1:
        raise FrontendError("an index can only have one ellipsis (...)")
    n_slices = builtins.sum(1 for i in items if isinstance(i, slice))
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + (full,) * (t.ndim - n_slices) + items[k + 1:]
        n_slices = t.ndim
    if n_slices > t.ndim:
        raise FrontendError(f"too many indices for a tile of rank {t.ndim}")
    items = items + (full,) * (t.ndim - n_slices)
    shape: list[int] = []
    dims = iter(t.shape)
    for i in items:
        shape.append(1 if i is None else next(dims))
    return tr.b.reshape(t, tuple(shape))


# ====================================================================== calls


def _call_method(tr: Translator, m: BoundMethod, args: list[object], kwargs: dict[str, object]) -> object:
    api = _METHODS[m.name]
    if m.name in ("reshape", "transpose") and len(args) > 1:
        args = [tuple(args)]  # numpy style: t.reshape(4, 8), t.transpose(1, 0)
    arguments = bind(api, f".{m.name}", [m.obj, *args], kwargs)
    return BUILTINS[id(api)][1](tr, **arguments)


def _py_int_float_bool(tr: Translator, kind: type, args: list[object]) -> object:
    if len(args) == 1 and isinstance(args[0], Tile):
        t = args[0]
        if not t.type.is_scalar:
            raise FrontendError(f"{kind.__name__}() of a tile of shape {t.shape}: only scalars convert")
        return tr.b.cast(t, {int: int32, float: float32, bool: bool_}[kind])
    if not all(is_const(a) for a in args):
        raise FrontendError(f"{kind.__name__}() works on compile-time values and scalars")
    try:
        return tr.budget.check(normalize_const(kind(*args)), f"the result of {kind.__name__}()")
    except ValueError as exc:
        if len(args) >= 1 and isinstance(args[0], str | bytes):
            base = f" in base {shown(args[1])}" if len(args) == 2 else ""
            why = f" ({exc})" if "limit" in str(exc) else ""
            raise FrontendError(f"{kind.__name__}() of {shown(args[0])} is not a number{base}{why}") from None
        raise FrontendError(f"{kind.__name__}() of {', '.join(describe(a) for a in args)}: not a valid value") from None
    except (TypeError, OverflowError, ZeroDivisionError) as exc:
        raise FrontendError(f"{kind.__name__}(): {exc}") from None


def _py_len(tr: Translator, v: object) -> object:
    if isinstance(v, Tile):
        if v.ndim == 0:
            raise FrontendError("len() of a scalar")
        return v.shape[0]
    if isinstance(v, Array):
        return tr.b.array_dim(v.value, 0, "shape")
    if isinstance(v, ArrayList):
        return tr.b.array_count(v.value)
    if isinstance(v, ArrayDims):
        return v.array.ndim
    if isinstance(v, range):
        return range_len(v)
    if isinstance(v, tuple | list | str | dict):
        return len(v)
    raise FrontendError(f"len() of {describe(v)}")


#: Python builtins that also take run-time values (tiles, scalars): then they are the tj function named here,
#: the same implementation (promotion, weak Python numbers, broadcasting, NaN); ``min``/``max`` of several
#: arguments nest it from the left. With compile-time arguments only they stay Python's (``_CONST_ONLY``).
_RUNTIME: dict[Any, Callable[..., Any]] = {abs: tile.abs, min: tile.minimum, max: tile.maximum}
_STRUCTURAL = {tuple, list, enumerate, zip, reversed, isinstance}
_CONST_ONLY = {range, min, max, sum, abs, divmod, round, sorted, str, repr, any, all, hash, type, slice, pow}
#: the builtins that iterate their arguments (each at most MAX_ITERATIONS items)
_ITERATING = {tuple, list, enumerate, zip, reversed, min, max, sum, sorted, any, all}


def _sum_sequences(items: tuple[object, ...], start: tuple[object, ...] | list[object]) -> object:
    """``sum(items, start)`` for a tuple or list ``start``, in linear time (Python's sum copies the
    growing result once per item)."""
    kind = type(start)
    for item in items:
        if type(item) is not kind:
            raise FrontendError(f'sum(): can only concatenate {kind.__name__} (not "{type(item).__name__}") to '
                                f"{kind.__name__}")
    return kind(itertools.chain(start, *items))  # type: ignore[arg-type]


def _call_const_builtin(tr: Translator, fn: Any, args: list[object], kwargs: dict[str, object]) -> object:
    """A Python builtin on compile-time values, with the few whose work is not bounded by their
    arguments' size (pow, round to a huge negative ndigits, sum of tuples) kept in bounds."""
    if fn is builtins.pow:
        given = [*args, *(kwargs[k] for k in ("base", "exp", "mod") if k in kwargs)]
        tr.budget.check_pow_call(given[:2] if len(given) == 3 and given[2] is None else given)
    if fn is builtins.round:
        number, ndigits = [*args, *(kwargs[k] for k in ("number", "ndigits") if k in kwargs), None][:2]
        if isinstance(number, int) and isinstance(ndigits, int) and ndigits < 0 and -ndigits > number.bit_length():
            return 0  # 10 ** -ndigits is more than twice the number (Python would compute it first)
    if fn is builtins.sum and args and not isinstance(args[0], str):
        start = kwargs.get("start", args[1] if len(args) > 1 else 0)
        if isinstance(start, tuple | list) and len(args) <= 2 and set(kwargs) <= {"start"}:
            items = as_sequence(tr, args[0])
            if items is not None:
                return _sum_sequences(items, start)
    return fn(*args, **kwargs)


def _runtime_builtin(tr: Translator, fn: Any, args: list[object], kwargs: dict[str, object]) -> object:
    """``abs(x)``, ``min(a, b, ...)`` or ``max(a, b, ...)`` with a run-time argument: ``tj.abs(x)``,
    ``tj.minimum(tj.minimum(a, b), ...)``, ``tj.maximum(...)``."""
    name = fn.__name__
    if kwargs:
        raise FrontendError(
            f"{name}() of run-time values takes no keyword arguments (got {', '.join(f'{k}=' for k in kwargs)}); "
            "key= and default= work only when every argument is a compile-time value"
        )
    if fn is builtins.abs:
        if len(args) != 1:
            raise FrontendError(f"abs() takes exactly one argument ({len(args)} given)")
    elif len(args) == 1:
        what = "minimum" if fn is builtins.min else "maximum"
        raise FrontendError(
            f"{name}() of one run-time argument ({describe(args[0])}) is not supported: for the {what} of a tile's "
            f"elements use tj.{name}(t, axis=...); for the element-wise {what} pass two or more arguments, "
            f"{name}(a, b, ...)"
        )
    for a in args:
        if not isinstance(a, Tile) and not is_number(a):
            raise FrontendError(f"{name}() of run-time values expects tiles or numbers, got {describe(a)}")
    api = _RUNTIME[fn]
    impl = BUILTINS[id(api)][1]
    result = args[0]
    if fn is builtins.abs:
        return impl(tr, result)
    for a in args[1:]:
        result = impl(tr, result, a)
    return result


def _call_python_builtin(tr: Translator, fn: Any, args: list[object], kwargs: dict[str, object]) -> object:
    if fn in (int, float, bool) and not kwargs:
        return _py_int_float_bool(tr, fn, args)
    if fn is len and len(args) == 1 and not kwargs:
        return _py_len(tr, args[0])
    if fn in _RUNTIME and not (all(is_const(a) for a in args) and all(is_const(v) for v in kwargs.values())):
        return _runtime_builtin(tr, fn, args, kwargs)
    if fn in _ITERATING:
        for a in args:
            check_iterable(a, f"{fn.__name__}(): ")
    if fn in _STRUCTURAL:
        try:
            out = fn(*args, **kwargs)
            out = tuple(out) if isinstance(out, enumerate | zip | reversed | list) else out
        except (TypeError, ValueError) as exc:  # ValueError: zip(..., strict=True) of unequal lengths
            raise FrontendError(f"{fn.__name__}(): {exc}") from None
        return tr.budget.check(out, f"the result of {fn.__name__}()")
    if fn in _CONST_ONLY:
        if not all(is_const(a) for a in args) or not all(is_const(a) for a in kwargs.values()):
            hint = {sum: "tj.sum"}.get(fn)
            raise FrontendError(
                f"{fn.__name__}() works on compile-time values only" + (f"; for tiles use {hint}" if hint else "")
            )
        try:
            result = normalize_const(_call_const_builtin(tr, fn, args, kwargs))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise FrontendError(f"{fn.__name__}(): {exc}") from None
        return tr.budget.check(result, f"the result of {fn.__name__}()")
    raise FrontendError(f"the Python builtin {fn.__name__}() is not supported in tile code")


def call(tr: Translator, callee: object, args: list[object], kwargs: dict[str, object], node: ast.AST) -> object:
    """Call ``callee`` from tile code: a tj builtin, a tile method, an inlined @tj.function, a dtype
    (conversion), or a Python builtin/math function on compile-time values."""
    if isinstance(callee, BoundMethod):
        return _call_method(tr, callee, args, kwargs)
    entry = BUILTINS.get(id(callee))
    if entry is not None and entry[0] is callee:
        api, impl = entry
        return impl(tr, **bind(api, f"tj.{api.__name__}", args, kwargs))
    if isinstance(callee, tile.TileFunction):
        return tr.inline(callee.func, args, kwargs)
    if isinstance(callee, DType):
        if len(args) != 1 or kwargs:
            raise FrontendError(f"{callee!r}() takes one value to convert")
        return _astype(tr, args[0], callee)
    if isinstance(callee, type) and issubclass(callee, BaseException):
        if not all(is_const(a) for a in args):
            raise FrontendError("exceptions can only be built from compile-time values")
        return callee(*args)
    if getattr(builtins, getattr(callee, "__name__", ""), None) is callee and callable(callee):
        return _call_python_builtin(tr, callee, args, kwargs)
    if getattr(callee, "__module__", None) == "math" and callable(callee):
        name = getattr(callee, "__name__", "?")
        if not all(is_const(a) for a in args) or kwargs:
            raise FrontendError(f"math.{name}() works on compile-time values only; use the tj.* math functions "
                                "on tiles")
        check_math_call(name, args)
        try:
            result = normalize_const(callee(*args))
        except (ValueError, TypeError, OverflowError) as exc:
            raise FrontendError(f"math.{name}(): {exc}") from None
        return tr.budget.check(result, f"the result of math.{name}()")
    cls = type(callee)
    if cls.__name__ == "Kernel" and cls.__module__.startswith("tilejit."):
        raise FrontendError(
            "a @tj.kernel cannot be called from tile code; make the shared code a @tj.function and call that"
        )
    if callable(callee):
        name = getattr(callee, "__qualname__", None) or getattr(callee, "__name__", None) or repr(callee)
        raise FrontendError(
            f"cannot call the Python function '{name}' in tile code: only tj.* functions, @tj.function helpers "
            "and a few builtins on compile-time values can be called (decorate it with @tj.function)"
        )
    raise FrontendError(f"{describe(callee)} is not callable")


# tj.umulhi, tj.philox and the random numbers register themselves (a module of their own; it imports this one)
from tilejit.language.frontend import philox as _philox  # noqa: E402, F401
