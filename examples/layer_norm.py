"""Layer norm over the last axis, forward and backward, with statistics in float32.

``layer_norm``: one block per row, the whole row one tile, masked tail; ``layer_norm_tuned`` is the same kernel with
its block size in warps chosen by ``tj.autotune`` for each shape and dtype of x. ``layer_norm_fwd`` also writes each
row's mean and 1/std for the backward pass (as Triton's tutorial 05 does).

Backward (``layer_norm_backward``), in the structure of Triton's tutorial 05 without its spin lock: each of ``groups``
blocks takes every groups-th step of ``ROWS`` rows, writes their dx and adds their dw and db terms into registers of
its own, then stores them as one row of the float32 buffers ``dw_part`` and ``db_part``; ``sum_partials`` (a second,
small kernel) sums those rows into dw and db.

Rows longer than ``WHOLE_ROW`` (forward) or ``WHOLE_ROW_BWD`` (backward) elements do not fit in registers, so they go
in chunks of ``_common.CHUNK_BYTES``, re-reading the row as Triton's tutorial does: ``layer_norm_fwd_chunked`` merges
each chunk's mean and squared deviations into the row's (Chan et al.), then normalizes chunk by chunk;
``layer_norm_bwd_sums`` writes each row's two dot products, and ``layer_norm_bwd_chunked`` (a block per group and
chunk) computes dx and the chunk's dw and db terms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from _common import (
    backend_of,
    block_of,
    check,
    chunk_of,
    compile_only,
    itemsize_of,
    on_backend,
    parse_args,
    row_tiles,
    run_plan,
    should_run,
)

import tilejit as tj

#: The longest rows (elements, any dtype) the forward and backward kernels hold whole: ptxas -v for sm_90a shows no
#: spill up to here (the backward holds x, dy, w and the dw and db sums at once).
WHOLE_ROW = 16384
WHOLE_ROW_BWD = 8192
#: The CUDA backend's forward: the longest rows held whole when a whole-row tile would be costly (``forward_plan``),
#: and the chunks it takes instead.
CUDA_WHOLE_ROW = 8192
CUDA_CHUNKS = (8192, 4096)
#: Tile IR's forward (``forward_plan``; bench/RESULTS.md, session 20): 16-bit rows held whole up to this length
#: (32768: 1.01x of the CUDA backend against 0.78x in chunks), float32 rows of 8193-16384 elements in chunks of
#: ``TILEIR_CHUNK`` with tileiras asked for 2 CTAs per SM (0.73-0.76x -> 0.91-1.04x: whole, they spill), and longer
#: 16-bit rows in chunks of ``TILEIR_CHUNK_16`` (65536: 0.62x -> 0.75x).
TILEIR_WHOLE_ROW_16 = 32768
TILEIR_CHUNK = 8192
TILEIR_CHUNK_OCCUPANCY = 2
TILEIR_CHUNK_16 = 2048
#: Bytes of a block's (ROWS, BLOCK) tile of short rows on Tile IR (``_common.row_tiles``; bench/RESULTS.md,
#: session 18).
ROW_TILE_BYTES = 32768
#: Elements a backward block takes per step (``ROWS`` = this / BLOCK rows), and its blocks per SM: as many groups
#: (partial rows of dw and db) as that makes, so that the partial sums stay a few percent of the traffic.
STEP_ELEMENTS = 4096
BLOCKS_PER_SM = 2
#: The CUDA backend's backward: chunks of rows longer than ``WHOLE_ROW_BWD``, in elements of any dtype. On an H200
#: (bench/RESULTS.md, session 21) 16-bit rows in 4096-element chunks ran 9-36% faster than in 8192 at 12288-32768
#: elements and tied at 65536; for float32, 4096 beat 2048 and 8192. Tile IR keeps 16 KB chunks (``chunk_of``): its
#: 16-bit RMS norm backward ran 10-34% slower in 4096-element chunks.
CUDA_BWD_CHUNK = 4096
#: ``sum_partials``'s tile: rows of the partial buffer by columns.
SUM_TILE = (16, 128)


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


@tj.function
def _store_normalized(x, weight, bias, out, row, c, mu, r, BLOCK):
    """Chunk ``c`` of row ``row``: (x - mu) * r * weight + bias."""
    t = tj.load(x, index=(row, c), shape=(1, BLOCK)).astype(tj.float32)
    w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
    b = tj.load(bias, index=(c,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(row, c), tile=(t - mu) * r * w + b)


@tj.kernel
def layer_norm_fwd(x, weight, bias, out, mean, rstd, eps: float, ROWS: tj.Constant[int], BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    n = x.shape[1].astype(tj.float32)
    t = tj.load(x, index=(i, 0), shape=(ROWS, BLOCK)).astype(tj.float32)
    mu = tj.sum(t, axis=1, keepdims=True) / n
    d = tj.where(tj.arange(BLOCK) < x.shape[1], t - mu, 0.0)
    r = tj.rsqrt(tj.sum(d * d, axis=1, keepdims=True) / n + eps)
    w = tj.load(weight, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    b = tj.load(bias, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(i, 0), tile=d * r * w + b)
    tj.store(mean, index=(i,), tile=tj.reshape(mu, (ROWS,)))
    tj.store(rstd, index=(i,), tile=tj.reshape(r, (ROWS,)))


@tj.kernel
def layer_norm_fwd_chunked(x, weight, bias, out, mean, rstd, eps: float, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    n = x.shape[1]
    mu = tj.zeros((1,), tj.float32)  # the mean of the chunks so far
    m2 = tj.zeros((1,), tj.float32)  # their sum of squared deviations from mu
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        t = tj.load(x, index=(row, c), shape=(1, BLOCK)).astype(tj.float32)
        seen = (c * BLOCK).astype(tj.float32)
        k = tj.minimum(n - c * BLOCK, BLOCK).astype(tj.float32)
        cmu = tj.sum(t, axis=1) / k
        d = tj.where(c * BLOCK + tj.arange(BLOCK) < n, t - cmu, 0.0)
        delta = cmu - mu
        mu = mu + delta * (k / (seen + k))
        m2 = m2 + tj.sum(d * d, axis=1) + delta * delta * (seen * k / (seen + k))
    r = tj.rsqrt(m2 / n.astype(tj.float32) + eps)
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        _store_normalized(x, weight, bias, out, row, c, mu, r, BLOCK)
    tj.store(mean, index=(row,), tile=mu)
    tj.store(rstd, index=(row,), tile=r)


@tj.function
def _ln_grad_terms(x, dy, w, mean, rstd, i, c, ROWS, BLOCK):
    """Step ``i`` (rows i*ROWS...) at column chunk ``c``: x normalized, dy and w * dy, in float32, and 1/std."""
    r = tj.reshape(tj.load(rstd, index=(i,), shape=(ROWS,)), (ROWS, 1))
    mu = tj.reshape(tj.load(mean, index=(i,), shape=(ROWS,)), (ROWS, 1))
    xhat = (tj.load(x, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32) - mu) * r
    d = tj.load(dy, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32)
    return xhat, d, w * d, r


@tj.kernel
def layer_norm_bwd(x, dy, weight, mean, rstd, dx, dw_part, db_part, ROWS: tj.Constant[int],
                   BLOCK: tj.Constant[int]):
    g = tj.bid(0)
    n = x.shape[1].astype(tj.float32)
    w = tj.load(weight, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    dw = tj.zeros((ROWS, BLOCK), tj.float32)
    db = tj.zeros((ROWS, BLOCK), tj.float32)
    for i in range(g, tj.num_tiles(x, 0, (ROWS, BLOCK)), tj.num_blocks(0)):
        xhat, d, wdy, r = _ln_grad_terms(x, dy, w, mean, rstd, i, 0, ROWS, BLOCK)
        c1 = tj.sum(xhat * wdy, axis=1, keepdims=True) / n  # padding: w, dy are 0 there, so wdy is
        c2 = tj.sum(wdy, axis=1, keepdims=True) / n
        tj.store(dx, index=(i, 0), tile=(wdy - (xhat * c1 + c2)) * r)
        dw += d * xhat
        db += d
    tj.store(dw_part, index=(g, 0), tile=tj.sum(dw, axis=0, keepdims=True))
    tj.store(db_part, index=(g, 0), tile=tj.sum(db, axis=0, keepdims=True))


@tj.kernel
def layer_norm_bwd_sums(x, dy, weight, mean, rstd, c1, c2, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    a = tj.zeros((1, 1), tj.float32)
    b = tj.zeros((1, 1), tj.float32)
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
        xhat, _d, wdy, _r = _ln_grad_terms(x, dy, w, mean, rstd, row, c, 1, BLOCK)
        a += tj.sum(xhat * wdy, axis=1, keepdims=True)
        b += tj.sum(wdy, axis=1, keepdims=True)
    n = x.shape[1].astype(tj.float32)
    tj.store(c1, index=(row,), tile=tj.reshape(a / n, (1,)))
    tj.store(c2, index=(row,), tile=tj.reshape(b / n, (1,)))


@tj.kernel
def layer_norm_bwd_chunked(x, dy, weight, mean, rstd, c1, c2, dx, dw_part, db_part, BLOCK: tj.Constant[int]):
    g = tj.bid(0)
    c = tj.bid(1)
    w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
    dw = tj.zeros((1, BLOCK), tj.float32)
    db = tj.zeros((1, BLOCK), tj.float32)
    for row in range(g, x.shape[0], tj.num_blocks(0)):
        xhat, d, wdy, r = _ln_grad_terms(x, dy, w, mean, rstd, row, c, 1, BLOCK)
        a = tj.load(c1, index=(row,), shape=(1,))
        b = tj.load(c2, index=(row,), shape=(1,))
        tj.store(dx, index=(row, c), tile=(wdy - (xhat * a + b)) * r)
        dw += d * xhat
        db += d
    tj.store(dw_part, index=(g, c), tile=dw)
    tj.store(db_part, index=(g, c), tile=db)


@tj.kernel
def sum_partials(part, out, BG: tj.Constant[int], BN: tj.Constant[int]):
    j = tj.bid(0)
    acc = tj.zeros((BG, BN), tj.float32)
    for i in range(tj.num_tiles(part, 0, (BG, BN))):
        acc += tj.load(part, index=(i, j), shape=(BG, BN))
    tj.store(out, index=(j,), tile=tj.sum(acc, axis=0))


def layer_norm_forward(x: Any, weight: Any, bias: Any, out: Any, mean: Any, rstd: Any, eps: float,
                       backend: str | None = None) -> None:
    """``out`` = layer norm of each row of ``x``, with its float32 ``mean`` and ``rstd`` (1/std), any row length;
    ``backend``: build the kernels with this backend instead of the default."""
    run_plan(forward_plan(x, backend), backend, x, weight, bias, out, mean, rstd, eps)


def forward_plan(x: Any, backend: str | None = None) -> tuple[Any, int, dict[str, int]]:
    """The forward kernel, its grid and its constants (and launch options) for the rows of ``x``: whole rows as one
    tile up to ``WHOLE_ROW`` elements (``row_tiles`` of them a block), else a block per row in chunks. On the
    CUDA backend, rows of more than ``CUDA_WHOLE_ROW`` 16-bit elements, or that a power-of-two tile would pad by a
    quarter or more, go in chunks of 8192 or 4096 elements (the one that pads least) with 8 warps: 0.99-1.32x of
    Triton at 12288 and 16384 elements, against 0.56-1.01x as whole rows (bench/RESULTS.md, session 18); float32
    rows of 24577-32768 elements in two chunks of 16384."""
    m, n = x.shape
    block = block_of(n)
    if backend_of(backend) == "tileir":
        return _tileir_forward_plan(x, m, block)
    big = block > CUDA_WHOLE_ROW and (itemsize_of(x) == 2 or 4 * (block - n) >= n)
    cuda = backend_of(backend) == "cuda"
    if cuda and block <= WHOLE_ROW and big:
        chunk = min(CUDA_CHUNKS, key=lambda c: -(-n // c) * c)
        return layer_norm_fwd_chunked, m, {"BLOCK": chunk, "num_warps": 8}
    if cuda and block == 2 * WHOLE_ROW and itemsize_of(x) == 4 and 4 * (block - n) < n:
        # float32 rows of 24577-32768 elements: two 16384-element chunks with 8 warps, 1.14x of Triton at 32768
        # against 0.89x in 8192-element chunks (bench/RESULTS.md, session 19)
        return layer_norm_fwd_chunked, m, {"BLOCK": WHOLE_ROW, "num_warps": 8}
    if block > WHOLE_ROW:
        return layer_norm_fwd_chunked, m, {"BLOCK": chunk_of(x, backend)}
    return layer_norm_fwd, *row_tiles(m, block, backend, ROW_TILE_BYTES // itemsize_of(x))


def _tileir_forward_plan(x: Any, m: int, block: int) -> tuple[Any, int, dict[str, int]]:
    """``forward_plan`` on Tile IR, for the ``m`` rows of ``x`` padded to ``block`` elements."""
    itemsize = itemsize_of(x)
    if itemsize == 2 and block > TILEIR_WHOLE_ROW_16:
        return layer_norm_fwd_chunked, m, {"BLOCK": TILEIR_CHUNK_16}
    if itemsize == 4 and block == WHOLE_ROW:
        return layer_norm_fwd_chunked, m, {"BLOCK": TILEIR_CHUNK, "occupancy": TILEIR_CHUNK_OCCUPANCY}
    if itemsize != 2 and block > WHOLE_ROW:
        return layer_norm_fwd_chunked, m, {"BLOCK": chunk_of(x, "tileir")}
    return layer_norm_fwd, *row_tiles(m, block, "tileir", ROW_TILE_BYTES // itemsize)


class BackwardPlan(NamedTuple):
    """How a backward pass runs: BLOCK, ROWS per step (0: chunked rows, BLOCK-element chunks) and groups."""

    block: int
    rows: int
    groups: int


def backward_plan(x: Any, sms: int, whole: int = WHOLE_ROW_BWD, chunk: int | None = None,
                  backend: str | None = None) -> BackwardPlan:
    """The plan of a backward pass over the rows of ``x`` on ``sms`` SMs with ``backend`` (as ``layer_norm_backward``
    takes it): rows of up to ``whole`` elements in one tile, longer ones in chunks of ``chunk`` (default
    ``CUDA_BWD_CHUNK`` on the CUDA backend, 16 KB of the row on Tile IR; a block per group and chunk);
    ``BLOCKS_PER_SM`` blocks in all."""
    m, n = x.shape
    block = block_of(n)
    if block > whole:
        chunk = chunk or (CUDA_BWD_CHUNK if backend_of(backend) == "cuda" else chunk_of(x, "tileir"))
        return BackwardPlan(chunk, 0, max(1, min(m, BLOCKS_PER_SM * sms // -(-n // chunk))))
    rows = max(1, STEP_ELEMENTS // block)
    return BackwardPlan(block, rows, max(1, min(-(-m // rows), BLOCKS_PER_SM * sms)))


def backward_scratch(m: int, n: int, plan: BackwardPlan, empty: Callable[[tuple[int, ...]], Any]) -> tuple[Any, ...]:
    """The float32 buffers ``layer_norm_backward`` needs, made by ``empty(shape)``: dw_part and db_part (groups x n),
    c1 and c2 (m)."""
    return empty((plan.groups, n)), empty((plan.groups, n)), empty((m,)), empty((m,))


def sum_columns(parts: tuple[Any, ...], outs: tuple[Any, ...], backend: str | None = None) -> None:
    """Each ``out`` = the sum of the rows of its float32 ``part`` (``sum_partials``)."""
    bg, bn = SUM_TILE
    for part, out in zip(parts, outs):
        on_backend(sum_partials, backend)[-(-part.shape[1] // bn)](part, out, BG=bg, BN=bn)


def layer_norm_backward(x: Any, dy: Any, weight: Any, mean: Any, rstd: Any, dx: Any, dw: Any, db: Any,
                        scratch: tuple[Any, ...], plan: BackwardPlan, backend: str | None = None) -> None:
    """dx, dw and db of ``layer_norm_forward``'s output for its gradient ``dy``, as ``plan`` says
    (``backward_plan``); ``scratch``: ``backward_scratch``'s buffers; ``backend``: as ``layer_norm_forward``'s."""
    m, n = x.shape
    dw_part, db_part, c1, c2 = scratch
    if plan.rows:
        on_backend(layer_norm_bwd, backend)[plan.groups](x, dy, weight, mean, rstd, dx, dw_part, db_part,
                                                         ROWS=plan.rows, BLOCK=plan.block)
    else:
        on_backend(layer_norm_bwd_sums, backend)[m](x, dy, weight, mean, rstd, c1, c2, BLOCK=plan.block)
        on_backend(layer_norm_bwd_chunked, backend)[plan.groups, -(-n // plan.block)](
            x, dy, weight, mean, rstd, c1, c2, dx, dw_part, db_part, BLOCK=plan.block)
    sum_columns((dw_part, db_part), (dw, db), backend)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    """float64 layer norm and its gradients: (y, mean, rstd, dx, dw, db)."""
    x, w, b, dy = (a.astype(np.float64) for a in (x, w, b, dy))
    mu = x.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    wdy = w * dy
    dx = (wdy - xhat * (xhat * wdy).mean(axis=1, keepdims=True) - wdy.mean(axis=1, keepdims=True)) * rstd
    return xhat * w + b, mu[:, 0], rstd[:, 0], dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def torch_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray,
                    eps: float) -> tuple[np.ndarray, ...] | None:
    """(y, dx, dw, db) by torch autograd in float64 on the CPU, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    xt, wt, bt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    y = torch.nn.functional.layer_norm(xt, (x.shape[1],), wt, bt, eps)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return tuple(t.detach().numpy() for t in (y, xt.grad, wt.grad, bt.grad))


