"""Kernel-wide decisions made before any code is written: the block size, each value's layout and
how each ``MmaOp`` is computed (tensor cores with mma.sync, tf32, or an FMA loop)."""

from __future__ import annotations

from dataclasses import dataclass

from tilejit.backends.cuda.layouts import Layout, WarpGrid, assign_mma_layouts, blocked, choose_warp_grid, mma_layout
from tilejit.errors import CompileError
from tilejit.language.ir.core import Value
from tilejit.language.ir.ops import AtomicOp, Function, GatherOp, LoadOp, MmaOp, ScatterOp, StoreOp
from tilejit.language.ir.types import ArrayType, DType, TileType, bfloat16, float16, float32


@dataclass(frozen=True)
class MmaPlan:
    """How one MmaOp runs: ``path`` is 'tc' (m16n8k16 f16/bf16), 'tf32' (m16n8k8) or 'fma'."""

    path: str
    m: int
    n: int
    k: int
    grid: WarpGrid | None
    lda: int  # padded shared-memory row strides, in elements
    ldb: int
    in_dtype: DType
    acc_dtype: DType

    @property
    def a_elems(self) -> int:
        """Elements of the A buffer, rounded so that B starts 16-byte aligned."""
        unit = max(1, 16 // self.in_dtype.itemsize)
        return -(-self.m * self.lda // unit) * unit

    @property
    def smem_bytes(self) -> int:
        return (self.a_elems + self.k * self.ldb) * self.in_dtype.itemsize


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


class Plan:
    """Block size, layouts, array facts and mma strategies of one kernel for one target."""

    def __init__(self, fn: Function, arch: int, num_threads: int | None) -> None:
        self.fn = fn
        self.arch = arch
        self.array_names: dict[Value, str] = {
            v: n for n, v in zip(fn.param_names, fn.params) if isinstance(v.type, ArrayType)
        }
        written: set[Value] = set()
        tiles: list[TileType] = []
        mem_itemsize: dict[tuple[int, ...], int] = {}
        mmas: list[MmaOp] = []
        for op in fn.body.walk():
            if isinstance(op, StoreOp | ScatterOp | AtomicOp):
                written.add(op.array)
            if isinstance(op, LoadOp | GatherOp | StoreOp | ScatterOp):
                t = (op.result if isinstance(op, LoadOp | GatherOp) else op.tile).type
                at = op.array.type
                if isinstance(t, TileType) and isinstance(at, ArrayType):
                    mem_itemsize[t.shape] = min(mem_itemsize.get(t.shape, 16), at.dtype.itemsize)
            if isinstance(op, MmaOp):
                mmas.append(op)
            for v in op.results + [a for r in op.regions() for a in r.args]:
                if isinstance(v.type, TileType):
                    if not all(_pow2(s) for s in v.type.shape):
                        raise CompileError(f"tile shapes must be powers of two, got {v.type}")
                    tiles.append(v.type)
        self.read_only = {v for v in self.array_names if v not in written}
        self._vec = {shape: max(1, 16 // item) for shape, item in mem_itemsize.items()}
        self.nt = self._block_size(num_threads, tiles, mmas)
        self.mma: dict[int, MmaPlan] = {}
        mma_results: dict[Value, Layout] = {}
        for op in mmas:
            p = self._plan_mma(op)
            self.mma[id(op)] = p
            if p.grid is not None:
                mma_results[op.result] = mma_layout(p.m, p.n, self.nt, p.grid)
        self._fixed = assign_mma_layouts(fn, mma_results)
        self._cache: dict[tuple[int, ...], Layout] = {}

    def _block_size(self, num_threads: int | None, tiles: list[TileType], mmas: list[MmaOp]) -> int:
        if num_threads is not None:
            if not (_pow2(num_threads) and 32 <= num_threads <= 1024):
                raise CompileError(f"num_threads must be a power of two from 32 to 1024, got {num_threads}")
            return num_threads
        if mmas:
            big = max((op.result.type.size for op in mmas if isinstance(op.result.type, TileType)), default=0)
            return 256 if big >= 128 * 64 else 128
        largest = max((t.size for t in tiles), default=1)
        return min(256, max(32, largest // 4))

    def _plan_mma(self, op: MmaOp) -> MmaPlan:
        at, bt, ct = op.a.type, op.b.type, op.acc.type
        if not (isinstance(at, TileType) and isinstance(bt, TileType) and isinstance(ct, TileType)):
            raise CompileError("mma operands must be tiles")
        if at.ndim != 2 or bt.ndim != 2 or ct.ndim != 2:
            raise CompileError(f"mma needs 2-d tiles, got {at}, {bt} and {ct}")
        m, k = at.shape
        k2, n = bt.shape
        if k != k2 or ct.shape != (m, n) or op.result.type != ct:
            raise CompileError(f"mma shapes do not match: ({m}, {k}) @ ({k2}, {n}) + {ct.shape}")
        if at.dtype != bt.dtype:
            raise CompileError(f"mma operands differ in dtype: {at.dtype.name} and {bt.dtype.name}")
        if at.dtype.is_bool:
            raise CompileError("mma is not defined for bool tiles")
        item = at.dtype.itemsize
        pad = max(1, 16 // item)
        lda, ldb = k + pad, n + pad
        grid = choose_warp_grid(m, n, self.nt)
        if self.arch >= 80 and grid is not None and ct.dtype == float32:
            if at.dtype in (float16, bfloat16) and k % 16 == 0:
                return MmaPlan("tc", m, n, k, grid, lda, ldb, at.dtype, ct.dtype)
            if at.dtype == float32 and op.tf32 and k % 8 == 0:
                return MmaPlan("tf32", m, n, k, grid, k + 4, n + 8, at.dtype, ct.dtype)
        return MmaPlan("fma", m, n, k, None, lda, ldb, at.dtype, ct.dtype)

    def layout_of(self, v: Value) -> Layout:
        """The layout ``v`` is computed in (blocked by shape unless it belongs to an mma chain)."""
        fixed = self._fixed.get(v)
        if fixed is not None:
            return fixed
        t = v.type
        assert isinstance(t, TileType), v
        lay = self._cache.get(t.shape)
        if lay is None:
            lay = self._cache[t.shape] = blocked(t.shape, self.nt, self._vec.get(t.shape, 4))
        return lay
