"""Constant folding, CSE and DCE: on hand-built IR (exact effects) and on translated kernels."""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import math

import pytest

import tilejit as tj
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.passes import eliminate_common, eliminate_dead, fold_constants, run_passes
from tilejit.language.ir.printer import print_function
from tilejit.language.ir.types import ArrayType, DType, TileType, bfloat16, bool_, float16, float32, int8, int32, uint8
from tilejit.language.ir.verifier import verify

I32 = TileType(int32)
F32 = TileType(float32)


def const(value: object, type: TileType) -> ops.ConstantOp:
    return ops.ConstantOp(results=[Value(type)], value=value)


def func(body: list[ops.Op], params: list[Value] | None = None) -> ops.Function:
    params = params or [Value(ArrayType(float32, 1), "x")]
    return ops.Function("k", [p.name for p in params], Block(args=params, ops=[*body, ops.ReturnOp()]))


def folded(op_factory: type[ops.Op], result: TileType, *operands: tuple[object, TileType], **attrs: object) -> object:
    """Fold one op on constant operands and return the resulting constant (or the op, if not folded)."""
    cs = [const(v, t) for v, t in operands]
    names = {"UnaryOp": ["x"], "CastOp": ["x"], "BroadcastOp": ["x"], "ReshapeOp": ["x"], "PermuteOp": ["x"],
             "BinaryOp": ["x", "y"], "CompareOp": ["x", "y"], "SelectOp": ["cond", "x", "y"]}[op_factory.__name__]
    op = op_factory(results=[Value(result)], **dict(zip(names, (c.result for c in cs))), **attrs)
    x = Value(ArrayType(result.dtype, max(result.ndim, 1)), "x")
    store_val = op.results[0]
    body: list[ops.Op] = [*cs, op]
    if result.ndim == 0:
        r = ops.ReshapeOp(results=[Value(TileType(result.dtype, (1,)))], x=store_val)
        body.append(r)
        store_val = r.result
    zero = const(0, I32)
    body += [zero, ops.StoreOp(array=x, index=[zero.result] * max(result.ndim, 1), tile=store_val)]
    fn = func(body, [x])
    verify(fn)
    fold_constants(fn)
    verify(fn)
    producer = next(o for o in fn.body.ops if op.results[0] in o.results)
    return producer.value if isinstance(producer, ops.ConstantOp) else producer


@pytest.mark.parametrize(
    ("fn", "a", "b", "dtype", "want"),
    [
        ("add", 2, 3, int32, 5),
        ("add", 2**31 - 1, 1, int32, -(2**31)),  # wraps like the GPU
        ("add", 250, 10, uint8, 4),
        ("sub", 1.5, 0.25, float32, 1.25),
        ("mul", 3, -4, int8, -12),
        ("truediv", 1.0, 3.0, float32, float(__import__("numpy").float32(1) / __import__("numpy").float32(3))),
        ("floordiv", -7, 2, int32, -4),  # Python floor semantics
        ("mod", -7, 2, int32, 1),
        ("pow", 2, 10, int32, 1024),
        ("maximum", 2.0, 5.0, float32, 5.0),
        ("and", 12, 10, int32, 8),
        ("xor", True, True, bool_, False),
        ("lshift", 1, 4, int32, 16),
        ("add", 65504.0, 65504.0, float16, math.inf),
    ],
)
def test_fold_binary(fn: str, a: object, b: object, dtype: DType, want: object) -> None:
    t = TileType(dtype)
    got = folded(ops.BinaryOp, t, (a, t), (b, t), fn=fn)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    ("fn", "a", "b", "dtype"),
    [("floordiv", 1, 0, int32), ("mod", 1, 0, int32), ("lshift", 1, 40, int32), ("maximum", math.nan, 1.0, float32)],
)
def test_undefined_or_platform_dependent_results_are_not_folded(fn: str, a: object, b: object, dtype: DType) -> None:
    t = TileType(dtype)
    assert isinstance(folded(ops.BinaryOp, t, (a, t), (b, t), fn=fn), ops.BinaryOp)


