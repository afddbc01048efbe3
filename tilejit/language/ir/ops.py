"""The tile IR's ops. Every op works on whole tiles; no op mentions threads.

Conventions every op relies on (the front end establishes them, the verifier checks them):
- Elementwise ops (Unary, Binary, Compare, Select) take operands of exactly the result shape:
  the front end inserts ``BroadcastOp`` for numpy broadcasting and ``CastOp`` for type promotion.
- Scalars are 0-d tiles (``TileType(dtype, ())``), uniform across the block.
- Index operands of Load/Store and loop bounds are scalar integers; shapes and strides of arrays
  are ``int64`` scalars read with ``ArrayDimOp``.
- A block that ends control flow ends with exactly one terminator: ``YieldOp`` (end of an If
  branch), ``ContinueOp`` (end of a loop iteration), ``BreakOp`` (leave the innermost loop) or
  ``ReturnOp`` (end of the kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tilejit.language.ir.core import Block, Op, Value, attribute, operand, region
from tilejit.language.ir.types import ArrayType, DType

# ---------------------------------------------------------------------------------------------
# Values from nothing


@dataclass(eq=False, kw_only=True)
class ConstantOp(Op):
    """A tile (or scalar) whose every element is ``value``; the result type says dtype and shape."""

    NAME: ClassVar[str] = "constant"
    value: Any = attribute()


@dataclass(eq=False, kw_only=True)
class ArangeOp(Op):
    """The 1-d tile ``[0, 1, ..., n-1]`` of the result's dtype (n is the result's shape[0])."""

    NAME: ClassVar[str] = "arange"


@dataclass(eq=False, kw_only=True)
class BlockIdOp(Op):
    """This block's index along grid ``axis`` (0, 1 or 2): an int32 scalar."""

    NAME: ClassVar[str] = "block_id"
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class NumBlocksOp(Op):
    """The grid's size along ``axis``: an int32 scalar."""

    NAME: ClassVar[str] = "num_blocks"
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class ArrayDimOp(Op):
    """``array.shape[axis]`` (``which='shape'``) or ``array.strides[axis]`` in elements
    (``which='stride'``), as an int64 scalar known at run time."""

    NAME: ClassVar[str] = "array_dim"
    array: Value = operand()
    axis: int = attribute()
    which: str = attribute("shape")


@dataclass(eq=False, kw_only=True)
class ArrayItemOp(Op):
    """Array ``index`` (an integer scalar known at run time) of the array list ``arrays``: an ``ArrayType`` value
    with that array's pointer, shape and strides. An index outside ``[0, len)`` gives an empty array (every
    shape 0): loads from it read the padding, stores to it write nothing."""

    NAME: ClassVar[str] = "array_item"
    arrays: Value = operand()
    index: Value = operand()


@dataclass(eq=False, kw_only=True)
class ArrayCountOp(Op):
    """The number of arrays in the array list ``arrays``, known at run time: an int32 scalar."""

    NAME: ClassVar[str] = "array_count"
    arrays: Value = operand()


# ---------------------------------------------------------------------------------------------
# Memory


@dataclass(eq=False, kw_only=True)
class LoadOp(Op):
    """Read the tile at tile-grid ``index`` of ``array``: element ``j`` along dim ``d`` comes from
    array index ``index[d] * shape[d] + j``. Elements outside the array read ``padding``.
    ``shape`` (the result's) has one entry per array dim."""

    NAME: ClassVar[str] = "load"
    array: Value = operand()
    index: list[Value] = operand()
    padding: Any = attribute(0)


@dataclass(eq=False, kw_only=True)
class StoreOp(Op):
    """Write ``tile`` at tile-grid ``index`` of ``array`` (same indexing as ``LoadOp``); elements
    outside the array are not written."""

    NAME: ClassVar[str] = "store"
    has_side_effects: ClassVar[bool] = True
    array: Value = operand()
    index: list[Value] = operand()
    tile: Value = operand()


@dataclass(eq=False, kw_only=True)
class GatherOp(Op):
    """Read ``array[indices[0][e], indices[1][e], ...]`` for each element ``e`` of the result; the
    index tiles (one per array dim, integer, already broadcast to the result shape) give element
    indices. Out-of-range elements read ``padding``."""

    NAME: ClassVar[str] = "gather"
    array: Value = operand()
    indices: list[Value] = operand()
    padding: Any = attribute(0)


