"""Edge cases of tile ops against numpy on a GPU: ties and NaN in reductions, out-of-range and negative
gather/scatter indices of every integer dtype, float atomics with negative values and NaN, every 3-D
transpose, and matrix multiplies off the tensor-core pipeline. Outputs are poisoned before each launch."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import tilejit as tj

pytestmark = pytest.mark.gpu


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def dev(a: np.ndarray) -> Any:
    return tj.asarray(np.ascontiguousarray(a))


def poisoned(shape: Any, dtype: Any) -> Any:
    return tj.asarray(np.full(shape, 77, dtype))


def assert_same(got: np.ndarray, want: Any, what: str) -> None:
    """Equal values and shapes; NaN equals NaN."""
    np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype), err_msg=what)


@tj.kernel
def reduce_rows_cols(x, mx0, am0, am1, amn1, am_all, R: tj.Constant[int], C: tj.Constant[int]):
    t = tj.load(x, index=(0, 0), shape=(R, C))
    tj.store(mx0, index=(0,), tile=tj.max(t, axis=0))
    tj.store(am0, index=(0,), tile=tj.argmax(t, axis=0))
    tj.store(am1, index=(0,), tile=tj.argmax(t, axis=1))
    tj.store(amn1, index=(0,), tile=tj.argmin(t, axis=1))
    tj.store(am_all, index=(0,), tile=tj.argmax(t))


def test_reductions_pick_the_first_tie_and_the_first_nan(rng: np.random.Generator) -> None:
    r, c = 8, 16
    x = rng.integers(-3, 4, (r, c)).astype(np.float32)  # few values: many ties
    x[2, 5] = x[6, 1] = x[7, 5] = np.nan
    outs = [poisoned(c, np.float32), poisoned(c, np.int32), poisoned(r, np.int32), poisoned(r, np.int32),
            poisoned(1, np.int32)]
    reduce_rows_cols[1](dev(x), *outs, R=r, C=c)
    mx0, am0, am1, amn1, am_all = (o.numpy() for o in outs)
    assert_same(mx0, x.max(0), "max along axis 0 (NaN propagates)")
    assert_same(am0, x.argmax(0), "argmax along axis 0")
    assert_same(am1, x.argmax(1), "argmax along axis 1")
    assert_same(amn1, x.argmin(1), "argmin along axis 1")
    assert_same(am_all, [x.argmax()], "argmax of the whole tile")


@tj.kernel
def gather_padded(x, idx, out, T: tj.Constant[int]):
    tj.store(out, index=(0,), tile=tj.gather(x, tj.load(idx, index=(0,), shape=(T,)), padding=-1))


@tj.kernel
def scatter_tile(x, idx, v, T: tj.Constant[int]):
    tj.scatter(x, tj.load(idx, index=(0,), shape=(T,)), tj.load(v, index=(0,), shape=(T,)))


@pytest.mark.parametrize("index_dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
def test_gather_and_scatter_skip_out_of_range_and_negative_indices(index_dtype: str,
                                                                   rng: np.random.Generator) -> None:
    n, t = 50, 64
    x = rng.standard_normal(n).astype(np.float32)
    lo = 0 if index_dtype.startswith("u") else -60
    idx = rng.integers(lo, min(np.iinfo(index_dtype).max, 120), t).astype(index_dtype)
    out = poisoned(t, np.float32)
    gather_padded[1](dev(x), dev(idx), out, T=t)
    wide = idx.astype(np.int64)
    inside = (wide >= 0) & (wide < n)
    assert_same(out.numpy(), np.where(inside, x[np.clip(wide, 0, n - 1)], -1), "gather (outside reads padding)")

    base = rng.integers(0, 100, n).astype(np.float32)
    values = rng.integers(1000, 2000, t).astype(np.float32)
    unique = rng.permutation(np.arange(lo, lo + 2 * t))[:t].astype(index_dtype)  # no duplicates: one answer
    target = dev(base)
    scatter_tile[1](target, dev(unique), dev(values), T=t)
    want = base.copy()
    keep = (unique.astype(np.int64) >= 0) & (unique.astype(np.int64) < n)
    want[unique[keep].astype(np.int64)] = values[keep]
    assert_same(target.numpy(), want, "scatter (outside is skipped)")


@tj.kernel
def atomic_max_min(hi, lo, idx, v, T: tj.Constant[int]):
    b = tj.bid(0)
    i = tj.load(idx, index=(b,), shape=(T,), padding=-1)  # past the end: index -1, skipped
    value = tj.load(v, index=(b,), shape=(T,))
    tj.atomic_max(hi, i, value)
    tj.atomic_min(lo, i, value)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_atomic_max_min_with_negative_values_and_nan(dtype: str, rng: np.random.Generator) -> None:
    n, bins, t = 3000, 7, 128
    v = (rng.standard_normal(n) * 100).astype(dtype)
    idx = rng.integers(0, bins, n).astype(np.int32)
    v[idx == 3] = -np.abs(v[idx == 3])  # one bin of negative values only
    v[np.flatnonzero(idx == 5)[0]] = np.nan  # one bin with a NaN: it wins, as np.maximum gives
    hi, lo = dev(np.full(bins, -np.inf, dtype)), dev(np.full(bins, np.inf, dtype))
    atomic_max_min[tj.cdiv(n, t)](hi, lo, dev(idx), dev(v), T=t)
    want_hi, want_lo = np.full(bins, -np.inf, dtype), np.full(bins, np.inf, dtype)
    with np.errstate(invalid="ignore"):  # the NaN: numpy warns, then gives NaN
        np.maximum.at(want_hi, idx, v)
        np.minimum.at(want_lo, idx, v)
    assert_same(hi.numpy(), want_hi, "atomic_max")
    assert_same(lo.numpy(), want_lo, "atomic_min")


@tj.kernel
def transpose3(x, out, A: tj.Constant[int], B: tj.Constant[int], C: tj.Constant[int], P0: tj.Constant[int],
               P1: tj.Constant[int], P2: tj.Constant[int]):
    t = tj.load(x, index=(0, 0, 0), shape=(A, B, C))
    tj.store(out, index=(0, 0, 0), tile=tj.transpose(t, (P0, P1, P2)) + 1)


@pytest.mark.parametrize("axes", list(itertools.permutations(range(3))))
def test_every_3d_transpose(axes: tuple[int, int, int], rng: np.random.Generator) -> None:
    x = rng.integers(0, 100, (2, 4, 8)).astype(np.int32)
    want = x.transpose(axes) + 1
    out = poisoned(want.shape, np.int32)
    transpose3[1](dev(x), out, A=2, B=4, C=8, P0=axes[0], P1=axes[1], P2=axes[2])
    assert_same(out.numpy(), want, f"transpose {axes}")


@tj.kernel
def matmul_bt(a, b_t, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pm, pn = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), c.dtype)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        b = tj.transpose(tj.load(b_t, index=(pn, k), shape=(BN, BK)))
        acc = tj.mma(tj.load(a, index=(pm, k), shape=(BM, BK)), b, acc)
    tj.store(c, index=(pm, pn), tile=acc)


@pytest.mark.parametrize(("dtype", "acc", "mnk", "tiles"), [
    ("int8", "int32", (37, 45, 70), (16, 16, 32)),
    ("float64", "float64", (33, 17, 29), (16, 16, 8)),
    ("float16", "float32", (19, 21, 23), (8, 8, 8)),
])
def test_mma_off_the_pipeline_with_ragged_shapes_and_a_transposed_operand(
    dtype: str, acc: str, mnk: tuple[int, int, int], tiles: tuple[int, int, int], rng: np.random.Generator
) -> None:
    (m, n, k), (bm, bn, bk) = mnk, tiles
    if dtype == "int8":
        a, b = (rng.integers(-128, 128, s).astype(np.int8) for s in ((m, k), (k, n)))
        want = a.astype(np.int64) @ b.astype(np.int64)  # fits int32 for these sizes
    else:
        a, b = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (k, n)))
        want = a.astype(np.float64) @ b.astype(np.float64)
    c = poisoned((m, n), acc)
    matmul_bt[tj.cdiv(m, bm), tj.cdiv(n, bn)](dev(a), dev(b.T), c, BM=bm, BN=bn, BK=bk)
    got = c.numpy()
    if dtype == "int8":
        assert_same(got, want, "int8 mma")
    else:
        tol = {"float64": 1e-12, "float16": 2e-3}[dtype] * np.sqrt(k)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
