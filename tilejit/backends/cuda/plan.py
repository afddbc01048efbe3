"""Kernel-wide decisions made before any code is written: the block size, each value's layout and
how each ``MmaOp`` is computed (wgmma, tensor cores with mma.sync, tf32, or an FMA loop).

Block size (unless ``num_threads`` is given): on sm_90a, 2 * M threads for a 16-bit mma with an
(M, N) accumulator, M in 64..256 (one warp per 16 rows, as wgmma wants); else 256 threads for mma
kernels with a >= 128x64 accumulator (128 otherwise); one whole 16-bit row per block (no loop): 64
threads up to 512 elements, 128 for 1024, 256 from 2048; other tiles of >= 4096 16-bit elements:
512; else the largest tile's size / 4, between 32 and 256. A one-row-per-block kernel whose row
(its loads and loop-carried tiles) would not fit a thread's registers gets more threads, up to 1024.
K loops of the form ``for k: acc = mma(load(a, k), load(b, k), acc)`` over read-only, unit-stride,
16-byte-aligned arrays become cp.async pipelines (sm_80+); on sm_90a their 16-bit mma runs as wgmma
on swizzled stages. An operand may be a transposed load (16-bit: staged as stored, read with
ldmatrix(.trans) or wgmma's imm-trans) or a (1, R, C) load of a 3-D array reshaped to (R, C).
Other tensor-core mmas (sm_80+) form FlashAttention-2 register chains: one whose result is row-reduced or
feeds another's A operand gets warps owning whole rows; an A operand made from an mma's result, or loaded
before the loop, stays in registers; a B operand loaded beside the mma is staged (``StagedOperand``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tilejit.backends.cuda.layouts import (
    Layout,
    WarpGrid,
    assign_mma_layouts,
    blocked,
    choose_warp_grid,
    flows_from,
    mma_layout,
)
from tilejit.backends.cuda.tables import compute_dtype
from tilejit.errors import CompileError, TileCompileError
from tilejit.language.ir.core import Block, Loc, Op, Value
from tilejit.language.ir.ops import (
    ArgReduceOp,
    ArrayCountOp,
    ArrayDimOp,
    ArrayItemOp,
    AssumeOp,
    AtomicOp,
    BarrierOp,
    BinaryOp,
    BlockIdOp,
    BroadcastOp,
    CastOp,
    CompareOp,
    ConstantOp,
    ContinueOp,
    FenceOp,
    FmaOp,
    ForOp,
    Function,
    GatherOp,
    LoadOp,
    LoopOp,
    MmaOp,
    NumBlocksOp,
    PermuteOp,
    ReduceOp,
    ReshapeOp,
    ReturnOp,
    ScatterOp,
    SelectOp,
    StoreOp,
    UnaryOp,
)
from tilejit.language.ir.types import ArrayType, DType, TileType, bfloat16, float16, float32


@dataclass(frozen=True)
class Pipeline:
    """A K loop whose mma operands stream global → shared memory with cp.async, ``stages`` deep."""

    mma: MmaOp
    load_a: LoadOp
    load_b: LoadOp
    stages: int
    stage_bytes: int
    overlap: bool = False  # wgmma: one mma batch stays in flight across iterations (prefetch stages - 2)
    views: tuple[Op, ...] = ()  # transposes/reshapes between a load and the mma: the stage serves them


@dataclass(frozen=True)
class WarpSpecialized:
    """A wgmma ``Pipeline`` run by specialized warpgroups (``TILEJIT_CUDA_WARP_SPECIALIZE=1``): the plan's
    ``nt`` threads (every layout as planned) are the consumers that only issue wgmmas; one more warpgroup
    (threads nt..nt+127) is the producer that only copies stages with cp.async. ``registers``: per thread at
    launch (``__launch_bounds__(threads, 1)``), ``producer_registers``/``consumer_registers``: after setmaxnreg.
    ``tma``: the producer copies with TMA (one elected thread, tensor maps of both operands' arrays passed as
    kernel parameters, ``Plan.tma_maps``) where the launch's maps are encoded, else with cp.async."""

    loop: ForOp
    stages: int
    threads: int
    registers: int
    producer_registers: int
    consumer_registers: int
    tma: bool = False


@dataclass(frozen=True)
class TensorMapParam:
    """A tensor map kernel parameter of a TMA producer (``WarpSpecialized.tma``): of array parameter ``array``
    (its dtype and rank), boxes of ``box`` elements (outermost first: one swizzle span of columns by the tile's
    rows, 1 along a batch dim) with a ``swizzle``-byte swizzle."""

    array: str
    dtype: DType
    ndim: int
    box: tuple[int, ...]
    swizzle: int


@dataclass(frozen=True)
class StagedOperand:
    """The B operand of a tensor-core mma outside a K pipeline, copied with cp.async from its load (where the program
    loads it) into its own shared-memory buffer, as stored (ldmatrix reads it transposed or not), and waited for at
    the mma: no registers, no reshape/transpose through the scratch area, the copy overlapping the work between."""

    load: LoadOp
    views: tuple[Op, ...]  # the reshape/transpose between the load and the mma: the buffer serves them
    offset: int  # bytes into the staging area (after the scratch area)
    rows: int  # buffer rows (B's K, or its N when transposed) of ``ld`` elements
    ld: int
    wait: int = 0  # cp.async groups the mma may leave in flight (copies issued after this one, still pending); -1:
    # an earlier mma of the block read the buffer (waited for it and synced): no wait, no barrier
    size: int = 0  # prefetched an iteration ahead: the bytes of each of its two buffers (0: one buffer)
    loop: int = 0  # prefetched: the id of the loop whose body loads it


