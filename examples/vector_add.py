"""Vector add: one block adds one tile; the last tile's lanes past the end are masked."""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj


@tj.kernel
def vector_add(x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=a + b)


def main() -> None:
    args = parse_args(__doc__)
    tile = 1024
    if not should_run(args):
        compile_only(args, vector_add, (tj.float32[:], tj.float32[:], tj.float32[:]), {"TILE": tile})
        return
    n = 1_000_003
    rng = np.random.default_rng()
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    dx, dy = tj.asarray(x), tj.asarray(y)
    dout = tj.asarray(np.full((n,), np.nan, np.float32))
    vector_add[tj.cdiv(n, tile)](dx, dy, dout, TILE=tile)
    check("vector_add", dout.numpy(), x + y, 1e-6)


if __name__ == "__main__":
    main()
