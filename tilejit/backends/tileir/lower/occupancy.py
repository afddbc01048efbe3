"""The entry's optimization hints chosen from the kernel's tile sizes: ``occupancy`` for row kernels,
``num_worker_warps_per_cta`` for matmuls with large accumulators.

Without a hint tileiras gives a row kernel (softmax, layer norm: one large tile per block) 255 registers x
256 threads, one CTA per SM, and it runs at 0.2-0.6x the CUDA backend on an H100; ``occupancy=N`` caps
ptxas at 65536 / (256 N) registers (N=2: 128, 4: 64, 8: 32), and the largest N whose cap still holds the
kernel's tiles brings it to 0.86-1.03x. Too high an N makes ptxas spill (0.1-0.5x). The estimate below is
fitted to ptxas on examples/softmax.py and examples/layer_norm.py (docs/tileir.md, "Occupancy hint").
The user's ``@tj.kernel(occupancy=N)`` replaces the choice, and ``num_ctas=N`` adds ``num_cta_in_cga``
(:func:`entry_hints`; docs/tileir.md, "User hints").
"""

from __future__ import annotations

from tilejit.backends.base import NO_HINTS, KernelHints
from tilejit.backends.tileir.module import HINT_ARCHS
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Value
from tilejit.language.ir.types import ArrayType, TileType

#: Threads per CTA tileiras gives a non-mma kernel with large tiles (smaller tiles get 128, i.e. more
#: registers per thread under the same cap, so the estimate at 256 is the tighter one).
THREADS = 256
#: Registers a thread needs beside its share of the tiles (addresses, indices, reduction partials).
BASE_REGISTERS = 16
#: Targets the estimate was checked on with ptxas (sm_8x: tileiras gives 128 threads, the hint rarely binds).
#: Not sm_100+: its softmax code needs more registers (8192 f32 at occupancy 4 spills 248 B), unmeasured.
ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90")
#: The occupancies tried, highest first: 8 CTAs x 256 threads fill an SM's 2048 threads.
CHOICES = (8, 4, 2)


def _words(t: object) -> int:
    """32-bit registers one tile of type ``t`` takes in all (64-bit elements: two; narrower ones: one)."""
    if not isinstance(t, TileType):
        return 0
    n = 1
    for d in t.shape:
        n *= d
    return n * (2 if t.dtype.bits > 32 else 1)


def estimate_registers(fn: O.Function) -> float | None:
    """Registers per thread (at ``THREADS`` threads) ``fn`` needs to keep its tiles in registers, or ``None``
    for a kernel with an ``mma`` (tileiras's warp-specialized matmul schedule wants every register).

    Counted are data tiles (loaded, gathered, or computed from those; index tiles such as ``arange``
    masks are folded by tileiras): ``largest`` = the largest one's words per thread, ``loads`` = the loads
    of a tile at least half that size. Fitted to ptxas: a kernel with one such load holds about 1.25 of
    those tiles at once (softmax), one with two or more about 1.75 (vector add, layer norm).
    """
    data: set[Value] = set()
    largest = 0
    load_words: list[int] = []
    for op in fn.body.walk():
        if isinstance(op, O.MmaOp):
            return None
        if isinstance(op, (O.LoadOp, O.GatherOp, O.AtomicOp)) or any(v in data for v in op.operands()):
            data.update(op.results)
            for r in op.results:
                largest = max(largest, _words(r.type))
            if isinstance(op, (O.LoadOp, O.GatherOp)):
                load_words.append(_words(op.result.type))
    loads = sum(1 for w in load_words if 2 * w >= largest)
    return BASE_REGISTERS + largest / THREADS * (1.25 if loads <= 1 else 1.75)


def choose_occupancy(fn: O.Function) -> int | None:
    """The ``occupancy`` hint for kernel ``fn``: the highest of ``CHOICES`` whose register cap holds
    ``estimate_registers(fn)``; ``None`` (write no hint) for mma kernels and for tiles too large for any."""
    need = estimate_registers(fn)
    if need is None:
        return None
    for n in CHOICES:
        if need <= 65536 // (THREADS * n):
            return n
    return None


#: Targets whose matmuls were timed with 8 worker warps (sm_100's tileiras schedule is unmeasured).
WORKER_WARP_ARCHS = ("sm_90",)
#: Accumulator elements from which an mma kernel gets 8 worker warps (two consumer warpgroups): a 128x256
#: or 256x128 f32 accumulator in one warpgroup's registers spills.
WIDE_ACCUMULATOR = 128 * 256


