"""Long rows on both backends: the examples' softmax and layer norm at row lengths where the backends change how
they hold a row (the CUDA backend's register cap for 16-bit rows, Tile IR's 8 worker warps for 32K-element rows),
ragged lengths included, against float64 references; outputs poisoned first. Then (issue 19) softmax, layer norm
and RMS norm forward and backward through the examples' host functions at any row length, 256 to 65536 and the odd
65537 (rows too long for registers go in chunks; no length is refused), the softmax backward up to the odd 70001,
and the chunked kernels with small chunks.

CPU: the choices these kernels get (``__launch_bounds__``, worker warps) are checked in test_backend_codegen.py
and test_tileir_occupancy.py; that they do not spill, in test_bench_rows.py (ptxas -v).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _kernels import np_dtype, poison

import tilejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from layer_norm import layer_norm
from softmax import softmax

#: (row length, BLOCK): whole tiles and ragged rows around the lengths where the plans change
LENGTHS = [(8192, 8192), (12000, 16384), (16384, 16384), (20000, 32768), (32768, 32768)]
ROWS = 37
EPS = 1e-5
#: relative error (norm) allowed: the 16-bit outputs' rounding; float32 sums of 32K terms in another order
RTOL = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-5}


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert not np.isnan(got).any(), "unwritten (poisoned) or NaN elements"
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize(("n", "block"), LENGTHS)
def test_softmax_long_rows_gpu(n: int, block: int, dtype: str) -> None:
    rng = np.random.default_rng()
    x = (rng.standard_normal((ROWS, n)) * 4).astype(np_dtype(dtype))
    out = tj.asarray(poison((ROWS, n), dtype))
    softmax[ROWS](tj.asarray(x), out, ROWS=1, BLOCK=block)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    assert _rel_err(out.numpy().astype(np.float64), want) <= RTOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize(("n", "block"), LENGTHS)
def test_layer_norm_long_rows_gpu(n: int, block: int, dtype: str) -> None:
    rng = np.random.default_rng()
    dt = np_dtype(dtype)
    x = (rng.standard_normal((ROWS, n)) + 3).astype(dt)
    w, b = rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt)
    out = tj.asarray(poison((ROWS, n), dtype))
    layer_norm[ROWS](tj.asarray(x), tj.asarray(w), tj.asarray(b), out, EPS, BLOCK=block)
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=1, keepdims=True)
    want = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + EPS) * w.astype(np.float64) + b.astype(np.float64)
    assert _rel_err(out.numpy().astype(np.float64), want) <= RTOL[dtype]


# ------------------------------------------------------------------------------------------------ any row length
# Issue 19: the examples' host functions at every row length: the whole row one tile while it fits in registers
# (softmax up to 32768 elements, the forward norms up to 16384, the backward passes up to 8192), chunks beyond;
# 65537 is the odd length past 65536, as ragged as a chunked row gets (one element in its last chunk).

ANY_LENGTHS = [256, 3000, 8192, 12288, 32768, 50000, 65536, 65537]
DTYPES = ["bfloat16", "float16", "float32"]


def _rows(n: int) -> int:
    """Few rows: 37 short ones, down to 16 of 65537 elements."""
    return max(16, min(37, (1 << 20) // n))


def _inputs(n: int, dtype: str, shift: float) -> tuple[np.ndarray, ...]:
    """x (rows x n, mean ``shift``), weight, bias and dy (rows x n) of ``dtype``."""
    rng = np.random.default_rng()
    dt = np_dtype(dtype)
    m = _rows(n)
    return ((rng.standard_normal((m, n)) + shift).astype(dt), rng.standard_normal(n).astype(dt),
            rng.standard_normal(n).astype(dt), rng.standard_normal((m, n)).astype(dt))


def _close(name: str, got: tj.DeviceArray, want: np.ndarray, dtype: str) -> None:
    err = _rel_err(got.numpy().astype(np.float64), want)
    assert err <= RTOL[dtype], f"{name}: relative error {err:.2e} > {RTOL[dtype]}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ANY_LENGTHS)
def test_softmax_any_row_length_gpu(n: int, dtype: str) -> None:
    import softmax as sm

    x = _inputs(n, dtype, 0.0)[0] * 4
    out = tj.asarray(poison(x.shape, dtype))
    sm.softmax_rows(tj.asarray(x), out)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    _close("softmax", out, e / e.sum(axis=1, keepdims=True), dtype)


#: The softmax backward's lengths: whole rows (a ragged 1000 and 12288 in power-of-two tiles, 16384 the longest held
#: whole), chunked ones from 16385 (ragged), 65536, and the odd 70001 past it.
BACKWARD_LENGTHS = [256, 1000, 4096, 12288, 16384, 16385, 65536, 70001]


def _softmax_rows(x: np.ndarray, dtype: str) -> np.ndarray:
    """The softmax of the rows of ``x``, rounded to ``dtype`` (what the backward pass gets from the forward)."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np_dtype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", BACKWARD_LENGTHS)
