"""Clean-up passes over tile IR, run between the front end and a backend.

``run_passes`` is the whole pipeline, in order; each pass edits the function in place:

1. verify                 the front end's output is well formed
2. fold_constants         element-wise ops, casts, selects and shape ops on constants become constants
                          (numpy semantics for the dtype, 16-bit floats computed in float32 as on the
                          GPU; results that are undefined or differ there are left alone; a cat or join
                          only of two equal constants)
3. merge_assumes          the facts stated of a value and of the value it was stated of become one
                          ``AssumeOp`` of the latter (``tj.max_contiguous(tj.multiple_of(x, 16), 16)``)
4. eliminate_common       pure ops with the same operands and attributes are computed once
5. eliminate_dead         pure ops, and ifs/loops without effects, whose results are unused
6. verify                 the passes kept it well formed
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Op, Value
from tilejit.language.ir.float8 import round_float8
from tilejit.language.ir.types import DType, TileType
from tilejit.language.ir.verifier import verify


def run_passes(fn: ops.Function) -> ops.Function:
    """The standard pipeline (see the module docstring); returns ``fn``, changed in place."""
    verify(fn)
    fold_constants(fn)
    merge_assumes(fn)
    eliminate_common(fn)
    eliminate_dead(fn)
    verify(fn)
    return fn


# ---------------------------------------------------------------------------------- helpers


def _blocks(block: Block) -> list[Block]:
    """``block`` and every block nested in it."""
    out = [block]
    for op in block.ops:
        for r in op.regions():
            out.extend(_blocks(r))
    return out


def _replace_uses(fn: ops.Function, mapping: dict[Value, Value]) -> None:
    if not mapping:
        return
    for k in list(mapping):  # resolve chains a -> b -> c
        v = mapping[k]
        while v in mapping:
            v = mapping[v]
        mapping[k] = v
    for op in fn.body.walk():
        op.replace_operands(mapping)


# ---------------------------------------------------------------------------------- constant folding

_NP: dict[str, Any] = {
    "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
    "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16, "f32": np.float32, "f64": np.float64,
}


class _NoFold(Exception):
    """This op is left for the GPU (its result there could differ, or is undefined)."""


def _round_bf16(x: float) -> float:
    """Round a float to the nearest bfloat16 (ties to even), as the GPU's conversion does."""
    f = np.array(x, dtype=np.float32)
    if np.isnan(f):
        return math.nan
    bits = int(f.view(np.uint32))
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


def round_to_dtype(value: float, dtype: DType) -> float:
    """``value`` rounded to the nearest element of the float ``dtype`` as numpy's astype does
    (bfloat16 as the GPU converts it; out of range becomes inf; 8-bit floats as torch converts them)."""
    f = float(value)
    if dtype.is_float8:
        return round_float8(f, dtype)
    if dtype.bits == 64 or math.isnan(f) or math.isinf(f):
        return f
    if dtype.short == "bf16":
        with np.errstate(all="ignore"):
            return _round_bf16(f)
    with np.errstate(all="ignore"):
        return float(np.array(f, dtype=np.float16 if dtype.bits == 16 else np.float32))


def _const(value: object, dtype: DType) -> object:
    """A ConstantOp's value as an element of ``dtype`` (floats rounded to it)."""
    if dtype.is_float and isinstance(value, float | int) and not isinstance(value, bool):
        return round_to_dtype(float(value), dtype)
    return value


def _arr(value: object, dtype: DType) -> np.ndarray:
    """A 0-d numpy array of ``value`` in ``dtype`` (bfloat16 held in float32)."""
    npdt = _NP.get(dtype.short, np.float32)
    return np.array(value, dtype=npdt)


def _py(a: np.ndarray, dtype: DType) -> bool | int | float:
    """A numpy result as the Python value a ConstantOp of ``dtype`` holds."""
    if dtype.is_bool:
        return bool(a)
    if dtype.is_int:
        return int(a)
    return round_to_dtype(float(a), dtype)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    """sigmoid as the GPU computes it (math.cuh): exp(-|v|) never overflows, so v < -88.7 stays subnormal."""
    e = np.exp(-np.abs(v))
    return np.asarray(np.where(v < 0, e, v.dtype.type(1)) / (v.dtype.type(1) + e))