@dataclass(eq=False, kw_only=True)
class ScatterOp(Op):
    """Write ``tile[e]`` to ``array[indices[0][e], ...]``; out-of-range elements are skipped."""

    NAME: ClassVar[str] = "scatter"
    has_side_effects: ClassVar[bool] = True
    array: Value = operand()
    indices: list[Value] = operand()
    tile: Value = operand()


MEMORY_ORDERS = ("relaxed", "acquire", "release", "acq_rel")
MEMORY_SCOPES = ("cta", "gpu", "sys")


@dataclass(eq=False, kw_only=True)
class AtomicOp(Op):
    """Atomic read-modify-write at element indices (as ``ScatterOp``), one per element of ``value``.
    ``kind`` is 'add', 'max', 'min', 'xchg' or 'cas' (then ``compare`` holds the expected values).
    The result holds the old values (out-of-range elements: 0, nothing written).

    ``sem`` (one of ``MEMORY_ORDERS``) and ``scope`` (``MEMORY_SCOPES``: the block, the device, the system)
    order the block's other memory ops around it, for the whole block: with 'release' or 'acq_rel' every
    earlier memory op of the block happens before each element's update, with 'acquire' or 'acq_rel' each
    element's update happens before every later memory op of the block."""

    NAME: ClassVar[str] = "atomic"
    has_side_effects: ClassVar[bool] = True
    kind: str = attribute()
    array: Value = operand()
    indices: list[Value] = operand()
    value: Value = operand()
    compare: list[Value] = operand()  # [] or [expected]
    sem: str = attribute("acq_rel")
    scope: str = attribute("gpu")


@dataclass(eq=False, kw_only=True)
class FenceOp(Op):
    """A memory fence of ``scope`` for the whole block: every memory op of the block before it happens before
    every one after it, as observed by threads of ``scope`` (``sem``: 'acquire', 'release' or 'acq_rel')."""

    NAME: ClassVar[str] = "fence"
    has_side_effects: ClassVar[bool] = True
    sem: str = attribute("acq_rel")
    scope: str = attribute("gpu")


@dataclass(eq=False, kw_only=True)
class BarrierOp(Op):
    """A block-wide barrier: the block's memory ops before it are visible to its memory ops after it."""

    NAME: ClassVar[str] = "barrier"
    has_side_effects: ClassVar[bool] = True


@dataclass(eq=False, kw_only=True)
class PrintOp(Op):
    """Print ``texts[0] value[0] texts[1] ... value[-1] texts[-1]`` from the device (``len(texts)`` is
    ``len(values) + 1``; ``texts[-1]`` ends the line). ``values`` are scalars or tiles of one shape; every element
    of the tiles is printed. How the lines name the block and the element, and how numbers are written, is the
    backends' (README, "Device print")."""

    NAME: ClassVar[str] = "print"
    has_side_effects: ClassVar[bool] = True
    values: list[Value] = operand()
    texts: tuple[str, ...] = attribute()


# ---------------------------------------------------------------------------------------------
# Elementwise

UNARY_FNS = (
    "neg", "not", "invert", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
    "tanh", "floor", "ceil", "erf", "sigmoid", "asin", "acos", "atan", "sinh", "cosh", "log1p", "expm1", "cbrt",
    "erfinv", "isnan", "isinf", "signbit", "popc", "clz",
)
#: Unary fns whose result is a bool tile of the operand's shape (float operands).
PREDICATE_FNS = ("isnan", "isinf", "signbit")
#: Unary fns on 32- and 64-bit integers whose result is an int32 tile of the operand's shape.
BIT_COUNT_FNS = ("popc", "clz")
BINARY_FNS = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum",
    "and", "or", "xor", "lshift", "rshift", "mulhi", "atan2",
)
COMPARE_FNS = ("eq", "ne", "lt", "le", "gt", "ge")
#: Roundings an op may ask for (``rounding``; "" is the op's default): IEEE to nearest even, toward zero, -inf,
#: +inf; the CUDA Math API's full-range function; the GPU's fast approximation.
ROUNDINGS = ("", "rn", "rz", "rm", "rp", "full", "approx")
#: (fn, rounding, ftz) that a unary or binary op may carry besides the defaults ("", False), and on which float
#: dtypes (short names): the fast-math options of ``tj.exp``, ``tj.sqrt``, ``tj.truediv``...
FAST_MATH: dict[tuple[str, str, bool], tuple[str, ...]] = {
    ("exp", "approx", False): ("f32",), ("tanh", "approx", False): ("f32",), ("exp2", "", True): ("f32",),
    ("rsqrt", "", True): ("f32",),
    **{("sqrt", r, z): ("f32",) for r in ("", "rz", "rm", "rp", "approx") for z in (False, True) if r or z},
    **{("sqrt", r, False): ("f32", "f64") for r in ("rz", "rm", "rp")},
    **{("truediv", r, z): ("f32",) for r in ("", "rn", "rz", "rm", "rp", "approx") for z in (False, True) if r or z},
    **{("truediv", r, False): ("f32", "f64") for r in ("rz", "rm", "rp")},
}