def test_softmax_backward_any_row_length_gpu(n: int, dtype: str) -> None:
    """softmax_backward (dx = y * (dy - sum(dy * y))) on softmax rows y of ``dtype``, against float64 from the same
    y and dy (the reference matches finite differences and torch autograd: test_examples.py)."""
    import softmax as sm

    x, _, _, dy = _inputs(n, dtype, 0.0)
    y = _softmax_rows(x * 4, dtype)
    dx = tj.asarray(poison(y.shape, dtype))
    sm.softmax_backward(tj.asarray(y), tj.asarray(dy), dx)
    _close("dx", dx, sm.reference_backward(y, dy), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ANY_LENGTHS)
def test_layer_norm_forward_backward_any_row_length_gpu(n: int, dtype: str) -> None:
    """layer_norm_forward (y, mean, rstd), then layer_norm_backward (dx, dw, db) on its statistics, against float64
    (the reference's gradients match finite differences and torch autograd: test_examples.py)."""
    import layer_norm as ln

    x, w, b, dy = _inputs(n, dtype, 3.0)
    m = x.shape[0]
    want_y, want_mu, want_rstd, want_dx, want_dw, want_db = ln.reference(x, w, b, dy, EPS)
    dx_, dw_, db_, ddy = (tj.asarray(a) for a in (x, w, b, dy))
    out, mean, rstd = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((m,), "float32")), \
        tj.asarray(poison((m,), "float32"))
    ln.layer_norm_forward(dx_, dw_, db_, out, mean, rstd, EPS)
    _close("y", out, want_y, dtype)
    _close("mean", mean, want_mu, "float32")
    _close("rstd", rstd, want_rstd, "float32")
    plan = ln.backward_plan(dx_, tj.get_device().multiprocessor_count)
    assert (plan.rows == 0) == (n > ln.WHOLE_ROW_BWD)
    gx, gw, gb = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((n,), dtype)), tj.asarray(poison((n,), dtype))
    scratch = ln.backward_scratch(m, n, plan, lambda shape: tj.asarray(poison(shape, "float32")))
    ln.layer_norm_backward(dx_, ddy, dw_, mean, rstd, gx, gw, gb, scratch, plan)
    _close("dx", gx, want_dx, dtype)
    _close("dw", gw, want_dw, dtype)
    _close("db", gb, want_db, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ANY_LENGTHS)
