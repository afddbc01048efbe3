"""A numpy interpreter of tile IR, for CPU tests of generated kernels (``tj.fuse``'s): it runs every block of a
grid over a byte heap that stands in for device memory, with the language's arithmetic (``tilejit/language/
tile.py``): 16-bit floats compute in float32 and round to their dtype, integers wrap, integer ``//`` and ``%`` by
zero give 0, loads and gathers read ``padding`` outside the array, stores and scatters skip elements outside it.

It knows the ops the fuse kernels use (constants, block ids, aranges, elementwise ops and math but ``erfinv``,
casts, broadcasts, reshapes, reductions, loads, stores, gathers, scatters, ``for`` loops); any other op is an error.
Float math functions are numpy's, which may differ from CUDA's in the last bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.types import BY_NAME, ArrayType, DType, TileType
from tilejit.runtime.interop import ArrayView

#: numpy dtype that holds each tile dtype's values (bfloat16: float32 numbers on the bfloat16 grid)
HOLD = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "float16": np.float16,
        "bfloat16": np.float32, "float32": np.float32, "float64": np.float64}
#: numpy dtype of the raw elements in memory (bfloat16: its 16 bits)
RAW = {**HOLD, "bfloat16": np.uint16}
_ERF = np.frompyfunc(math.erf, 1, 1)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 (ties to even) of float32 values, as float32; NaN stays NaN."""
    f = np.array(x, dtype=np.float32, ndmin=1)
    bits = f.view(np.uint32).astype(np.uint64)
    out = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), np.float32(np.nan), out).reshape(np.shape(x))