@dataclass(eq=False, kw_only=True)
class UnaryOp(Op):
    """Elementwise ``fn(x)``; ``fn`` is one of ``UNARY_FNS``. 'not' is logical (bool), 'invert' bitwise. The
    result has the operand's type, except ``PREDICATE_FNS`` (bool) and ``BIT_COUNT_FNS`` (int32). ``rounding``
    and ``ftz`` (flush subnormals to zero) are fast-math options (``FAST_MATH``)."""

    NAME: ClassVar[str] = "unary"
    fn: str = attribute()
    x: Value = operand()
    rounding: str = attribute("", quiet=True)
    ftz: bool = attribute(False, quiet=True)


@dataclass(eq=False, kw_only=True)
class BinaryOp(Op):
    """Elementwise ``fn(x, y)``; both operands have the result's type. 'truediv' and 'atan2' (``atan(x / y)`` in
    the quadrant of ``(y, x)``) only on floats (the front end casts ints first); 'floordiv' and 'mod' follow Python
    (floor) semantics; 'mulhi' (unsigned integers only) is the high half of the double-width product. ``rounding``
    and ``ftz`` as ``UnaryOp``'s."""

    NAME: ClassVar[str] = "binary"
    fn: str = attribute()
    x: Value = operand()
    y: Value = operand()
    rounding: str = attribute("", quiet=True)
    ftz: bool = attribute(False, quiet=True)


@dataclass(eq=False, kw_only=True)
class FmaOp(Op):
    """Elementwise ``x * y + z`` rounded once; all three operands have the result's (float) type."""

    NAME: ClassVar[str] = "fma"
    x: Value = operand()
    y: Value = operand()
    z: Value = operand()


@dataclass(eq=False, kw_only=True)
class CompareOp(Op):
    """Elementwise comparison of two operands of one type; the result is a bool tile."""

    NAME: ClassVar[str] = "compare"
    fn: str = attribute()
    x: Value = operand()
    y: Value = operand()


@dataclass(eq=False, kw_only=True)
class SelectOp(Op):
    """Elementwise ``cond ? x : y`` (``where``); all three have the result's shape."""

    NAME: ClassVar[str] = "select"
    cond: Value = operand()
    x: Value = operand()
    y: Value = operand()


@dataclass(eq=False, kw_only=True)
class CastOp(Op):
    """Elementwise conversion to the result's dtype (C++ ``static_cast`` semantics; float to int
    truncates; to bool is ``!= 0``)."""

    NAME: ClassVar[str] = "cast"
    x: Value = operand()


@dataclass(eq=False, kw_only=True)
class AssumeOp(Op):
    """``x`` unchanged, with facts the user states about it (``tj.multiple_of``, ``tj.max_contiguous``) that
    backends may rely on: ``x`` is an integer scalar or tile; along the tile's last axis, each aligned group of
    ``contiguous`` elements (1 for a scalar) counts up by one, and the first element of each group is a multiple
    of ``div_by``. Both are powers of two; a false fact is undefined behaviour, as in Triton and Tile IR."""

    NAME: ClassVar[str] = "assume"
    x: Value = operand()
    div_by: int = attribute(1)
    contiguous: int = attribute(1)