def test_rms_norm_forward_backward_any_row_length_gpu(n: int, dtype: str) -> None:
    """rms_norm_forward (y, rstd), then rms_norm_backward (dx, dw), against float64."""
    import layer_norm as ln
    import rms_norm as rn

    x, w, _, dy = _inputs(n, dtype, 1.0)
    m = x.shape[0]
    want_y, want_rstd, want_dx, want_dw = rn.reference(x, w, dy, EPS)
    dx_, dw_, ddy = (tj.asarray(a) for a in (x, w, dy))
    out, rstd = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((m,), "float32"))
    rn.rms_norm_forward(dx_, dw_, out, rstd, EPS)
    _close("y", out, want_y, dtype)
    _close("rstd", rstd, want_rstd, "float32")
    plan = ln.backward_plan(dx_, tj.get_device().multiprocessor_count)
    gx, gw = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((n,), dtype))
    rn.rms_norm_backward(dx_, ddy, dw_, rstd, gx, gw,
                         rn.backward_scratch(m, n, plan, lambda shape: tj.asarray(poison(shape, "float32"))), plan)
    _close("dx", gx, want_dx, dtype)
    _close("dw", gw, want_dw, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_chunked_kernels_with_small_chunks_gpu(dtype: str) -> None:
    """The chunked paths with 256-element chunks on a 1000-element row (4 chunks, the last one ragged), every kernel
    against float64: the same code the long rows take, at a length whose whole-row kernels also run."""
    import layer_norm as ln
    import rms_norm as rn
    import softmax as sm

    x, w, b, dy = _inputs(1000, dtype, 3.0)
    m, n = x.shape
    dx_, dw_, db_, ddy = (tj.asarray(a) for a in (x, w, b, dy))
    out = tj.asarray(poison((m, n), dtype))
    sm.softmax_chunked[m](dx_, out, BLOCK=256)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    _close("softmax", out, e / e.sum(axis=1, keepdims=True), dtype)
    y = _softmax_rows(x, dtype)
    y_, want_dx = tj.asarray(y), sm.reference_backward(y, dy)
    for name, kernel, grid, constants in (
        ("softmax_bwd_chunked", sm.softmax_bwd_chunked, m, {"BLOCK": 256}),
        ("softmax_bwd, 8 rows a block", sm.softmax_bwd, -(-m // 8), {"ROWS": 8, "BLOCK": 1024}),  # the last ragged
    ):
        gx = tj.asarray(poison((m, n), dtype))
        kernel[grid](y_, ddy, gx, **constants)
        _close(name, gx, want_dx, dtype)
    want_y, _, want_rstd, want_dx, want_dw, want_db = ln.reference(x, w, b, dy, EPS)
    out, mean, rstd = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((m,), "float32")), \
        tj.asarray(poison((m,), "float32"))
    ln.layer_norm_fwd_chunked[m](dx_, dw_, db_, out, mean, rstd, EPS, BLOCK=256)
    _close("layer norm y", out, want_y, dtype)
    _close("layer norm rstd", rstd, want_rstd, "float32")
    plan = ln.backward_plan(dx_, tj.get_device().multiprocessor_count, whole=256, chunk=256)
    assert plan.rows == 0 and plan.block == 256
    gx, gw, gb = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((n,), dtype)), tj.asarray(poison((n,), dtype))
    ln.layer_norm_backward(dx_, ddy, dw_, mean, rstd, gx, gw, gb,
                           ln.backward_scratch(m, n, plan, lambda shape: tj.asarray(poison(shape, "float32"))), plan)
    for name, got, want in (("dx", gx, want_dx), ("dw", gw, want_dw), ("db", gb, want_db)):
        _close(f"layer norm {name}", got, want, dtype)
    want_y, want_rstd, want_dx, want_dw = rn.reference(x, w, dy, EPS)
    out, rstd = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((m,), "float32"))
    rn.rms_norm_chunked[m](dx_, dw_, out, rstd, EPS, BLOCK=256)
    _close("rms norm y", out, want_y, dtype)
    gx, gw = tj.asarray(poison((m, n), dtype)), tj.asarray(poison((n,), dtype))
    rn.rms_norm_backward(dx_, ddy, dw_, rstd, gx, gw,
                         rn.backward_scratch(m, n, plan, lambda shape: tj.asarray(poison(shape, "float32"))), plan)
    _close("rms norm dx", gx, want_dx, dtype)
    _close("rms norm dw", gw, want_dw, dtype)
