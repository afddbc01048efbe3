"""Matrix multiply: f16/bf16 tiles in, f32 accumulate on tensor cores, one output tile per block."""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj


@tj.kernel
def matmul(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        ta = tj.load(a, index=(pid_m, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


def main() -> None:
    args = parse_args(__doc__)
    consts = {"BM": 128, "BN": 128, "BK": 32}
    if not should_run(args):
        # [:, ::1]: contiguous, 16-byte-aligned rows, as the arrays below are: the fast path
        compile_only(args, matmul, (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1]), consts)
        return
    m, n, k = 1000, 1100, 700
    rng = np.random.default_rng()
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    grid = (tj.cdiv(m, consts["BM"]), tj.cdiv(n, consts["BN"]))
    matmul[grid](tj.asarray(a), tj.asarray(b), dc, **consts)
    check("matmul f16", dc.numpy(), a.astype(np.float64) @ b.astype(np.float64), 1e-3)


if __name__ == "__main__":
    main()
