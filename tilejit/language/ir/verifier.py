"""Structural and type checks of tile IR: run after the front end and after every pass.

A failure is a compiler bug, not a user error, so it raises ``IRVerificationError`` naming the op,
its source location and what is wrong, rather than a located ``TileCompileError``.
"""

from __future__ import annotations

from collections.abc import Callable

from tilejit.errors import IRVerificationError
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Op, Value
from tilejit.language.ir.types import ArrayListType, ArrayType, TileType, bool_, int32, int64

_SINGLE_RESULT = (
    ops.ConstantOp, ops.ArangeOp, ops.BlockIdOp, ops.NumBlocksOp, ops.ArrayDimOp, ops.ArrayCountOp, ops.LoadOp,
    ops.GatherOp, ops.AtomicOp, ops.UnaryOp, ops.BinaryOp, ops.FmaOp, ops.CompareOp, ops.SelectOp, ops.CastOp,
    ops.AssumeOp, ops.ReshapeOp, ops.PermuteOp, ops.BroadcastOp, ops.ExtractOp, ops.CatOp, ops.JoinOp, ops.ReduceOp,
    ops.ArgReduceOp, ops.ScanOp, ops.MmaOp,
)
_TWO_RESULTS = (ops.SplitOp,)
_NO_RESULT = (ops.StoreOp, ops.ScatterOp, ops.FenceOp, ops.BarrierOp, ops.PrintOp, ops.YieldOp, ops.ContinueOp,
              ops.BreakOp, ops.ReturnOp)

_FLOAT_ONLY_UNARY = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "floor", "ceil", "erf",
                     "sigmoid", "asin", "acos", "atan", "sinh", "cosh", "log1p", "expm1", "cbrt", "erfinv", "isnan",
                     "isinf", "signbit"}
_MMA_ACC = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64", "i8": "i32", "u8": "i32", "f8e4m3fn": "f32",
            "f8e5m2": "f32"}
_ATOMIC_KINDS = ("add", "max", "min", "xchg", "cas")


class _Check(Exception):
    """One failed check of the op being verified."""


def _tile(v: Value, what: str) -> TileType:
    if not isinstance(v.type, TileType):
        raise _Check(f"{what} must be a tile, got {v.type}")
    return v.type


def _array(v: Value, what: str) -> ArrayType:
    if not isinstance(v.type, ArrayType):
        raise _Check(f"{what} must be an array, got {v.type}")
    return v.type


def _int_scalar(v: Value, what: str) -> TileType:
    t = _tile(v, what)
    if not t.is_scalar or not t.dtype.is_int:
        raise _Check(f"{what} must be an integer scalar, got {t}")
    return t


def _same(a: object, b: object, what: str) -> None:
    if a != b:
        raise _Check(f"{what}: {a} != {b}")


def _pow2_shape(t: TileType, what: str) -> None:
    for s in t.shape:
        if s <= 0 or s & (s - 1):
            raise _Check(f"{what} has a dimension that is not a power of two: {t}")


def _axis(axis: object, ndim: int) -> None:
    if not isinstance(axis, int) or not 0 <= axis < ndim:
        raise _Check(f"axis {axis!r} is out of range for rank {ndim}")


def _check_constant(op: ops.ConstantOp, r: TileType) -> None:
    v = op.value
    if not isinstance(v, bool | int | float):
        raise _Check(f"value must be a Python number, got {type(v).__name__}")
    if r.dtype.is_bool and not isinstance(v, bool):
        raise _Check(f"a bool constant needs a bool value, got {v!r}")
    if r.dtype.is_int and isinstance(v, float | bool):
        raise _Check(f"an integer constant needs an int value, got {v!r}")


def _check_arange(op: ops.ArangeOp, r: TileType) -> None:
    if r.ndim != 1 or r.dtype.is_bool:
        raise _Check(f"result must be a 1-d numeric tile, got {r}")


def _check_grid(op: ops.BlockIdOp | ops.NumBlocksOp, r: TileType) -> None:
    _same(r, TileType(int32), "result type")
    if op.axis not in (0, 1, 2):
        raise _Check(f"axis must be 0, 1 or 2, got {op.axis!r}")


def _check_array_dim(op: ops.ArrayDimOp, r: TileType) -> None:
    a = _array(op.array, "array")
    _axis(op.axis, a.ndim)
    if op.which not in ("shape", "stride"):
        raise _Check(f"which must be 'shape' or 'stride', got {op.which!r}")
    _same(r, TileType(int64), "result type")


