"""The verifier accepts well-formed IR and rejects hand-built bad IR with a message naming the problem."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.types import ArrayType, TileType, bool_, float16, float32, int32, int64
from tilejit.language.ir.verifier import IRVerificationError, verify

F32 = TileType(float32)
I32 = TileType(int32)
B1 = TileType(bool_)


def t(shape: tuple[int, ...], dtype: object = float32) -> TileType:
    return TileType(dtype, shape)  # type: ignore[arg-type]


def const(value: object, type: TileType) -> ops.ConstantOp:
    return ops.ConstantOp(results=[Value(type)], value=value)


def kernel(build: Callable[[Value, list[ops.Op]], None]) -> ops.Function:
    """A function with one f32 array parameter; ``build`` appends ops (a return is added unless
    the last one is a terminator)."""
    x = Value(ArrayType(float32, 1), "x")
    body: list[ops.Op] = []
    build(x, body)
    if not body or not body[-1].is_terminator:
        body.append(ops.ReturnOp())
    return ops.Function("k", ["x"], Block(args=[x], ops=body))


def bad(build: Callable[[Value, list[ops.Op]], None], message: str) -> None:
    with pytest.raises(IRVerificationError, match=message):
        verify(kernel(build))


def test_good_kernel_passes() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        i = ops.BlockIdOp(results=[Value(I32)], axis=0)
        load = ops.LoadOp(results=[Value(t((16,)))], array=x, index=[i.result])
        two = const(2.0, t((16,)))
        mul = ops.BinaryOp(results=[Value(t((16,)))], fn="mul", x=load.result, y=two.result)
        body += [i, load, two, mul, ops.StoreOp(array=x, index=[i.result], tile=mul.result)]

    verify(kernel(build))


def test_use_before_definition() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        c = const(1.0, F32)
        neg = ops.UnaryOp(results=[Value(F32)], fn="neg", x=c.result)
        body += [neg, c]

    bad(build, "operand %.* is used before its definition or outside its scope")


def test_value_from_another_region_is_out_of_scope() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        cond = const(True, B1)
        inner = const(1.0, F32)
        if_op = ops.IfOp(cond=cond.result, then_body=Block(ops=[inner, ops.YieldOp(values=[])]),
                         else_body=Block(ops=[ops.YieldOp(values=[])]))
        use = ops.UnaryOp(results=[Value(F32)], fn="neg", x=inner.result)
        body += [cond, if_op, use]

    bad(build, "outside its scope")


def test_binary_operand_types_must_match() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a, b = const(1.0, t((16,))), const(1.0, t((16,), float16))
        body += [a, b, ops.BinaryOp(results=[Value(t((16,)))], fn="add", x=a.result, y=b.result)]

    bad(build, "y type vs result type")


def test_compare_result_is_bool() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(1.0, F32)
        body += [a, ops.CompareOp(results=[Value(F32)], fn="lt", x=a.result, y=a.result)]

    bad(build, "result type")


def test_truediv_on_ints() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(1, I32)
        body += [a, ops.BinaryOp(results=[Value(I32)], fn="truediv", x=a.result, y=a.result)]

    bad(build, "'truediv' needs float operands")


def test_load_index_count_and_rank() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        i = const(0, I32)
        body += [i, ops.LoadOp(results=[Value(t((16,)))], array=x, index=[i.result, i.result])]

    bad(build, "load has 2 indices for a rank-1 array")

    def build2(x: Value, body: list[ops.Op]) -> None:
        i = const(0, I32)
        body += [i, ops.LoadOp(results=[Value(t((4, 4)))], array=x, index=[i.result])]

    bad(build2, "result rank vs array rank")


def test_store_dtype() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        i, v = const(0, I32), const(0.0, t((16,), float16))
        body += [i, v, ops.StoreOp(array=x, index=[i.result], tile=v.result)]

    bad(build, "tile dtype vs array dtype")


def test_index_must_be_an_integer_scalar() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        i = const(0.0, F32)
        body += [i, ops.LoadOp(results=[Value(t((16,)))], array=x, index=[i.result])]

    bad(build, "index 0 must be an integer scalar")


def test_reshape_size() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(0.0, t((16,)))
        body += [a, ops.ReshapeOp(results=[Value(t((4, 8)))], x=a.result)]

    bad(build, "reshape size")


def test_permute_perm() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(0.0, t((4, 8)))
        body += [a, ops.PermuteOp(results=[Value(t((8, 4)))], x=a.result, perm=(0, 0))]

    bad(build, "is not a permutation")


def test_broadcast_rules() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(0.0, t((4, 2)))
        body += [a, ops.BroadcastOp(results=[Value(t((4, 8)))], x=a.result)]

    bad(build, "cannot broadcast")


def test_reduce_axis() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(0.0, t((4, 8)))
        body += [a, ops.ReduceOp(results=[Value(t((4,)))], fn="sum", x=a.result, axis=2)]

    bad(build, "axis 2 is out of range for rank 2")


def test_mma_shapes_and_accumulator() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        a, b, c = const(0.0, t((16, 16), float16)), const(0.0, t((8, 16), float16)), const(0.0, t((16, 16)))
        body += [a, b, c, ops.MmaOp(results=[Value(t((16, 16)))], a=a.result, b=b.result, acc=c.result)]

    bad(build, "mma shapes do not match")

    def build2(x: Value, body: list[ops.Op]) -> None:
        a, c = const(0.0, t((16, 16), float16)), const(0.0, t((16, 16), float16))
        body += [a, c, ops.MmaOp(results=[Value(t((16, 16), float16))], a=a.result, b=a.result, acc=c.result)]

    bad(build2, "mma accumulator dtype")


def test_non_power_of_two_result() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        body.append(const(0.0, t((12,))))

    bad(build, "not a power of two")


def test_missing_terminator() -> None:
    x = Value(ArrayType(float32, 1), "x")
    fn = ops.Function("k", ["x"], Block(args=[x], ops=[const(0.0, F32)]))
    with pytest.raises(IRVerificationError, match="a func block must end with a terminator"):
        verify(fn)


def test_terminator_not_last() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        body += [ops.ReturnOp(), const(0.0, F32), ops.ReturnOp()]

    bad(build, "a terminator must be the last op of its block")


def test_break_outside_loop() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        body += [ops.BreakOp(values=[])]

    bad(build, "break outside a loop")


def test_yield_outside_if() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        lo, hi, st = const(0, I32), const(4, I32), const(1, I32)
        loop = ops.ForOp(lower=lo.result, upper=hi.result, step=st.result, init=[],
                         body=Block(args=[Value(I32)], ops=[ops.YieldOp(values=[])]))
        body += [lo, hi, st, loop]

    bad(build, "yield outside an if branch")


def test_for_loop_carried_types_and_results() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        lo, hi, st, init = const(0, I32), const(4, I32), const(1, I32), const(0.0, F32)
        arg = Value(F32)
        loop = ops.ForOp(lower=lo.result, upper=hi.result, step=st.result, init=[init.result],
                         body=Block(args=[Value(I32), arg], ops=[ops.ContinueOp(values=[lo.result])]),
                         results=[Value(F32)])
        body += [lo, hi, st, init, loop]

    bad(build, "continue values vs carried types")

    def build2(x: Value, body: list[ops.Op]) -> None:
        lo, hi, st, init = const(0, I32), const(4, I32), const(1, I32), const(0.0, F32)
        loop = ops.ForOp(lower=lo.result, upper=hi.result, step=st.result, init=[init.result],
                         body=Block(args=[Value(I32), Value(F32)], ops=[ops.ContinueOp(values=[init.result])]),
                         results=[])
        body += [lo, hi, st, init, loop]

    bad(build2, "result types vs init types")

    def build3(x: Value, body: list[ops.Op]) -> None:
        lo, hi, st = const(0, I32), const(4, TileType(int64)), const(1, I32)
        loop = ops.ForOp(lower=lo.result, upper=hi.result, step=st.result, init=[],
                         body=Block(args=[Value(I32)], ops=[ops.ContinueOp(values=[])]))
        body += [lo, hi, st, loop]

    bad(build3, "upper type vs lower type")


def test_if_yields_must_match_results() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        cond, a = const(True, B1), const(1.0, F32)
        if_op = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.YieldOp(values=[a.result])]),
                         else_body=Block(ops=[ops.YieldOp(values=[])]), results=[Value(F32)])
        body += [cond, a, if_op]

    bad(build, "yielded types vs if results")


def test_if_condition_is_a_bool_scalar() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        cond = const(1, I32)
        if_op = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.YieldOp(values=[])]),
                         else_body=Block(ops=[ops.YieldOp(values=[])]))
        body += [cond, if_op]

    bad(build, "cond type")


def test_break_in_if_inside_loop_is_fine_and_result_counts_are_checked() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        init = const(0, I32)
        arg = Value(I32)
        cond = const(True, B1)
        inner_if = ops.IfOp(cond=cond.result, then_body=Block(ops=[ops.BreakOp(values=[arg])]),
                            else_body=Block(ops=[ops.YieldOp(values=[])]))
        loop = ops.LoopOp(init=[init.result], body=Block(args=[arg], ops=[cond, inner_if,
                                                                           ops.ContinueOp(values=[arg])]),
                          results=[Value(I32)])
        body += [init, loop]

    verify(kernel(build))

    def build2(x: Value, body: list[ops.Op]) -> None:
        body += [ops.BlockIdOp(results=[], axis=0)]

    bad(build2, "must have exactly one result, has 0")


def test_value_defined_twice() -> None:
    def build(x: Value, body: list[ops.Op]) -> None:
        c = const(1.0, F32)
        body += [c, ops.ConstantOp(results=c.results, value=2.0)]

    bad(build, "defined twice")


def test_message_names_the_source_location() -> None:
    from tilejit.language.ir.core import Loc

    def build(x: Value, body: list[ops.Op]) -> None:
        a = const(1, I32)
        op = ops.UnaryOp(results=[Value(I32)], fn="exp", x=a.result, loc=Loc("kern.py", 12, 4))
        body += [a, op]

    bad(build, r"unary op \(from kern.py:12\): 'exp' needs a float operand")
