"""Every tile op on the GPU against numpy: fresh random inputs, sizes that are not multiples of the
tile, every dtype, outputs poisoned before each launch, tolerances by dtype."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _kernels import ALL, FLOATS, INTS, RTOL, binary_op, np_dtype, poison, reduce_op, unary_op

import tilejit as tj

pytestmark = pytest.mark.gpu


def rand(shape: tuple[int, ...], dtype: str, rng: np.random.Generator, *, positive: bool = False,
         nonzero: bool = False) -> np.ndarray:
    """Random values that fit the dtype and keep arithmetic in range."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in INTS:
        info = np.iinfo(dtype)
        lo = 1 if (positive or nonzero) and info.min == 0 else (1 if positive else max(info.min, -100))
        hi = min(info.max, 100)
        a = rng.integers(lo, hi, shape, dtype=np.int64)
        if nonzero:
            a[a == 0] = 1
        return a.astype(dtype)
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.1
    return a.astype(np_dtype(dtype))


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    if dtype in FLOATS:
        g, w = got.astype(np.float64), want.astype(np.float64)
        assert not np.isnan(g).any(), "unwritten (NaN-poisoned) or NaN elements in the output"
        err = np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30)
        assert err <= RTOL[dtype], f"relative error {err:.3e} > {RTOL[dtype]}"
    else:
        np.testing.assert_array_equal(got, want)


def dev(a: np.ndarray) -> Any:
    return tj.asarray(a)


# --------------------------------------------------------------------------- elementwise


@tj.kernel
def binary(x, y, out, OP: tj.Constant[str], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,), padding=1)
    r = binary_op(OP, a, b)
    tj.store(out, index=(i,), tile=r)


NP_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.mod, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "eq": np.equal,
    "ge": np.greater_equal,
}


def _binary_cases() -> list[tuple[str, str]]:
    cases = []
    for dt in ALL:
        for op in NP_BINARY:
            if dt == "bool" and op not in ("and", "or", "xor", "eq"):
                continue
            if dt in FLOATS and op in ("and", "or", "xor", "floordiv", "mod"):
                continue
            if dt in INTS and op == "truediv":
                continue
            cases.append((dt, op))
    return cases


@pytest.mark.parametrize(("dtype", "op"), _binary_cases())
def test_binary(dtype: str, op: str, rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x = rand((n,), dtype, rng)
    y = rand((n,), dtype, rng, nonzero=op in ("floordiv", "mod", "truediv"))
    if dtype in INTS and op in ("sub",) and dtype.startswith("u"):
        x, y = np.maximum(x, y), np.minimum(x, y)
    if dtype in INTS and op == "mul" and np.iinfo(dtype).bits == 8:
        x, y = x % 11, y % 11
    want = NP_BINARY[op](x.astype(np.float32) if dtype == "bfloat16" else x,
                         y.astype(np.float32) if dtype == "bfloat16" else y)
    out_dtype = "bool" if op in ("lt", "eq", "ge") else dtype
    out = dev(poison((n,), out_dtype))
    binary[tj.cdiv(n, tile)](dev(x), dev(y), out, OP=op, TILE=tile)
    got = out.numpy()
    if out_dtype == "bool":
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, np.asarray(want).astype(np_dtype(dtype)) if dtype != "bfloat16" else want, dtype)


@tj.kernel
def unary(x, out, FN: tj.Constant[str], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,), padding=1)
    r = unary_op(FN, a)
    tj.store(out, index=(i,), tile=r)


def _np_unary(fn: str, x: np.ndarray) -> np.ndarray:
    if fn == "rsqrt":
        return 1 / np.sqrt(x)
    if fn == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if fn == "erf":
        return np.vectorize(math.erf)(x)
    if fn == "neg":
        return -x
    if fn == "pow":
        return x**2.0
    return getattr(np, fn)(x)


UNARY_FNS = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "abs", "floor", "ceil",
             "erf", "sigmoid", "neg", "pow"]