def erfinv(y: float) -> float:
    """The inverse error function in float64 (to about 1 ulp): the normal quantile, then Newton steps on erf (on
    erfc near +-1, where erf has no digits left); +-inf at +-1, NaN outside [-1, 1]."""
    a = abs(y)
    if not a <= 1:
        return math.nan
    if a == 1 or a == 0:
        return math.copysign(math.inf, y) if a else y
    x = -statistics.NormalDist().inv_cdf((1 - a) / 2) / math.sqrt(2)  # 1 - a: exact where erfc matters
    for _ in range(3):
        err = math.erf(x) - a if a <= 0.5 else (1 - a) - math.erfc(x)
        x -= err / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return math.copysign(x, y)


def _in_dtype(f: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A Python float function applied to a 0-d array, the result in the array's dtype (domain errors: NaN)."""

    def apply(v: np.ndarray) -> np.ndarray:
        try:
            r = f(float(v))
        except (ValueError, OverflowError):
            r = math.nan
        return np.array(r, dtype=v.dtype)

    return apply


#: The float math of the unary fns on numpy values (0-d arrays or scalars), for folding compile-time constants.
NUMPY_MATH: dict[str, Callable[[Any], Any]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda v: v.dtype.type(1) / np.sqrt(v), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "floor": np.floor, "ceil": np.ceil, "sigmoid": _sigmoid, "erf": _in_dtype(math.erf), "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p, "expm1": np.expm1,
    "cbrt": np.cbrt, "erfinv": _in_dtype(erfinv),
}


def bit_count(fn: str, v: int, bits: int) -> int:
    """``popc`` or ``clz`` of integer ``v`` seen as ``bits`` bits (two's complement)."""
    u = v & ((1 << bits) - 1)
    return bin(u).count("1") if fn == "popc" else bits - u.bit_length()


def _float_math(fn: str, x: np.ndarray, dtype: DType) -> np.ndarray:
    """Float math as the GPU does it: 16-bit floats compute in float32."""
    wide = x.astype(np.float64 if dtype.bits == 64 else np.float32)
    return np.asarray(NUMPY_MATH[fn](wide))


def _fold_unary(fn: str, v: object, dtype: DType, operand: DType) -> object:
    if fn in ops.PREDICATE_FNS:
        f = float(_arr(v, operand))
        return math.isnan(f) if fn == "isnan" else math.isinf(f) if fn == "isinf" else math.copysign(1, f) < 0
    if fn in ops.BIT_COUNT_FNS:
        return bit_count(fn, int(v), operand.bits)  # type: ignore[call-overload]
    x = _arr(v, dtype)
    if fn == "neg":
        return _py(np.negative(x), dtype)
    if fn == "not":
        return not bool(x)
    if fn == "invert":
        return _py(np.invert(x), dtype)
    if fn == "abs":
        return _py(np.abs(x), dtype)
    return _py(_float_math(fn, x, dtype), dtype)


def _fold_binary(fn: str, a: object, b: object, dtype: DType) -> object:
    if fn == "mulhi":  # unsigned: the high half of the exact product
        return (int(a) * int(b)) >> dtype.bits  # type: ignore[call-overload]
    x, y = _arr(a, dtype), _arr(b, dtype)
    if dtype.is_int or dtype.is_bool:
        if fn in ("floordiv", "mod", "truediv") and int(y) == 0:
            raise _NoFold  # undefined on the GPU
        if fn in ("lshift", "rshift") and not 0 <= int(y) < dtype.bits:
            raise _NoFold  # undefined in C++
        if fn == "pow" and int(y) < 0:
            raise _NoFold
    if fn in ("maximum", "minimum") and dtype.is_float and (np.isnan(x) or np.isnan(y)):
        raise _NoFold  # NaN handling of fmax/fmin differs from numpy
    if dtype.is_float and dtype.bits < 32:
        x, y = x.astype(np.float32), y.astype(np.float32)
    fns: dict[str, Any] = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
        "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "maximum": np.maximum,
        "minimum": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
        "lshift": np.left_shift, "rshift": np.right_shift, "atan2": np.arctan2,
    }
    return _py(np.asarray(fns[fn](x, y)), dtype)


def _fold_compare(fn: str, a: object, b: object, dtype: DType) -> bool:
    x, y = _arr(a, dtype), _arr(b, dtype)
    fns: dict[str, Any] = {
        "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal,
    }
    return bool(fns[fn](x, y))