def main() -> None:
    args = parse_args(__doc__)
    m, n, eps = 520, 1000, 1e-5
    block = block_of(n)
    f32 = tj.float32
    if not should_run(args):
        fwd = (f32[:, :], f32[:], f32[:], f32[:, :], f32[:], f32[:], f32)
        grad = (f32[:, :], f32[:, :], f32[:], f32[:], f32[:])
        compile_only(args, layer_norm, fwd[:4] + fwd[6:], {"BLOCK": block})
        compile_only(args, layer_norm_fwd, fwd, {"ROWS": 1, "BLOCK": block})
        compile_only(args, layer_norm_fwd_chunked, fwd, {"BLOCK": 256})
        compile_only(args, layer_norm_bwd, (*grad, f32[:, :], f32[:, :], f32[:, :]), {"ROWS": 4, "BLOCK": block})
        compile_only(args, layer_norm_bwd_sums, (*grad, f32[:], f32[:]), {"BLOCK": 256})
        compile_only(args, layer_norm_bwd_chunked, (*grad, f32[:], f32[:], f32[:, :], f32[:, :], f32[:, :]),
                     {"BLOCK": 256})
        compile_only(args, sum_partials, (f32[:, :], f32[:]), dict(zip(("BG", "BN"), SUM_TILE)))
        return
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n), dtype=np.float32) + 3
    w, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    dy = rng.standard_normal((m, n), dtype=np.float32)
    want, want_mu, want_rstd, want_dx, want_dw, want_db = reference(x, w, b, dy, eps)
    got_torch = torch_reference(x, w, b, dy, eps)
    if got_torch is not None:  # two references that must agree
        for name, got, ref in zip(("torch y", "torch dx", "torch dw", "torch db"), got_torch,
                                  (want, want_dx, want_dw, want_db)):
            check(name, got, ref, 1e-10)
    dx, dw, db, ddy = tj.asarray(x), tj.asarray(w), tj.asarray(b), tj.asarray(dy)

    def nan(*shape: int) -> Any:
        return tj.asarray(np.full(shape, np.nan, np.float32))

    for name, kernel in (("layer_norm", layer_norm), ("layer_norm_tuned", layer_norm_tuned)):
        dout = nan(m, n)
        kernel[m](dx, dw, db, dout, eps, BLOCK=block)
        check(name, dout.numpy(), want, 1e-5)
    print(f"layer_norm_tuned chose {layer_norm_tuned.best_config}")
    mean, rstd = nan(m), nan(m)
    for name, kernel, grid, constants in (
        ("layer_norm_fwd", layer_norm_fwd, m, {"ROWS": 1, "BLOCK": block}),
        ("layer_norm_fwd, 16 rows a block", layer_norm_fwd, -(-m // 16), {"ROWS": 16, "BLOCK": block}),
        ("layer_norm_fwd_chunked", layer_norm_fwd_chunked, m, {"BLOCK": 256}),  # 4 chunks, one ragged
    ):
        dout, mean, rstd = nan(m, n), nan(m), nan(m)
        kernel[grid](dx, dw, db, dout, mean, rstd, eps, **constants)
        check(name, dout.numpy(), want, 1e-5)
        check(f"{name} mean", mean.numpy(), want_mu, 1e-6)
        check(f"{name} rstd", rstd.numpy(), want_rstd, 1e-5)
    sms = tj.get_device().multiprocessor_count
    for label, plan in (("layer_norm_backward", backward_plan(dx, sms)),
                        ("layer_norm_backward (chunks of 256)", backward_plan(dx, sms, whole=256, chunk=256))):
        ddx, ddw, ddb = nan(m, n), nan(n), nan(n)
        scratch = backward_scratch(m, n, plan, lambda shape: nan(*shape))
        layer_norm_backward(dx, ddy, dw, mean, rstd, ddx, ddw, ddb, scratch, plan)
        check(f"{label} dx", ddx.numpy(), want_dx, 1e-5)
        check(f"{label} dw", ddw.numpy(), want_dw, 1e-5)
        check(f"{label} db", ddb.numpy(), want_db, 1e-5)


if __name__ == "__main__":
    main()
