"""Long rows on both backends: the examples' softmax and layer norm at row lengths where the backends change how
they hold a row (the CUDA backend's register cap for 16-bit rows, Tile IR's 8 worker warps for 32K-element rows),
ragged lengths included, against float64 references; outputs poisoned first.

CPU: the choices these kernels get (``__launch_bounds__``, worker warps) are checked in test_backend_codegen.py
and test_tileir_occupancy.py.
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
    softmax[ROWS](tj.asarray(x), out, BLOCK=block)
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
