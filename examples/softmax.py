"""Fused row softmax: a block per ``ROWS`` rows (one on the CUDA backend; several short rows on Tile IR, see
``_common.row_tiles``); max, exp, sum and divide without leaving registers. ``softmax_tuned`` is the same kernel
with its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x.

A row longer than ``WHOLE_ROW`` elements does not fit in registers (a 65536-element float32 row is an SM's whole
register file), so ``softmax_rows`` gives it to ``softmax_chunked``: one pass over chunks (``_common.CHUNK_BYTES``
each) keeps a running maximum and the sum of exponentials rescaled to it, a second pass re-reads the row and writes
it out."""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import (
    backend_of,
    block_of,
    check,
    chunk_of,
    compile_only,
    itemsize_of,
    parse_args,
    row_tiles,
    run_plan,
    should_run,
)

import tilejit as tj

#: The longest row (elements, any dtype) that ``softmax`` holds whole: ptxas -v for sm_90a shows no spill up to here.
WHOLE_ROW = 32768
#: Elements of a block's (ROWS, BLOCK) tile of short rows on Tile IR (``row_tiles``; bench/RESULTS.md, session 18).
ROW_TILE = 2048
#: Tile IR's chunked rows: chunks of this many elements, with tileiras asked for this many CTAs per SM
#: (bench/RESULTS.md, session 20: bf16 rows of 65536 0.75x -> 0.90x of the CUDA backend, float32 0.97x -> 1.01x).
TILEIR_CHUNK = 8192
TILEIR_CHUNK_OCCUPANCY = 4


@tj.kernel
def softmax(x, out, ROWS: tj.Constant[int], BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(ROWS, BLOCK), padding=float("-inf")).astype(tj.float32)
    e = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(out, index=(i, 0), tile=e / tj.sum(e, axis=1, keepdims=True))


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


def row_plan(x: Any, backend: str | None = None) -> tuple[Any, int, dict[str, int]]:
    """The kernel, its grid and constants (and launch options) for the rows of ``x``: whole rows as one tile up to
    ``WHOLE_ROW`` elements (``row_tiles`` of them a block), else a block per row in chunks. 16-bit rows of
    16385-32768 elements go in chunks too: on the CUDA backend of 16384 with 8 warps (0.92-0.93x of Triton at 32768
    against 0.89x whole; bench/RESULTS.md, session 19), on Tile IR as its longer rows do (0.79x of the CUDA backend
    against 0.75x whole; session 20)."""
    m, block = x.shape[0], block_of(x.shape[1])
    tileir = backend_of(backend) == "tileir"
    if block > WHOLE_ROW or (block == WHOLE_ROW and itemsize_of(x) == 2):
        if tileir:
            return softmax_chunked, m, {"BLOCK": TILEIR_CHUNK, "occupancy": TILEIR_CHUNK_OCCUPANCY}
        if block == WHOLE_ROW:
            return softmax_chunked, m, {"BLOCK": WHOLE_ROW // 2, "num_warps": 8}
        return softmax_chunked, m, {"BLOCK": chunk_of(x, backend)}
    return softmax, *row_tiles(m, block, backend, ROW_TILE)


def softmax_rows(x: Any, out: Any, backend: str | None = None) -> None:
    """``out`` = the softmax of each row of the 2-D array ``x`` (tilejit, torch, ... arrays), at any row length;
    ``backend``: build the kernels with this backend instead of the default."""
    run_plan(row_plan(x, backend), backend, x, out)


def main() -> None:
    args = parse_args(__doc__)
    m, n = 1001, 3000
    block = block_of(n)
    if not should_run(args):
        sig = (tj.float32[:, :], tj.float32[:, :])
        compile_only(args, softmax, sig, {"ROWS": 1, "BLOCK": block})
        compile_only(args, softmax_chunked, sig, {"BLOCK": 1024})
        return
    x = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    dx = tj.asarray(x)
    for name, kernel, grid, constants in (
        ("softmax", softmax, m, {"ROWS": 1, "BLOCK": block}),
        ("softmax, 8 rows a block", softmax, -(-m // 8), {"ROWS": 8, "BLOCK": block}),  # the last block ragged
        ("softmax_tuned", softmax_tuned, m, {"ROWS": 1, "BLOCK": block}),
        ("softmax_chunked", softmax_chunked, m, {"BLOCK": 1024}),  # 3 chunks, the last one ragged
    ):
        dout = tj.asarray(np.full((m, n), np.nan, np.float32))
        kernel[grid](dx, dout, **constants)
        check(name, dout.numpy(), want, 1e-5)
    print(f"softmax_tuned chose {softmax_tuned.best_config}")


if __name__ == "__main__":
    main()
