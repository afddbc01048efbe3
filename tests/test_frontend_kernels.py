"""The front end on whole kernels: IR text of small kernels, and the example kernels through the passes.

This module uses ``from __future__ import annotations`` on purpose: ``tj.Constant[int]`` is then a
string annotation, as in the examples, and the front end must still recognize it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tilejit as tj
from tilejit.language.frontend.params import constant_params, signature_params
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops
from tilejit.language.ir.passes import run_passes
from tilejit.language.ir.printer import print_function
from tilejit.language.ir.types import ArrayType, TileType, float16, float32, int32, int64, scalar
from tilejit.language.ir.verifier import verify

F32_1 = ArrayType(float32, 1)
F32_2 = ArrayType(float32, 2)
F16_2 = ArrayType(float16, 2)
I32 = scalar(int32)


def lower(kernel: Callable[..., Any], consts: dict[str, Any] | None = None, **types: Any) -> ops.Function:
    fn = translate(kernel, types, consts or {})
    verify(fn)
    return fn


def ir(kernel: Callable[..., Any], consts: dict[str, Any] | None = None, **types: Any) -> str:
    return print_function(lower(kernel, consts, **types))


def op_names(fn: ops.Function) -> list[str]:
    return [op.NAME for op in fn.body.walk()]


# ---------------------------------------------------------------------------------------------- kernels


@tj.kernel
def vector_add(x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=a + b)


def test_vector_add_ir() -> None:
    assert ir(vector_add, {"TILE": 256}, x=F32_1, y=F32_1, out=F32_1) == """\
func @vector_add(%x: array<f32, 1>, %y: array<f32, 1>, %out: array<f32, 1>) {
  %i = block_id {axis=0} : i32
  %a = load %x, [%i] {padding=0.0} : tile<256xf32>
  %b = load %y, [%i] {padding=0.0} : tile<256xf32>
  %0 = binary %a, %b {fn='add'} : tile<256xf32>
  store %out, [%i], %0
  return
}
"""


def test_constant_params_from_string_annotations() -> None:
    assert vector_add.func.__annotations__["TILE"] == "tj.Constant[int]"
    assert constant_params(vector_add) == ["TILE"]
    assert signature_params(vector_add) == ["x", "y", "out", "TILE"]


def test_constant_params_from_real_annotations() -> None:
    def k(x, n, BLOCK, DT):  # type: ignore[no-untyped-def]
        pass

    k.__annotations__ = {"n": int, "BLOCK": tj.Constant[int], "DT": tj.Constant}
    assert constant_params(k) == ["BLOCK", "DT"]


def test_each_constant_value_specializes() -> None:
    small = lower(vector_add, {"TILE": 64}, x=F32_1, y=F32_1, out=F32_1)
    big = lower(vector_add, {"TILE": 1024}, x=F32_1, y=F32_1, out=F32_1)
    loads = [op for op in small.body.ops if isinstance(op, ops.LoadOp)]
    assert loads[0].result.type == TileType(float32, (64,))
    loads = [op for op in big.body.ops if isinstance(op, ops.LoadOp)]
    assert loads[0].result.type == TileType(float32, (1024,))


def row_max(x, out, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf"))
    tj.store(out, index=(row,), tile=tj.max(t, axis=1))


def test_reduction_ir() -> None:
    assert ir(row_max, {"BLOCK": 128}, x=F32_2, out=F32_1) == """\
func @row_max(%x: array<f32, 2>, %out: array<f32, 1>) {
  %row = block_id {axis=0} : i32
  %0 = constant {value=0} : i32
  %t = load %x, [%row, %0] {padding=-inf} : tile<1x128xf32>
  %1 = reduce %t {fn='max', axis=1} : tile<1xf32>
  store %out, [%row], %1
  return
}
"""


def loop_sum(x, out, n, T: tj.Constant[int]):
    acc = tj.zeros((T,), tj.float32)
    for j in range(n):
        acc += tj.load(x, index=(j,), shape=(T,))
    tj.store(out, index=(0,), tile=acc)


def test_for_loop_with_carried_accumulator() -> None:
    assert ir(loop_sum, {"T": 32}, x=F32_1, out=F32_1, n=I32) == """\