def _fold_cast(v: object, src: DType, dst: DType) -> object:
    if src.is_float:
        v = round_to_dtype(float(v), src)  # type: ignore[arg-type]
    if dst.is_bool:
        return bool(v)
    if src.is_float and dst.is_int:
        f = float(v)  # type: ignore[arg-type]
        if not math.isfinite(f):
            raise _NoFold
        i = math.trunc(f)
        lo, hi = np.iinfo(_NP[dst.short]).min, np.iinfo(_NP[dst.short]).max
        if not lo <= i <= hi:
            raise _NoFold  # undefined in C++
        return i
    if dst.is_int:
        return int(np.array(int(v), dtype=np.int64 if src.kind != "u" else np.uint64).astype(_NP[dst.short]))  # type: ignore[call-overload]
    if src.is_int and dst.bits < 64:
        # one rounding, integer to float32, as the GPU (and numpy) convert: through a Python float
        # it rounded twice (2**60 + 2**36 + 1 became 2**60 instead of 2**60 + 2**37)
        f32 = np.array(int(v), dtype=np.int64 if src.kind != "u" else np.uint64).astype(np.float32)  # type: ignore[call-overload]
        return round_to_dtype(float(f32), dst)
    return round_to_dtype(float(v), dst)  # type: ignore[arg-type]


def _fold(op: Op, consts: dict[Value, object]) -> object:
    """The constant value of ``op``'s result, or _NoFold."""
    r = op.results[0].type
    assert isinstance(r, TileType)
    if isinstance(op, ops.UnaryOp | ops.BinaryOp) and (op.rounding or op.ftz):
        raise _NoFold  # a fast-math or directed rounding the GPU's result differs by
    if isinstance(op, ops.UnaryOp):
        xt = op.x.type
        assert isinstance(xt, TileType)
        return _fold_unary(op.fn, consts[op.x], r.dtype, xt.dtype)
    if isinstance(op, ops.BinaryOp):
        return _fold_binary(op.fn, consts[op.x], consts[op.y], r.dtype)
    if isinstance(op, ops.CompareOp):
        xt = op.x.type
        assert isinstance(xt, TileType)
        return _fold_compare(op.fn, consts[op.x], consts[op.y], xt.dtype)
    if isinstance(op, ops.CastOp):
        xt = op.x.type
        assert isinstance(xt, TileType)
        return _fold_cast(consts[op.x], xt.dtype, r.dtype)
    if isinstance(op, ops.BroadcastOp | ops.ReshapeOp | ops.PermuteOp | ops.AssumeOp | ops.ExtractOp):
        return consts[op.x]  # (an AssumeOp: a constant says more than any fact stated of it)
    if isinstance(op, ops.CatOp | ops.JoinOp):
        x, y = consts[op.x], consts[op.y]
        if type(x) is type(y) and repr(x) == repr(y):  # one value (NaN included; 0.0 and -0.0 differ)
            return x
    raise _NoFold


_FOLDABLE = (ops.UnaryOp, ops.BinaryOp, ops.CompareOp, ops.CastOp, ops.BroadcastOp, ops.ReshapeOp, ops.PermuteOp,
             ops.AssumeOp, ops.ExtractOp, ops.CatOp, ops.JoinOp)


def fold_constants(fn: ops.Function) -> int:
    """Replace ops whose operands are all constants by constants; forward selects on a constant
    condition. Returns how many ops changed."""
    consts: dict[Value, object] = {}
    forward: dict[Value, Value] = {}
    changed = 0
    for block in _blocks(fn.body):
        for i, op in enumerate(block.ops):
            if forward:
                op.replace_operands(forward)
            if isinstance(op, ops.ConstantOp):
                rt = op.result.type
                if isinstance(rt, TileType):
                    value = _const(op.value, rt.dtype)
                    if value != op.value or type(value) is not type(op.value):
                        op.value = value
                consts[op.result] = op.value
                continue
            if isinstance(op, ops.SelectOp) and op.cond in consts:
                chosen = op.x if consts[op.cond] else op.y
                if chosen in consts:
                    block.ops[i] = ops.ConstantOp(results=op.results, loc=op.loc, value=consts[chosen])
                    consts[op.result] = consts[chosen]
                else:
                    forward[op.result] = chosen
                changed += 1
                continue
            if not isinstance(op, _FOLDABLE) or not all(v in consts for v in op.operands()):
                continue
            try:
                with np.errstate(all="ignore"):
                    value = _fold(op, consts)
            except _NoFold:
                continue
            block.ops[i] = ops.ConstantOp(results=op.results, loc=op.loc, value=value)
            consts[op.result] = value
            changed += 1
    _replace_uses(fn, forward)
    return changed