def _array_list(v: Value) -> ArrayListType:
    if not isinstance(v.type, ArrayListType):
        raise _Check(f"arrays must be an array list, got {v.type}")
    return v.type


def _check_array_count(op: ops.ArrayCountOp, r: TileType) -> None:
    _array_list(op.arrays)
    _same(r, TileType(int32), "result type")


def _check_array_item(op: ops.ArrayItemOp, r: object) -> None:
    lst = _array_list(op.arrays)
    _int_scalar(op.index, "index")
    if len(op.results) != 1:
        raise _Check(f"must have exactly one result, has {len(op.results)}")
    _same(op.results[0].type, lst.element, "result type vs the list's element type")


def _check_index(array: Value, index: list[Value], what: str) -> ArrayType:
    a = _array(array, "array")
    if len(index) != a.ndim:
        raise _Check(f"{what} has {len(index)} indices for a rank-{a.ndim} array")
    for i, v in enumerate(index):
        _int_scalar(v, f"index {i}")
    return a


def _check_load(op: ops.LoadOp, r: TileType) -> None:
    a = _check_index(op.array, op.index, "load")
    _same(r.dtype, a.dtype, "result dtype vs array dtype")
    _same(r.ndim, a.ndim, "result rank vs array rank")


def _check_store(op: ops.StoreOp, r: None) -> None:
    a = _check_index(op.array, op.index, "store")
    t = _tile(op.tile, "tile")
    _same(t.dtype, a.dtype, "tile dtype vs array dtype")
    _same(t.ndim, a.ndim, "tile rank vs array rank")


def _check_indices(array: Value, indices: list[Value], shape: tuple[int, ...]) -> ArrayType:
    a = _array(array, "array")
    if len(indices) != a.ndim:
        raise _Check(f"{len(indices)} index tiles for a rank-{a.ndim} array")
    for i, v in enumerate(indices):
        t = _tile(v, f"index {i}")
        if not t.dtype.is_int:
            raise _Check(f"index {i} must be an integer tile, got {t}")
        _same(t.shape, shape, f"index {i} shape")
    return a


def _check_gather(op: ops.GatherOp, r: TileType) -> None:
    a = _check_indices(op.array, op.indices, r.shape)
    _same(r.dtype, a.dtype, "result dtype vs array dtype")


def _check_scatter(op: ops.ScatterOp, r: None) -> None:
    t = _tile(op.tile, "tile")
    a = _check_indices(op.array, op.indices, t.shape)
    _same(t.dtype, a.dtype, "tile dtype vs array dtype")


def _check_atomic(op: ops.AtomicOp, r: TileType) -> None:
    if op.kind not in _ATOMIC_KINDS:
        raise _Check(f"unknown atomic kind {op.kind!r}")
    a = _check_indices(op.array, op.indices, r.shape)
    _same(_tile(op.value, "value"), r, "value type vs result type")
    _same(r.dtype, a.dtype, "result dtype vs array dtype")
    if (op.kind == "cas") != (len(op.compare) == 1) or len(op.compare) > 1:
        raise _Check(f"atomic {op.kind} takes {'one' if op.kind == 'cas' else 'no'} compare value")
    for c in op.compare:
        _same(_tile(c, "compare"), r, "compare type vs result type")
    _check_order(op.sem, op.scope)


def _check_order(sem: object, scope: object) -> None:
    if sem not in ops.MEMORY_ORDERS or scope not in ops.MEMORY_SCOPES:
        raise _Check(f"unknown memory order {sem!r} or scope {scope!r}")


def _check_fence(op: ops.FenceOp, r: None) -> None:
    _check_order(op.sem, op.scope)
    if op.sem == "relaxed":
        raise _Check("a fence cannot be relaxed")


def _check_barrier(op: ops.BarrierOp, r: None) -> None:
    pass


def _check_print(op: ops.PrintOp, r: None) -> None:
    if not isinstance(op.texts, tuple) or len(op.texts) != len(op.values) + 1:
        raise _Check(f"{len(op.values)} values need {len(op.values) + 1} texts, got {op.texts!r}")
    if not all(isinstance(t, str) for t in op.texts):
        raise _Check(f"texts must be strings, got {op.texts!r}")
    shapes = {t.shape for t in (_tile(v, "value") for v in op.values) if not t.is_scalar}
    if len(shapes) > 1:
        raise _Check(f"printed tiles have different shapes: {sorted(shapes)}")


