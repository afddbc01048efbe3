"""A tiny hand builder of tile IR for the backend tests (no front end needed), the five example
kernels built with it, and a raw NVRTC helper used when ``tilejit.compiler`` is not importable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Block, Loc, Op, Value
from tilejit.language.ir.printer import print_function
from tilejit.language.ir.types import ArrayType, DType, TileType, bool_, float32, int32, int64, scalar


class IRBuilder:
    """Appends ops to the current block; ``for_``/``loop``/``if_`` open nested regions."""

    def __init__(self, name: str, params: list[tuple[str, ArrayType | TileType]]) -> None:
        self.fn = O.Function(name, [n for n, _ in params], Block(args=[Value(t, n) for n, t in params]),
                             filename="test_backend.py")
        self.blocks = [self.fn.body]
        self.line = 0

    def p(self, name: str) -> Value:
        return self.fn.params[self.fn.param_names.index(name)]

    def add(self, op: Op) -> Op:
        self.line += 1
        op.loc = Loc("test_backend.py", self.line)
        self.blocks[-1].append(op)
        return op

    def new(self, cls: type[Op], t: TileType | None, **fields: Any) -> Value:
        res = [Value(t)] if t is not None else []
        op = self.add(cls(results=res, **fields))
        return op.results[0] if res else None  # type: ignore[return-value]

    # values
    def const(self, value: object, dtype: DType, shape: tuple[int, ...] = ()) -> Value:
        return self.new(O.ConstantOp, TileType(dtype, shape), value=value)

    def i32(self, value: int) -> Value:
        return self.const(value, int32)

    def bid(self, axis: int = 0) -> Value:
        return self.new(O.BlockIdOp, scalar(int32), axis=axis)

    def dim(self, arr: Value, axis: int, which: str = "shape") -> Value:
        return self.new(O.ArrayDimOp, scalar(int64), array=arr, axis=axis, which=which)

    def arange(self, n: int, dtype: DType = int32) -> Value:
        return self.new(O.ArangeOp, TileType(dtype, (n,)))

    # memory
    def load(self, arr: Value, index: list[Value], shape: tuple[int, ...], padding: object = 0) -> Value:
        assert isinstance(arr.type, ArrayType)
        return self.new(O.LoadOp, TileType(arr.type.dtype, shape), array=arr, index=index, padding=padding)

    def store(self, arr: Value, index: list[Value], tile: Value) -> None:
        self.add(O.StoreOp(array=arr, index=index, tile=tile))

    def gather(self, arr: Value, indices: list[Value], padding: object = 0) -> Value:
        assert isinstance(arr.type, ArrayType)
        shape = indices[0].type.shape  # type: ignore[union-attr]
        return self.new(O.GatherOp, TileType(arr.type.dtype, shape), array=arr, indices=indices, padding=padding)

    def scatter(self, arr: Value, indices: list[Value], tile: Value) -> None:
        self.add(O.ScatterOp(array=arr, indices=indices, tile=tile))

    def atomic(self, kind: str, arr: Value, indices: list[Value], value: Value, compare: Value | None = None,
               result: bool = True) -> Value:
        return self.new(O.AtomicOp, value.type if result else None, kind=kind, array=arr,  # type: ignore[arg-type]
                        indices=indices, value=value, compare=[compare] if compare is not None else [])

    # elementwise
    def un(self, fn: str, x: Value, dtype: DType | None = None) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.UnaryOp, t.with_dtype(dtype or t.dtype), fn=fn, x=x)

    def bin(self, fn: str, x: Value, y: Value) -> Value:
        return self.new(O.BinaryOp, x.type, fn=fn, x=x, y=y)  # type: ignore[arg-type]

    def cmp(self, fn: str, x: Value, y: Value) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.CompareOp, t.with_dtype(bool_), fn=fn, x=x, y=y)

    def select(self, c: Value, x: Value, y: Value) -> Value:
        return self.new(O.SelectOp, x.type, cond=c, x=x, y=y)  # type: ignore[arg-type]

    def cast(self, x: Value, dtype: DType) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.CastOp, t.with_dtype(dtype), x=x)

    # shape
    def reshape(self, x: Value, shape: tuple[int, ...]) -> Value:
        return self.new(O.ReshapeOp, x.type.with_shape(shape), x=x)  # type: ignore[union-attr]

    def permute(self, x: Value, perm: tuple[int, ...]) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.PermuteOp, t.with_shape(tuple(t.shape[p] for p in perm)), x=x, perm=perm)

    def bcast(self, x: Value, shape: tuple[int, ...]) -> Value:
        return self.new(O.BroadcastOp, x.type.with_shape(shape), x=x)  # type: ignore[union-attr]

    # reductions
    def reduce(self, fn: str, x: Value, axis: int, dtype: DType | None = None) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        shape = t.shape[:axis] + t.shape[axis + 1:]
        return self.new(O.ReduceOp, TileType(dtype or t.dtype, shape), fn=fn, x=x, axis=axis)

    def argreduce(self, fn: str, x: Value, axis: int) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.ArgReduceOp, TileType(int32, t.shape[:axis] + t.shape[axis + 1:]), fn=fn, x=x, axis=axis)

    def cumsum(self, x: Value, axis: int, dtype: DType | None = None) -> Value:
        t = x.type
        assert isinstance(t, TileType)
        return self.new(O.ScanOp, t.with_dtype(dtype or t.dtype), fn="sum", x=x, axis=axis)

    def mma(self, a: Value, b: Value, acc: Value, tf32: bool = False) -> Value:
        return self.new(O.MmaOp, acc.type, a=a, b=b, acc=acc, tf32=tf32)  # type: ignore[arg-type]

    # control flow
    @contextmanager
    def for_(self, lower: Value, upper: Value, step: Value, init: list[Value],
             unroll: int = 1) -> Iterator[tuple[Value, list[Value], O.ForOp]]:
        iv = Value(lower.type, "k")
        carried = [Value(v.type) for v in init]
        op = O.ForOp(results=[Value(v.type) for v in init], lower=lower, upper=upper, step=step, init=init,
                     body=Block(args=[iv, *carried]), unroll=unroll)
        self.add(op)
        self.blocks.append(op.body)
        yield iv, carried, op
        self.blocks.pop()

    @contextmanager
    def loop(self, init: list[Value]) -> Iterator[tuple[list[Value], O.LoopOp]]:
        carried = [Value(v.type) for v in init]
        op = O.LoopOp(results=[Value(v.type) for v in init], init=init, body=Block(args=carried))
        self.add(op)
        self.blocks.append(op.body)
        yield carried, op
        self.blocks.pop()

    @contextmanager
    def if_(self, cond: Value, result_types: list[TileType]) -> Iterator[tuple[O.IfOp, Block, Block]]:
        op = O.IfOp(results=[Value(t) for t in result_types], cond=cond, then_body=Block(), else_body=Block())
        self.add(op)
        yield op, op.then_body, op.else_body

    @contextmanager
    def into(self, block: Block) -> Iterator[None]:
        self.blocks.append(block)
        yield
        self.blocks.pop()

    def cont(self, values: list[Value]) -> None:
        self.add(O.ContinueOp(values=values))

    def brk(self, values: list[Value]) -> None:
        self.add(O.BreakOp(values=values))

    def yld(self, values: list[Value]) -> None:
        self.add(O.YieldOp(values=values))

    def ret(self) -> O.Function:
        self.add(O.ReturnOp())
        return self.fn


# ---------------------------------------------------------------------------------- example kernels


def arr(dtype: DType, ndim: int) -> ArrayType:
    return ArrayType(dtype, ndim)


def vector_add(dtype: DType = float32, tile: int = 1024) -> O.Function:
    b = IRBuilder("vector_add", [("x", arr(dtype, 1)), ("y", arr(dtype, 1)), ("out", arr(dtype, 1))])
    i = b.bid()
    x = b.load(b.p("x"), [i], (tile,))
    y = b.load(b.p("y"), [i], (tile,))
    b.store(b.p("out"), [i], b.bin("add", x, y))
    return b.ret()


def softmax(dtype: DType = float32, block: int = 4096) -> O.Function:
    b = IRBuilder("softmax", [("x", arr(dtype, 2)), ("out", arr(dtype, 2))])
    row, zero = b.bid(), b.i32(0)
    t = b.cast(b.load(b.p("x"), [row, zero], (1, block), padding=float("-inf")), float32)
    mx = b.bcast(b.reshape(b.reduce("max", t, 1), (1, 1)), (1, block))
    e = b.un("exp", b.bin("sub", t, mx))
    s = b.bcast(b.reshape(b.reduce("sum", e, 1), (1, 1)), (1, block))
    b.store(b.p("out"), [row, zero], b.cast(b.bin("truediv", e, s), dtype))
    return b.ret()


def layer_norm(dtype: DType = float32, block: int = 1024) -> O.Function:
    b = IRBuilder("layer_norm", [("x", arr(dtype, 2)), ("w", arr(dtype, 1)), ("b", arr(dtype, 1)),
                                 ("out", arr(dtype, 2)), ("eps", scalar(float32))])
    row, zero = b.bid(), b.i32(0)
    n = b.cast(b.dim(b.p("x"), 1), float32)
    t = b.cast(b.load(b.p("x"), [row, zero], (1, block)), float32)
    nb = b.bcast(n, (1, 1))
    mean = b.bin("truediv", b.reshape(b.reduce("sum", t, 1), (1, 1)), nb)
    inside = b.cmp("lt", b.cast(b.arange(block), int64), b.bcast(b.dim(b.p("x"), 1), (block,)))
    inside2 = b.bcast(b.reshape(inside, (1, block)), (1, block))
    d = b.select(inside2, b.bin("sub", t, b.bcast(mean, (1, block))), b.const(0.0, float32, (1, block)))
    var = b.bin("truediv", b.reshape(b.reduce("sum", b.bin("mul", d, d), 1), (1, 1)), nb)
    rstd = b.un("rsqrt", b.bin("add", var, b.bcast(b.p("eps"), (1, 1))))
    w = b.reshape(b.cast(b.load(b.p("w"), [zero], (block,)), float32), (1, block))
    bb = b.reshape(b.cast(b.load(b.p("b"), [zero], (block,)), float32), (1, block))
    y = b.bin("add", b.bin("mul", b.bin("mul", d, b.bcast(rstd, (1, block))), w), bb)
    b.store(b.p("out"), [row, zero], b.cast(y, dtype))
    return b.ret()


def cdiv(b: IRBuilder, n: Value, d: int) -> Value:
    """(n + d - 1) // d as an int32 scalar."""
    one = b.const(d - 1, int64)
    return b.cast(b.bin("floordiv", b.bin("add", n, one), b.const(d, int64)), int32)


