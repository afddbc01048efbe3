"""Matrix multiply: f16 or bf16 tiles in (--dtype), f32 accumulate on tensor cores, one output tile per block.

``matmul`` maps the 2-D grid straight onto output tiles; ``matmul_grouped`` takes a 1-D grid and visits the
tiles in groups of GROUP tile rows (Triton's tutorial order), so blocks running together share rows of A
and columns of B in L2: faster on large matrices. ``matmul_tuned`` is ``matmul`` with its tile shape chosen
by ``tj.autotune`` for each shape and dtype of A and B (timed once, then kept in the disk cache).
"""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

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


if __name__ == "__main__":
    main()