# ---------------------------------------------------------------------------------- facts


def merge_assumes(fn: ops.Function) -> int:
    """Make an ``AssumeOp`` of another's result state both ops' facts of the other's operand: hints given one on
    top of another combine, as Triton's do (``max_contiguous(multiple_of(offs, 16), 16)``: runs of 16 consecutive
    values, each starting at a multiple of 16). The inner op stays only for its other uses. Returns ops merged."""
    stated: dict[Value, ops.AssumeOp] = {}
    merged = 0
    for op in fn.body.walk():  # definitions come before uses
        if not isinstance(op, ops.AssumeOp):
            continue
        inner = stated.get(op.x)
        if inner is not None:
            op.x = inner.x
            op.div_by = max(op.div_by, inner.div_by)
            op.contiguous = max(op.contiguous, inner.contiguous)
            merged += 1
        stated[op.result] = op
    return merged


# ---------------------------------------------------------------------------------- CSE

#: ops that read memory: two of them may differ when a store comes between
_READS_MEMORY = (ops.LoadOp, ops.GatherOp)


def _attr_key(v: object) -> object:
    if isinstance(v, float):
        return ("f", repr(v))
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, tuple | list):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, DType):
        return ("d", v.name)
    return ("r", repr(v))


def _is_pure(op: Op) -> bool:
    return not (op.has_side_effects or op.is_terminator or op.regions() or isinstance(op, _READS_MEMORY))


def eliminate_common(fn: ops.Function) -> int:
    """Common-subexpression elimination of pure ops, scoped by block nesting. Returns ops removed."""
    mapping: dict[Value, Value] = {}
    removed = 0

    def run(block: Block, table: dict[object, list[Value]]) -> None:
        nonlocal removed
        keep: list[Op] = []
        for op in block.ops:
            op.replace_operands(mapping)
            for r in op.regions():
                run(r, dict(table))
            if _is_pure(op) and op.results:
                key = (
                    type(op),
                    tuple(v.id for v in op.operands()),
                    tuple(_attr_key(a) for a in op.attributes().values()),
                    tuple(str(r.type) for r in op.results),
                )
                found = table.get(key)
                if found is not None:
                    for res, prev in zip(op.results, found):
                        mapping[res] = prev
                    removed += 1
                    continue
                table[key] = list(op.results)
            keep.append(op)
        block.ops[:] = keep

    run(fn.body, {})
    return removed


# ---------------------------------------------------------------------------------- DCE


def _has_effects(op: Op, in_loop: bool = False) -> bool:
    """Whether removing ``op`` could change what the kernel does: it writes memory, returns, or
    leaves a loop around it (``in_loop``: a loop inside the op being removed catches break/continue)."""
    if op.has_side_effects or isinstance(op, ops.ReturnOp):
        return True
    if isinstance(op, ops.BreakOp | ops.ContinueOp):
        return not in_loop
    inner = in_loop or isinstance(op, ops.ForOp | ops.LoopOp)
    return any(_has_effects(o, inner) for r in op.regions() for o in r.ops)


def eliminate_dead(fn: ops.Function) -> int:
    """Remove pure ops, and ifs/loops without effects, whose results are unused. Returns ops removed."""
    uses: Counter[int] = Counter()
    for op in fn.body.walk():
        for v in op.operands():
            uses[v.id] += 1
    removed = 0

    def drop(op: Op) -> None:
        for o in [op, *(x for r in op.regions() for x in r.walk())]:
            for v in o.operands():
                uses[v.id] -= 1

    def run(block: Block) -> None:
        nonlocal removed
        keep: list[Op] = []
        for op in reversed(block.ops):
            if not op.is_terminator and all(uses[r.id] == 0 for r in op.results):
                if op.regions():
                    if not _has_effects(op):
                        drop(op)
                        removed += 1
                        continue
                elif not op.has_side_effects:
                    drop(op)
                    removed += 1
                    continue
            for r in op.regions():
                run(r)
            keep.append(op)
        block.ops[:] = keep[::-1]

    before = -1
    while before != removed:
        before = removed
        run(fn.body)
    return removed


__all__ = [
    "NUMPY_MATH", "bit_count", "eliminate_common", "eliminate_dead", "erfinv", "fold_constants", "merge_assumes",
    "round_to_dtype", "run_passes",
]