def choose_worker_warps(fn: O.Function) -> int | None:
    """``num_worker_warps_per_cta`` for kernel ``fn``: 8 when an ``mma`` accumulates a tile of at least
    ``WIDE_ACCUMULATOR`` elements, or when a kernel without one holds tiles too large for any occupancy's cap at
    ``THREADS`` threads (``choose_occupancy`` gives None); else ``None`` (tileiras's own choice).
    Measured on an H100: a 128x256x64 bf16 matmul ran at 0.06x cuBLAS with tileiras's choice (256 threads,
    spilling) and 0.90-0.98x with 8; a softmax over rows of 32768 floats spills 1080 B at 256 threads and none
    at the 384 threads tileiras gives it with 8 worker warps (ptxas -v; docs/tileir.md, "Worker warps for
    long rows")."""
    need = estimate_registers(fn)
    if need is None:
        for op in fn.body.walk():
            if isinstance(op, O.MmaOp) and _words(op.result.type) >= WIDE_ACCUMULATOR:
                return 8
        return None
    return 8 if need > 65536 // (THREADS * CHOICES[-1]) else None


#: Targets and tile sizes (the largest tile's elements) where float32 row kernels ran faster without TMA (H100,
#: tileiras 13.5.37), for one large load (softmax) and for more (layer norm: x, weight, bias): measured only there
#: (docs/tileir.md, "Worker warps for long rows; TMA for rows").
NO_TMA_ARCHS = ("sm_90",)
NO_TMA_SIZES_ONE_LOAD = (4096, 8192, 16384, 32768)
NO_TMA_SIZES = (4096, 8192)


def choose_no_tma(fn: O.Function) -> bool:
    """Whether kernel ``fn``'s view loads and stores should not use TMA: a kernel without an mma that reduces
    (a row kernel), whose arrays are all float32, and whose largest tile has ``NO_TMA_SIZES_ONE_LOAD`` elements
    when one load is at least half that large, ``NO_TMA_SIZES`` when more are. Measured on an H100 against the
    CUDA backend: softmax 0.92-0.99x with TMA (its rows staged through shared memory), 1.00x without at 4K-32K
    floats; layer norm 0.86x/0.84x -> 1.00x at 4K/8K but 0.74x -> 0.58x at 16K. bfloat16 rows were mixed, so
    tileiras keeps its choice there."""
    reduces = False
    largest = 0
    loads: list[int] = []
    for op in fn.body.walk():
        if isinstance(op, O.MmaOp):
            return False
        reduces = reduces or isinstance(op, (O.ReduceOp, O.ArgReduceOp, O.ScanOp))
        if isinstance(op, O.LoadOp) and isinstance(op.result.type, TileType):
            loads.append(op.result.type.size)
        for r in op.results:
            if isinstance(r.type, TileType):
                largest = max(largest, r.type.size)
    arrays = [v.type for v in fn.params if isinstance(v.type, ArrayType)]
    if not (reduces and arrays and all(t.dtype.name == "float32" for t in arrays)):
        return False
    big_loads = sum(1 for n in loads if 2 * n >= largest)
    return largest in (NO_TMA_SIZES_ONE_LOAD if big_loads <= 1 else NO_TMA_SIZES)


def entry_hints(fn: O.Function, target: str, user: KernelHints = NO_HINTS) -> dict[str, dict[str, int]]:
    """The entry optimization hints of kernel ``fn`` for ``target`` (``sm_NN``; ``""``: any), under the target's
    name (``default`` for ``""``): ``occupancy`` = the user's, else ``choose_occupancy(fn)`` on ``ARCHS``; and
    ``num_cta_in_cga`` = the user's ``num_ctas`` when above 1, except where Tile IR refuses clusters (sm_8x, and
    ``""``, which may be compiled for those): there it is dropped, with a debug log line (a cluster is a
    performance hint only); ``num_worker_warps_per_cta`` from ``choose_worker_warps(fn)`` on
    ``WORKER_WARP_ARCHS``."""
    items: dict[str, int] = {}
    occupancy = user.occupancy
    if occupancy is None and target in ARCHS:
        occupancy = choose_occupancy(fn)
    if occupancy is not None:
        items["occupancy"] = occupancy
    if user.num_ctas is not None and user.num_ctas > 1:
        if target.startswith("sm_8") or not target:
            import logging

            logging.getLogger(__name__).debug(
                "kernel %s: num_ctas=%d dropped for %s: Tile IR runs one CTA per cluster there",
                fn.name, user.num_ctas, target or "a module of no target")
        else:
            items["num_cta_in_cga"] = user.num_ctas
    warps = choose_worker_warps(fn) if target in WORKER_WARP_ARCHS else None
    if warps is not None:
        items["num_worker_warps_per_cta"] = warps
    if not items:
        return {}
    return {target if target in HINT_ARCHS else "default": items}
