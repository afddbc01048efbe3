"""Fused row softmax: one block per row; max, exp, sum and divide without leaving registers. ``softmax_tuned`` is the
same kernel with its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x.

A row longer than ``WHOLE_ROW`` elements does not fit in registers (a 65536-element float32 row is an SM's whole
register file), so ``softmax_rows`` gives it to ``softmax_chunked``: one pass over chunks (``_common.CHUNK_BYTES``
each) keeps a running maximum and the sum of exponentials rescaled to it, a second pass re-reads the row and writes
it out."""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import block_of, check, chunk_of, compile_only, on_backend, parse_args, should_run

import tilejit as tj

#: The longest row (elements, any dtype) that ``softmax`` holds whole: ptxas -v for sm_90a shows no spill up to here.
WHOLE_ROW = 32768


@tj.kernel
def softmax(x, out, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf")).astype(tj.float32)
    e = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(out, index=(row, 0), tile=e / tj.sum(e, axis=1, keepdims=True))


softmax_tuned = tj.autotune([tj.Config({}, num_warps=w) for w in (2, 4, 8, 16)], key=["x"])(softmax)


@tj.kernel
def softmax_chunked(x, out, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    chunks = tj.num_tiles(x, 1, (1, BLOCK))
    top = tj.full((1, 1), float("-inf"), tj.float32)  # the largest element so far
    total = tj.zeros((1, 1), tj.float32)  # the sum of exp(element - top) so far
    for c in range(chunks):
        t = tj.load(x, index=(row, c), shape=(1, BLOCK), padding=float("-inf")).astype(tj.float32)
        new = tj.maximum(top, tj.max(t, axis=1, keepdims=True))
        total = total * tj.exp(top - new) + tj.sum(tj.exp(t - new), axis=1, keepdims=True)
        top = new
    scale = 1.0 / total
    for c in range(chunks):
        t = tj.load(x, index=(row, c), shape=(1, BLOCK)).astype(tj.float32)
        tj.store(out, index=(row, c), tile=tj.exp(t - top) * scale)


def row_plan(x: Any, backend: str | None = None) -> tuple[Any, int]:
    """The kernel and BLOCK for the rows of ``x``: the whole row as one tile up to ``WHOLE_ROW``, else chunks."""
    block = block_of(x.shape[1])
    return (softmax, block) if block <= WHOLE_ROW else (softmax_chunked, chunk_of(x, backend))


def softmax_rows(x: Any, out: Any, backend: str | None = None) -> None:
    """``out`` = the softmax of each row of the 2-D array ``x`` (tilejit, torch, ... arrays), at any row length;
    ``backend``: build the kernels with this backend instead of the default."""
    kernel, block = row_plan(x, backend)
    on_backend(kernel, backend)[x.shape[0]](x, out, BLOCK=block)


def main() -> None:
    args = parse_args(__doc__)
    m, n = 1000, 3000
    block = block_of(n)
    if not should_run(args):
        sig = (tj.float32[:, :], tj.float32[:, :])
        compile_only(args, softmax, sig, {"BLOCK": block})
        compile_only(args, softmax_chunked, sig, {"BLOCK": 1024})
        return
    x = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    dx = tj.asarray(x)
    for name, kernel, b in (("softmax", softmax, block), ("softmax_tuned", softmax_tuned, block),
                            ("softmax_chunked", softmax_chunked, 1024)):  # 3 chunks, the last one ragged
        dout = tj.asarray(np.full((m, n), np.nan, np.float32))
        kernel[m](dx, dout, BLOCK=b)
        check(name, dout.numpy(), want, 1e-5)
    print(f"softmax_tuned chose {softmax_tuned.best_config}")


if __name__ == "__main__":
    main()