@dataclass(frozen=True)
class MmaPlan:
    """How one MmaOp runs: ``path`` is 'wgmma' (sm_90a, pipelined f16/bf16), 'tc' (m16n8k16
    f16/bf16), 'tf32' (m16n8k8), 'fp8' (m16n8k32 e4m3/e5m2) or 'fma'. ``swa``/``swb`` (bytes) are nonzero
    when the op can run as wgmma: the swizzle widths of its A and B stages. ``ta``/``tb``: the stage holds the operand
    transposed, as its load read it (A as (K, M) rows, B as (N, K) rows; pipelined loops only). ``ra``: A comes
    from registers (another mma's result made elementwise, or a tile loaded before the loop), only B is staged."""

    path: str
    m: int
    n: int
    k: int
    grid: WarpGrid | None
    lda: int  # padded shared-memory row strides, in elements
    ldb: int
    in_dtype: DType
    acc_dtype: DType
    swa: int = 0
    swb: int = 0
    ta: bool = False
    tb: bool = False
    ra: bool = False  # 'tc': A is taken from registers in the m16n8 fragment layout of (M, K) (warps own rows)

    @property
    def a_elems(self) -> int:
        """Elements of the A buffer, rounded so that B starts 16-byte aligned (1024 for wgmma)."""
        item = self.in_dtype.itemsize
        if self.path == "wgmma":
            return -(-self.m * self.k * item // 1024) * 1024 // item
        unit = max(1, 16 // item)
        return -(-(self.k if self.ta else self.m) * self.lda // unit) * unit

    @property
    def smem_bytes(self) -> int:
        if self.path == "wgmma":
            return -(-(self.a_elems + self.k * self.n) * self.in_dtype.itemsize // 1024) * 1024
        return (self.a_elems + (self.n if self.tb else self.k) * self.ldb) * self.in_dtype.itemsize


def fp8_mma_plan(op: MmaOp, arch: int, grid: WarpGrid | None, lda: int, ldb: int) -> MmaPlan:
    """The plan of an 8-bit float MmaOp: m16n8k32 tensor cores ('fp8': sm_89+, M and N split over the warps in
    16s, K a multiple of 32), else the FMA loop; below sm_89 (no 8-bit float tensor cores) a located error."""
    at, ct = op.a.type, op.acc.type
    assert isinstance(at, TileType) and isinstance(ct, TileType)
    if arch < 89:
        raise located(op.loc, f"fp8 mma needs sm_89 or newer (the target is sm_{arch}): 8-bit float tensor cores "
                              "start with Ada; cast the operands to float16 or bfloat16 for older GPUs")
    (m, k), n = at.shape, ct.shape[1]
    path = "fp8" if grid is not None and k % 32 == 0 else "fma"
    return MmaPlan(path, m, n, k, grid if path == "fp8" else None, lda, ldb, at.dtype, ct.dtype)


#: The most 32-bit words of one tile a thread may hold (an 8-byte element takes two). Tile code is unrolled
#: per element, and NVRTC's time grows faster than linearly with it: 256 float32 per thread compiled in 1-2 s
#: (elementwise, reductions and their broadcast, gather, atomics, mma), 512 in 3-6 s, 4096 float32 (a
#: (2**20,) tile) in 80 s, and 4096 float64 (a 1024 x 1024 row sum broadcast back) for over 15 minutes.
MAX_THREAD_WORDS = 256


def located(loc: Loc, message: str, error: type[TileCompileError] = TileCompileError) -> TileCompileError:
    """A ``TileCompileError`` (or the subclass ``error``) at ``loc`` in the user's source, with the line and a caret
    when the file reads."""
    if not loc.line or loc.filename.startswith("<"):
        return error(message)
    import linecache

    text = linecache.getline(loc.filename, loc.line).rstrip("\r\n")
    return error(message, loc.filename, loc.line, loc.col, text or None)


def max_shared_bytes(arch: int) -> int:
    """The most dynamic shared memory one block may opt in to on sm_<arch> (the CUDA guide's
    per-block limits: 227 KiB on sm_90/sm_100, 163 KiB on sm_80/87, 99 KiB on sm_86/89/120, ...)."""
    table = {70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 101: 227,
             103: 227, 110: 227, 120: 99, 121: 99}
    kib = table.get(arch)
    if kib is None:  # an unlisted target: the smallest limit of its generation's neighbours
        kib = 99 if arch >= 120 else 227 if arch > 90 else 48
    return kib * 1024


def pipeline_stages(stage_bytes: int, limit: int | None = None) -> int:
    """How many shared-memory stages a cp.async K loop keeps in flight (0: too big to pipeline);
    ``limit``: the target's shared memory per block, which every stage together must fit."""
    cap = limit if limit is not None else 1 << 62
    for n in (4, 3, 2):
        if n * stage_bytes <= min((100 if n == 4 else 160) * 1024, cap):
            return n
    return 2 if 2 * stage_bytes <= min(200 * 1024, cap) else 0


#: Shared memory the stages of a wgmma K loop may take (an H100 block may have 227 KiB).
WGMMA_STAGE_BYTES = 220 * 1024


def wgmma_stages(stage_bytes: int) -> int:
    """Stages for a wgmma K loop: 4 (prefetch two ahead, one wgmma batch in flight) when they fit
    in 220 KiB (an H100 block may have 227), else 2. Three, five or six stages made ptxas
    serialize the wgmmas (warning C7515) in our kernels."""
    if 4 * stage_bytes <= WGMMA_STAGE_BYTES:
        return 4
    return 2 if 2 * stage_bytes <= WGMMA_STAGE_BYTES else 0


#: Threads of a warp-specialized kernel's producer warpgroup, and the registers each keeps (setmaxnreg.dec; CUTLASS's
#: figure: its loop holds the stage ring's state and the cp.async addresses).
WS_PRODUCER_THREADS = 128
WS_PRODUCER_REGISTERS = 40
#: The most stages a warp-specialized ring keeps (its producer runs up to stages - 1 ahead of the wgmmas).
WS_MAX_STAGES = 8


def ws_stages(stage_bytes: int) -> int:
    """Stages of a warp-specialized wgmma ring: as many as fit in ``WGMMA_STAGE_BYTES`` (the stages'
    mbarriers fit in the rest of the block's 227 KiB), up to ``WS_MAX_STAGES``; 0 below 2."""
    n = min(WS_MAX_STAGES, WGMMA_STAGE_BYTES // stage_bytes) if stage_bytes else 0
    return n if n >= 2 else 0


def ws_registers(consumers: int) -> tuple[int, int, int] | None:
    """(registers per thread at launch, the producer's after setmaxnreg.dec, the consumers' after setmaxnreg.inc)
    for ``consumers`` threads beside the producer warpgroup, or None when they would gain nothing: at launch
    65536 / threads rounded down to 8 (``__launch_bounds__(threads, 1)``); the consumers share what the producer
    gives back (rounded down to 8, as setmaxnreg counts), at most 232 (CUTLASS's figure: never the whole file)."""
    threads = consumers + WS_PRODUCER_THREADS
    entry = min(255, 65536 // threads) // 8 * 8
    if entry >= 248 or entry <= WS_PRODUCER_REGISTERS:
        return None  # one consumer warpgroup has every register already (or too few are left to share)
    extra = (entry - WS_PRODUCER_REGISTERS) * WS_PRODUCER_THREADS // consumers // 8 * 8
    return entry, WS_PRODUCER_REGISTERS, min(232, entry + extra)


#: Ops that may run before a warp-specialized K loop: every thread (the producer too) runs them, so they must make
#: block-uniform scalars (or lazy constant tiles) with no side effects and no barrier.
_WS_PROLOGUE = (ConstantOp, BlockIdOp, NumBlocksOp, ArrayDimOp, ArrayItemOp, ArrayCountOp, AssumeOp, UnaryOp,
                BinaryOp, FmaOp, CompareOp, SelectOp, CastOp)
#: Ops that may follow it: only the consumer warpgroups run them (the producer has exited), so none may need a
#: block barrier. Views may still remap through shared memory (with barriers): the generated code is checked too.
_WS_EPILOGUE = (*_WS_PROLOGUE, ReshapeOp, BroadcastOp, PermuteOp, LoadOp, StoreOp, ReturnOp)


#: The most 32-bit words a thread of a register chain may hold across its loops in carried tiles (accumulators)
#: and A operands loaded before the loop; the rest of the 255 registers hold the scores, their fragments and
#: addresses (``Plan._invariant_a_to_stage``).
CHAIN_HELD_WORDS = 128

#: Registers a row-kernel thread needs beside its share of the row (addresses, indices, reduction partials).
ROW_BASE_REGISTERS = 16
#: Registers per element of a thread's share of the row held by 1, 2, and 3 or more 16-bit loads of it (fitted to
#: ptxas -v on sm_90a: the first is widened to float32, the others mostly stay packed until used; layer norm's x,
#: weight and bias spilled 12-56 B under 40 registers at 8192 bfloat16/float16 elements with 512 threads).
LOAD16_REGISTERS = (0.0, 1.0, 1.6, 2.0)


def row_registers(loads16: int, held: float = 0.0, accumulates: bool = False) -> float:
    """Registers per element of a thread's share of a row: those of ``loads16`` 16-bit loads of it, plus ``held``
    for other tiles of the row that stay live (float32 loads, float32 sums a loop carries). In a kernel whose loop
    carries such sums (a backward pass adding up dw), every 16-bit load counts one register, and the terms made
    before the row's reductions and used after them (w * dy) one more: the loads are widened and used again after
    the reductions (an RMS norm backward spilled 8-196 B under the caps of lesser counts at 4096-8192 bfloat16 and
    float16 elements)."""
    return (loads16 + 1.0 if accumulates else LOAD16_REGISTERS[min(loads16, 3)]) + held


def row_min_blocks(largest: int, nt: int, big_loads: int, per_element: float | None = None) -> int | None:
    """``__launch_bounds__``'s minimum resident blocks for a kernel of long 16-bit rows (one row per block of
    ``nt`` threads, the largest tile of ``largest`` elements, ``big_loads`` loads at least half that size): 4
    blocks for one such load, 3 for more (layer norm's weight and bias), keeping bytes in flight; fewer where the
    cap (65536 registers / (nt * blocks)) would not hold a thread's share of the row at ``per_element`` registers
    each (default: ``row_registers(big_loads)``; a 16384-element bf16 softmax row spilled 446 B under the cap of
    4 blocks, 32 registers); None (no cap) when not even 2 blocks' cap holds it."""
    each = row_registers(max(big_loads, 1)) if per_element is None else per_element
    need = ROW_BASE_REGISTERS + largest / nt * each
    for blocks in range(4 if big_loads <= 1 else 3, 1, -1):
        if need <= 65536 // (nt * blocks):
            return blocks
    return None


def row_fits(largest: int, nt: int, per_element: float) -> bool:
    """Whether one block of ``nt`` threads holds a row of ``largest`` elements at ``per_element`` registers each
    (plus ``ROW_BASE_REGISTERS``) without spilling: at most 255 registers a thread, 65536 a block."""
    return ROW_BASE_REGISTERS + largest / nt * per_element <= min(255, 65536 // nt)


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def wgmma_fits(m: int, n: int, nt: int) -> bool:
    """Whether an (m, n) float32 wgmma accumulator fits the registers of ``nt`` threads: wgmma takes its
    accumulator as register operands, and 128 of them with 512 threads (a 256 x 256 tile, 128 registers
    per thread at most) stopped ptxas ("Insufficient registers ... register target of 154")."""
    return m * n // nt + 32 <= min(255, 65536 // nt)


def wgmma_tiling(
    m: int, n: int, k: int, nt: int, itemsize: int, ta: bool = False, tb: bool = False
) -> tuple[WarpGrid, int, int] | None:
    """The warp grid and A/B swizzle widths for an (m, k) @ (k, n) wgmma on ``nt`` threads, if any:
    one warp per 16 rows (whole warpgroups along M), the rest of the warps split N. ``ta``/``tb``:
    A stored M-major ((K, M) rows), B stored K-major ((N, K) rows)."""
    warps, wm = nt // 32, m // 16
    if m % 64 or k % 16 or wm > warps or warps % wm or not wgmma_fits(m, n, nt):
        return None
    wn = warps // wm
    wtn = n // wn
    if n % wn or wtn % 8 or wtn > 256:
        return None
    swa, swb = min(128, (64 if ta else k) * itemsize), min(128, (k if tb else wtn) * itemsize)
    if swa not in (32, 64, 128) or swb not in (32, 64, 128) or ((k if tb else wtn) * itemsize) % swb:
        return None
    return WarpGrid(wm, wn), swa, swb


class Plan:
    """Block size, layouts, array facts and mma strategies of one kernel for one target."""

    def __init__(
        self, fn: Function, arch: int, num_threads: int | None, hints: Mapping[str, Any], wgmma: bool = False,
        num_stages: int | None = None, staging: int = 2, warp_specialize: bool = False, tma: bool = False,
    ) -> None:
        self.fn = fn
        self.arch = arch
        self.num_stages = num_stages  # the user's pipeline depth (None: the plan's choice; 1: no pipeline)
        self.wgmma = wgmma  # sm_90a: wgmma.mma_async is available
        self.hints = hints
        self.array_names: dict[Value, str] = {
            v: n for n, v in zip(fn.param_names, fn.params) if isinstance(v.type, ArrayType)
        }
        written: set[Value] = set()
        tiles: list[TileType] = []
        mem_itemsize: dict[tuple[int, ...], int] = {}
        mmas: list[MmaOp] = []
        loads: list[tuple[int, int]] = []  # (elements, bytes per element in memory) of each tile load
        carried: list[TileType] = []  # tiles a loop carries from one iteration to the next
        reduces = False
        loops = False  # the kernel has a for or while loop
        for op in fn.body.walk():
            if isinstance(op, StoreOp | ScatterOp | AtomicOp):
                written.add(op.array)
            if isinstance(op, LoadOp | GatherOp | StoreOp | ScatterOp):
                t = (op.result if isinstance(op, LoadOp | GatherOp) else op.tile).type
                at = op.array.type
                if isinstance(t, TileType) and isinstance(at, ArrayType):
                    mem_itemsize[t.shape] = min(mem_itemsize.get(t.shape, 16), at.dtype.itemsize)
            if isinstance(op, LoadOp) and isinstance(op.result.type, TileType) and isinstance(op.array.type, ArrayType):
                loads.append((op.result.type.size, op.array.type.dtype.itemsize))
            if isinstance(op, ForOp | LoopOp):
                loops = True
                carried += [a.type for a in op.body.args if isinstance(a.type, TileType) and not a.type.is_scalar]
            reduces = reduces or isinstance(op, ReduceOp)
            if isinstance(op, MmaOp):
                mmas.append(op)
            for v in op.results + [a for r in op.regions() for a in r.args]:
                if isinstance(v.type, TileType):
                    if not all(_pow2(s) for s in v.type.shape):
                        raise CompileError(f"tile shapes must be powers of two, got {v.type}")
                    tiles.append(v.type)
        self.read_only = {v for v in self.array_names if v not in written}
        self._vec = {shape: max(1, 16 // item) for shape, item in mem_itemsize.items()}
        largest = max(tiles, key=lambda t: t.size, default=None)
        big = [item for n, item in loads if largest is not None and 2 * n >= largest.size]
        loads16 = sum(1 for item in big if item <= 2)
        sums = [max(1.0, t.dtype.itemsize / 4) for t in carried if largest is not None and 2 * t.size >= largest.size]
        self._row_registers = row_registers(loads16, sum(item / 4 for item in big if item > 2) + sum(sums), bool(sums))
        self._loads16 = loads16
        self._one_row = reduces and largest is not None and bool(largest.shape) and largest.size == largest.shape[-1]
        # (not a 16384-element row with three such loads, layer norm's x, weight and bias: 0.74x Triton at 256
        # threads against 0.81x with 512)
        self._whole_row16 = self._one_row and not loops and self._largest_16bit(tiles) and not (
            largest is not None and largest.size >= 16384 and loads16 >= 3)
        self.nt = self._block_size(num_threads, tiles, mmas)
        self.mma: dict[int, MmaPlan] = {}
        mma_results: dict[Value, Layout] = {}
        self._row_owned, a_in_registers, invariant = self._register_chains(mmas)
        for op in mmas:
            p = self._plan_mma(op)
            if id(op) in a_in_registers and p.path == "tc" and p.grid is not None and p.grid.wn == 1:
                p = replace(p, ra=True)
            self.mma[id(op)] = p
            if p.grid is not None:
                mma_results[op.result] = mma_layout(p.m, p.n, self.nt, p.grid)
        # loop-invariant A operands that would crowd the registers: staged once in shared memory (_plan_staged)
        self._a_to_stage = self._invariant_a_to_stage(invariant) if staging else set()
        for op in mmas:
            if id(op) in self._a_to_stage:
                self.mma[id(op)] = replace(self.mma[id(op)], ra=False)
        self.crowded = bool(self._a_to_stage)  # a register chain short of registers: no B fragments read ahead
        for op in mmas:  # A fragments: the (M, K) C-fragment layout of the same warps (set after every result's)
            p = self.mma[id(op)]
            if p.ra and p.grid is not None and op.a not in mma_results:
                mma_results[op.a] = mma_layout(p.m, p.k, self.nt, p.grid)
        # tensor-core kernels: ask for two resident blocks (registers capped so that they fit)
        small_acc = all(p.m * p.n // self.nt <= 64 for p in self.mma.values())
        if any(p.ra for p in self.mma.values()):  # a register chain holds every accumulator and A operand at once
            small_acc = sum(p.m * (p.n + (p.k // 2 if p.ra else 0)) for p in self.mma.values()) // self.nt <= 64
        tc = any(p.path in ("tc", "tf32", "fp8") for p in self.mma.values())
        self.min_blocks_arg = ", 2" if tc and small_acc and self.nt <= 256 else ""
        if num_threads is None and not mmas and not self._whole_row16 and self._long_16bit_rows(tiles):
            blocks = row_min_blocks(max(t.size for t in tiles), self.nt, self._loads16, self._row_registers)
            self.min_blocks_arg = f", {blocks}" if blocks else ""
        self._fixed = assign_mma_layouts(fn, mma_results)
        self._cache: dict[tuple[int, ...], Layout] = {}
        self.defs: dict[Value, Op] = {r: op for op in fn.body.walk() for r in op.results}
        self.used: set[Value] = {v for op in fn.body.walk() for v in op.operands()}  # values some op reads
        self.pipelines: dict[int, Pipeline] = {}
        self.deferred: set[int] = set()
        for op in fn.body.walk():
            if isinstance(op, ForOp):
                pipe = self._plan_pipeline(op)
                if pipe is not None:
                    self.pipelines[id(op)] = pipe
                    self.deferred |= {id(pipe.load_a), id(pipe.load_b)}
        self.staged: dict[int, StagedOperand] = {}  # mma id → its B operand's buffer
        self.staged_a: dict[int, StagedOperand] = {}  # mma id → its loop-invariant A operand's buffer
        self.users: dict[Value, list[Op]] = {}  # value → the ops that read it
        for op in fn.body.walk():
            for v in dict.fromkeys(op.operands()):
                self.users.setdefault(v, []).append(op)
        self.staged_loads: dict[int, StagedOperand] = {}  # load id → the same
        self.elided: set[int] = set()  # ids of the views that staged buffers serve (no code)
        self.prefetched: dict[int, list[StagedOperand]] = {}  # loop id → its staged loads fetched an iteration ahead
        self.refill: dict[int, list[StagedOperand]] = {}  # mma id → the prefetched buffers it copies the next ones of
        self.stage_bytes = 0
        self._staging = staging  # 2: staged and prefetched, 1: staged, 0: neither (their buffers did not fit)
        if staging:
            self._plan_staged(fn.body)
        self._tma = tma  # a warp-specialized producer may copy with TMA (TILEJIT_CUDA_TMA)
        self.ws = self._plan_warp_specialized() if warp_specialize else None
        if self.ws is not None:
            self.min_blocks_arg = ", 1"
        self._check_registers()

    def _plan_warp_specialized(self) -> WarpSpecialized | None:
        """The kernel's wgmma K pipeline as a warp-specialized one (``WarpSpecialized``), when the kernel is just
        that loop: at the top level, its body the two streamed loads (and their views), the mma on the carried
        accumulator and ``continue``; before it only block-uniform scalar ops (``_WS_PROLOGUE``), after it only
        ops that need no block barrier (``_WS_EPILOGUE``); no other mma, staged operand or pipeline. Else None
        (the pipeline stays as planned)."""
        if not self.wgmma or len(self.pipelines) != 1 or len(self.mma) != 1 or self.stage_bytes:
            return None
        top = self.fn.body.ops
        at = next((k for k, op in enumerate(top) if id(op) in self.pipelines), None)
        if at is None:
            return None
        loop = top[at]
        assert isinstance(loop, ForOp)
        pipe = self.pipelines[id(loop)]
        p = self.mma[id(pipe.mma)]
        regs = ws_registers(self.nt)
        if p.path != "wgmma" or regs is None or self.nt % WS_PRODUCER_THREADS:
            return None
        if not self._only_mma(loop, pipe.mma, [pipe.load_a, pipe.load_b, *pipe.views]):
            return None
        for load in (pipe.load_a, pipe.load_b):  # the producer's threads tile each copy evenly (cp_async_rows_by)
            t = load.result.type
            assert isinstance(t, TileType)
            if t.shape[-2] * (t.shape[-1] * p.in_dtype.itemsize // 16) % WS_PRODUCER_THREADS:
                return None
        term = loop.body.ops[-1]
        carried = loop.body.args[1:]
        if not (isinstance(term, ContinueOp) and term.values[carried.index(pipe.mma.acc)] is pipe.mma.result):
            return None  # the wgmma accumulates in place: the carried variable must be its result
        scalar = all(isinstance(r.type, ArrayType) or (isinstance(r.type, TileType) and r.type.is_scalar)
                     for op in top[:at] if not isinstance(op, ConstantOp) for r in op.results)
        if not scalar or not all(isinstance(op, _WS_PROLOGUE) for op in top[:at]):
            return None
        if not all(isinstance(op, _WS_EPILOGUE) and not op.regions() for op in top[at + 1:]):
            return None
        stages = self._stages(ws_stages(pipe.stage_bytes), pipe.stage_bytes, WGMMA_STAGE_BYTES)
        if stages < 2:
            return None
        self.pipelines[id(loop)] = replace(pipe, stages=stages)
        tma = self._tma and all(self._tma_ok(load) for load in (pipe.load_a, pipe.load_b))
        return WarpSpecialized(loop, stages, self.nt + WS_PRODUCER_THREADS, *regs, tma=tma)

    def _tma_ok(self, load: LoadOp) -> bool:
        """Whether TMA may copy a streamed operand: its array is a kernel parameter whose launch facts allow a
        tensor map (unit inner stride, 16-byte aligned base and rows, strides in [0, 2**31): part of the
        specialization's key, so an array that breaks one gets the cp.async producer) and its tile has at most 256
        rows (a box's limit). What the facts cannot say (an empty dimension, overlapping rows) the launch finds:
        it then passes no map and the kernel copies with cp.async."""
        hint = self.hints.get(self.array_names.get(load.array, ""))
        t = load.result.type
        return (isinstance(t, TileType) and t.shape[-2] <= 256 and bool(getattr(hint, "unit_stride", False))
                and bool(getattr(hint, "aligned16", False)) and bool(getattr(hint, "index32", False)))

    def tma_maps(self) -> list[TensorMapParam]:
        """The tensor-map parameters of a TMA producer: A's, then B's."""
        ws = self.ws
        if ws is None or not ws.tma:
            return []
        pipe = self.pipelines[id(ws.loop)]
        p = self.mma[id(pipe.mma)]
        out = []
        for load, sw in ((pipe.load_a, p.swa), (pipe.load_b, p.swb)):
            t, at = load.result.type, load.array.type
            assert isinstance(t, TileType) and isinstance(at, ArrayType)
            box = (*t.shape[:-1], sw // at.dtype.itemsize)
            out.append(TensorMapParam(self.array_names[load.array], at.dtype, at.ndim, box, sw))
        return out

    def _check_registers(self) -> None:
        """Refuse, at the op that makes it, a tile of which each thread would hold more than
        ``MAX_THREAD_WORDS`` words: NVRTC would take minutes (and the registers would spill anyway).
        An argmax/argmin holds (value, int32 index) pairs of its operand."""
        for op in self.fn.body.walk():
            for v in op.results + [a for r in op.regions() for a in r.args]:
                t = v.type
                if isinstance(t, TileType) and not t.is_scalar:
                    words = max(1, t.dtype.itemsize // 4)
                    self._check_tile(op, t, self.layout_of(v).elems, words, "tile", f"{t.dtype.name} elements")
            if isinstance(op, ArgReduceOp) and isinstance(op.x.type, TileType):
                item = compute_dtype(op.x.type.dtype).itemsize
                pair = -(-(item + 4) // max(item, 4)) * max(item, 4)
                self._check_tile(op, op.x.type, self.layout_of(op.x).elems, pair // 4,
                                 f"tile (its {op.fn} keeps {pair}-byte value and index pairs)", "pairs")

    def _check_tile(self, op: Op, t: TileType, per_thread: int, words: int, what: str, unit: str) -> None:
        """Raise the error of ``_check_registers`` for a tile ``t`` of ``words`` words per element, if any."""
        if per_thread * words <= MAX_THREAD_WORDS:
            return
        most = MAX_THREAD_WORDS // words * self.nt
        raise located(op.loc, (
            f"a {t.dtype.name} {what} of shape {t.shape} is too large for the CUDA backend: its {t.size} "
            f"elements over {self.nt} threads are {per_thread} per thread, but a thread holds at most "
            f"{MAX_THREAD_WORDS} 32-bit words of one tile ({MAX_THREAD_WORDS // words} {unit}, so at "
            f"most {most} with {self.nt} threads): use smaller tiles or more threads (num_threads, up to 1024)"
        ))

    def _vector_ok(self, array: Value) -> bool:
        hint = self.hints.get(self.array_names.get(array, ""))
        return bool(getattr(hint, "unit_stride", False) and getattr(hint, "aligned16", False))

    def _plan_pipeline(self, loop: ForOp) -> Pipeline | None:
        """A cp.async pipeline for ``for k: mma(load(a, k), load(b, k), acc)`` loops on sm_80+; an
        operand may also be ``transpose(load)`` (16-bit tensor cores read the stage transposed) or a
        3-D ``load`` of shape (1, R, C) reshaped to (R, C) (a batch index outside the tile)."""
        if self.arch < 80 or any(isinstance(op, AtomicOp | FenceOp | BarrierOp) for op in loop.body.walk()):
            return None  # a loop that synchronizes keeps its loads where the program puts them
        top = loop.body.ops
        mmas = [op for op in top if isinstance(op, MmaOp)]
        if len(mmas) != 1 or any(isinstance(op, MmaOp) for op in loop.body.walk() if op not in top):
            return None
        mma = mmas[0]
        loads: list[LoadOp] = []
        views: list[Op] = []
        trans: list[bool] = []
        for v in (mma.a, mma.b):
            found = self._streamed_operand(v, top, loop)
            if found is None:
                return None
            loads.append(found[0])
            views += found[1]
            trans.append(found[2])
        p = self.mma[id(mma)]
        ta, tb = trans
        if ta or tb:
            if p.path != "tc" or p.grid is None:  # only the 16-bit tensor-core paths read a stage transposed
                return None
            pad = max(1, 16 // p.in_dtype.itemsize)
            lda, ldb = (p.m if ta else p.k) + pad, (p.k if tb else p.n) + pad
            wg = wgmma_tiling(p.m, p.n, p.k, self.nt, p.in_dtype.itemsize, ta, tb) if p.swa else None
            swa, swb = (wg[1], wg[2]) if wg is not None and wg[0] == p.grid else (0, 0)
            p = replace(p, lda=lda, ldb=ldb, ta=ta, tb=tb, swa=swa, swb=swb)
        if p.swa:
            wg_plan = replace(p, path="wgmma")
            stages = self._stages(wgmma_stages(wg_plan.smem_bytes), wg_plan.smem_bytes, WGMMA_STAGE_BYTES)
            if stages >= 2:
                self.mma[id(mma)] = wg_plan
                overlap = stages >= 3 and self._only_mma(loop, mma, [*loads, *views])
                return Pipeline(mma, loads[0], loads[1], stages, wg_plan.smem_bytes, overlap, tuple(views))
        stage = p.smem_bytes
        limit = max_shared_bytes(self.arch)
        stages = self._stages(pipeline_stages(stage, limit), stage, limit)
        if stages < 2:
            return None
        self.mma[id(mma)] = p
        return Pipeline(mma, loads[0], loads[1], stages, stage, views=tuple(views))

    def _plan_staged(self, block: Block, base: int = 0, loop: ForOp | None = None) -> None:
        """Stage the operands of the 16-bit tensor-core mmas of ``block`` (``loop``'s body, if any) and its nested
        blocks that are loads of read-only, unit-stride, 16-byte-aligned arrays (``StagedOperand``), sm_80+: a B
        operand loaded in the mma's block (one buffer however many mmas read the tile, each through its own
        views, transposed or not), and a loop-invariant A operand that ``_invariant_a_to_stage`` chose. The
        buffers of ``block`` start ``base`` bytes into the staging area, those of nested blocks after them (blocks
        one after the other share theirs). In a loop whose staged loads are all affine in its variable, each has
        two buffers and is fetched an iteration ahead."""
        if self.arch < 80 or self.num_stages == 1:  # num_stages=1: no cp.async at all, as for K pipelines
            return
        # an atomic, fence or barrier among the ops: a copy in flight could cross it (loads stay in program order)
        synced = any(isinstance(op, AtomicOp | FenceOp | BarrierOp) for op in block.walk())
        # each staged load: its buffer and the mmas reading it ((mma, plan with the buffer's stride), A or B)
        found: list[tuple[StagedOperand, list[tuple[MmaOp, MmaPlan]], str]] = []
        for op in [] if synced else block.ops:
            if isinstance(op, LoadOp):
                got = self._staged_load(op, block.ops)
                if got is not None:
                    found.append(got)
        exits = [] if loop is None else [o for o in loop.body.walk() if o.NAME in ("continue", "break")]
        # every iteration must issue the next one's copies (at the first mma reading a B buffer): no exit but the
        # body's own last continue, no A operand (its mmas run in a nested loop)
        ahead = self._staging > 1 and loop is not None and id(loop) not in self.pipelines and bool(found) \
            and exits == loop.body.ops[-1:] and all(operand == "b" for _, _, operand in found) \
            and all(self._affine_in(ix, loop) for st, _, _ in found for ix in st.load.index)
        position = {id(op): k for k, op in enumerate(block.ops)}
        loads = [position[id(st.load)] for st, _, _ in found]
        # prefetched: every buffer of this iteration was copied during the last one, so the first mma that reads
        # one waits for them all and syncs, then issues the next iteration's copies into the other buffers (which
        # every warp has read, being past that barrier): one barrier an iteration
        first_b = min((position[id(mma)] for _, uses, operand in found if operand == "b" for mma, _ in uses),
                      default=0)
        end = base
        staged: list[StagedOperand] = []
        for st, uses, operand in found:
            at = position[id(st.load)]
            size = -(-st.rows * st.ld * uses[0][1].in_dtype.itemsize // 128) * 128
            st = replace(st, offset=end, size=size if ahead else 0, loop=id(loop) if ahead else 0)
            end += size * (2 if ahead else 1)
            self.staged_loads[id(st.load)] = st
            self.elided |= {id(v) for v in st.views}
            staged.append(st)
            first = min((position.get(id(mma), 0) for mma, _ in uses), default=0)  # A: mmas in nested blocks
            for mma, p in uses:
                self.mma[id(mma)] = p
                if operand == "a":  # an A loaded before the loop: older than every copy the loop waits for
                    self.staged_a[id(mma)] = st
                    continue
                here = position[id(mma)]
                if ahead:
                    wait = 0 if here == first_b else -1
                else:  # the copies issued after this one and before the mma may pend; a later reader: no wait
                    wait = sum(1 for k in loads if at < k < here) if here == first else -1
                self.staged[id(mma)] = replace(st, wait=wait)
        if ahead and loop is not None:
            self.prefetched[id(loop)] = staged
            self.refill[id(block.ops[first_b])] = staged
        self.stage_bytes = max(self.stage_bytes, end)
        for op in block.ops:
            for r in op.regions():
                self._plan_staged(r, end, op if isinstance(op, ForOp) else None)

    def _staged_load(self, load: LoadOp, top: list[Op]) -> tuple[StagedOperand, list[tuple[MmaOp, MmaPlan]], str] \
            | None:
        """``load``'s buffer (offset not yet set) if it can be staged, with the plans of the mmas that read it, and
        'a' or 'b': the B operand of tensor-core mmas in ``top`` (its block), or the A operand of mmas whose
        loop-invariant A goes to shared memory (``_a_to_stage``)."""
        t = load.result.type
        assert isinstance(t, TileType)
        for operand in ("b", "a"):
            uses = self._mma_uses(load.result, top, operand)
            if not uses or not self._stageable(load, any(isinstance(w, ReshapeOp) for _, vs, _ in uses for w in vs)):
                continue
            plans: list[tuple[MmaOp, MmaPlan]] = []
            views: list[Op] = []
            for mma, vs, transposed in uses:
                p = self.mma.get(id(mma))
                pipelined = any(pp.mma is mma for pp in self.pipelines.values())
                if p is None or p.path != "tc" or p.grid is None or pipelined:
                    break
                if operand == "a" and (id(mma) not in self._a_to_stage or transposed):
                    break
                if operand == "b" and not any(o is mma for o in top):
                    break
                pad = max(1, 16 // p.in_dtype.itemsize)
                if operand == "a":
                    p = replace(p, lda=p.k + pad)
                else:
                    p = replace(p, tb=transposed, ldb=(p.k if transposed else p.n) + pad)
                plans.append((mma, p))
                views += [w for w in vs if all(w is not x for x in views)]
            else:
                pad = max(1, 16 // plans[0][1].in_dtype.itemsize)
                return StagedOperand(load, tuple(views), 0, t.shape[-2], t.shape[-1] + pad), plans, operand
        return None

    def _mma_uses(self, v: Value, top: list[Op], operand: str) -> list[tuple[MmaOp, list[Op], bool]] | None:
        """Every use of tile ``v`` (a load's), through views in ``top``: a reshape of (1, R, C) to (R, C), then a
        transpose, as the ``operand`` ('a' or 'b') of an mma: (the mma, the views on the way, whether transposed);
        None when some use is anything else (or there is none)."""
        out: list[tuple[MmaOp, list[Op], bool]] = []
        todo: list[tuple[Value, list[Op], bool]] = [(v, [], False)]
        while todo:
            x, views, transposed = todo.pop()
            users = self.users.get(x, [])
            if not users:
                return None
            for op in users:
                if isinstance(op, MmaOp) and getattr(op, operand) is x and op.a is not op.b:
                    out.append((op, views, transposed))
                elif not any(op is o for o in top) or transposed:
                    return None
                elif isinstance(op, PermuteOp) and tuple(op.perm) == (1, 0):
                    todo.append((op.result, [*views, op], True))
                elif isinstance(op, ReshapeOp) and not views and self._drops_unit_dim(op):
                    todo.append((op.result, [op], False))
                else:
                    return None
        return out

    @staticmethod
    def _drops_unit_dim(op: ReshapeOp) -> bool:
        """Whether ``op`` reshapes (1, R, C) to (R, C) (a 3-D load's batch dim outside the tile)."""
        src, dst = op.x.type, op.result.type
        return isinstance(src, TileType) and isinstance(dst, TileType) and src.shape == (1, *dst.shape)

    def _stageable(self, load: LoadOp, reshaped: bool) -> bool:
        """Whether cp.async can copy ``load``'s tile as stored: no padding value, a read-only, unit-stride,
        16-byte-aligned 2-D array (or 3-D, the tile (1, R, C) ``reshaped`` to (R, C)) of 16-byte rows."""
        if load.padding not in (0, 0.0, False):
            return False
        at, t = load.array.type, load.result.type
        if not (isinstance(at, ArrayType) and isinstance(t, TileType) and at.ndim == t.ndim):
            return False
        if not (at.ndim == 2 or (at.ndim == 3 and t.shape[0] == 1 and reshaped)):
            return False
        rows_ok = (t.shape[-1] * at.dtype.itemsize) % 16 == 0
        return load.array in self.read_only and self._vector_ok(load.array) and rows_ok

    def _stages(self, chosen: int, stage_bytes: int, limit: int) -> int:
        """The stages of a pipeline: the plan's ``chosen``, or the user's ``num_stages`` capped at what fits in
        ``limit`` bytes of shared memory (below 2: no pipeline), logged at debug level when capped."""
        wanted = self.num_stages
        if wanted is None:
            return chosen
        fits = limit // stage_bytes if stage_bytes else wanted
        if wanted > fits >= 2:
            from tilejit.logs import logger_for

            log = logger_for(__name__)
            if log is not None:
                log.debug("kernel %s: num_stages=%d lowered to %d: %d stages of %d bytes fit %d bytes of shared "
                          "memory", self.fn.name, wanted, fits, fits, stage_bytes, limit)
        return min(wanted, fits)

    def _streamed_operand(self, v: Value, top: list[Op], loop: ForOp | None) -> tuple[LoadOp, list[Op], bool] | None:
        """The load a cp.async stage can hold for mma operand ``v``, the transpose/reshape ops between
        (each in ``top``, the mma's block, and used only on the way to the mma) and whether ``v`` is transposed;
        with a ``loop``, the load's indices must be affine in its variable (to be fetched iterations ahead)."""
        views: list[Op] = []
        transposed = False
        while True:
            op = self.defs.get(v)
            uses = sum(v in o.operands() for o in self.fn.body.walk())
            if op is None or op not in top or uses != 1:
                return None
            if isinstance(op, PermuteOp) and not views and tuple(op.perm) == (1, 0):
                transposed = True
            elif isinstance(op, ReshapeOp) and not any(isinstance(w, ReshapeOp) for w in views):
                if not self._drops_unit_dim(op):
                    return None
            elif isinstance(op, LoadOp):
                break
            else:
                return None
            views.append(op)
            v = op.x
        load = op
        if not self._stageable(load, any(isinstance(w, ReshapeOp) for w in views)):
            return None
        if loop is not None and not all(self._affine_in(ix, loop) for ix in load.index):
            return None
        return load, views, transposed

    @staticmethod
    def _only_mma(loop: ForOp, mma: MmaOp, loads: list[Op]) -> bool:
        """Whether the loop body is just the operand loads (and their views), the mma on a carried
        accumulator and the terminator, so that nothing reads the accumulator while a wgmma batch is in flight."""
        rest = [op for op in loop.body.ops if op is not mma and op not in loads]
        return mma.acc in loop.body.args and len(rest) == 1 and rest[0].NAME in ("continue", "yield")

    def _affine_in(self, v: Value, loop: ForOp) -> bool:
        """Whether scalar ``v`` is computed from the loop variable and values from outside the loop."""
        if v is loop.body.args[0]:
            return True
        op = self.defs.get(v)
        if op is None or not self._inside(op, loop):
            return v not in loop.body.args
        if isinstance(op, ConstantOp):
            return True
        if isinstance(op, UnaryOp | BinaryOp | CastOp) and isinstance(v.type, TileType) and v.type.is_scalar:
            return all(self._affine_in(x, loop) for x in op.operands())
        return False

    @staticmethod
    def _inside(op: Op, loop: ForOp) -> bool:
        return any(o is op for o in loop.body.walk())

    def _largest_16bit(self, tiles: list[TileType]) -> bool:
        """Whether memory holds the kernel's largest tiles in 16 bits (smaller float32 loads and stores beside them,
        e.g. a row's statistics or its share of a weight gradient, do not count)."""
        largest = max((t.size for t in tiles), default=1)
        vecs = [v for shape, v in self._vec.items() if math.prod(shape) == largest]
        return min(vecs, default=4) >= 8

    def _long_16bit_rows(self, tiles: list[TileType]) -> bool:
        """Whether the kernel's largest tiles are >= 4096 elements that memory holds in 16 bits."""
        return max((t.size for t in tiles), default=1) >= 4096 and self._largest_16bit(tiles)

    def _block_size(self, num_threads: int | None, tiles: list[TileType], mmas: list[MmaOp]) -> int:
        if num_threads is not None:
            if not (_pow2(num_threads) and 32 <= num_threads <= 1024):
                raise CompileError(f"num_threads must be a power of two from 32 to 1024, got {num_threads}")
            return num_threads
        if mmas:
            shapes = [op.result.type for op in mmas if isinstance(op.result.type, TileType)]
            big = max(shapes, key=lambda t: t.size, default=None)
            if big is None:
                return 128
            wg_dtypes = all(isinstance(op.a.type, TileType) and op.a.type.dtype in (float16, bfloat16) for op in mmas)
            if self.wgmma and wg_dtypes and big.ndim == 2 and big.shape[0] in (64, 128, 256) and \
                    wgmma_fits(big.shape[0], big.shape[1], 2 * big.shape[0]):
                return 2 * big.shape[0]
            return 256 if big.size >= 128 * 64 else 128
        largest = max((t.size for t in tiles), default=1)
        if self._whole_row16:
            # one 16-bit row per block, no loop: Triton's layer-norm warps (2 up to 512 elements, 4 for 1024, 8 from
            # 2048), 16-byte vectors or more per thread; 0.69-0.94x -> 0.98-1.25x Triton at 512-4096 (RESULTS.md)
            nt = 32 * min(max(largest // 256, 2), 8)
        else:
            nt = 512 if self._long_16bit_rows(tiles) else min(256, max(32, largest // 4))  # 16-bit: more warps
        while self._one_row and nt < 1024 and not row_fits(largest, nt, self._row_registers):
            nt *= 2
        return nt

    def _register_chains(self, mmas: list[MmaOp]) -> tuple[set[int], set[int], list[MmaOp]]:
        """FlashAttention-2's register chains on sm_80+: the ids of the mmas whose warps must own whole rows of the
        accumulator (a row reduction of what it flows into, or an mma's A operand made from it, stays in a warp's
        registers and shuffles), and of those that take their A operand from registers (made from another mma's
        result, or loaded before the loop the mma runs in: no shared memory per iteration); and the latter mmas
        (A loaded before their loop)."""
        if self.arch < 80:
            return set(), set(), []
        walk = list(self.fn.body.walk())
        row_reduced = {op.x for op in walk if isinstance(op, ReduceOp) and isinstance(op.x.type, TileType)
                       and op.x.type.ndim == 2 and op.axis == 1}
        rows: set[int] = set()
        regs: set[int] = set()
        for x in mmas:
            flow = flows_from(self.fn, x.result)
            if flow & row_reduced:
                rows.add(id(x))
            for y in mmas:
                if y.a in flow:
                    rows |= {id(x), id(y)}
                    regs.add(id(y))
        loops = [op for op in walk if isinstance(op, ForOp | LoopOp)]
        defined = {r: op for op in walk for r in op.results}
        invariant: list[MmaOp] = []
        for y in mmas:
            inner = [lp for lp in loops if any(o is y for o in lp.body.walk())]
            if id(y) in rows and inner and id(y) not in regs:
                loop = inner[-1]  # walk order: parents first, so the last is the innermost
                d = defined.get(y.a)
                if d is not None and not any(o is d for o in loop.body.walk()):
                    regs.add(id(y))
                    invariant.append(y)
        return rows, regs, invariant

    def _invariant_a_to_stage(self, invariant: list[MmaOp]) -> set[int]:
        """The ids of the mmas whose loop-invariant A operand (``_register_chains``) goes to shared memory once
        (``_plan_staged``) instead of registers: while a loop's carried tiles and those A operands would hold more
        than ``CHAIN_HELD_WORDS`` words a thread, the largest A first (FlashAttention-2's backward keeps K and V in
        shared memory: the dK/dV kernel at d128 spilled 260-268 B with both in registers beside dK and dV)."""
        if self.arch < 80 or self.num_stages == 1:
            return set()
        loops = [op for op in self.fn.body.walk() if isinstance(op, ForOp | LoopOp)]
        held = max((sum(a.type.size * max(1.0, a.type.dtype.itemsize / 4) for a in lp.body.args
                        if isinstance(a.type, TileType) and not a.type.is_scalar) for lp in loops), default=0.0)
        size: dict[Value, float] = {}
        for y in invariant:
            t = y.a.type
            if isinstance(t, TileType) and self.mma[id(y)].ra:
                size[y.a] = t.size * t.dtype.itemsize / 4
        held = (held + sum(size.values())) / self.nt
        chosen: set[Value] = set()
        for v in sorted(size, key=lambda v: -size[v]):
            if held <= CHAIN_HELD_WORDS:
                break
            chosen.add(v)
            held -= size[v] / self.nt
        return {id(y) for y in invariant if y.a in chosen}

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
        if at.dtype.is_float8:
            return fp8_mma_plan(op, self.arch, grid, lda, ldb)
        warps = self.nt // 32
        rows = id(op) in self._row_owned and m % (16 * warps) == 0 and n % 16 == 0
        if rows:  # each warp owns whole rows (16 * MT of them, all N columns)
            grid = WarpGrid(warps, 1)
        if self.arch >= 80 and grid is not None and ct.dtype == float32:
            if at.dtype in (float16, bfloat16) and k % 16 == 0:
                # a wgmma-ready warp grid keeps the option of wgmma open (see _plan_pipeline)
                wg = wgmma_tiling(m, n, k, self.nt, item) if self.wgmma else None
                if wg is not None and rows and wg[0] != grid:
                    wg = None
                if wg is not None:
                    return MmaPlan("tc", m, n, k, wg[0], lda, ldb, at.dtype, ct.dtype, wg[1], wg[2])
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