# ---------------------------------------------------------------------------------------------
# Shape


@dataclass(eq=False, kw_only=True)
class ReshapeOp(Op):
    """Same elements in row-major order, new shape (the result's); sizes match."""

    NAME: ClassVar[str] = "reshape"
    x: Value = operand()


@dataclass(eq=False, kw_only=True)
class PermuteOp(Op):
    """``numpy.transpose(x, perm)``."""

    NAME: ClassVar[str] = "permute"
    x: Value = operand()
    perm: tuple[int, ...] = attribute()


@dataclass(eq=False, kw_only=True)
class BroadcastOp(Op):
    """Broadcast ``x`` to the result shape. ``x`` is a scalar or has the result's rank with size 1
    in every broadcast dim."""

    NAME: ClassVar[str] = "broadcast"
    x: Value = operand()


@dataclass(eq=False, kw_only=True)
class ExtractOp(Op):
    """One block of ``x``: ``x`` split into blocks of the result's shape (same rank, each dimension dividing
    ``x``'s), the block at block index ``index`` (compile-time, in units of the result's shape):
    element ``j`` along dim ``d`` is ``x``'s ``index[d] * shape[d] + j``."""

    NAME: ClassVar[str] = "extract"
    x: Value = operand()
    index: tuple[int, ...] = attribute()


@dataclass(eq=False, kw_only=True)
class CatOp(Op):
    """``x`` then ``y`` along ``axis`` (``numpy.concatenate``); both have one type, the result twice its size
    along ``axis``."""

    NAME: ClassVar[str] = "cat"
    x: Value = operand()
    y: Value = operand()
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class JoinOp(Op):
    """``x`` and ``y`` (one type) side by side along a new last dimension of size 2 (``numpy.stack(...,
    axis=-1)``)."""

    NAME: ClassVar[str] = "join"
    x: Value = operand()
    y: Value = operand()


@dataclass(eq=False, kw_only=True)
class SplitOp(Op):
    """The two halves of ``x`` along its last dimension, of size 2, which they drop: ``results`` are
    ``x[..., 0]`` and ``x[..., 1]`` (JoinOp's inverse)."""

    NAME: ClassVar[str] = "split"
    x: Value = operand()


# ---------------------------------------------------------------------------------------------
# Reductions, scans, matrix multiply

REDUCE_FNS = ("sum", "max", "min", "prod")
ARGREDUCE_FNS = ("argmax", "argmin")
SCAN_FNS = ("sum",)


@dataclass(eq=False, kw_only=True)
class ReduceOp(Op):
    """Reduce ``x`` along ``axis`` with ``fn``; the result drops that axis (keepdims is a reshape).
    Sum and prod of ints accumulate in the result dtype; floats of < 32 bits accumulate in float32."""

    NAME: ClassVar[str] = "reduce"
    fn: str = attribute()
    x: Value = operand()
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class ArgReduceOp(Op):
    """Index (int32) of the first max/min of ``x`` along ``axis``; the result drops that axis."""

    NAME: ClassVar[str] = "argreduce"
    fn: str = attribute()
    x: Value = operand()
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class ScanOp(Op):
    """Inclusive prefix ``fn`` (cumsum) of ``x`` along ``axis``; same shape as ``x``."""

    NAME: ClassVar[str] = "scan"
    fn: str = attribute()
    x: Value = operand()
    axis: int = attribute()


@dataclass(eq=False, kw_only=True)
class MmaOp(Op):
    """``a @ b + acc`` with a: (M, K), b: (K, N), acc and result: (M, N). a and b share a dtype
    (f16, bf16, f32, f64, the 8-bit floats, or ints); acc is f32 for float inputs but f64. ``tf32`` allows the
    tensor cores' tf32 mode for f32 inputs."""

    NAME: ClassVar[str] = "mma"
    a: Value = operand()
    b: Value = operand()
    acc: Value = operand()
    tf32: bool = attribute(False)


# ---------------------------------------------------------------------------------------------
# Structured control flow