def test_fold_unary_compare_cast() -> None:
    assert folded(ops.UnaryOp, F32, (-2.5, F32), fn="abs") == 2.5
    assert folded(ops.UnaryOp, F32, (0.0, F32), fn="exp") == 1.0
    assert folded(ops.UnaryOp, TileType(bool_), (True, TileType(bool_)), fn="not") is False
    assert folded(ops.UnaryOp, I32, (5, I32), fn="invert") == -6
    assert folded(ops.CompareOp, TileType(bool_), (1.0, F32), (2.0, F32), fn="lt") is True
    assert folded(ops.CastOp, I32, (-2.7, F32)) == -2  # truncation
    assert folded(ops.CastOp, TileType(int8), (300, I32)) == 44  # wraps
    assert folded(ops.CastOp, TileType(bool_), (0.5, F32)) is True
    assert folded(ops.CastOp, F32, (7, I32)) == 7.0
    assert folded(ops.CastOp, TileType(bfloat16), (1.00390625, F32)) == 1.0  # rounds to bf16 (ties to even)
    assert isinstance(folded(ops.CastOp, I32, (math.inf, F32)), ops.CastOp)  # undefined: left alone


def test_fold_shape_ops_and_select() -> None:
    assert folded(ops.BroadcastOp, TileType(float32, (4, 8)), (1.5, F32)) == 1.5
    assert folded(ops.ReshapeOp, TileType(float32, (8,)), (2.0, TileType(float32, (2, 4)))) == 2.0
    assert folded(ops.SelectOp, F32, (False, TileType(bool_)), (1.0, F32), (2.0, F32)) == 2.0


def test_select_on_constant_condition_forwards_a_non_constant_operand() -> None:
    x = Value(ArrayType(float32, 1), "x")
    zero = const(0, I32)
    load = ops.LoadOp(results=[Value(TileType(float32, (16,)))], array=x, index=[zero.result])
    cond = const(True, TileType(bool_, (16,)))
    other = const(0.0, TileType(float32, (16,)))
    sel = ops.SelectOp(results=[Value(TileType(float32, (16,)))], cond=cond.result, x=load.result, y=other.result)
    store = ops.StoreOp(array=x, index=[zero.result], tile=sel.result)
    fn = func([zero, load, cond, other, sel, store], [x])
    run_passes(fn)
    assert store.tile is load.result
    assert not any(isinstance(o, ops.SelectOp) for o in fn.body.ops)


def test_cse_merges_identical_pure_ops_but_not_loads() -> None:
    x = Value(ArrayType(float32, 1), "x")
    zero_a, zero_b = const(0, I32), const(0, I32)
    dim_a = ops.ArrayDimOp(results=[Value(TileType(tj.int64))], array=x, axis=0)
    dim_b = ops.ArrayDimOp(results=[Value(TileType(tj.int64))], array=x, axis=0)
    stride = ops.ArrayDimOp(results=[Value(TileType(tj.int64))], array=x, axis=0, which="stride")
    load_a = ops.LoadOp(results=[Value(TileType(float32, (8,)))], array=x, index=[zero_a.result])
    load_b = ops.LoadOp(results=[Value(TileType(float32, (8,)))], array=x, index=[zero_b.result])
    fz, fneg = const(0.0, F32), const(-0.0, F32)
    body: list[ops.Op] = [zero_a, zero_b, dim_a, dim_b, stride, load_a, load_b, fz, fneg]
    fn = func(body, [x])
    assert eliminate_common(fn) == 2  # zero_b, dim_b
    kept = fn.body.ops
    assert zero_b not in kept and dim_b not in kept and stride in kept
    assert load_a in kept and load_b in kept and load_b.index == [zero_a.result]
    assert fz in kept and fneg in kept  # 0.0 and -0.0 are different constants
    verify(fn)


