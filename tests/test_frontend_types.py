"""Typing rules of the front end: weak Python scalars, promotion, broadcasting, and each builtin's
result type. A kernel assigns the value under test to ``r``; the test reads the type of ``r``."""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import tilejit as tj
from tilejit.language import tile
from tilejit.language.frontend import calls
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops
from tilejit.language.ir.types import (
    ArrayType,
    DType,
    TileType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    scalar,
    uint8,
    uint32,
)
from tilejit.language.ir.verifier import verify


def lower(kernel: Callable[..., Any], dtype: DType = float32, consts: dict[str, Any] | None = None) -> ops.Function:
    fn = translate(kernel, {"x": ArrayType(dtype, 1), "y": ArrayType(dtype, 2), "n": scalar(int32)},
                   {"DT": dtype, **(consts or {})})
    verify(fn)
    return fn


def typeof(kernel: Callable[..., Any], dtype: DType = float32, consts: dict[str, Any] | None = None) -> TileType:
    fn = lower(kernel, dtype, consts)
    found = [r.type for op in fn.body.walk() for r in op.results if r.name == "r"]
    assert found, "the kernel assigns no tile to r"
    t = found[-1]
    assert isinstance(t, TileType)
    return t


def producer(fn: ops.Function, name: str = "r") -> ops.Op:
    return next(op for op in fn.body.walk() if any(r.name == name for r in op.results))


def vec(x, y, n, DT: tj.Constant[object]):
    return tj.load(x, index=(0,), shape=(16,))


# ---------------------------------------------------------------------------------------------- weak scalars


def k_plus_int(x, y, n, DT: tj.Constant[object]):
    r = tj.load(x, index=(0,), shape=(16,)) + 1


def k_plus_float(x, y, n, DT: tj.Constant[object]):
    r = tj.load(x, index=(0,), shape=(16,)) * 0.5


def k_int_div(x, y, n, DT: tj.Constant[object]):
    r = tj.load(x, index=(0,), shape=(16,)) / 2


@pytest.mark.parametrize(
    ("dtype", "int_result", "float_result", "div_result"),
    [
        (float16, float16, float16, float16),
        (bfloat16, bfloat16, bfloat16, bfloat16),
        (float32, float32, float32, float32),
        (float64, float64, float64, float64),
        (int8, int8, float32, float32),
        (int32, int32, float32, float32),
        (int64, int64, float32, float32),
        (uint8, uint8, float32, float32),
        (bool_, int32, float32, float32),
    ],
)
def test_python_numbers_are_weak(dtype: DType, int_result: DType, float_result: DType, div_result: DType) -> None:
    assert typeof(k_plus_int, dtype) == TileType(int_result, (16,))
    assert typeof(k_plus_float, dtype) == TileType(float_result, (16,))
    assert typeof(k_int_div, dtype) == TileType(div_result, (16,))


def k_mixed(x, y, n, DT: tj.Constant[object]):
    a = tj.load(x, index=(0,), shape=(16,))
    b = tj.load(y, index=(0, 0), shape=(1, 16)).astype(DT)
    r = a + b


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (float16, float32, float32),
        (float16, bfloat16, float32),
        (int8, int16, int16),
        (int8, uint8, int16),
        (uint32, int32, int64),
        (int32, float16, float16),  # int with float gives the float (no silent float64)
        (int64, float32, float32),
        (bool_, int8, int8),
        (float32, float64, float64),
    ],
)
def test_promotion_of_two_tiles(a: DType, b: DType, want: DType) -> None:
    fn = translate(k_mixed, {"x": ArrayType(a, 1), "y": ArrayType(a, 2), "n": scalar(int32)}, {"DT": b})
    verify(fn)
    r = producer(fn)
    assert r.results[0].type == TileType(want, (1, 16))
    assert isinstance(r, ops.BinaryOp)
    assert r.x.type == r.y.type == TileType(want, (1, 16))


def k_scalar_int(x, y, n, DT: tj.Constant[object]):
    r = tj.load(x, index=(0,), shape=(16,)) * n


def test_int_scalar_with_float_tile_keeps_the_float() -> None:
    assert typeof(k_scalar_int, float16) == TileType(float16, (16,))
    assert typeof(k_scalar_int, int8) == TileType(int32, (16,))  # int8 with an int32 scalar: numpy promotion


def k_overflow_u8(x, y, n, DT: tj.Constant[object]):
    r = tj.load(x, index=(0,), shape=(16,)) - (-1)