@dataclass(eq=False, kw_only=True)
class ForOp(Op):
    """``for iv in range(lower, upper, step)`` with loop-carried values.

    ``body.args`` are ``[iv, *carried]``; the body ends with ``ContinueOp(next carried values)``
    and may leave early through ``BreakOp(values)``. ``results`` are the carried values at exit.
    ``step`` is positive at run time (the front end checks constant steps)."""

    NAME: ClassVar[str] = "for"
    lower: Value = operand()
    upper: Value = operand()
    step: Value = operand()
    init: list[Value] = operand()
    body: Block = region()
    unroll: int = attribute(1)


@dataclass(eq=False, kw_only=True)
class LoopOp(Op):
    """A loop with no bound (Python ``while``): runs ``body`` until a ``BreakOp``.

    ``body.args`` are the carried values; ``ContinueOp(values)`` starts the next iteration and
    ``BreakOp(values)`` leaves with ``results = values``. ``while c: S`` becomes
    ``loop { if not c: break; S; continue }``."""

    NAME: ClassVar[str] = "loop"
    init: list[Value] = operand()
    body: Block = region()


@dataclass(eq=False, kw_only=True)
class IfOp(Op):
    """``if cond`` (a bool scalar) with both branches; each branch ends in ``YieldOp(values)``
    (giving ``results``) or leaves the enclosing loop with ``BreakOp``/``ContinueOp``."""

    NAME: ClassVar[str] = "if"
    cond: Value = operand()
    then_body: Block = region()
    else_body: Block = region()


@dataclass(eq=False, kw_only=True)
class YieldOp(Op):
    """Ends an ``IfOp`` branch, giving the If's results."""

    NAME: ClassVar[str] = "yield"
    is_terminator: ClassVar[bool] = True
    values: list[Value] = operand()


@dataclass(eq=False, kw_only=True)
class ContinueOp(Op):
    """Ends the current iteration of the innermost For/Loop with the next carried values."""

    NAME: ClassVar[str] = "continue"
    is_terminator: ClassVar[bool] = True
    values: list[Value] = operand()


@dataclass(eq=False, kw_only=True)
class BreakOp(Op):
    """Leaves the innermost For/Loop; ``values`` become its results."""

    NAME: ClassVar[str] = "break"
    is_terminator: ClassVar[bool] = True
    values: list[Value] = operand()


@dataclass(eq=False, kw_only=True)
class ReturnOp(Op):
    """Ends the kernel (for this block of the grid)."""

    NAME: ClassVar[str] = "return"
    is_terminator: ClassVar[bool] = True


# ---------------------------------------------------------------------------------------------
# The kernel


@dataclass(eq=False)
class Function:
    """A kernel after specialization: constants are folded in; parameters are arrays and scalars.

    ``param_names`` keeps the user's names for the printer and error messages; ``body.args`` are
    the parameter values in order. ``body`` ends with ``ReturnOp``."""

    name: str
    param_names: list[str]
    body: Block
    filename: str = "<unknown>"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def params(self) -> list[Value]:
        return self.body.args

    def array_params(self) -> list[tuple[str, ArrayType]]:
        return [
            (n, v.type) for n, v in zip(self.param_names, self.params) if isinstance(v.type, ArrayType)
        ]


ALL_OPS: tuple[type[Op], ...] = (
    ConstantOp, ArangeOp, BlockIdOp, NumBlocksOp, ArrayDimOp, ArrayItemOp, ArrayCountOp, LoadOp, StoreOp, GatherOp,
    ScatterOp, AtomicOp, FenceOp, BarrierOp, PrintOp, UnaryOp, BinaryOp, FmaOp, CompareOp, SelectOp, CastOp,
    AssumeOp, ReshapeOp, PermuteOp, BroadcastOp, ExtractOp, CatOp, JoinOp, SplitOp, ReduceOp, ArgReduceOp, ScanOp,
    MmaOp, ForOp, LoopOp, IfOp, YieldOp, ContinueOp, BreakOp, ReturnOp,
)

__all__ = [cls.__name__ for cls in ALL_OPS] + [
    "ARGREDUCE_FNS", "BINARY_FNS", "BIT_COUNT_FNS", "COMPARE_FNS", "FAST_MATH", "MEMORY_ORDERS", "MEMORY_SCOPES",
    "PREDICATE_FNS", "REDUCE_FNS", "ROUNDINGS", "SCAN_FNS", "UNARY_FNS", "DType", "Function",
]