def to_raw(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (np.ascontiguousarray(round_bf16(values)).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values, dtype=RAW[dtype])


def from_raw(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(raw, dtype=HOLD[dtype])


def hold(x: Any, dtype: DType) -> np.ndarray:
    """``x`` as values of ``dtype`` (floats rounded, integers wrapped, as a conversion of an exact value)."""
    name = dtype.name
    with np.errstate(all="ignore"):
        if name == "bfloat16":
            return round_bf16(np.asarray(x, dtype=np.float32))
        if dtype.is_bool:
            return np.asarray(x) != 0
        a = np.asarray(x)
        if dtype.is_int and a.dtype.kind == "f":  # truncate, saturate to 32/64 bits (NaN: 0), keep the low bits
            wide = 64 if dtype.bits == 64 else 32
            if dtype.kind == "u":
                lo, hi = 0, 2.0**wide - 1
            else:
                lo, hi = -(2.0 ** (wide - 1)), 2.0 ** (wide - 1) - 1
            t = np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0.0)
            t = np.clip(t, lo, hi)
            big = np.uint64 if dtype.kind == "u" else np.int64
            return t.astype(big).astype(HOLD[name])
        return a.astype(HOLD[name])


def _compute(x: np.ndarray, dtype: DType) -> np.ndarray:
    """The values 16-bit floats compute in (float32)."""
    return x.astype(np.float32) if dtype.name in ("float16", "bfloat16") else x


class Heap:
    """Device memory on the host: arrays are placed in one byte buffer; a pointer is an offset into it (plus a
    base, so that no pointer is 0)."""

    BASE = 1 << 20

    def __init__(self, size: int = 1 << 24) -> None:
        self.bytes = np.zeros(size, np.uint8)
        self.top = 0

    def alloc(self, nbytes: int) -> int:
        ptr = self.BASE + self.top
        self.top += (nbytes + 255) // 256 * 256 + 256
        if self.top > self.bytes.size:
            grown = np.zeros(max(self.top * 2, self.bytes.size * 2), np.uint8)
            grown[:self.bytes.size] = self.bytes
            self.bytes = grown
        return ptr

    def typed(self, dtype: str) -> np.ndarray:
        return self.bytes.view(RAW[dtype])

    def element(self, ptr: int, dtype: str) -> int:
        item = np.dtype(RAW[dtype]).itemsize
        assert (ptr - self.BASE) % item == 0, "misaligned element pointer"
        return (ptr - self.BASE) // item

    def put(self, values: np.ndarray, dtype: str, extra: int = 0) -> ArrayView:
        """A contiguous array holding ``values``, ``extra`` elements past its start (misaligns it, when odd)."""
        raw = to_raw(values, dtype).reshape(-1)
        item = raw.itemsize
        ptr = self.alloc((raw.size + extra) * item) + extra * item
        start = self.element(ptr, dtype)
        self.typed(dtype)[start:start + raw.size] = raw
        shape = tuple(np.shape(values))
        strides = tuple(int(s) // item for s in np.empty(shape, raw.dtype).strides)
        return ArrayView(ptr, shape, strides, dtype, None)

    def read(self, v: ArrayView) -> np.ndarray:
        """The values of a view, as ``from_raw`` holds them."""
        shape, strides = tuple(v[1]), tuple(v[2])
        if 0 in shape:
            return from_raw(np.empty(shape, RAW[v[3]]), v[3])
        idx = self.element(v[0], v[3]) + sum(np.arange(n).reshape((-1,) + (1,) * (len(shape) - d - 1)) * s
                                             for d, (n, s) in enumerate(zip(shape, strides)))
        return from_raw(self.typed(v[3])[np.asarray(idx, dtype=np.int64)], v[3])


class Interpreter:
    """Runs one kernel (its optimized IR) for a grid."""

    def __init__(self, fn: ops.Function, heap: Heap) -> None:
        self.fn = fn
        self.heap = heap

    def run(self, grid: int, args: Sequence[Any]) -> None:
        for b in range(grid):
            env: dict[Value, Any] = {}
            for v, a in zip(self.fn.params, args):
                if isinstance(v.type, ArrayType):
                    env[v] = a
                else:
                    env[v] = hold(a, v.type.dtype)
            self.block_id = b
            self.block(self.fn.body, env)

    # ------------------------------------------------------------------ memory

    def _index(self, view: ArrayView, idx: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(element index into the typed heap, in-bounds mask) of element indices ``idx`` (one per dim)."""
        ok = np.ones(np.broadcast_shapes(*(np.shape(i) for i in idx)), bool)
        off = np.zeros(ok.shape, np.int64)
        for d, i in enumerate(idx):
            i = np.asarray(i, dtype=np.int64)
            ok &= (i >= 0) & (i < view[1][d])
            off = off + i * view[2][d]
        base = self.heap.element(view[0], view[3])
        return np.where(ok, base + off, 0), ok

    def _tile_indices(self, view: ArrayView, index: Sequence[Any], shape: tuple[int, ...]) -> list[np.ndarray]:
        return [np.asarray(int(index[d]) * shape[d] + np.arange(shape[d]), np.int64).reshape(
            (1,) * d + (shape[d],) + (1,) * (len(shape) - d - 1)) for d in range(len(shape))]

    def read(self, view: ArrayView, idx: Sequence[np.ndarray], padding: Any, dtype: DType) -> np.ndarray:
        at, ok = self._index(view, idx)
        raw = self.heap.typed(view[3])[at]
        values = from_raw(raw, view[3])
        return np.where(ok, values, hold(padding, dtype)).astype(HOLD[dtype.name])

    def write(self, view: ArrayView, idx: Sequence[np.ndarray], tile: np.ndarray, dtype: str) -> None:
        at, ok = self._index(view, idx)
        values = np.broadcast_to(hold(tile, BY_NAME[dtype]), ok.shape)
        self.heap.typed(view[3])[at[ok]] = to_raw(values[ok], dtype)

    # ------------------------------------------------------------------ ops

    def block(self, block: Block, env: dict[Value, Any]) -> tuple[str, list[Any]] | None:
        for op in block.ops:
            out = self.op(op, env)
            if out is not None:
                return out
        return None

    def op(self, op: ops.Op, env: dict[Value, Any]) -> tuple[str, list[Any]] | None:
        g = env.__getitem__
        rt = op.results[0].type if op.results else None
        if isinstance(op, ops.ReturnOp):
            return ("return", [])
        if isinstance(op, ops.ContinueOp | ops.BreakOp | ops.YieldOp):
            return (op.NAME, [g(v) for v in op.values])
        if isinstance(op, ops.StoreOp):
            view, tile = g(op.array), g(op.tile)
            shape = np.shape(tile)
            idx = self._tile_indices(view, [g(i) for i in op.index], shape) if shape else \
                [np.asarray(int(g(i))) for i in op.index]
            self.write(view, idx, tile, view[3])
            return None
        if isinstance(op, ops.ScatterOp):
            view = g(op.array)
            self.write(view, [g(i) for i in op.indices], g(op.tile), view[3])
            return None
        if isinstance(op, ops.ForOp):
            lo, hi, step = int(g(op.lower)), int(g(op.upper)), int(g(op.step))
            carried = [g(v) for v in op.init]
            i = lo
            while i < hi:
                inner = dict(env)
                inner[op.body.args[0]] = hold(i, op.body.args[0].type.dtype)
                for a, c in zip(op.body.args[1:], carried):
                    inner[a] = c
                how, values = self.block(op.body, inner) or ("continue", [])
                carried = values
                if how == "break":
                    break
                if how == "return":
                    return ("return", [])
                i += step
            for r, c in zip(op.results, carried):
                env[r] = c
            return None
        if isinstance(op, ops.IfOp):
            how, values = self.block(op.then_body if bool(g(op.cond)) else op.else_body, dict(env)) or ("yield", [])
            if how != "yield":
                return (how, values)
            for r, v in zip(op.results, values):
                env[r] = v
            return None
        assert isinstance(rt, TileType), f"the interpreter does not know {op.NAME}"
        env[op.results[0]] = self.value(op, rt, g)
        return None

    def value(self, op: ops.Op, rt: TileType, g: Any) -> np.ndarray:
        dt = rt.dtype
        if isinstance(op, ops.ConstantOp):
            return np.full(rt.shape, hold(op.value, dt), dtype=HOLD[dt.name])
        if isinstance(op, ops.BlockIdOp):
            return hold(self.block_id if op.axis == 0 else 0, dt)
        if isinstance(op, ops.ArangeOp):
            return np.arange(rt.shape[0]).astype(HOLD[dt.name])
        if isinstance(op, ops.ArrayDimOp):
            view = g(op.array)
            return hold(view[1][op.axis] if op.which == "shape" else view[2][op.axis], dt)
        if isinstance(op, ops.LoadOp):
            view = g(op.array)
            return self.read(view, self._tile_indices(view, [g(i) for i in op.index], rt.shape), op.padding, dt)
        if isinstance(op, ops.GatherOp):
            return self.read(g(op.array), [g(i) for i in op.indices], op.padding, dt)
        if isinstance(op, ops.CastOp):
            return hold(g(op.x), dt)
        if isinstance(op, ops.AssumeOp):  # tj.multiple_of / tj.max_contiguous: checked, then the value itself
            x = g(op.x)
            _check_facts(x, op.div_by, op.contiguous)
            return x
        if isinstance(op, ops.BroadcastOp):
            return np.broadcast_to(g(op.x), rt.shape).copy()
        if isinstance(op, ops.ReshapeOp):
            return np.reshape(g(op.x), rt.shape)
        if isinstance(op, ops.PermuteOp):
            return np.transpose(g(op.x), op.perm)
        if isinstance(op, ops.FmaOp):  # rounded once: float32 products are exact in float64
            x, y, z = (_compute(g(v), dt).astype(np.float64) for v in (op.x, op.y, op.z))
            return hold(x * y + z, dt)
        if isinstance(op, ops.SelectOp):
            return np.where(g(op.cond), g(op.x), g(op.y)).astype(HOLD[dt.name])
        if isinstance(op, ops.CompareOp):
            x, y = g(op.x), g(op.y)
            return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                    "ge": np.greater_equal}[op.fn](x, y)
        if isinstance(op, ops.UnaryOp):
            return hold(_unary(op.fn, _compute(g(op.x), op.x.type.dtype), dt), dt)
        if isinstance(op, ops.BinaryOp):
            xt = op.x.type.dtype
            return hold(_binary(op.fn, _compute(g(op.x), xt), _compute(g(op.y), xt), dt), dt)
        if isinstance(op, ops.ReduceOp):
            x = g(op.x)
            src = op.x.type.dtype
            x = _compute(x, src)
            if src.is_bool or (src.is_int and src.bits < 32):
                x = x.astype(np.int64)
            with np.errstate(all="ignore"):
                r = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op.fn](x, axis=op.axis)
            return hold(r, dt)
        raise AssertionError(f"the interpreter does not know {op.NAME}")


#: The numpy function of each unary fn whose name differs.
_NUMPY_NAMES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}


def _unary(fn: str, x: np.ndarray, dt: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        if fn == "neg":
            return -x
        if fn in ("not", "invert"):
            return ~x
        if fn == "abs":
            return np.abs(x)
        if fn == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if fn == "erf":
            return np.asarray(_ERF(x), dtype=x.dtype)
        if fn == "rsqrt":
            return 1 / np.sqrt(x)
        if fn in ("popc", "clz"):  # of the integer's bits (two's complement)
            bits = x.dtype.itemsize * 8
            u = x.view(f"uint{bits}")
            if fn == "popc":
                return np.bitwise_count(u).astype(np.int32)
            return (bits - np.frompyfunc(int.bit_length, 1, 1)(u.astype(object))).astype(np.int32)
        return getattr(np, _NUMPY_NAMES.get(fn, fn))(x)


def _check_facts(x: np.ndarray, div_by: int, contiguous: int) -> None:
    """A broken ``multiple_of`` / ``max_contiguous`` promise (undefined behaviour on a GPU) fails the test."""
    a = np.asarray(x, dtype=np.int64)
    if a.ndim == 0:
        assert a % div_by == 0, f"multiple_of({div_by}) broken by {a}"
        return
    n = min(contiguous, a.shape[-1])
    groups = a.reshape(a.shape[:-1] + (-1, n))
    assert (groups[..., 0] % div_by == 0).all(), f"multiple_of({div_by}) broken"
    assert (np.diff(groups, axis=-1) == 1).all(), f"max_contiguous({contiguous}) broken"


def _binary(fn: str, x: np.ndarray, y: np.ndarray, dt: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        if fn == "mulhi":  # the high half of the unsigned double-width product
            bits = dt.bits
            ux, uy = (np.asarray(v).astype(HOLD[f"uint{bits}"]) for v in (x, y))
            if bits < 64:
                return ((ux.astype(np.uint64) * uy.astype(np.uint64)) >> np.uint64(bits)).astype(HOLD[dt.name])
            lo = np.uint64(0xFFFFFFFF)
            a0, a1, b0, b1 = ux & lo, ux >> np.uint64(32), uy & lo, uy >> np.uint64(32)
            mid = (a0 * b0 >> np.uint64(32)) + (a1 * b0 & lo) + a0 * b1
            return (a1 * b1 + (a1 * b0 >> np.uint64(32)) + (mid >> np.uint64(32))).astype(HOLD[dt.name])
        if fn in ("floordiv", "mod") and np.asarray(x).dtype.kind in "iu":
            zero = y == 0
            safe = np.where(zero, 1, y).astype(np.asarray(y).dtype)
            r = np.floor_divide(x, safe) if fn == "floordiv" else np.mod(x, safe)
            return np.where(zero, 0, r)
        table = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
                 "floordiv": np.floor_divide, "mod": np.mod, "pow": np.power, "maximum": np.maximum,
                 "minimum": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                 "lshift": np.left_shift, "rshift": np.right_shift, "atan2": np.arctan2}
        if dt.is_bool and fn in ("add", "mul"):
            return np.logical_or(x, y) if fn == "add" else np.logical_and(x, y)
        return table[fn](x, y)


def run(fn: ops.Function, heap: Heap, grid: int, args: Sequence[Any]) -> None:
    """Run kernel ``fn`` (optimized tile IR) for ``grid`` blocks with ``args`` (views into ``heap``, numbers)."""
    Interpreter(fn, heap).run(grid, args)