@pytest.mark.parametrize("fn", UNARY_FNS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_math(dtype: str, fn: str, rng: np.random.Generator) -> None:
    n, tile = 777, 128
    x = rand((n,), dtype, rng, positive=fn in ("log", "log2", "sqrt", "rsqrt"))
    out = dev(poison((n,), dtype))
    unary[tj.cdiv(n, tile)](dev(x), out, FN=fn, TILE=tile)
    assert_close(out.numpy(), _np_unary(fn, x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_unary_int(dtype: str, rng: np.random.Generator) -> None:
    n, tile = 500, 128
    x = rand((n,), dtype, rng)
    for fn, want in (("abs", np.abs(x)), ("neg", -x)):
        out = dev(poison((n,), dtype))
        unary[tj.cdiv(n, tile)](dev(x), out, FN=fn, TILE=tile)
        np.testing.assert_array_equal(out.numpy(), want)


@tj.kernel
def cast(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)).astype(out.dtype))


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ["bool", "int8", "int32", "uint64", "float16", "bfloat16", "float32", "float64"])
def test_astype(src: str, dst: str, rng: np.random.Generator) -> None:
    n, tile = 300, 64
    x = rand((n,), src, rng)
    if src in FLOATS and dst in INTS:
        x = (np.abs(x.astype(np.float64)) * 10).astype(np_dtype(src))
    out = dev(poison((n,), dst))
    cast[tj.cdiv(n, tile)](dev(x), out, TILE=tile)
    want = x.astype(np.float32).astype(np_dtype(dst)) if src == "bfloat16" else x.astype(np_dtype(dst))
    if dst in FLOATS:
        assert_close(out.numpy(), want, dst)
    else:
        np.testing.assert_array_equal(out.numpy(), want)


# --------------------------------------------------------------------------- creation and shape ops


@tj.kernel
def creation(out, WHAT: tj.Constant[str], N: tj.Constant[int]):
    if WHAT == "zeros":
        t = tj.zeros((N,), out.dtype)
    elif WHAT == "ones":
        t = tj.ones((N,), out.dtype)
    elif WHAT == "full":
        t = tj.full((N,), 7, out.dtype)
    else:
        t = tj.arange(N).astype(out.dtype)
    tj.store(out, index=(tj.bid(0),), tile=t)


@pytest.mark.parametrize("what", ["zeros", "ones", "full", "arange"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "float16", "float32", "float64"])
def test_creation(what: str, dtype: str) -> None:
    n = 100
    out = dev(poison((n,), dtype))
    creation[1](out, WHAT=what, N=128)
    want = {"zeros": np.zeros(n), "ones": np.ones(n), "full": np.full(n, 7), "arange": np.arange(n)}[what]
    np.testing.assert_array_equal(out.numpy().astype(np.float64), want)


@tj.kernel
def shapes(x, out, OP: tj.Constant[str], BM: tj.Constant[int], BN: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(BM, BN))
    if OP == "transpose":
        tj.store(out, index=(j, i), tile=tj.transpose(t))
    elif OP == "T":
        tj.store(out, index=(j, i), tile=t.T)
    elif OP == "reshape":
        tj.store(out, index=(i, j), tile=tj.reshape(tj.reshape(t, (BM * BN,)), (BM, BN)))
    elif OP == "broadcast":
        row = tj.load(x, index=(0, j), shape=(1, BN))
        tj.store(out, index=(i, j), tile=t + tj.broadcast_to(row, (BM, BN)))
    else:
        col = tj.sum(t, axis=1)
        tj.store(out, index=(i, j), tile=t - tj.expand_dims(col, 1))