def test_negative_constant_with_unsigned_tile_is_an_error() -> None:
    with pytest.raises(tj.TileCompileError, match="the constant -1 does not fit in uint8"):
        lower(k_overflow_u8, uint8)


# ---------------------------------------------------------------------------------------------- broadcasting


def k_outer(x, y, n, DT: tj.Constant[object]):
    col = tj.load(y, index=(0, 0), shape=(16, 1))
    row = tj.load(x, index=(0,), shape=(32,))
    r = col < row


def test_broadcast_outer_compare() -> None:
    fn = lower(k_outer)
    r = producer(fn)
    assert isinstance(r, ops.CompareOp) and r.result.type == TileType(bool_, (16, 32))
    assert r.x.type == r.y.type == TileType(float32, (16, 32))
    bcasts = [op for op in fn.body.ops if isinstance(op, ops.BroadcastOp)]
    assert len(bcasts) == 2
    reshape = next(op for op in fn.body.ops if isinstance(op, ops.ReshapeOp))
    assert reshape.result.type == TileType(float32, (1, 32))  # rank extension before broadcasting


def k_scalar_bcast(x, y, n, DT: tj.Constant[object]):
    r = tj.load(y, index=(0, 0), shape=(4, 8)) + x.shape[0]


def test_scalar_broadcasts_directly() -> None:
    fn = lower(k_scalar_bcast)
    r = producer(fn)
    assert r.results[0].type == TileType(float32, (4, 8))
    b = next(op for op in fn.body.ops if isinstance(op, ops.BroadcastOp))
    assert b.x.type == TileType(float32)  # int64 dim cast to float32, then broadcast


# ---------------------------------------------------------------------------------------------- builtins


def k_math_int(x, y, n, DT: tj.Constant[object]):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.exp(t)
    a = tj.abs(t)
    m = tj.maximum(t, 3)


def test_float_math_on_ints_uses_float32() -> None:
    fn = lower(k_math_int, int16)
    assert producer(fn).results[0].type == TileType(float32, (16,))
    assert producer(fn, "a").results[0].type == TileType(int16, (16,))
    assert producer(fn, "m").results[0].type == TileType(int16, (16,))


def k_where(x, y, n, DT: tj.Constant[object]):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.where(t > 0, t, 0)


def test_where_promotes_and_broadcasts() -> None:
    r = producer(lower(k_where, float16))
    assert isinstance(r, ops.SelectOp)
    assert r.result.type == TileType(float16, (16,)) and r.cond.type == TileType(bool_, (16,))


def k_reduce(x, y, n, DT: tj.Constant[object]):
    t = tj.load(y, index=(0, 0), shape=(4, 8))
    r = tj.sum(t)
    s = t.sum(axis=-1, keepdims=True)
    m = tj.max(t, axis=(0, 1), keepdims=True)
    a = tj.argmax(t, axis=0)
    c = tj.cumsum(t, axis=1)


def test_reductions() -> None:
    fn = lower(k_reduce, int8)
    assert producer(fn).results[0].type == TileType(int32)  # small ints sum in int32
    assert producer(fn, "s").results[0].type == TileType(int32, (4, 1))
    assert producer(fn, "m").results[0].type == TileType(int8, (1, 1))
    assert producer(fn, "a").results[0].type == TileType(int32, (8,))
    assert producer(fn, "c").results[0].type == TileType(int32, (4, 8))
    full = next(op for op in fn.body.ops if isinstance(op, ops.ReduceOp))
    assert full.x.type == TileType(int32, (32,))  # axis=None: reshape to 1-d, one reduce


def k_shapes(x, y, n, DT: tj.Constant[object]):
    t = tj.load(y, index=(0, 0), shape=(4, 8))
    r = t.T
    p = tj.reshape(t, (-1,))
    e = tj.expand_dims(p, 0)
    b = tj.broadcast_to(e, (2, 32))
    q = p[None, :]
    z = tj.transpose(tj.reshape(t, (2, 2, 8)), (2, 0, 1))


def test_shape_ops() -> None:
    fn = lower(k_shapes)
    assert producer(fn).results[0].type == TileType(float32, (8, 4))
    assert producer(fn, "p").results[0].type == TileType(float32, (32,))
    assert producer(fn, "e").results[0].type == TileType(float32, (1, 32))
    assert producer(fn, "b").results[0].type == TileType(float32, (2, 32))
    assert producer(fn, "q").results[0].type == TileType(float32, (1, 32))
    z = producer(fn, "z")
    assert isinstance(z, ops.PermuteOp) and z.perm == (2, 0, 1) and z.result.type == TileType(float32, (8, 2, 2))