def matmul(in_dtype: DType, acc_dtype: DType = float32, out_dtype: DType | None = None, bm: int = 128,
           bn: int = 128, bk: int = 32, tf32: bool = False) -> O.Function:
    out_dtype = out_dtype or acc_dtype
    b = IRBuilder("matmul", [("a", arr(in_dtype, 2)), ("b", arr(in_dtype, 2)), ("c", arr(out_dtype, 2))])
    pm, pn = b.bid(0), b.bid(1)
    acc0 = b.const(0, acc_dtype, (bm, bn))
    ktiles = cdiv(b, b.dim(b.p("a"), 1), bk)
    with b.for_(b.i32(0), ktiles, b.i32(1), [acc0]) as (k, (acc,), loop):
        ta = b.load(b.p("a"), [pm, k], (bm, bk))
        tb = b.load(b.p("b"), [k, pn], (bk, bn))
        b.cont([b.mma(ta, tb, acc, tf32=tf32)])
    res = loop.results[0]
    b.store(b.p("c"), [pm, pn], b.cast(res, out_dtype) if out_dtype != acc_dtype else res)
    return b.ret()


def row_sum(dtype: DType = float32, bm: int = 4, bn: int = 256) -> O.Function:
    b = IRBuilder("row_sum", [("x", arr(dtype, 2)), ("out", arr(float32, 1))])
    i = b.bid()
    acc0 = b.const(0.0, float32, (bm, bn))
    with b.for_(b.i32(0), cdiv(b, b.dim(b.p("x"), 1), bn), b.i32(1), [acc0]) as (j, (acc,), loop):
        b.cont([b.bin("add", acc, b.cast(b.load(b.p("x"), [i, j], (bm, bn)), float32))])
    b.store(b.p("out"), [i], b.reduce("sum", loop.results[0], 1))
    return b.ret()


EXAMPLES = {
    "vector_add": vector_add, "softmax": softmax, "layer_norm": layer_norm,
    "matmul": lambda: matmul(__import__("tilejit.language.ir.types", fromlist=["float16"]).float16),
    "row_sum": row_sum,
}


def test_builder_makes_printable_ir() -> None:
    for make in EXAMPLES.values():
        text = print_function(make())
        assert text.startswith("func @") and "return" in text