func @loop_sum(%x: array<f32, 1>, %out: array<f32, 1>, %n: i32) {
  %acc = constant {value=0.0} : tile<32xf32>
  %0 = constant {value=0} : i32
  %1 = constant {value=1} : i32
  %2 = for %0, %n, %1, [%acc] {unroll=1} : tile<32xf32> (%j: i32, %3: tile<32xf32>) {
    %4 = load %x, [%j] {padding=0.0} : tile<32xf32>
    %5 = binary %3, %4 {fn='add'} : tile<32xf32>
    continue [%5]
  }
  %6 = constant {value=0} : i32
  store %out, [%6], %2
  return
}
"""


def branchy(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    if n > 0:
        t = t * 2
    else:
        t = -t
    tj.store(out, index=(0,), tile=t)


def test_if_else_ir() -> None:
    assert ir(branchy, x=F32_1, out=F32_1, n=I32) == """\
func @branchy(%x: array<f32, 1>, %out: array<f32, 1>, %n: i32) {
  %0 = constant {value=0} : i32
  %t = load %x, [%0] {padding=0.0} : tile<16xf32>
  %1 = constant {value=0} : i32
  %2 = compare %n, %1 {fn='gt'} : i1
  %3 = if %2 : tile<16xf32> then_body {
    %4 = constant {value=2.0} : tile<16xf32>
    %5 = binary %t, %4 {fn='mul'} : tile<16xf32>
    yield [%5]
  } else_body {
    %6 = unary %t {fn='neg'} : tile<16xf32>
    yield [%6]
  }
  %7 = constant {value=0} : i32
  store %out, [%7], %3
  return
}
"""


def countdown(out, n):
    k = n
    while k > 0:
        if k == 5:
            break
        k -= 1
    tj.store(out, index=(0,), tile=k)


def test_while_break_ir() -> None:
    assert ir(countdown, out=ArrayType(int32, 1), n=I32) == """\
func @countdown(%out: array<i32, 1>, %n: i32) {
  %k = loop [%n] : i32 (%0: i32) {
    %1 = constant {value=0} : i32
    %2 = compare %0, %1 {fn='gt'} : i1
    %3 = unary %2 {fn='not'} : i1
    if %3 then_body {
      break [%0]
    } else_body {
      yield []
    }
    %4 = constant {value=5} : i32
    %5 = compare %0, %4 {fn='eq'} : i1
    if %5 then_body {
      break [%0]
    } else_body {
      yield []
    }
    %6 = constant {value=1} : i32
    %7 = binary %0, %6 {fn='sub'} : i32
    continue [%7]
  }
  %8 = constant {value=0} : i32
  %9 = reshape %k : tile<1xi32>
  store %out, [%8], %9
  return
}
"""


@tj.function
def scale_shift(t, scale, shift=1.0):
    """Helpers are inlined; default arguments work."""
    y = t * scale
    return y + shift


def uses_helper(x, out):
    t = tj.load(x, index=(0,), shape=(8,))
    tj.store(out, index=(0,), tile=scale_shift(t, 3.0))


def test_inlined_function_ir() -> None:
    assert ir(uses_helper, x=F32_1, out=F32_1) == """\