def _check_fast_math(op: ops.UnaryOp | ops.BinaryOp, x: TileType) -> None:
    """``rounding``/``ftz`` are the defaults, or a combination ``ops.FAST_MATH`` allows for ``fn`` on ``x``."""
    if op.rounding == "" and op.ftz is False:
        return
    allowed = ops.FAST_MATH.get((op.fn, op.rounding, op.ftz))
    if allowed is None or x.dtype.short not in allowed:
        raise _Check(f"{op.fn!r} with rounding={op.rounding!r}, ftz={op.ftz!r} on {x}")


def _check_unary(op: ops.UnaryOp, r: TileType) -> None:
    if op.fn not in ops.UNARY_FNS:
        raise _Check(f"unknown unary fn {op.fn!r}")
    x = _tile(op.x, "x")
    _check_fast_math(op, x)
    if op.fn in ops.BIT_COUNT_FNS:
        if not x.dtype.is_int or x.dtype.bits not in (32, 64):
            raise _Check(f"{op.fn!r} needs a 32- or 64-bit integer operand, got {x}")
        _same(r, x.with_dtype(int32), "result type")
        return
    _same(r, x.with_dtype(bool_) if op.fn in ops.PREDICATE_FNS else x, "operand type vs result type")
    if op.fn == "not" and not x.dtype.is_bool:
        raise _Check(f"'not' needs a bool operand, got {x}")
    if op.fn == "invert" and not x.dtype.is_int:
        raise _Check(f"'invert' needs an integer operand, got {x}")
    if op.fn == "neg" and x.dtype.is_bool:
        raise _Check("'neg' of a bool tile")
    if op.fn in _FLOAT_ONLY_UNARY and not x.dtype.is_float:
        raise _Check(f"{op.fn!r} needs a float operand, got {x}")


def _check_binary(op: ops.BinaryOp, r: TileType) -> None:
    if op.fn not in ops.BINARY_FNS:
        raise _Check(f"unknown binary fn {op.fn!r}")
    _same(_tile(op.x, "x"), r, "x type vs result type")
    _same(_tile(op.y, "y"), r, "y type vs result type")
    _check_fast_math(op, r)
    d = r.dtype
    if op.fn in ("truediv", "atan2") and not d.is_float:
        raise _Check(f"{op.fn!r} needs float operands, got {d}")
    if op.fn in ("and", "or", "xor") and d.is_float:
        raise _Check(f"{op.fn!r} needs integer or bool operands, got {d}")
    if op.fn in ("lshift", "rshift") and not d.is_int:
        raise _Check(f"{op.fn!r} needs integer operands, got {d}")
    if op.fn == "mulhi" and d.kind != "u":
        raise _Check(f"'mulhi' needs unsigned integer operands, got {d}")


def _check_fma(op: ops.FmaOp, r: TileType) -> None:
    for name in ("x", "y", "z"):
        _same(_tile(getattr(op, name), name), r, f"{name} type vs result type")
    if not r.dtype.is_float:
        raise _Check(f"fma needs float operands, got {r.dtype}")


def _check_compare(op: ops.CompareOp, r: TileType) -> None:
    if op.fn not in ops.COMPARE_FNS:
        raise _Check(f"unknown compare fn {op.fn!r}")
    x = _tile(op.x, "x")
    _same(_tile(op.y, "y"), x, "y type vs x type")
    _same(r, x.with_dtype(bool_), "result type")


def _check_select(op: ops.SelectOp, r: TileType) -> None:
    _same(_tile(op.cond, "cond"), r.with_dtype(bool_), "cond type")
    _same(_tile(op.x, "x"), r, "x type vs result type")
    _same(_tile(op.y, "y"), r, "y type vs result type")


def _check_cast(op: ops.CastOp, r: TileType) -> None:
    _same(_tile(op.x, "x").shape, r.shape, "cast shape")


