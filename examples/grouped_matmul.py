"""Grouped matrix multiply (issue 20): C[g] = A[g] @ B[g] for a run-time number of groups of different M, N and K,
in one launch. The kernel takes the groups' matrices as three array lists (tuples of arrays, indexed at run time,
as cuTile's grouped GEMM); one compiled kernel serves any number of groups.

The grid is one block per output tile over all groups: ``tile_starts[g]`` is the first tile of group g (host
computed, ``tile_starts[G]`` the total), and each block finds its group by walking it, then computes one
(BM, BN) tile of that group's C with f16 or bf16 inputs (--dtype) and f32 accumulation.
"""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run
from matmul import DTYPES, random_input

import tilejit as tj


@tj.kernel
def grouped_matmul(As, Bs, Cs, tile_starts, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid = tj.bid(0)
    g = 0
    while tj.gather(tile_starts, g + 1) <= pid:  # the group whose tiles hold this block's
        g += 1
    a, b, c = As[g], Bs[g], Cs[g]
    t = pid - tj.gather(tile_starts, g)
    tiles_n = tj.cdiv(c.shape[1], BN)
    pid_m, pid_n = t // tiles_n, t % tiles_n
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


def tile_starts(shapes: list[tuple[int, int, int]], bm: int, bn: int) -> np.ndarray:
    """The first output tile of each group of (M, N, K) ``shapes``, and the total last: int32."""
    counts = [tj.cdiv(m, bm) * tj.cdiv(n, bn) for m, n, _ in shapes]
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def run_groups(a: list[tj.DeviceArray], b: list[tj.DeviceArray], c: list[tj.DeviceArray],
               consts: dict[str, int]) -> None:
    """Launch ``grouped_matmul`` once over the groups ``c[g] = a[g] @ b[g]``."""
    shapes = [(x.shape[0], y.shape[1], x.shape[1]) for x, y in zip(a, b)]
    starts = tile_starts(shapes, consts["BM"], consts["BN"])
    grouped_matmul[int(starts[-1])](tuple(a), tuple(b), tuple(c), tj.asarray(starts), **consts)


def main() -> None:
    args = parse_args(__doc__, lambda p: p.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float16", help="the input matrices' dtype (default: float16)"
    ))
    dtype = DTYPES[args.dtype]
    consts = {"BM": 64, "BN": 64, "BK": 32}
    if not should_run(args):
        sig = (tj.array_list(dtype[:, :]), tj.array_list(dtype[:, :]), tj.array_list(tj.float32[:, :]), tj.int32[:])
        compile_only(args, grouped_matmul, sig, consts)
        return
    rng = np.random.default_rng()
    for groups in (3, 7):  # two launches of the one compiled kernel
        shapes = [(int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(1, 200)))
                  for _ in range(groups)]
        ins = [(random_input(rng, (m, k), args.dtype), random_input(rng, (k, n), args.dtype)) for m, n, k in shapes]
        outs = [tj.asarray(np.full((m, n), np.nan, np.float32)) for m, n, _ in shapes]
        run_groups([da for (_, da), _ in ins], [db for _, (_, db) in ins], outs, consts)
        for g, (((a, _), (b, _)), out) in enumerate(zip(ins, outs)):
            check(f"grouped_matmul {args.dtype}, {groups} groups, group {g} {shapes[g]}", out.numpy(), a @ b, 1e-3)


if __name__ == "__main__":
    main()