def test_cse_reuses_outer_values_inside_regions_but_not_across_branches() -> None:
    cond = const(True, TileType(bool_))
    outer = const(1.0, F32)
    in_then, in_else = const(2.0, F32), const(2.0, F32)
    dup = const(1.0, F32)
    neg = ops.UnaryOp(results=[Value(F32)], fn="neg", x=dup.result)
    if_op = ops.IfOp(cond=cond.result, then_body=Block(ops=[in_then, dup, neg, ops.YieldOp(values=[neg.result])]),
                     else_body=Block(ops=[in_else, ops.YieldOp(values=[in_else.result])]), results=[Value(F32)])
    fn = func([cond, outer, if_op])
    eliminate_common(fn)
    verify(fn)
    assert dup not in if_op.then_body.ops and neg.x is outer.result
    assert in_then in if_op.then_body.ops and in_else in if_op.else_body.ops


def test_dce_removes_unused_pure_ops_and_effect_free_control_flow() -> None:
    x = Value(ArrayType(float32, 1), "x")
    zero = const(0, I32)
    unused_load = ops.LoadOp(results=[Value(TileType(float32, (8,)))], array=x, index=[zero.result])
    chain_a = const(1.0, F32)
    chain_b = ops.UnaryOp(results=[Value(F32)], fn="neg", x=chain_a.result)
    cond = const(True, TileType(bool_))
    pure_if = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.YieldOp(values=[chain_b.result])]),
                       else_body=Block(ops=[ops.YieldOp(values=[chain_a.result])]), results=[Value(F32)])
    val = const(3.0, TileType(float32, (8,)))
    store = ops.StoreOp(array=x, index=[zero.result], tile=val.result)
    effect_if = ops.IfOp(cond=cond.result, then_body=Block(ops=[store, ops.YieldOp(values=[])]),
                         else_body=Block(ops=[ops.YieldOp(values=[])]))
    lo, hi = const(0, I32), const(4, I32)
    arg = Value(I32)
    brk_if = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.BreakOp(values=[])]),
                      else_body=Block(ops=[ops.YieldOp(values=[])]))
    loop_with_break = ops.ForOp(lower=lo.result, upper=hi.result, step=hi.result, init=[],
                                body=Block(args=[arg], ops=[brk_if, ops.ContinueOp(values=[])]))
    body: list[ops.Op] = [zero, unused_load, chain_a, chain_b, cond, pure_if, val, effect_if, lo, hi,
                          loop_with_break]
    fn = func(body, [x])
    verify(fn)
    eliminate_dead(fn)
    verify(fn)
    kept = fn.body.ops
    assert unused_load not in kept and chain_a not in kept and chain_b not in kept and pure_if not in kept
    assert effect_if in kept and val in kept and zero in kept
    assert loop_with_break not in kept  # its break only leaves the loop itself: no effect outside


def test_dce_keeps_an_if_that_leaves_the_enclosing_loop() -> None:
    cond = const(True, TileType(bool_))
    lo, hi, st = const(0, I32), const(4, I32), const(1, I32)
    brk_if = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.BreakOp(values=[])]),
                      else_body=Block(ops=[ops.YieldOp(values=[])]))
    x = Value(ArrayType(float32, 1), "x")
    val = const(1.0, TileType(float32, (4,)))
    store = ops.StoreOp(array=x, index=[lo.result], tile=val.result)
    loop = ops.ForOp(lower=lo.result, upper=hi.result, step=st.result, init=[],
                     body=Block(args=[Value(I32)], ops=[brk_if, store, ops.ContinueOp(values=[])]))
    fn = func([cond, lo, hi, st, val, loop], [x])
    eliminate_dead(fn)
    assert brk_if in loop.body.ops and loop in fn.body.ops


# ---------------------------------------------------------------------------------------------- on kernels


def passes_kernel(x, out, n):
    a = x.shape[0] + 0
    b = x.shape[0] + 0
    unused = tj.exp(tj.load(x, index=(0,), shape=(16,)))
    k = 3 * 4
    t = tj.full((16,), 2, tj.int32) * k + (a - b)
    if n > 100:
        dead = n * 2
    tj.store(out, index=(0,), tile=t)


