"""RMS norm over the last axis (x / sqrt(mean(x**2) + eps) * weight), forward and backward, statistics in float32.

Forward: ``rms_norm``, whole rows as tiles (a block per ``ROWS`` rows: ``_common.row_tiles``), writing each
row's 1/rms (``rstd``) for the backward pass. Backward (``rms_norm_backward``): dx, and dw through per-group
partial sums, as layer_norm.py's backward does (``rms_norm_bwd``, then layer_norm.py's ``sum_partials``):
dx = rstd * (w * dy - x * rstd**2 * mean(w * dy * x)), dw = the sum over rows of dy * x * rstd.

Rows longer than layer_norm.py's ``WHOLE_ROW`` / ``WHOLE_ROW_BWD`` go in chunks (``_common.CHUNK_BYTES``),
re-reading the row: ``rms_norm_chunked`` adds up the squares chunk by chunk and then scales; ``rms_norm_bwd_sums``
writes each row's mean(w * dy * x) and ``rms_norm_bwd_chunked`` (a block per group and chunk) computes dx and the
chunk's dw terms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from layer_norm import (
    CUDA_WHOLE_ROW,
    ROW_TILE_BYTES,
    SUM_TILE,
    TILEIR_WHOLE_ROW_16,
    WHOLE_ROW,
    BackwardPlan,
    backward_plan,
    sum_columns,
    sum_partials,
)

import tilejit as tj

#: Tile IR's forward: 16-bit rows longer than it holds whole (up to 32768 elements: 1.09x of the CUDA backend against
#: 0.74x in chunks) go in chunks of this many elements with tileiras asked for this many CTAs per SM (bf16 65536:
#: 0.57x -> 0.74x; bench/RESULTS.md, session 20); float32 rows as before (16 KB chunks).
TILEIR_CHUNK = 8192
TILEIR_CHUNK_OCCUPANCY = 4
#: Tile IR's forward: 16-bit rows held whole in a tile of these sizes go one a block with tileiras asked for this many
#: CTAs per SM (an H200 against the examples' plan: 8192 +3%, 12288 +10%, 16384 +18-22%, bf16 and f16; the H100 sweep
#: of session 20 agreed; bench/RESULTS.md, session 21).
TILEIR_WHOLE_OCCUPANCY_16 = {8192: 4, 16384: 4}

@tj.kernel
def rms_norm(x, weight, out, rstd, eps: float, ROWS: tj.Constant[int], BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(ROWS, BLOCK)).astype(tj.float32)
    r = tj.rsqrt(tj.sum(t * t, axis=1, keepdims=True) / x.shape[1].astype(tj.float32) + eps)
    w = tj.load(weight, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(i, 0), tile=t * r * w)
    tj.store(rstd, index=(i,), tile=tj.reshape(r, (ROWS,)))


@tj.kernel
def rms_norm_chunked(x, weight, out, rstd, eps: float, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    squares = tj.zeros((1, BLOCK), tj.float32)  # summed across the row once, after the loop
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        t = tj.load(x, index=(row, c), shape=(1, BLOCK)).astype(tj.float32)
        squares += t * t
    r = tj.rsqrt(tj.sum(squares, axis=1) / x.shape[1].astype(tj.float32) + eps)
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        t = tj.load(x, index=(row, c), shape=(1, BLOCK)).astype(tj.float32)
        w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
        tj.store(out, index=(row, c), tile=t * r * w)
    tj.store(rstd, index=(row,), tile=r)


@tj.function
def _rms_grad_terms(x, dy, w, rstd, i, c, ROWS, BLOCK):
    """Step ``i`` (rows i*ROWS...) at column chunk ``c``: x, dy and w * dy in float32, and 1/rms."""
    r = tj.reshape(tj.load(rstd, index=(i,), shape=(ROWS,)), (ROWS, 1))
    t = tj.load(x, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32)
    d = tj.load(dy, index=(i, c), shape=(ROWS, BLOCK)).astype(tj.float32)
    return t, d, w * d, r


@tj.kernel
def rms_norm_bwd(x, dy, weight, rstd, dx, dw_part, ROWS: tj.Constant[int], BLOCK: tj.Constant[int]):
    g = tj.bid(0)
    n = x.shape[1].astype(tj.float32)
    w = tj.load(weight, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    dw = tj.zeros((ROWS, BLOCK), tj.float32)
    for i in range(g, tj.num_tiles(x, 0, (ROWS, BLOCK)), tj.num_blocks(0)):
        t, d, wdy, r = _rms_grad_terms(x, dy, w, rstd, i, 0, ROWS, BLOCK)
        c = tj.sum(wdy * t, axis=1, keepdims=True) / n
        tj.store(dx, index=(i, 0), tile=(wdy - t * (r * r * c)) * r)
        dw += d * t * r
    tj.store(dw_part, index=(g, 0), tile=tj.sum(dw, axis=0, keepdims=True))


@tj.kernel
def rms_norm_bwd_sums(x, dy, weight, rstd, c1, BLOCK: tj.Constant[int]):
    row = tj.bid(0)
    a = tj.zeros((1, 1), tj.float32)
    for c in range(tj.num_tiles(x, 1, (1, BLOCK))):
        w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
        t, _d, wdy, _r = _rms_grad_terms(x, dy, w, rstd, row, c, 1, BLOCK)
        a += tj.sum(wdy * t, axis=1, keepdims=True)
    tj.store(c1, index=(row,), tile=tj.reshape(a / x.shape[1].astype(tj.float32), (1,)))


@tj.kernel
def rms_norm_bwd_chunked(x, dy, weight, rstd, c1, dx, dw_part, BLOCK: tj.Constant[int]):
    g = tj.bid(0)
    c = tj.bid(1)
    w = tj.load(weight, index=(c,), shape=(BLOCK,)).astype(tj.float32)
    dw = tj.zeros((1, BLOCK), tj.float32)
    for row in range(g, x.shape[0], tj.num_blocks(0)):
        t, d, wdy, r = _rms_grad_terms(x, dy, w, rstd, row, c, 1, BLOCK)
        a = tj.load(c1, index=(row,), shape=(1,))
        tj.store(dx, index=(row, c), tile=(wdy - t * (r * r * a)) * r)
        dw += d * t * r
    tj.store(dw_part, index=(g, c), tile=dw)


def rms_norm_forward(x: Any, weight: Any, out: Any, rstd: Any, eps: float, backend: str | None = None) -> None:
    """``out`` = RMS norm of each row of ``x``, with its float32 ``rstd`` (1/rms), at any row length; ``backend``:
    build the kernels with this backend instead of the default."""
    run_plan(forward_plan(x, backend), backend, x, weight, out, rstd, eps)


def forward_plan(x: Any, backend: str | None = None) -> tuple[Any, int, dict[str, int]]:
    """The forward kernel, its grid and its constants (and launch options) for the rows of ``x``: whole rows as one
    tile up to ``WHOLE_ROW`` elements (``row_tiles`` of them a block), else a block per row in chunks. On the CUDA
    backend, rows over ``CUDA_WHOLE_ROW`` elements that a power-of-two tile would pad by a quarter or more go in
    chunks of ``CUDA_WHOLE_ROW`` with 8 warps: 1.09x of Triton at 12288 float32 elements against 0.89x whole
    (bench/RESULTS.md, session 19)."""
    m, n = x.shape
    block = block_of(n)
    if backend_of(backend) == "tileir":
        if itemsize_of(x) == 2:
            if block > TILEIR_WHOLE_ROW_16:
                return rms_norm_chunked, m, {"BLOCK": TILEIR_CHUNK, "occupancy": TILEIR_CHUNK_OCCUPANCY}
            if block in TILEIR_WHOLE_OCCUPANCY_16:  # one row a block, as measured
                return rms_norm, m, {"ROWS": 1, "BLOCK": block, "occupancy": TILEIR_WHOLE_OCCUPANCY_16[block]}
        elif block > WHOLE_ROW:
            return rms_norm_chunked, m, {"BLOCK": chunk_of(x, backend)}
        return rms_norm, *row_tiles(m, block, "tileir", ROW_TILE_BYTES // itemsize_of(x))
    if backend_of(backend) == "cuda" and CUDA_WHOLE_ROW < block <= WHOLE_ROW and 4 * (block - n) >= n:
        return rms_norm_chunked, m, {"BLOCK": CUDA_WHOLE_ROW, "num_warps": 8}
    if block > WHOLE_ROW:
        return rms_norm_chunked, m, {"BLOCK": chunk_of(x, backend)}
    return rms_norm, *row_tiles(m, block, backend, ROW_TILE_BYTES // itemsize_of(x))


def backward_scratch(m: int, n: int, plan: BackwardPlan, empty: Callable[[tuple[int, ...]], Any]) -> tuple[Any, ...]:
    """The float32 buffers ``rms_norm_backward`` needs, made by ``empty(shape)``: dw_part (groups x n), c1 (m)."""
    return empty((plan.groups, n)), empty((m,))


def rms_norm_backward(x: Any, dy: Any, weight: Any, rstd: Any, dx: Any, dw: Any, scratch: tuple[Any, ...],
                      plan: BackwardPlan, backend: str | None = None) -> None:
    """dx and dw of ``rms_norm_forward``'s output for its gradient ``dy``, as ``plan`` (layer_norm.py's
    ``backward_plan``) says; ``scratch``: ``backward_scratch``'s buffers; ``backend``: as ``rms_norm_forward``'s."""
    m, n = x.shape
    dw_part, c1 = scratch
    if plan.rows:
        on_backend(rms_norm_bwd, backend)[plan.groups](x, dy, weight, rstd, dx, dw_part, ROWS=plan.rows,
                                                       BLOCK=plan.block)
    else:
        on_backend(rms_norm_bwd_sums, backend)[m](x, dy, weight, rstd, c1, BLOCK=plan.block)
        on_backend(rms_norm_bwd_chunked, backend)[plan.groups, -(-n // plan.block)](
            x, dy, weight, rstd, c1, dx, dw_part, BLOCK=plan.block)
    sum_columns((dw_part,), (dw,), backend)


def reference(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    """float64 RMS norm and its gradients: (y, rstd, dx, dw)."""
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    rstd = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    wdy = w * dy
    dx = (wdy - x * rstd**2 * (wdy * x).mean(axis=1, keepdims=True)) * rstd
    return x * rstd * w, rstd[:, 0], dx, (dy * x * rstd).sum(axis=0)


def torch_reference(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, ...] | None:
    """(y, dx, dw) by torch autograd in float64 on the CPU (written out: older torch has no rms_norm), or None
    without torch."""
    try:
        import torch
    except ImportError:
        return None
    xt, wt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    y = xt * torch.rsqrt((xt * xt).mean(dim=1, keepdim=True) + eps) * wt
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return tuple(t.detach().numpy() for t in (y, xt.grad, wt.grad))


def main() -> None:
    args = parse_args(__doc__)
    m, n, eps = 520, 1000, 1e-5
    block = block_of(n)
    f32 = tj.float32
    if not should_run(args):
        fwd = (f32[:, :], f32[:], f32[:, :], f32[:], f32)
        grad = (f32[:, :], f32[:, :], f32[:], f32[:])
        compile_only(args, rms_norm, fwd, {"ROWS": 1, "BLOCK": block})
        compile_only(args, rms_norm_chunked, fwd, {"BLOCK": 256})
        compile_only(args, rms_norm_bwd, (*grad, f32[:, :], f32[:, :]), {"ROWS": 4, "BLOCK": block})
        compile_only(args, rms_norm_bwd_sums, (*grad, f32[:]), {"BLOCK": 256})
        compile_only(args, rms_norm_bwd_chunked, (*grad, f32[:], f32[:, :], f32[:, :]), {"BLOCK": 256})
        compile_only(args, sum_partials, (f32[:, :], f32[:]), dict(zip(("BG", "BN"), SUM_TILE)))
        return
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n), dtype=np.float32) + 1
    w = rng.standard_normal(n, dtype=np.float32)
    dy = rng.standard_normal((m, n), dtype=np.float32)
    want, want_rstd, want_dx, want_dw = reference(x, w, dy, eps)
    got_torch = torch_reference(x, w, dy, eps)
    if got_torch is not None:  # two references that must agree
        for name, got, ref in zip(("torch y", "torch dx", "torch dw"), got_torch, (want, want_dx, want_dw)):
            check(name, got, ref, 1e-10)
    dx, dw, ddy = tj.asarray(x), tj.asarray(w), tj.asarray(dy)

    def nan(*shape: int) -> Any:
        return tj.asarray(np.full(shape, np.nan, np.float32))

    rstd = nan(m)
    for name, kernel, grid, constants in (
        ("rms_norm", rms_norm, m, {"ROWS": 1, "BLOCK": block}),
        ("rms_norm, 16 rows a block", rms_norm, -(-m // 16), {"ROWS": 16, "BLOCK": block}),
        ("rms_norm_chunked", rms_norm_chunked, m, {"BLOCK": 256}),
    ):
        dout, rstd = nan(m, n), nan(m)
        kernel[grid](dx, dw, dout, rstd, eps, **constants)
        check(name, dout.numpy(), want, 1e-5)
        check(f"{name} rstd", rstd.numpy(), want_rstd, 1e-5)
    sms = tj.get_device().multiprocessor_count
    for label, plan in (("rms_norm_backward", backward_plan(dx, sms)),
                        ("rms_norm_backward (chunks of 256)", backward_plan(dx, sms, whole=256, chunk=256))):
        ddx, ddw = nan(m, n), nan(n)
        rms_norm_backward(dx, ddy, dw, rstd, ddx, ddw, backward_scratch(m, n, plan, lambda shape: nan(*shape)), plan)
        check(f"{label} dx", ddx.numpy(), want_dx, 1e-5)
        check(f"{label} dw", ddw.numpy(), want_dw, 1e-5)


if __name__ == "__main__":
    main()
