"""Fused row softmax: a block per ``ROWS`` rows (one on the CUDA backend; several short rows on Tile IR, see
``_common.row_tiles``); max, exp, sum and divide without leaving registers. ``softmax_tuned`` is the same kernel
with its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x.

A row longer than ``WHOLE_ROW`` elements does not fit in registers (a 65536-element float32 row is an SM's whole
register file), so ``softmax_rows`` gives it to ``softmax_chunked``: one pass over chunks (``_common.CHUNK_BYTES``
each) keeps a running maximum and the sum of exponentials rescaled to it, a second pass re-reads the row and writes
it out.

Backward (``softmax_backward``): dx = y * (dy - sum(dy * y)) per row, from the forward's output y and its gradient
dy, in float32. ``softmax_bwd`` holds the rows' y and dy whole (``ROWS`` rows a block, as the forward) up to
``WHOLE_ROW_BWD`` elements on Tile IR, ``CUDA_WHOLE_ROW_BWD`` on the CUDA backend; ``softmax_bwd_chunked`` adds
up dy * y chunk by chunk and then re-reads the row to write dx."""

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
#: The longest row (elements, any dtype) that ``softmax_bwd`` holds whole on Tile IR: it holds y and dy. ptxas -v
#: for sm_90a (the CUDA backend's code) shows no spill up to here (159-162 registers, 256 threads) and 176-228 B
#: spilled at 32768 (bench_rows.py --ptxas).
WHOLE_ROW_BWD = 16384
#: On the CUDA backend ``softmax_bwd`` holds rows of up to 32768 elements whole, with these warps per block by the
#: row's tile (an H200 sweep against Triton's peer, bench/RESULTS.md session 21: 32768-element rows whole with 8
#: warps 0.87-0.96x against 0.65-0.85x in 32 KB chunks; 12288-element rows with 16 warps 0.70-0.99x against
#: 0.68-0.82x with the default 8). The spills at 32768 go to L1 and cost less than re-reading the row.
CUDA_WHOLE_ROW_BWD = 32768
CUDA_BWD_WARPS = {16384: 16, 32768: 8}
#: On the CUDA backend 16-bit rows shorter than their tile of 16384 or 32768 elements (12288, 20000, 24576) go in
#: chunks of this many elements with 16 warps instead: whole, a quarter or more of the tile is padding (H200 sweeps,
#: bench/RESULTS.md sessions 21-22: 12288 0.70-0.83x -> 0.98-1.00x of Triton, 24576 0.72x -> 0.87-0.92x).
CUDA_BWD_PADDED_CHUNK = {16384: 4096, 32768: 8192}
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


@tj.function
def _probabilities_and_grads(y, dy, i, c, ROWS, BLOCK):
    """Rows i*ROWS... at column chunk ``c`` of the softmax ``y`` and its gradient ``dy``, in float32 (0 outside)."""
    t = tj.load(y, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32)
    return t, tj.load(dy, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32)


@tj.kernel
def softmax_bwd(y, dy, dx, ROWS: tj.Constant[int], BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    t, d = _probabilities_and_grads(y, dy, i, 0, ROWS, BLOCK)
    tj.store(dx, index=(i, 0), tile=t * (d - tj.sum(t * d, axis=1, keepdims=True)))


@tj.kernel
def softmax_bwd_chunked(y, dy, dx, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    chunks = tj.num_tiles(y, 1, (1, BLOCK))
    dots = tj.zeros((1, BLOCK), tj.float32)  # summed across the row once, after the loop
    for c in range(chunks):
        t, d = _probabilities_and_grads(y, dy, row, c, 1, BLOCK)
        dots += t * d
    total = tj.sum(dots, axis=1, keepdims=True)
    for c in range(chunks):
        t, d = _probabilities_and_grads(y, dy, row, c, 1, BLOCK)
        tj.store(dx, index=(row, c), tile=t * (d - total))


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


def backward_row_plan(y: Any, backend: str | None = None) -> tuple[Any, int, dict[str, int]]:
    """The backward kernel, its grid and constants for the rows of ``y`` (the forward's output): y and dy whole as
    tiles up to ``WHOLE_ROW_BWD`` elements (``row_tiles`` of them a block, as the forward's), else a block per row in
    chunks of ``_common.CHUNK_BYTES`` (32 KB on the CUDA backend); on the CUDA backend whole up to
    ``CUDA_WHOLE_ROW_BWD`` elements, with ``CUDA_BWD_WARPS``, but 16-bit rows shorter than their tile in
    ``CUDA_BWD_PADDED_CHUNK``'s chunks."""
    m, n = y.shape
    block = block_of(n)
    cuda = backend_of(backend) == "cuda"
    if cuda and n < block and block in CUDA_BWD_PADDED_CHUNK and itemsize_of(y) == 2:
        return softmax_bwd_chunked, m, {"BLOCK": CUDA_BWD_PADDED_CHUNK[block], "num_warps": 16}
    if block > (CUDA_WHOLE_ROW_BWD if cuda else WHOLE_ROW_BWD):
        return softmax_bwd_chunked, m, {"BLOCK": chunk_of(y, backend)}
    grid, constants = row_tiles(m, block, backend, ROW_TILE)
    if cuda and block in CUDA_BWD_WARPS:
        constants["num_warps"] = CUDA_BWD_WARPS[block]
    return softmax_bwd, grid, constants


def softmax_backward(y: Any, dy: Any, dx: Any, backend: str | None = None) -> None:
    """``dx`` = the gradient of the softmax rows ``y`` (``softmax_rows``'s output) for their gradient ``dy``: 2-D
    arrays of one shape, any row length; ``backend``: as ``softmax_rows``'s."""
    run_plan(backward_row_plan(y, backend), backend, y, dy, dx)


def reference_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """float64 dx of the softmax rows ``y`` for their gradient ``dy``."""
    y, dy = y.astype(np.float64), dy.astype(np.float64)
    return y * (dy - (dy * y).sum(axis=1, keepdims=True))


def main() -> None:
    args = parse_args(__doc__)
    m, n = 1001, 3000
    block = block_of(n)
    if not should_run(args):
        sig = (tj.float32[:, :], tj.float32[:, :])
        compile_only(args, softmax, sig, {"ROWS": 1, "BLOCK": block})
        compile_only(args, softmax_chunked, sig, {"BLOCK": 1024})
        compile_only(args, softmax_bwd, (*sig, tj.float32[:, :]), {"ROWS": 1, "BLOCK": block})
        compile_only(args, softmax_bwd_chunked, (*sig, tj.float32[:, :]), {"BLOCK": 1024})
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
    dy = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    y32 = want.astype(np.float32)
    want_dx = reference_backward(y32, dy)
    y, ddy = tj.asarray(y32), tj.asarray(dy)
    for name, kernel, grid, constants in (
        ("softmax_bwd", softmax_bwd, m, {"ROWS": 1, "BLOCK": block}),
        ("softmax_bwd, 8 rows a block", softmax_bwd, -(-m // 8), {"ROWS": 8, "BLOCK": block}),
        ("softmax_bwd_chunked", softmax_bwd_chunked, m, {"BLOCK": 1024}),
    ):
        ddx = tj.asarray(np.full((m, n), np.nan, np.float32))
        kernel[grid](y, ddy, ddx, **constants)
        check(name, ddx.numpy(), want_dx, 1e-5)
    ddx = tj.asarray(np.full((m, n), np.nan, np.float32))
    softmax_backward(y, ddy, ddx)
    check("softmax_backward", ddx.numpy(), want_dx, 1e-5)


if __name__ == "__main__":
    main()