def k_matmul(x, y, n, DT: tj.Constant[object]):
    a = tj.load(y, index=(0, 0), shape=(16, 32))
    b = tj.load(y, index=(0, 0), shape=(32, 8))
    r = a @ b


def test_matmul_operator() -> None:
    fn = lower(k_matmul, float16)
    mma = next(op for op in fn.body.ops if isinstance(op, ops.MmaOp))
    assert mma.acc.type == TileType(float32, (16, 8))
    assert producer(fn).results[0].type == TileType(float16, (16, 8))  # cast back like numpy
    fn = lower(k_matmul, int8)
    assert producer(fn).results[0].type == TileType(int32, (16, 8))


def k_store_cast(x, y, n, DT: tj.Constant[object]):
    tj.store(x, index=(0,), tile=tj.arange(16))
    tj.store(y, index=(n, 0), tile=tj.full((1, 4), 7.0, tj.float64))


def test_store_casts_to_the_array_dtype() -> None:
    fn = lower(k_store_cast, float16)
    stores = [op for op in fn.body.ops if isinstance(op, ops.StoreOp)]
    assert [s.tile.type for s in stores] == [TileType(float16, (16,)), TileType(float16, (1, 4))]


def k_atomics(x, y, n, DT: tj.Constant[object]):
    idx = tj.arange(16)
    r = tj.atomic_add(x, idx, 1)
    c = tj.atomic_cas(y, (idx[:, None], tj.arange(4)[None, :]), 0, n)
    g = tj.gather(y, (0, idx))


def test_atomics_and_gather() -> None:
    fn = lower(k_atomics, int32)
    r = producer(fn)
    assert isinstance(r, ops.AtomicOp) and r.kind == "add" and r.value.type == TileType(int32, (16,))
    c = producer(fn, "c")
    assert isinstance(c, ops.AtomicOp) and c.kind == "cas" and c.result.type == TileType(int32, (16, 4))
    assert [i.type.shape for i in c.indices] == [(16, 4), (16, 4)]  # type: ignore[union-attr]
    assert c.compare[0].type == TileType(int32, (16, 4))
    g = producer(fn, "g")
    assert isinstance(g, ops.GatherOp) and g.result.type == TileType(int32, (16,))
    with pytest.raises(tj.TileCompileError, match=r"tj.atomic_add\(\) does not support int8 arrays"):
        lower(k_atomics, int8)


def k_runtime_ternary(x, y, n, DT: tj.Constant[object]):
    r = 1.5 if n > 0 else 2


def test_runtime_conditional_expression() -> None:
    r = producer(lower(k_runtime_ternary))
    assert isinstance(r, ops.SelectOp) and r.result.type == TileType(float32)


def k_chained(x, y, n, DT: tj.Constant[object]):
    r = 0 < n < 10


def test_chained_comparison() -> None:
    r = producer(lower(k_chained))
    assert isinstance(r, ops.BinaryOp) and r.fn == "and" and r.result.type == TileType(bool_)


