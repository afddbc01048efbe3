"""Row-wise sum of a large matrix: a run-time loop over column tiles, then one reduction per row tile."""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj


@tj.kernel
def row_sum(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    i = tj.bid(0)
    acc = tj.zeros((BM, BN), tj.float32)
    for j in range(tj.num_tiles(x, 1, (BM, BN))):
        acc += tj.load(x, index=(i, j), shape=(BM, BN)).astype(tj.float32)
    tj.store(out, index=(i,), tile=tj.sum(acc, axis=1))


def main() -> None:
    args = parse_args(__doc__)
    consts = {"BM": 4, "BN": 256}
    if not should_run(args):
        compile_only(args, row_sum, (tj.float32[:, :], tj.float32[:]), consts)
        return
    m, n = 1001, 20_000
    x = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    dout = tj.asarray(np.full((m,), np.nan, np.float32))
    row_sum[tj.cdiv(m, consts["BM"])](tj.asarray(x), dout, **consts)
    check("row_sum", dout.numpy(), x.astype(np.float64).sum(axis=1), 1e-5)


if __name__ == "__main__":
    main()