def _check_assume(op: ops.AssumeOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(x, r, "operand type vs result type")
    if not x.dtype.is_int:
        raise _Check(f"facts are stated of integers, got {x}")
    for name in ("div_by", "contiguous"):
        n = getattr(op, name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n & (n - 1):
            raise _Check(f"{name} must be a positive power of two, got {n!r}")
    if op.contiguous > (x.shape[-1] if x.shape else 1):
        raise _Check(f"contiguous={op.contiguous} is longer than the last axis of {x}")


def _check_reshape(op: ops.ReshapeOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(x.dtype, r.dtype, "reshape dtype")
    _same(x.size, r.size, "reshape size")


def _check_permute(op: ops.PermuteOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    perm = op.perm
    if not isinstance(perm, tuple) or sorted(perm) != list(range(x.ndim)):
        raise _Check(f"perm {perm!r} is not a permutation of range({x.ndim})")
    _same(r, TileType(x.dtype, tuple(x.shape[p] for p in perm)), "result type")


def _check_broadcast(op: ops.BroadcastOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(x.dtype, r.dtype, "broadcast dtype")
    if x.is_scalar:
        return
    if x.ndim != r.ndim:
        raise _Check(f"broadcast of {x} to {r}: ranks differ (reshape first)")
    for a, b in zip(x.shape, r.shape):
        if a != b and a != 1:
            raise _Check(f"cannot broadcast {x} to {r}")


def _check_extract(op: ops.ExtractOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(r.dtype, x.dtype, "extract dtype")
    index = op.index
    if not isinstance(index, tuple) or len(index) != x.ndim or r.ndim != x.ndim:
        raise _Check(f"extract of {r} from {x} at {index!r}: one index per dimension, ranks equal")
    for d, (i, s, b) in enumerate(zip(index, x.shape, r.shape)):
        if s % b or not isinstance(i, int) or not 0 <= i < s // b:
            raise _Check(f"extract of {r} from {x}: index {i!r} of dimension {d} is not a block of it")


def _check_cat(op: ops.CatOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(_tile(op.y, "y"), x, "y type vs x type")
    _axis(op.axis, x.ndim)
    doubled = tuple(2 * s if d == op.axis else s for d, s in enumerate(x.shape))
    _same(r, x.with_shape(doubled), "result type")


def _check_join(op: ops.JoinOp, r: TileType) -> None:
    x = _tile(op.x, "x")
    _same(_tile(op.y, "y"), x, "y type vs x type")
    _same(r, x.with_shape(x.shape + (2,)), "result type")


def _check_split(op: ops.SplitOp, rs: list[TileType]) -> None:
    x = _tile(op.x, "x")
    if not x.shape or x.shape[-1] != 2:
        raise _Check(f"split needs a last dimension of size 2, got {x}")
    for r in rs:
        _same(r, x.with_shape(x.shape[:-1]), "result type")


def _dropped(x: TileType, axis: int) -> tuple[int, ...]:
    return x.shape[:axis] + x.shape[axis + 1:]


def _check_reduce(op: ops.ReduceOp, r: TileType) -> None:
    if op.fn not in ops.REDUCE_FNS:
        raise _Check(f"unknown reduce fn {op.fn!r}")
    x = _tile(op.x, "x")
    _axis(op.axis, x.ndim)
    _same(r, TileType(x.dtype, _dropped(x, op.axis)), "result type")


def _check_argreduce(op: ops.ArgReduceOp, r: TileType) -> None:
    if op.fn not in ops.ARGREDUCE_FNS:
        raise _Check(f"unknown argreduce fn {op.fn!r}")
    x = _tile(op.x, "x")
    _axis(op.axis, x.ndim)
    _same(r, TileType(int32, _dropped(x, op.axis)), "result type")


def _check_scan(op: ops.ScanOp, r: TileType) -> None:
    if op.fn not in ops.SCAN_FNS:
        raise _Check(f"unknown scan fn {op.fn!r}")
    x = _tile(op.x, "x")
    _axis(op.axis, x.ndim)
    _same(r, x, "result type")


def _check_mma(op: ops.MmaOp, r: TileType) -> None:
    a, b, acc = _tile(op.a, "a"), _tile(op.b, "b"), _tile(op.acc, "acc")
    if a.ndim != 2 or b.ndim != 2 or acc.ndim != 2:
        raise _Check(f"mma needs 2-d tiles, got {a}, {b}, {acc}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or acc.shape != (m, n):
        raise _Check(f"mma shapes do not match: {a} x {b} + {acc}")
    _same(a.dtype, b.dtype, "mma input dtypes")
    want = _MMA_ACC.get(a.dtype.short)
    if want is None:
        raise _Check(f"mma does not take {a.dtype} inputs")
    _same(acc.dtype.short, want, "mma accumulator dtype")
    _same(r, acc, "result type vs acc type")


_OP_CHECKS: dict[type[Op], Callable[..., None]] = {
    ops.ConstantOp: _check_constant, ops.ArangeOp: _check_arange, ops.BlockIdOp: _check_grid,
    ops.NumBlocksOp: _check_grid, ops.ArrayDimOp: _check_array_dim, ops.ArrayCountOp: _check_array_count,
    ops.ArrayItemOp: _check_array_item, ops.LoadOp: _check_load,
    ops.StoreOp: _check_store, ops.GatherOp: _check_gather, ops.ScatterOp: _check_scatter,
    ops.AtomicOp: _check_atomic, ops.FenceOp: _check_fence, ops.BarrierOp: _check_barrier,
    ops.PrintOp: _check_print, ops.UnaryOp: _check_unary, ops.BinaryOp: _check_binary, ops.FmaOp: _check_fma,
    ops.CompareOp: _check_compare, ops.SelectOp: _check_select, ops.CastOp: _check_cast, ops.AssumeOp: _check_assume,
    ops.ReshapeOp: _check_reshape, ops.PermuteOp: _check_permute, ops.BroadcastOp: _check_broadcast,
    ops.ExtractOp: _check_extract, ops.CatOp: _check_cat, ops.JoinOp: _check_join, ops.SplitOp: _check_split,
    ops.ReduceOp: _check_reduce, ops.ArgReduceOp: _check_argreduce, ops.ScanOp: _check_scan,
    ops.MmaOp: _check_mma,
}



class _Verifier:
    """Walks the function once with the set of values visible at each point."""

    def __init__(self, fn: ops.Function) -> None:
        self.fn = fn
        self.defined_once: set[int] = set()

    def fail(self, op: Op | None, message: str) -> None:
        where = ""
        if op is not None:
            where = f" {op.NAME} op"
            if op.loc.line:
                where += f" (from {op.loc.filename}:{op.loc.line})"
        raise IRVerificationError(f"internal error: invalid tile IR in @{self.fn.name}:{where}: {message}")

    def define(self, v: Value, op: Op | None, visible: set[int]) -> None:
        if v.id in self.defined_once:
            self.fail(op, f"value %{v.name or v.id} is defined twice")
        self.defined_once.add(v.id)
        visible.add(v.id)

    def run(self) -> None:
        fn = self.fn
        if len(fn.param_names) != len(fn.body.args):
            self.fail(None, f"{len(fn.param_names)} parameter names for {len(fn.body.args)} parameters")
        visible: set[int] = set()
        for v in fn.body.args:
            if isinstance(v.type, TileType) and not v.type.is_scalar:
                self.fail(None, f"parameter %{v.name} must be an array or a scalar, got {v.type}")
            self.define(v, None, visible)
        self.block(fn.body, visible, [], "func")

    def block(
        self, block: Block, visible: set[int], loops: list[Op], owner: str, if_op: ops.IfOp | None = None
    ) -> None:
        """Check ``block``; ``owner`` is 'func', 'loop' (For/Loop body) or 'if' (an If branch)."""
        if not block.ops or not block.ops[-1].is_terminator:
            last = block.ops[-1] if block.ops else None
            self.fail(last, f"a {owner} block must end with a terminator")
        for i, op in enumerate(block.ops):
            if op.is_terminator and i != len(block.ops) - 1:
                self.fail(op, "a terminator must be the last op of its block")
            for v in op.operands():
                if v.id not in visible:
                    self.fail(op, f"operand %{v.name or v.id} is used before its definition or outside its scope")
            self.op(op, visible, loops, owner, if_op)
            for r in op.results:
                self.define(r, op, visible)

    def op(self, op: Op, visible: set[int], loops: list[Op], owner: str, if_op: ops.IfOp | None) -> None:
        try:
            self._op(op, visible, loops, owner, if_op)
        except _Check as exc:
            self.fail(op, str(exc))

    def _op(self, op: Op, visible: set[int], loops: list[Op], owner: str, if_op: ops.IfOp | None) -> None:
        check = _OP_CHECKS.get(type(op))
        if check is not None:
            if isinstance(op, _SINGLE_RESULT):
                if len(op.results) != 1:
                    raise _Check(f"must have exactly one result, has {len(op.results)}")
                r = op.results[0].type
                if not isinstance(r, TileType):
                    raise _Check(f"result must be a tile, got {r}")
                _pow2_shape(r, "result")
                check(op, r)
            elif isinstance(op, ops.ArrayItemOp):
                check(op, None)
            elif isinstance(op, _TWO_RESULTS):
                if len(op.results) != 2:
                    raise _Check(f"must have two results, has {len(op.results)}")
                rs = [v.type for v in op.results]
                for t in rs:
                    if not isinstance(t, TileType):
                        raise _Check(f"results must be tiles, got {t}")
                    _pow2_shape(t, "result")
                check(op, rs)
            else:
                if op.results:
                    raise _Check(f"must have no results, has {len(op.results)}")
                check(op, None)
            return
        if isinstance(op, _NO_RESULT) and op.results:
            raise _Check(f"must have no results, has {len(op.results)}")
        if isinstance(op, ops.ForOp):
            self._for(op, visible, loops)
        elif isinstance(op, ops.LoopOp):
            self._loop(op, visible, loops)
        elif isinstance(op, ops.IfOp):
            self._if(op, visible, loops)
        elif isinstance(op, ops.YieldOp):
            if owner != "if" or if_op is None:
                raise _Check("yield outside an if branch")
            _same([v.type for v in op.values], [r.type for r in if_op.results], "yielded types vs if results")
        elif isinstance(op, ops.ContinueOp | ops.BreakOp):
            if not loops:
                raise _Check(f"{op.NAME} outside a loop")
            loop = loops[-1]
            if isinstance(op, ops.ContinueOp):
                carried = loop.regions()[0].args[1:] if isinstance(loop, ops.ForOp) else loop.regions()[0].args
                _same([v.type for v in op.values], [a.type for a in carried], "continue values vs carried types")
            else:
                _same([v.type for v in op.values], [r.type for r in loop.results], "break values vs loop results")
        elif isinstance(op, ops.ReturnOp):
            return
        else:
            raise _Check(f"unknown op {type(op).__name__}")

    def _carried(self, op: ops.ForOp | ops.LoopOp, args: list[Value]) -> None:
        init_types = [v.type for v in op.init]
        _same([a.type for a in args], init_types, "block argument types vs init types")
        _same([r.type for r in op.results], init_types, "result types vs init types")

    def _for(self, op: ops.ForOp, visible: set[int], loops: list[Op]) -> None:
        lo = _int_scalar(op.lower, "lower")
        _same(_int_scalar(op.upper, "upper"), lo, "upper type vs lower type")
        _same(_int_scalar(op.step, "step"), lo, "step type vs lower type")
        if not isinstance(op.unroll, int) or op.unroll < 1:
            raise _Check(f"unroll must be a positive int, got {op.unroll!r}")
        args = op.body.args
        if not args:
            raise _Check("the body needs the induction variable as its first argument")
        _same(args[0].type, lo, "induction variable type")
        self._carried(op, args[1:])
        self._region(op, op.body, visible, loops + [op], "loop")

    def _loop(self, op: ops.LoopOp, visible: set[int], loops: list[Op]) -> None:
        self._carried(op, op.body.args)
        self._region(op, op.body, visible, loops + [op], "loop")

    def _if(self, op: ops.IfOp, visible: set[int], loops: list[Op]) -> None:
        _same(_tile(op.cond, "cond"), TileType(bool_), "cond type")
        for r in op.results:
            if not isinstance(r.type, TileType):
                raise _Check(f"if results must be tiles, got {r.type}")
        for body in (op.then_body, op.else_body):
            if body.args:
                raise _Check("if branches take no arguments")
            self._region(op, body, visible, loops, "if", op)

    def _region(self, op: Op, body: Block, visible: set[int], loops: list[Op], owner: str,
                if_op: ops.IfOp | None = None) -> None:
        inner = set(visible)
        for a in body.args:
            self.define(a, op, inner)
        try:
            self.block(body, inner, loops, owner, if_op)
        except _Check as exc:
            self.fail(op, str(exc))


def verify(fn: ops.Function) -> None:
    """Check ``fn``'s structure and types; raise ``IRVerificationError`` on the first problem."""
    _Verifier(fn).run()


__all__ = ["IRVerificationError", "verify"]
