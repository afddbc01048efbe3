"""Matrix multiply: f16 or bf16 tiles in (--dtype), f32 accumulate on tensor cores, one output tile per block.

``matmul`` maps the 2-D grid straight onto output tiles; ``matmul_grouped`` takes a 1-D grid and visits the
tiles in groups of GROUP tile rows (Triton's tutorial order), so blocks running together share rows of A
and columns of B in L2: faster on large matrices. ``matmul_tuned`` is ``matmul`` with its tile shape chosen
by ``tj.autotune`` for each shape and dtype of A and B (timed once, then kept in the disk cache).

``matmul_splitk`` is for few output tiles (small M, decode shapes: 16 x 4096 x 4096 has 16-32 tiles for 132 SMs):
block (pid_m, pid_n, s) multiplies only slice s of the K tiles into a float32 workspace of partial sums
(SPLIT, M, N), and ``splitk_sum`` adds the slices and casts to C's dtype. ``splitk_slices`` picks SPLIT from M, N,
K and the SM count; ``matmul_splitk_into`` launches both kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import check, compile_only, on_backend, parse_args, should_run

import tilejit as tj

DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}


@tj.function
def output_tile(a, b, pid_m, pid_n, BM, BN, BK):
    """Tile (pid_m, pid_n) of a @ b: the K loop over (BM, BK) tiles of a and (BK, BN) tiles of b."""
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        ta = tj.load(a, index=(pid_m, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    return acc


@tj.kernel
def matmul(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = output_tile(a, b, pid_m, pid_n, BM, BN, BK)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tj.kernel
def matmul_grouped(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int],
                   GROUP: tj.Constant[int]):
    pid = tj.bid(0)
    tiles_m, tiles_n = tj.cdiv(a.shape[0], BM), tj.cdiv(b.shape[1], BN)
    in_group = GROUP * tiles_n
    first_m = (pid // in_group) * GROUP
    group_m = tj.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    acc = output_tile(a, b, pid_m, pid_n, BM, BN, BK)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tj.kernel
def matmul_splitk(a, b, partial, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid_m, pid_n, s = tj.bid(0), tj.bid(1), tj.bid(2)
    k_tiles = tj.num_tiles(a, 1, (BM, BK))
    per = tj.cdiv(k_tiles, partial.shape[0])  # K tiles a slice: the last slice may have fewer, or none
    first = s * per
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(first, tj.minimum(first + per, k_tiles)):
        ta = tj.load(a, index=(pid_m, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(partial, index=(s, pid_m, pid_n), tile=acc.reshape((1, BM, BN)))


@tj.kernel
def splitk_sum(partial, c, BM: tj.Constant[int], BN: tj.Constant[int], SLICES: tj.Constant[int]):
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for s in range(tj.cdiv(partial.shape[0], SLICES)):
        group = tj.load(partial, index=(s, pid_m, pid_n), shape=(SLICES, BM, BN))  # one load (zeros past the end)
        for j in tj.static_range(SLICES):  # each thread holds all SLICES of its elements: adds in registers
            acc += tj.extract(group, (j, 0, 0), (1, BM, BN)).reshape((BM, BN))
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


#: splitk_sum's tile: 1024 float32 partials a block (a 16 x 4096 output is 64 blocks), 8 slices an iteration; the
#: slices are added in order, so the sum is the same on every run.
SUM_TILE = {"BM": 8, "BN": 128, "SLICES": 8}
#: The fewest K tiles a slice gets: its pipeline fill and its partial's store and reload must stay small beside it.
MIN_SLICE_TILES = 4


def splitk_slices(m: int, n: int, k: int, sms: int, bm: int, bn: int, bk: int) -> int:
    """How many K slices ``matmul_splitk`` should cut an (M, K) @ (K, N) product into on ``sms`` SMs with (BM, BN,
    BK) tiles: 1 (use ``matmul``) when the output tiles fill half the SMs or more; else about one block per SM, each
    slice at least ``MIN_SLICE_TILES`` K tiles, and no empty slice."""
    tiles = tj.cdiv(m, bm) * tj.cdiv(n, bn)
    k_tiles = tj.cdiv(k, bk)
    if 2 * tiles >= sms:
        return 1
    split = max(1, min(sms // tiles, k_tiles // MIN_SLICE_TILES))
    return tj.cdiv(k_tiles, tj.cdiv(k_tiles, split))  # every slice gets K tiles


def matmul_splitk_into(a: Any, b: Any, c: Any, partial: Any, consts: dict[str, int],
                       backend: str | None = None) -> None:
    """c = a @ b (tilejit or torch arrays) through the float32 workspace ``partial`` (SPLIT, M, N): the slices'
    partial sums, then their sum cast to c's dtype, two launches in order on the current stream (``backend``: the
    kernels built with that backend)."""
    m, n, split = c.shape[0], c.shape[1], partial.shape[0]
    slices, total = on_backend(matmul_splitk, backend), on_backend(splitk_sum, backend)
    slices[(tj.cdiv(m, consts["BM"]), tj.cdiv(n, consts["BN"]), split)](a, b, partial, **consts)
    total[(tj.cdiv(m, SUM_TILE["BM"]), tj.cdiv(n, SUM_TILE["BN"]))](partial, c, **SUM_TILE)


matmul_tuned = tj.autotune(
    configs=[
        tj.Config({"BM": 128, "BN": 128, "BK": 32}),
        tj.Config({"BM": 128, "BN": 128, "BK": 64}),
        tj.Config({"BM": 128, "BN": 256, "BK": 32}),
        tj.Config({"BM": 64, "BN": 128, "BK": 64}),
        tj.Config({"BM": 128, "BN": 64, "BK": 64}, num_warps=4),
    ],
    key=["a", "b"],
)(matmul)


def random_input(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> tuple[np.ndarray, tj.DeviceArray]:
    """Random values of ``dtype``: (their exact values as float64, a device array of them). numpy has no
    bfloat16, so a bfloat16 array is uploaded as its 16-bit patterns: float32's upper half, rounded to nearest even."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "float16":
        h = x.astype(np.float16)
        return h.astype(np.float64), tj.asarray(h)
    bits = x.view(np.uint32)
    upper = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    exact = (upper.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raw = tj.asarray(upper)
    return exact, tj.DeviceArray(shape, "bfloat16", ptr=raw.ptr, base=raw)


def main() -> None:
    args = parse_args(__doc__, lambda p: p.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float16", help="the input matrices' dtype (default: float16)"
    ))
    dtype = DTYPES[args.dtype]
    consts = {"BM": 128, "BN": 128, "BK": 32}
    if not should_run(args):
        # [:, ::1]: contiguous, 16-byte-aligned rows, as the arrays below are: the fast path
        compile_only(args, matmul, (dtype[:, ::1], dtype[:, ::1], tj.float32[:, ::1]), consts)
        return
    m, n, k = 1000, 1100, 700
    rng = np.random.default_rng()
    (a, da), (b, db) = random_input(rng, (m, k), args.dtype), random_input(rng, (k, n), args.dtype)
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    grid = (tj.cdiv(m, consts["BM"]), tj.cdiv(n, consts["BN"]))
    matmul[grid](da, db, dc, **consts)
    check(f"matmul {args.dtype}", dc.numpy(), a @ b, 1e-3)
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    matmul_grouped[grid[0] * grid[1]](da, db, dc, GROUP=8, **consts)
    check(f"matmul_grouped {args.dtype}", dc.numpy(), a @ b, 1e-3)
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    matmul_tuned[lambda meta: (tj.cdiv(m, meta["BM"]), tj.cdiv(n, meta["BN"]))](da, db, dc)
    check(f"matmul_tuned {args.dtype} ({matmul_tuned.best_config})", dc.numpy(), a @ b, 1e-3)
    m, k = 16, 4000  # a decode shape: 1 x 9 output tiles of 128 x 128, K cut into slices
    a, da = random_input(rng, (m, k), args.dtype)
    b, db = random_input(rng, (k, n), args.dtype)
    split = splitk_slices(m, n, k, tj.get_device().multiprocessor_count, consts["BM"], consts["BN"], consts["BK"])
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    matmul_splitk_into(da, db, dc, tj.empty((split, m, n), "float32"), consts)
    check(f"matmul_splitk {args.dtype} ({split} slices)", dc.numpy(), a @ b, 1e-3)


if __name__ == "__main__":
    main()