@pytest.mark.parametrize("op", ["transpose", "T", "reshape", "broadcast", "expand_dims"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_shape_ops(op: str, dtype: str, rng: np.random.Generator) -> None:
    m, n, bm, bn = 100, 70, 32, 16
    x = rand((m, n), dtype, rng)
    out_shape = (n, m) if op in ("transpose", "T") else (m, n)
    out = dev(poison(out_shape, dtype))
    shapes[(tj.cdiv(m, bm), tj.cdiv(n, bn))](dev(x), out, OP=op, BM=bm, BN=bn)
    x64 = x.astype(np.float64)
    if op in ("transpose", "T"):
        want = x64.T
    elif op == "reshape":
        want = x64
    elif op == "broadcast":
        want = x64 + x64[0:1, :]
    else:
        # each tile subtracts its own partial row sum over its BN columns
        want = np.empty_like(x64)
        for j0 in range(0, n, bn):
            blk = x64[:, j0:j0 + bn]
            want[:, j0:j0 + bn] = blk - blk.sum(axis=1, keepdims=True)
    assert_close(out.numpy(), want.astype(np_dtype(dtype)), dtype) if dtype in FLOATS else \
        np.testing.assert_array_equal(out.numpy(), want.astype(dtype))


@tj.kernel
def where_kernel(c, x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    cond = tj.load(c, index=(i,), shape=(TILE,))
    a = tj.load(x, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=tj.where(cond, a, -a))


def test_where(rng: np.random.Generator) -> None:
    n = 1000
    c, x = rand((n,), "bool", rng), rand((n,), "float32", rng)
    out = dev(poison((n,), "float32"))
    where_kernel[tj.cdiv(n, 256)](dev(c), dev(x), out, TILE=256)
    np.testing.assert_array_equal(out.numpy(), np.where(c, x, -x))


# --------------------------------------------------------------------------- reductions and scans


@tj.kernel
def reduce_rows(x, out, FN: tj.Constant[str], BM: tj.Constant[int], BN: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN), padding=0)
    r = reduce_op(FN, t, 1)
    tj.store(out, index=(i,), tile=r.astype(out.dtype))


@pytest.mark.parametrize("fn", ["sum", "max", "min", "prod", "argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_reduce_axis(fn: str, dtype: str, rng: np.random.Generator) -> None:
    m, n, bm, bn = 37, 64, 8, 64  # rows not a multiple of the tile; full columns so padding is not reduced
    x = rand((m, n), dtype, rng)
    if fn == "prod":
        x = (np.sign(x.astype(np.float64)) + (x.astype(np.float64) == 0)).astype(np_dtype(dtype))
    out_dtype = "int32" if fn.startswith("arg") else ("float32" if dtype in ("float16", "bfloat16") else dtype)
    out = dev(poison((m,), out_dtype))
    reduce_rows[tj.cdiv(m, bm)](dev(x), out, FN=fn, BM=bm, BN=bn)
    x64 = x.astype(np.float64)
    want = getattr(np, fn)(x64, axis=1)
    if fn.startswith("arg"):
        np.testing.assert_array_equal(out.numpy(), want)
    else:
        assert_close(out.numpy(), want.astype(np_dtype(out_dtype)), dtype) if out_dtype in FLOATS else \
            np.testing.assert_array_equal(out.numpy(), want.astype(out_dtype))


@tj.kernel
def reduce_all(x, out, TILE: tj.Constant[int]):
    t = tj.load(x, index=(tj.bid(0),), shape=(TILE,))
    s = tj.sum(t, keepdims=True)
    tj.store(out, index=(tj.bid(0),), tile=s)


def test_reduce_all_keepdims(rng: np.random.Generator) -> None:
    n, tile = 4000, 1024
    x = rand((n,), "float32", rng)
    out = dev(poison((tj.cdiv(n, tile),), "float32"))
    reduce_all[tj.cdiv(n, tile)](dev(x), out, TILE=tile)
    want = np.array([x[i:i + tile].astype(np.float64).sum() for i in range(0, n, tile)])
    assert_close(out.numpy(), want, "float32")


@tj.kernel
def cumsum_kernel(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    tj.store(out, index=(i, 0), tile=tj.cumsum(t, axis=1))


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_cumsum(dtype: str, rng: np.random.Generator) -> None:
    m, n = 21, 100
    x = rand((m, n), dtype, rng)
    out = dev(poison((m, n), dtype))
    cumsum_kernel[tj.cdiv(m, 4)](dev(x), out, BM=4, BN=128)
    want = np.cumsum(x, axis=1)
    assert_close(out.numpy(), want, dtype) if dtype in FLOATS else np.testing.assert_array_equal(out.numpy(), want)


# --------------------------------------------------------------------------- memory: strides, gather, atomics


@tj.kernel
def copy2d(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    tj.store(out, index=(i, j), tile=tj.load(x, index=(i, j), shape=(BM, BN)))


def test_non_contiguous_torch(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    base = torch.randn(300, 200, device="cuda")
    for view in (base.t(), base[::3, 1::2], base[:, 5:]):
        out = torch.full(view.shape, float("nan"), device="cuda")
        grid = (tj.cdiv(view.shape[0], 32), tj.cdiv(view.shape[1], 32))
        copy2d[grid](view, out, BM=32, BN=32)
        torch.cuda.synchronize()
        assert torch.equal(out, view)


@tj.kernel
def gather_scatter(x, idx, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    ix = tj.load(idx, index=(i,), shape=(TILE,), padding=-1)
    vals = tj.gather(x, ix, padding=-1)
    tj.scatter(out, ix, vals * 2)


def test_gather_scatter(rng: np.random.Generator) -> None:
    n = 1000
    x = rand((n,), "float32", rng)
    idx = rng.permutation(n).astype(np.int32)
    out = dev(poison((n,), "float32"))
    gather_scatter[tj.cdiv(n, 256)](dev(x), dev(idx), out, TILE=256)
    want = np.empty(n, np.float32)
    want[idx] = x[idx] * 2
    np.testing.assert_array_equal(out.numpy(), want)


@tj.kernel
def histogram(x, bins, TILE: tj.Constant[int]):
    i = tj.bid(0)
    v = tj.load(x, index=(i,), shape=(TILE,), padding=-1)
    tj.atomic_add(bins, v, tj.ones((TILE,), bins.dtype))


@pytest.mark.parametrize("dtype", ["int32", "uint64", "float32", "float64"])
def test_atomic_add_histogram(dtype: str, rng: np.random.Generator) -> None:
    n, nbins = 5000, 17
    x = rng.integers(0, nbins, n).astype(np.int32)
    bins = dev(np.zeros(nbins, dtype=dtype))
    histogram[tj.cdiv(n, 512)](dev(x), bins, TILE=512)
    np.testing.assert_array_equal(bins.numpy(), np.bincount(x, minlength=nbins).astype(dtype))


@tj.kernel
def atomic_minmax(x, lo, hi, TILE: tj.Constant[int]):
    v = tj.load(x, index=(tj.bid(0),), shape=(TILE,), padding=0)
    zero = tj.zeros((TILE,), tj.int32)
    tj.atomic_max(hi, zero, v)
    tj.atomic_min(lo, zero, v)


def test_atomic_min_max(rng: np.random.Generator) -> None:
    n = 3000
    x = rng.integers(-10**6, 10**6, n).astype(np.int32)
    lo, hi = dev(np.array([2**31 - 1], np.int32)), dev(np.array([-(2**31)], np.int32))
    atomic_minmax[tj.cdiv(n, 256)](dev(x), lo, hi, TILE=256)
    assert lo.numpy()[0] == min(x.min(), 0) and hi.numpy()[0] == max(x.max(), 0)


@tj.kernel
def cas_once(flags, out):
    i = tj.bid(0)
    zero = tj.zeros((1,), tj.int32)
    old = tj.atomic_cas(flags, zero, zero, zero + i + 1)
    tj.store(out, index=(i,), tile=old)


def test_atomic_cas_single_winner() -> None:
    nblocks = 64
    flags, out = dev(np.zeros(1, np.int32)), dev(np.full(nblocks, -7, np.int32))
    cas_once[nblocks](flags, out)
    old = out.numpy()
    winner = flags.numpy()[0]
    assert 1 <= winner <= nblocks
    assert (old == 0).sum() == 1 and old[winner - 1] == 0
    assert (old[old != 0] == winner).all()


# --------------------------------------------------------------------------- matrix multiply


@tj.kernel
def mma_kernel(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pm, pn = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), c.dtype)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        acc = tj.mma(tj.load(a, index=(pm, k), shape=(BM, BK)), tj.load(b, index=(k, pn), shape=(BK, BN)), acc)
    tj.store(c, index=(pm, pn), tile=acc)


@pytest.mark.parametrize(("dtype", "tol"), [("float16", 1e-3), ("bfloat16", 1e-2), ("float32", 1e-5),
                                             ("float64", 1e-12)])
def test_mma(dtype: str, tol: float, rng: np.random.Generator) -> None:
    m, n, k = 130, 90, 75
    a, b = rand((m, k), dtype, rng), rand((k, n), dtype, rng)
    acc_dtype = "float64" if dtype == "float64" else "float32"
    c = dev(poison((m, n), acc_dtype))
    mma_kernel[(tj.cdiv(m, 64), tj.cdiv(n, 64))](dev(a), dev(b), c, BM=64, BN=64, BK=32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = c.numpy().astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err <= tol, f"relative error {err:.2e}"


@pytest.mark.parametrize("arch_specific", ["1", "0"])
@pytest.mark.parametrize(
    ("dtype", "tiles"),
    [("bfloat16", (128, 256, 64, None)), ("float16", (128, 128, 64, None)), ("bfloat16", (64, 128, 32, 256)),
     ("float16", (64, 64, 16, None)), ("bfloat16", (256, 128, 64, None))],
)
@pytest.mark.cuda_only(reason="the CUDA backend's cp.async/wgmma pipeline under TILEJIT_ARCH_SPECIFIC, and num_threads")
def test_mma_pipelined(
    dtype: str, tiles: tuple[int, int, int, int | None], arch_specific: str, rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Contiguous 16-byte-aligned operands: the cp.async K pipeline (wgmma on sm_90a, else mma.sync),
    with M, N and K all off the tile grid."""
    monkeypatch.setenv("TILEJIT_ARCH_SPECIFIC", arch_specific)
    bm, bn, bk, threads = tiles
    m, n, k = 2 * bm + 40, 3 * bn - 24, 5 * bk + 8
    a, b = rand((m, k), dtype, rng), rand((k, n), dtype, rng)
    c = dev(poison((m, n), "float32"))
    kernel = tj.kernel(mma_kernel.func, num_threads=threads)  # fresh: the setting is read when it builds
    kernel[(tj.cdiv(m, bm), tj.cdiv(n, bn))](dev(a), dev(b), c, BM=bm, BN=bn, BK=bk)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = c.numpy().astype(np.float64)
    assert np.isfinite(got).all()
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= (1e-3 if dtype == "float16" else 1e-2), f"max error {err:.2e} of max |value|"


@tj.kernel
def matmul_op(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    ta = tj.load(a, index=(tj.bid(0), 0), shape=(BM, BK))
    tb = tj.load(b, index=(0, tj.bid(1)), shape=(BK, BN))
    tj.store(c, index=(tj.bid(0), tj.bid(1)), tile=ta @ tb)


def test_matmul_operator(rng: np.random.Generator) -> None:
    a, b = rand((50, 30), "float16", rng), rand((30, 40), "float16", rng)
    c = dev(poison((50, 40), "float32"))
    matmul_op[(1, 1)](dev(a), dev(b), c, BM=64, BN=64, BK=32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(c.numpy() - want) / np.linalg.norm(want) < 1e-3


# --------------------------------------------------------------------------- control flow and scalars


@tj.function
def clamp(t, lo, hi):
    return tj.minimum(tj.maximum(t, lo), hi)


@tj.kernel
def control(x, out, limit: int, scale: float, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    acc = tj.zeros((TILE,), tj.float32)
    k = 0
    while k < limit:
        k += 1
        if k == 2:
            continue
        acc = acc + t
    for j in range(100):
        if j >= limit:
            break
        acc = acc + 1.0
    if i % 2 == 0:
        acc = acc * scale
    else:
        acc = -acc
    for c in tj.static_range(3):
        acc = acc + c
    tj.store(out, index=(i,), tile=clamp(acc, -50.0, 50.0))


def test_control_flow(rng: np.random.Generator) -> None:
    n, tile, limit, scale = 1000, 128, 5, 0.5
    x = rand((n,), "float32", rng)
    out = dev(poison((n,), "float32"))
    control[tj.cdiv(n, tile)](dev(x), out, limit, scale, TILE=tile)
    acc = x.astype(np.float64) * (limit - 1) + limit
    block = np.arange(n) // tile
    acc = np.where(block % 2 == 0, acc * np.float32(scale), -acc) + 3
    assert_close(out.numpy(), np.clip(acc, -50, 50), "float32")


@tj.kernel
def scalar_params(x, out, a: float, b: int, flag: bool, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    r = t * a + b
    if flag:
        r = r + 1.0
    tj.store(out, index=(i,), tile=r)


def test_scalar_params_float_is_float32(rng: np.random.Generator) -> None:
    n = 300
    x = rand((n,), "float32", rng)
    out = dev(poison((n,), "float32"))
    scalar_params[tj.cdiv(n, 128)](dev(x), out, 0.1, 3, True, TILE=128)
    want = x * np.float32(0.1) + np.float32(3) + np.float32(1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_launch_errors() -> None:
    x = dev(np.zeros(10, np.float32))
    with pytest.raises(tj.LaunchError, match="x"):
        scalar_params[1](np.zeros(10, np.float32), x, 1.0, 1, True, TILE=128)
    with pytest.raises(tj.LaunchError):
        scalar_params[1](x, x, 1.0, TILE=128)
    with pytest.raises(tj.LaunchError, match="grid"):
        scalar_params[0](x, x, 1.0, 1, True, TILE=128)


# --------------------------------------------------------------------------- numpy's edge rules (audit)


def _edge_ints(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, 2, info.max - 1, info.max], dtype=object)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    a[: len(edges)] = edges.astype(dtype)
    return a


@tj.kernel
def int_edges(x, y, out, OP: tj.Constant[str], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    if OP == "neg":
        r = -a
    elif OP == "abs":
        r = tj.abs(a)
    elif OP == "inc_gt":
        r = tj.where((a + 1) > a, 1, 0)
    elif OP == "floor_ceil":
        r = tj.floor(a) + tj.ceil(a) - a
    else:
        r = binary_op(OP, a, b)
    tj.store(out, index=(i,), tile=r)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "neg", "abs", "floordiv", "mod", "inc_gt", "floor_ceil"])
@pytest.mark.parametrize("dtype", INTS)
def test_integer_wraparound_and_division_edges(dtype: str, op: str, rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x = _edge_ints(dtype, n, rng)
    y = np.roll(_edge_ints(dtype, n, rng), 3)
    if op in ("floordiv", "mod"):
        minus_one = -1 if np.issubdtype(np.dtype(dtype), np.signedinteger) else np.iinfo(dtype).max
        y[:16] = np.array([minus_one, 0] * 8, dtype=object).astype(dtype)
    with np.errstate(all="ignore"):
        want = {
            "add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "neg": lambda: -x,
            "abs": lambda: np.abs(x), "floordiv": lambda: np.floor_divide(x, y), "mod": lambda: np.mod(x, y),
            "inc_gt": lambda: ((x + np.ones_like(x)) > x).astype(dtype),
            "floor_ceil": lambda: x + x - x,
        }[op]()
    out = dev(poison((n,), dtype))
    int_edges[tj.cdiv(n, tile)](dev(x), dev(y), out, OP=op, TILE=tile)
    np.testing.assert_array_equal(out.numpy(), np.asarray(want).astype(dtype))


@tj.kernel
def bool_arith(x, y, out_or, out_and, out_div, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(out_or, index=(i,), tile=a + b)
    tj.store(out_and, index=(i,), tile=a * b)
    tj.store(out_div, index=(i,), tile=a // b)


def test_bool_arithmetic_like_numpy(rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x, y = rng.integers(0, 2, n).astype(bool), rng.integers(0, 2, n).astype(bool)
    x[:4], y[:4] = [True, True, False, False], [True, False, True, False]
    outs = [dev(poison((n,), "int32")) for _ in range(3)]
    bool_arith[tj.cdiv(n, tile)](dev(x), dev(y), *outs, TILE=tile)
    with np.errstate(all="ignore"):
        wants = [x + y, x * y, x // y]
    for got, want in zip(outs, wants):
        np.testing.assert_array_equal(got.numpy(), want.astype(np.int32))  # stored as numpy assigns


@tj.kernel
def cmp_i64_u64(x, y, lt, eq, ge, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(lt, index=(i,), tile=a < b)
    tj.store(eq, index=(i,), tile=b == a)
    tj.store(ge, index=(i,), tile=b >= a)


def test_int64_uint64_compare_exactly(rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    y = x.astype(np.uint64)
    y[::3] += rng.integers(0, 3, len(y[::3])).astype(np.uint64)
    x[:6] = [2**53 + 1, 2**53, -1, 2**63 - 1, -(2**63), 0]
    y[:6] = np.array([2**53, 2**53 + 1, 2**64 - 1, 2**63, 0, 0], dtype=np.uint64)
    outs = [dev(poison((n,), "bool")) for _ in range(3)]
    cmp_i64_u64[tj.cdiv(n, tile)](dev(x), dev(y), *outs, TILE=tile)
    for got, want in zip(outs, [x < y, y == x, y >= x]):
        np.testing.assert_array_equal(got.numpy(), want)


@tj.kernel
def f64_to_f16(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)).astype(tj.float16))


def test_float64_to_float16_rounds_once(rng: np.random.Generator) -> None:
    n, tile = 1024, 256
    # just above a float16 midpoint that float32 cannot see: rounding through float32 goes to even
    k = rng.integers(0, 1024, n)
    e = rng.integers(-14, 15, n).astype(np.float64)
    x = (1 + (k + 0.5) / 1024 + 2.0**-40) * 2.0**e * np.where(rng.integers(0, 2, n) == 1, 1, -1)
    x[:6] = [1 + 2**-11 + 2**-40, 65520.0, 65519.99, np.inf, -0.0, 2.0**-25 + 2.0**-60]
    out = dev(poison((n,), "float16"))
    f64_to_f16[tj.cdiv(n, tile)](dev(x), out, TILE=tile)
    np.testing.assert_array_equal(out.numpy().view(np.uint16), x.astype(np.float16).view(np.uint16))
