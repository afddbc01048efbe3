"""Layer norm over the last axis: one block per row, statistics in float32, masked tail. ``layer_norm_tuned`` is the
same kernel with its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x."""

from __future__ import annotations

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj


@tj.kernel
def layer_norm(x, weight, bias, out, eps: float, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    n = x.shape[1].astype(tj.float32)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tj.float32)
    mean = tj.sum(t, axis=1, keepdims=True) / n
    inside = tj.arange(BLOCK) < x.shape[1]
    d = tj.where(inside, t - mean, 0.0)
    rstd = tj.rsqrt(tj.sum(d * d, axis=1, keepdims=True) / n + eps)
    w = tj.load(weight, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    b = tj.load(bias, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(row, 0), tile=d * rstd * w + b)


layer_norm_tuned = tj.autotune([tj.Config({}, num_warps=w) for w in (2, 4, 8, 16)], key=["x"])(layer_norm)


def main() -> None:
    args = parse_args(__doc__)
    m, n, eps = 512, 1000, 1e-5
    block = 1 << (n - 1).bit_length()
    sig = (tj.float32[:, :], tj.float32[:], tj.float32[:], tj.float32[:, :], tj.float32)
    if not should_run(args):
        compile_only(args, layer_norm, sig, {"BLOCK": block})
        return
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n), dtype=np.float32)
    w, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    want = (x64 - mu) / np.sqrt(var + eps) * w + b
    dx, dw, db = tj.asarray(x), tj.asarray(w), tj.asarray(b)
    for name, kernel in (("layer_norm", layer_norm), ("layer_norm_tuned", layer_norm_tuned)):
        dout = tj.asarray(np.full((m, n), np.nan, np.float32))
        kernel[m](dx, dw, db, dout, eps, BLOCK=block)
        check(name, dout.numpy(), want, 1e-5)
    print(f"layer_norm_tuned chose {layer_norm_tuned.best_config}")


if __name__ == "__main__":
    main()
