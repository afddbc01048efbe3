"""Fused row softmax: one block per row; max, exp, sum and divide without leaving registers. ``softmax_tuned`` is the
same kernel with its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x."""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj


@tj.kernel
def softmax(x, out, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf")).astype(tj.float32)
    e = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(out, index=(row, 0), tile=e / tj.sum(e, axis=1, keepdims=True))


softmax_tuned = tj.autotune([tj.Config({}, num_warps=w) for w in (2, 4, 8, 16)], key=["x"])(softmax)


def main() -> None:
    args = parse_args(__doc__)
    m, n = 1000, 3000
    block = 1 << (n - 1).bit_length()
    if not should_run(args):
        compile_only(args, softmax, (tj.float32[:, :], tj.float32[:, :]), {"BLOCK": block})
        return
    x = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    dx = tj.asarray(x)
    for name, kernel in (("softmax", softmax), ("softmax_tuned", softmax_tuned)):
        dout = tj.asarray(np.full((m, n), np.nan, np.float32))
        kernel[m](dx, dout, BLOCK=block)
        check(name, dout.numpy(), e / e.sum(axis=1, keepdims=True), 1e-5)
    print(f"softmax_tuned chose {softmax_tuned.best_config}")


if __name__ == "__main__":
    main()