def test_pipeline_on_a_kernel() -> None:
    fn = translate(passes_kernel, {"x": ArrayType(float32, 1), "out": ArrayType(int32, 1), "n": I32}, {})
    run_passes(fn)
    text = print_function(fn)
    assert "exp" not in text and "load" not in text and "if" not in text
    assert text.count("array_dim") == 1
    store = next(op for op in fn.body.ops if isinstance(op, ops.StoreOp))
    cast = next(op for op in fn.body.ops if store.tile in op.results)
    assert isinstance(cast, ops.CastOp)  # int32 tile + int64 (a - b) is int64, stored into int32
    producer = next(op for op in fn.body.ops if cast.x in op.results)
    assert isinstance(producer, ops.BinaryOp) and producer.fn == "add"  # 24 + (a - b): a - b stays (run time)
    lhs = next(op for op in fn.body.ops if producer.x in op.results)
    assert isinstance(lhs, ops.ConstantOp) and lhs.value == 24 and lhs.result.type == TileType(tj.int64, (16,))


@pytest.mark.parametrize("value, src, dst", [
    (0.1, float16, float32), (70000.0, float16, float32), (-70000.0, float16, float32), (0.1, float32, "f64"),
    (1e-8, float16, float32), (3.4e39, float32, "f64"), (2049.0, float16, int32), (1e-8, float16, bool_),
    (0.1, bfloat16, float32),
])
def test_fold_cast_rounds_the_source_constant_to_its_dtype(value: float, src: DType, dst: object) -> None:
    import numpy as np

    from tilejit.language.ir.types import float64

    d = float64 if dst == "f64" else dst
    assert isinstance(d, DType)
    got = folded(ops.CastOp, TileType(d), (value, TileType(src)))
    with np.errstate(all="ignore"):
        if src == bfloat16:
            want = float(np.float32(0.10009765625))  # 0.1 rounded to bfloat16
        else:
            npsrc = {float16: np.float16, float32: np.float32}[src]
            npdst = {float32: np.float32, float64: np.float64, int32: np.int32, bool_: np.bool_}[d]
            want = np.array(value).astype(npsrc).astype(npdst).item()
    assert got == want and type(got) is type(want)


def test_front_end_constants_are_rounded_to_their_float_dtype() -> None:
    import numpy as np

    @tj.kernel
    def k(out):
        a = tj.full((16,), 0.1, tj.float16)
        b = tj.full((16,), 70000.0, tj.float16)
        c = tj.full((16,), 0.1, tj.float32)
        tj.store(out, index=(0,), tile=a.astype(tj.float64))
        tj.store(out, index=(1,), tile=b.astype(tj.float64))
        tj.store(out, index=(2,), tile=c.astype(tj.float64))

    fn = run_passes(translate(k, {"out": ArrayType(tj.float64, 1)}, {}))
    values = [op.value for op in fn.body.ops if isinstance(op, ops.ConstantOp) and op.result.type.dtype == tj.float64]
    with np.errstate(over="ignore"):
        want = [float(np.float16(0.1)), float(np.float16(70000.0)), float(np.float32(0.1))]
    assert values == want


@pytest.mark.parametrize("value, src", [
    (2**60 + 2**36 + 1, tj.int64), (-(2**60) - 2**36 - 1, tj.int64), (2**63 + 2**39 + 1, tj.uint64),
    (2**62 + 2**38 + 1, tj.int64),
])
def test_fold_int_to_float32_rounds_once(value: int, src: DType) -> None:
    """int64 -> float32 folds to numpy's (and the GPU's) one rounding; through a Python float the
    value rounded twice (2**60 + 2**36 + 1 gave 2**60, numpy gives 2**60 + 2**37)."""
    import numpy as np

    got = folded(ops.CastOp, TileType(float32), (value, TileType(src)))
    want = float(np.array(value, dtype=np.int64 if src == tj.int64 else np.uint64).astype(np.float32))
    assert got == want