func @uses_helper(%x: array<f32, 1>, %out: array<f32, 1>) {
  %0 = constant {value=0} : i32
  %t = load %x, [%0] {padding=0.0} : tile<8xf32>
  %1 = constant {value=3.0} : tile<8xf32>
  %y = binary %t, %1 {fn='mul'} : tile<8xf32>
  %2 = constant {value=1.0} : tile<8xf32>
  %3 = binary %y, %2 {fn='add'} : tile<8xf32>
  %4 = constant {value=0} : i32
  store %out, [%4], %3
  return
}
"""


def unrolled(x, out, N: tj.Constant[int]):
    acc = tj.zeros((16,), tj.float32)
    for k in tj.static_range(N):
        acc += tj.load(x, index=(k,), shape=(16,))
    for s in (2, 3):
        acc = acc * s
    tj.store(out, index=(0,), tile=acc)


def test_static_range_unrolls() -> None:
    fn = lower(unrolled, {"N": 3}, x=F32_1, out=F32_1)
    names = op_names(fn)
    assert "for" not in names
    assert names.count("load") == 3
    loads = [op for op in fn.body.ops if isinstance(op, ops.LoadOp)]
    idx = [op.index[0] for op in loads]
    consts = {op.result: op.value for op in fn.body.ops if isinstance(op, ops.ConstantOp)}
    assert [consts[v] for v in idx] == [0, 1, 2]
    muls = [op for op in fn.body.ops if isinstance(op, ops.BinaryOp) and op.fn == "mul"]
    assert [consts[op.y] for op in muls] == [2.0, 3.0]


def folded_if(x, out, MODE: tj.Constant[str]):
    t = tj.load(x, index=(0,), shape=(16,))
    if MODE == "exp":
        t = tj.exp(t)
    elif MODE == "bad":
        t = this_name_does_not_exist(t)  # noqa: F821 - never translated unless MODE == "bad"
    else:
        t = tj.sqrt(t)
    tj.store(out, index=(0,), tile=t)


def test_constant_if_translates_only_the_taken_branch() -> None:
    exp_fn = lower(folded_if, {"MODE": "exp"}, x=F32_1, out=F32_1)
    assert [op.fn for op in exp_fn.body.ops if isinstance(op, ops.UnaryOp)] == ["exp"]
    assert "if" not in op_names(exp_fn)
    sqrt_fn = lower(folded_if, {"MODE": "other"}, x=F32_1, out=F32_1)
    assert [op.fn for op in sqrt_fn.body.ops if isinstance(op, ops.UnaryOp)] == ["sqrt"]
    with pytest.raises(tj.TileCompileError, match="name 'this_name_does_not_exist' is not defined"):
        lower(folded_if, {"MODE": "bad"}, x=F32_1, out=F32_1)


def weak_carried(x, out, n):
    acc = 0.0
    count = 0
    for j in range(n):
        acc += tj.load(x, index=(j,), shape=(16,))
        count += 1
    tj.store(out, index=(0,), tile=acc / count)


def test_number_before_loop_takes_the_type_the_body_gives_it() -> None:
    fn = lower(weak_carried, x=F32_1, out=F32_1, n=I32)
    loop = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    assert [v.type for v in loop.init] == [TileType(float32, (16,)), TileType(int32)]
    assert [r.type for r in loop.results] == [TileType(float32, (16,)), TileType(int32)]


def early_exit(x, out, n):
    i = tj.bid(0)
    if i >= n:
        return
    t = tj.load(x, index=(i,), shape=(16,))
    for j in range(4):
        if j == 2:
            continue
        t = t + j
    tj.store(out, index=(i,), tile=t)


def test_early_return_and_continue() -> None:
    fn = lower(early_exit, x=F32_1, out=F32_1, n=I32)
    if_op = next(op for op in fn.body.ops if isinstance(op, ops.IfOp))
    assert isinstance(if_op.then_body.ops[-1], ops.ReturnOp)
    assert isinstance(if_op.else_body.ops[-1], ops.YieldOp)
    loop = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    assert loop.unroll == 4  # constant trip count <= 8
    inner_if = next(op for op in loop.body.ops if isinstance(op, ops.IfOp))
    assert isinstance(inner_if.then_body.ops[-1], ops.ContinueOp)


def int64_bounds(x, out, n):
    acc = tj.zeros((8,), tj.float32)
    for j in range(x.shape[0] // 8):
        acc += tj.load(x, index=(j,), shape=(8,))
    tj.store(out, index=(0,), tile=acc)


def test_loop_variable_is_int64_when_a_bound_is() -> None:
    fn = lower(int64_bounds, x=F32_1, out=F32_1, n=I32)
    loop = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    assert loop.body.args[0].type == TileType(int64)
    assert loop.lower.type == loop.step.type == TileType(int64)


def metaprogram(x, out, SHAPE: tj.Constant[tuple], DT: tj.Constant[object]):
    n = SHAPE[0] * SHAPE[1]
    assert n % 2 == 0, f"size {n} must be even"
    t = tj.load(x, index=(0, 0), shape=SHAPE).astype(DT)
    u = t.reshape((n,)) if len(SHAPE) == 2 else t
    tj.store(out, index=(0,), tile=u)


def test_python_metaprogramming_on_constants() -> None:
    fn = lower(metaprogram, {"SHAPE": (4, 8), "DT": tj.float16}, x=F32_2, out=ArrayType(float16, 1))
    reshape = next(op for op in fn.body.ops if isinstance(op, ops.ReshapeOp))
    assert reshape.result.type == TileType(float16, (32,))
    with pytest.raises(tj.TileCompileError, match="assertion failed: size 1 must be even"):
        lower(metaprogram, {"SHAPE": (1, 1), "DT": tj.float16}, x=F32_2, out=ArrayType(float16, 1))


# ---------------------------------------------------------------------------------------------- examples


# The kernels users run: the examples themselves, so these tests check exactly what they ship.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from layer_norm import layer_norm  # noqa: E402
from matmul import matmul  # noqa: E402
from row_sum import row_sum  # noqa: E402
from softmax import softmax  # noqa: E402


def test_softmax() -> None:
    bf16 = ArrayType(tj.bfloat16, 2)
    fn = run_passes(lower(softmax, {"ROWS": 1, "BLOCK": 1024}, x=bf16, out=bf16))
    names = op_names(fn)
    assert names.count("reduce") == 2 and "unary" in names
    store = next(op for op in fn.body.ops if isinstance(op, ops.StoreOp))
    cast = next(op for op in fn.body.ops if op.results and op.result is store.tile)
    assert isinstance(cast, ops.CastOp)  # float32 result stored into a bfloat16 array
    assert store.tile.type == TileType(tj.bfloat16, (1, 1024))


def test_layer_norm() -> None:
    fn = run_passes(lower(layer_norm, {"BLOCK": 1024}, x=F32_2, weight=F32_1, bias=F32_1, out=F32_2,
                          eps=scalar(float32)))
    dims = [op for op in fn.body.walk() if isinstance(op, ops.ArrayDimOp)]
    assert len(dims) == 1  # x.shape[1] read twice, computed once after CSE
    assert any(isinstance(op, ops.SelectOp) for op in fn.body.ops)
    compare = next(op for op in fn.body.ops if isinstance(op, ops.CompareOp))
    assert compare.x.type == TileType(int64, (1024,))  # int32 arange promoted against the int64 dim


def test_matmul() -> None:
    fn = run_passes(lower(matmul, {"BM": 64, "BN": 64, "BK": 32}, a=F16_2, b=F16_2, c=F32_2))
    loop = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    mma = next(op for op in loop.body.ops if isinstance(op, ops.MmaOp))
    assert mma.a.type == TileType(float16, (64, 32)) and mma.b.type == TileType(float16, (32, 64))
    assert mma.acc is loop.body.args[1] and mma.result.type == TileType(float32, (64, 64))
    assert isinstance(loop.body.ops[-1], ops.ContinueOp) and loop.body.ops[-1].values == [mma.result]
    assert loop.upper.type == TileType(int32)


def test_row_sum() -> None:
    fn = run_passes(lower(row_sum, {"BM": 4, "BN": 256}, x=F32_2, out=F32_1))
    loop = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    assert [r.type for r in loop.results] == [TileType(float32, (4, 256))]
    red = next(op for op in fn.body.ops if isinstance(op, ops.ReduceOp))
    assert red.x is loop.results[0] and red.result.type == TileType(float32, (4,))


def test_translate_unwraps_kernel_and_uses_name() -> None:
    fn = translate(vector_add, {"x": F32_1, "y": F32_1, "out": F32_1}, {"TILE": 16}, name="va_16")
    assert fn.name == "va_16" and fn.param_names == ["x", "y", "out"]
    assert fn.filename == __file__


# ---------------------------------------------------------------------------------------------- Python features


@tj.function
def min_max(t):
    return tj.min(t), tj.max(t)


def python_features(x, out, n, OPT: tj.Constant[object]):
    m, k = x.shape  # run-time dims unpack
    rows = len(x.shape)
    lo, hi = min_max(tj.load(x, index=(0, 0), shape=(4, 8)))
    print("min", lo)
    scale = tj.float32(2)
    offs = 0.0 if OPT is None else OPT
    acc = tj.zeros([4], tj.float32)
    for i, w in enumerate((1.0, 2.0, 3.0)):
        if i == 2:
            break  # compile-time path: stops unrolling
        acc = acc + w
    for d in x.shape:
        acc = acc + d
    flag = (True and rows == 2) or False
    if flag and n > 0:
        acc = acc * scale
    tj.store(out, index=(0,), tile=acc + (hi - lo) + offs + m * k)


def test_python_features() -> None:
    fn = lower(python_features, {"OPT": None}, x=F32_2, out=F32_1, n=I32)
    (printed,) = [op for op in fn.body.ops if isinstance(op, ops.PrintOp)]  # a device print of the minimum
    assert printed.texts == ("min ", "\n") and printed.values[0].type == TileType(float32)
    names = op_names(fn)
    assert names.count("array_dim") == 4  # m, k, then both again in `for d in x.shape`
    adds = [op for op in fn.body.ops if isinstance(op, ops.BinaryOp) and op.fn == "add"]
    consts = {op.result: op.value for op in fn.body.ops if isinstance(op, ops.ConstantOp)}
    assert [consts.get(op.y) for op in adds[:2]] == [1.0, 2.0]  # the static loop stopped at i == 2
    if_op = next(op for op in fn.body.ops if isinstance(op, ops.IfOp))
    cond = next(op for op in fn.body.ops if if_op.cond in op.results)
    assert isinstance(cond, ops.CompareOp) and cond.fn == "gt"  # `flag and n > 0` folded to `n > 0`
    scale = next(op for op in fn.body.ops if isinstance(op, ops.ConstantOp) and op.result.name == "scale")
    assert scale.result.type == TileType(float32) and scale.value == 2.0
    with_opt = lower(python_features, {"OPT": 0.5}, x=F32_2, out=F32_1, n=I32)
    assert any(isinstance(op, ops.ConstantOp) and op.value == 0.5 for op in with_opt.body.walk())


def while_weak(out, n):
    i = 0
    x = 1
    while i < n:
        i += 1
        x = x * 2.5
    tj.store(out, index=(0,), tile=x)


def test_while_with_numbers_that_become_carried() -> None:
    fn = lower(while_weak, out=F32_1, n=I32)
    loop = next(op for op in fn.body.ops if isinstance(op, ops.LoopOp))
    assert [v.type for v in loop.init] == [TileType(int32), TileType(float32)]  # x joined int 1 and float 2.5


def nested_loops(x, out, n):
    acc = tj.zeros((8,), tj.float32)
    for i in range(n):
        inner = tj.zeros((8,), tj.float32)
        for j in range(i):
            inner += tj.load(x, index=(j,), shape=(8,))
            if j > 4:
                break
        acc += inner
    tj.store(out, index=(0,), tile=acc)


def test_nested_loops_carry_separately() -> None:
    fn = lower(nested_loops, x=F32_1, out=F32_1, n=I32)
    outer = next(op for op in fn.body.ops if isinstance(op, ops.ForOp))
    inner = next(op for op in outer.body.ops if isinstance(op, ops.ForOp))
    assert len(outer.init) == 1 and len(inner.init) == 1
    assert inner.upper is outer.body.args[0]  # range(i) uses the outer induction variable
    brk = next(o for o in inner.body.walk() if isinstance(o, ops.BreakOp))
    assert brk.values[0].type == TileType(float32, (8,))