def k_consts(x, y, n, DT: tj.Constant[object]):
    r = tj.full((2,), tj.cdiv(10, 4) * 2 ** 3 + (7 // 2) - len((1, 2)), tj.int32)


def test_constant_arithmetic_folds_in_python() -> None:
    fn = lower(k_consts)
    r = producer(fn)
    assert isinstance(r, ops.ConstantOp) and r.value == 3 * 8 + 3 - 2


# ---------------------------------------------------------------------------------------------- the API itself


def test_every_tile_function_has_an_implementation_with_the_same_parameters() -> None:
    for name in tile.__all__:
        api = getattr(tile, name)
        if not inspect.isfunction(api) or name in calls.HOST_ONLY:  # tj.function, tj.array_list: not tile code
            continue
        entry = calls.BUILTINS.get(id(api))
        assert entry is not None, f"tj.{name} has no implementation"
        params = list(inspect.signature(api).parameters)
        impl_params = list(inspect.signature(entry[1]).parameters)[1:]
        assert impl_params == params, f"tj.{name}: {impl_params} != {params}"
        assert api.__doc__, f"tj.{name} has no docstring"


def test_public_names_resolve_from_the_package() -> None:
    assert tj.load is tile.load and tj.float32 is float32 and tj.Constant is tile.Constant


def test_types_and_targets_pickle_and_copy() -> None:
    """Signatures and targets can cross process boundaries (multiprocessing, AOT build pools) and be copied;
    a predefined dtype comes back as itself."""
    import copy
    import pickle

    from tilejit.compiler.targets import parse_target
    from tilejit.language.ir.types import ArrayHint, TileType

    values = [tj.float32, tj.bfloat16[:, ::1], tj.int8[:], TileType(tj.float16, (4, 8)), ArrayHint(True, False),
              parse_target("sm_90a"), parse_target("sm_120")]
    for v in values:
        for back in (pickle.loads(pickle.dumps(v)), copy.deepcopy(v), copy.copy(v)):
            assert back == v and repr(back) == repr(v)
    assert pickle.loads(pickle.dumps(tj.bfloat16)) is tj.bfloat16
    assert pickle.loads(pickle.dumps(tj.float16[:, ::1])).contiguous is True


# ---------------------------------------------------------------------------------------------- numpy edge rules


def k_bool_ops(x, y, n, DT: tj.Constant[object]):
    a = tj.load(x, index=(0,), shape=(16,)) > 0
    b = tj.load(x, index=(0,), shape=(16,)) < 1
    if DT == "add":
        r = a + b
    elif DT == "mul":
        r = a * b
    elif DT == "floordiv":
        r = a // b
    elif DT == "mod":
        r = a % b
    elif DT == "pow":
        r = a**b
    else:
        r = a - b


@pytest.mark.parametrize(("op", "want"), [("add", bool_), ("mul", bool_), ("floordiv", int8), ("mod", int8),
                                          ("pow", int8)])
def test_bool_arithmetic_types_follow_numpy(op: str, want: DType) -> None:
    """numpy: bool + bool and bool * bool are bool (or / and); //, % and ** give int8. They gave int32
    (True + True == 2)."""
    fn = translate(k_bool_ops, {"x": ArrayType(float32, 1), "y": ArrayType(float32, 2), "n": scalar(int32)},
                   {"DT": op})
    verify(fn)
    r = producer(fn)
    assert r.results[0].type == TileType(want, (16,))


def test_bool_subtract_is_an_error() -> None:
    with pytest.raises(tj.TileCompileError, match="not defined for bool"):
        translate(k_bool_ops, {"x": ArrayType(float32, 1), "y": ArrayType(float32, 2), "n": scalar(int32)},
                  {"DT": "sub"})


def k_cmp_u64(x, y, n, DT: tj.Constant[object]):
    a = tj.load(x, index=(0,), shape=(16,))
    b = tj.load(y, index=(0, 0), shape=(1, 16)).astype(tj.uint64)
    if DT == "lt":
        r = a < b
    else:
        r = b <= a


@pytest.mark.parametrize("op", ["lt", "le"])
@pytest.mark.parametrize("dtype", [int8, int32, int64])
def test_signed_vs_uint64_compares_exactly(op: str, dtype: DType) -> None:
    """numpy compares int64 with uint64 exactly; promotion gave float64 (2**53 + 1 == 2**53)."""
    fn = translate(k_cmp_u64, {"x": ArrayType(dtype, 1), "y": ArrayType(dtype, 2), "n": scalar(int32)}, {"DT": op})
    verify(fn)
    for o in fn.body.walk():
        for res in o.results:
            assert isinstance(res.type, TileType) and not res.type.dtype.is_float, o
    assert producer(fn).results[0].type == TileType(bool_, (1, 16))


def k_floor_ceil(x, y, n, DT: tj.Constant[object]):
    a = tj.load(x, index=(0,), shape=(16,))
    r = tj.floor(a) + tj.ceil(a)


@pytest.mark.parametrize("dtype", [bool_, int8, int32, int64, uint8, uint32])
def test_floor_ceil_keep_integer_dtypes(dtype: DType) -> None:
    """numpy 2: floor/ceil of integers keep the dtype; they went through float32 (16777217 -> 16777216)."""
    fn = lower(k_floor_ceil, dtype)
    assert not any(isinstance(o, ops.CastOp) for o in fn.body.walk())
    assert typeof(k_floor_ceil, dtype) == TileType(dtype, (16,))  # bool + bool stays bool
