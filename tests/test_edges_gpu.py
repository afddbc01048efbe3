"""Edge cases of tile ops against numpy on a GPU: ties and NaN in reductions, out-of-range and negative
gather/scatter indices of every integer dtype, float atomics with negative values and NaN, every 3-D
transpose, and matrix multiplies off the tensor-core pipeline. Outputs are poisoned before each launch."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gpu_arrays import dev, poisoned

import tilejit as tj

pytestmark = pytest.mark.gpu


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


# ----------------------------------------------------------------------------- IEEE rounding and subnormals


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between two float arrays of one dtype (NaN to NaN: 0)."""
    it = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]

    def ordered(a: np.ndarray) -> np.ndarray:
        i = a.view(it).astype(np.int64)
        return np.where(i < 0, np.int64(np.iinfo(it).min) - i, i)  # -0.0 and 0.0 both map to 0

    with np.errstate(over="ignore"):
        d = np.abs(ordered(np.ascontiguousarray(got)) - ordered(np.ascontiguousarray(want)))
    return np.where(np.isnan(got) & np.isnan(want), 0, d)


@tj.kernel
def fused_chains(a, b, c, o_fma, o_sub, o_cmp, o_i8, T: tj.Constant[int]):
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    y = tj.load(b, index=(i,), shape=(T,))
    z = tj.load(c, index=(i,), shape=(T,))
    tj.store(o_fma, index=(i,), tile=x * y + z)
    tj.store(o_sub, index=(i,), tile=z - x * y)
    tj.store(o_cmp, index=(i,), tile=x * y + z >= 0)
    tj.store(o_i8, index=(i,), tile=((x * y + z) * 1e15).astype(tj.int8))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_multiply_add_chains_round_like_numpy(dtype: str, rng: np.random.Generator) -> None:
    """x * y + z rounds twice in numpy; a fused multiply-add rounds once and left residues like -1.1e-16
    where numpy gives 0, so single lanes of the sum, of a comparison and of a cast to int8 differed."""
    n = 3001
    x = np.round(rng.uniform(-3, 3, n), 1).astype(dtype)
    y = np.round(rng.uniform(-3, 3, n), 1).astype(dtype)
    z = np.where(rng.random(n) < 0.7, -np.round(x.astype(np.float64) * y, 2), rng.uniform(-3, 3, n)).astype(dtype)
    outs = [poisoned(n, dtype), poisoned(n, dtype), poisoned(n, np.bool_), poisoned(n, np.int8)]
    fused_chains[tj.cdiv(n, 256)](dev(x), dev(y), dev(z), *outs, T=256)
    s = x * y + z
    assert_same(outs[0].numpy(), s, "x * y + z")
    assert_same(outs[1].numpy(), z - x * y, "z - x * y")
    assert_same(outs[2].numpy(), s >= 0, "x * y + z >= 0")
    scaled = s * dtype_scalar(dtype, 1e15)
    inside = np.abs(scaled) < 2**31  # the documented cast rule: truncate, then keep the low 8 bits
    want = np.where(inside, np.trunc(np.where(inside, scaled, 0)).astype(np.int64), 0).astype(np.int64)
    got = outs[3].numpy()
    np.testing.assert_array_equal(got[inside], (want[inside] & 0xFF).astype(np.uint8).view(np.int8),
                                  err_msg="(x * y + z) * 1e15 cast to int8")
    assert (np.abs(s) < 1e-5).sum() > n // 2  # the nearly cancelling lanes, where one rounding differs


def dtype_scalar(dtype: str, v: float) -> Any:
    return np.dtype(dtype).type(v)


@tj.kernel
def subnormal_ops(a, b, c, d, o_mul, o_div, o_add, o_max, o_exp, o_exp2, o_sig, o_narrow, o_sum,
                  T: tj.Constant[int], R: tj.Constant[int]):
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    y = tj.load(b, index=(i,), shape=(T,), padding=1)
    e = tj.load(c, index=(i,), shape=(T,))
    w = tj.load(d, index=(i,), shape=(T,))
    tj.store(o_mul, index=(i,), tile=x * 1e-20)
    tj.store(o_div, index=(i,), tile=x / y)
    tj.store(o_add, index=(i,), tile=(x * 1e-20) + (x * -5e-21))
    tj.store(o_max, index=(i,), tile=tj.maximum(x * 1e-20, x * -1e-21))
    tj.store(o_exp, index=(i,), tile=tj.exp(e))
    tj.store(o_exp2, index=(i,), tile=tj.exp2(e * 1.4426950408889634))
    tj.store(o_sig, index=(i,), tile=tj.sigmoid(e))
    tj.store(o_narrow, index=(i,), tile=w.astype(tj.float32))
    tj.store(o_sum, index=(i,), tile=tj.sum(tj.reshape(x * 1e-20, (T // R, R)), axis=1))


def test_float32_subnormal_results_are_kept_not_flushed(rng: np.random.Generator) -> None:
    """Results below 1.18e-38 are subnormal numbers in numpy; nothing may flush them to 0 (the fuzzer saw
    3.6e-43 and 8.2e-40 come back as 0.0 from sigmoid, whose exp(-x) overflowed below x = -88.7)."""
    n, t, r = 1000, 128, 16
    x = rng.uniform(1e-20, 1e-19, n).astype(np.float32)  # x * 1e-20: 1e-40 .. 1e-39, subnormal
    y = rng.uniform(1e19, 1e21, n).astype(np.float32)
    e = rng.uniform(-102.0, -87.5, n).astype(np.float32)  # exp(e): 5e-45 .. 1e-38
    w = (rng.uniform(1e-45, 1e-38, n)).astype(np.float64)
    names = ["mul", "div", "add", "max", "exp", "exp2", "sig", "narrow"]
    outs = {k: poisoned(n, np.float32) for k in names}
    o_sum = poisoned(n // r + 1, np.float32)
    subnormal_ops[tj.cdiv(n, t)](dev(x), dev(y), dev(e), dev(w), *outs.values(), o_sum, T=t, R=r)
    f32 = np.float32
    small = x * f32(1e-20)
    want = {
        "mul": small, "div": x / y, "add": small + x * f32(-5e-21), "max": np.maximum(small, x * f32(-1e-21)),
        "exp": np.exp(e.astype(np.float64)).astype(f32),
        "exp2": np.exp2((e * f32(1.4426950408889634)).astype(np.float64)).astype(f32),
        "sig": (1 / (1 + np.exp(-e.astype(np.float64)))).astype(f32), "narrow": w.astype(f32),
    }
    bound = {"mul": 0, "div": 2, "add": 0, "max": 0, "exp": 2, "exp2": 2, "sig": 6, "narrow": 0}
    assert (np.abs(want["mul"]) < np.finfo(f32).tiny).all()
    for k in names:
        got = outs[k].numpy()
        assert ((got == 0) == (want[k] == 0)).all(), f"{k}: zeros where numpy has subnormals (flushed)"
        assert ulps(got, want[k]).max() <= bound[k], f"{k}: {ulps(got, want[k]).max()} ulp from numpy"
    pad = np.concatenate([small, np.zeros(-n % r, f32)])
    sums = pad.reshape(-1, r).sum(axis=1, dtype=np.float64).astype(f32)  # exact: sums below 2**-125 do not round
    assert_same(o_sum.numpy(), sums, "sum of subnormals")


@tj.kernel
def float64_subnormals(a, idx, o_mul, o_atomic, T: tj.Constant[int]):
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    tj.store(o_mul, index=(i,), tile=x * 1e-300)
    tj.atomic_add(o_atomic, tj.load(idx, index=(i,), shape=(T,), padding=-1), x * 1e-300)


def test_float64_subnormals_are_kept_in_arithmetic_and_atomic_add(rng: np.random.Generator) -> None:
    n, t = 500, 128
    x = 10.0 ** rng.uniform(-16, -8, n)  # x * 1e-300: 1e-316 .. 1e-308, subnormal
    o_mul, o_atomic = poisoned(n, np.float64), dev(np.zeros(n))
    float64_subnormals[tj.cdiv(n, t)](dev(x), dev(np.arange(n, dtype=np.int32)), o_mul, o_atomic, T=t)
    small = x * 1e-300
    assert (small < np.finfo(np.float64).tiny).all()
    assert_same(o_mul.numpy(), small, "x * 1e-300")
    assert_same(o_atomic.numpy(), small, "atomic_add of float64 subnormals")


@tj.kernel
def half_subnormals(a, h, o_narrow, o_mul, T: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(o_narrow, index=(i,), tile=tj.load(a, index=(i,), shape=(T,)).astype(tj.float16))
    tj.store(o_mul, index=(i,), tile=tj.load(h, index=(i,), shape=(T,)) * 0.01)


def test_float16_subnormals_are_kept_in_casts_and_arithmetic(rng: np.random.Generator) -> None:
    """float16 numbers below 6.1e-5 are subnormal; the packed float32 -> float16 conversions keep them."""
    n, t = 1000, 256
    a = (10.0 ** rng.uniform(-7.5, -4.3, n)).astype(np.float32)
    h = (10.0 ** rng.uniform(-5, -2.3, n)).astype(np.float16)
    o_narrow, o_mul = poisoned(n, np.float16), poisoned(n, np.float16)
    half_subnormals[tj.cdiv(n, t)](dev(a), dev(h), o_narrow, o_mul, T=t)
    want_narrow, want_mul = a.astype(np.float16), h * np.float16(0.01)
    assert (np.abs(want_mul) < np.finfo(np.float16).tiny).mean() > 0.5
    assert_same(o_narrow.numpy(), want_narrow, "float32 -> float16 of small values")
    assert_same(o_mul.numpy(), want_mul, "float16 * 0.01")


@tj.kernel
def sigmoid_tile(x, out, T: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.sigmoid(tj.load(x, index=(i,), shape=(T,))))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid_is_within_its_documented_ulp_bound_over_the_whole_range(dtype: str) -> None:
    """tile.py: within 6 ulp (float32) / 4 ulp (float64) of the exact value, subnormal results included."""
    lim = 110.0 if dtype == "float32" else 760.0
    x = np.concatenate([np.linspace(-lim, lim, 40001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30]])
    x = x.astype(dtype)
    out = poisoned(x.size, dtype)
    sigmoid_tile[tj.cdiv(x.size, 256)](dev(x), out, T=256)
    wide = np.float64 if dtype == "float32" else np.longdouble
    if dtype == "float64" and np.finfo(wide).eps >= np.finfo(np.float64).eps:
        pytest.skip("no extended-precision long double for a float64 sigmoid reference")
    with np.errstate(over="ignore"):
        want = (1 / (1 + np.exp(-x.astype(wide)))).astype(dtype)
    got = out.numpy()
    bound = 6 if dtype == "float32" else 4
    worst = int(np.argmax(ulps(got, want)))
    assert ulps(got, want).max() <= bound, f"sigmoid({x[worst]!r}) = {got[worst]!r}, exact {want[worst]!r}"
    tiny = 8 * np.finfo(dtype).smallest_subnormal  # a result at the underflow boundary may round either way
    assert not ((got == 0) & (np.abs(want) > tiny)).any(), "a subnormal sigmoid result was flushed to zero"
    assert not ((want == 0) & (np.abs(got) > tiny)).any()


@tj.kernel
def cast_to(x, out, T: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(T,)).astype(out.dtype))


CAST_VALUES = [0.0, -0.0, 0.7, -0.7, 1.5, -1.5, 127.9, 128.0, -128.9, -129.7, 255.5, 256.0, 300.7, -300.7,
               32767.5, 32768.0, -32769.0, 40000.0, -40000.0, 65535.9, 65536.0, 1e5, 2147483520.0, 3e9, -3e9,
               4294967040.0, 5e9, -5e9, 1e19, -1e19, 1e20, 1.8e19, np.inf, -np.inf, np.nan]


def cast_rule(v: float, dst: np.dtype) -> int:
    """tile.py's rule for float to integer casts: truncate toward zero, saturate at the int32/uint32 range
    (int64/uint64 for 64-bit results), NaN gives 0, and 8- and 16-bit results keep the low bits."""
    if np.isnan(v):
        return 0
    bits = 64 if dst.itemsize == 8 else 32
    signed = dst.kind == "i"
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    t = hi if v == np.inf else lo if v == -np.inf else min(max(int(np.trunc(v)), lo), hi)
    width = dst.itemsize * 8
    u = t & ((1 << width) - 1)
    return u - (1 << width) if signed and u >= 1 << (width - 1) else u


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_float_to_integer_casts_follow_the_documented_rule(src: str, dst: str) -> None:
    x = np.array(CAST_VALUES, dtype=src)
    out = tj.asarray(np.full(x.size, 77, dst))
    cast_to[1](dev(x), out, T=64)
    want = np.array([cast_rule(float(v), np.dtype(dst)) for v in x], dtype=dst)
    got = out.numpy()
    bad = [(float(v), int(g), int(w)) for v, g, w in zip(x, got, want) if g != w]
    assert not bad, f"{src} -> {dst}: (value, got, rule) {bad}"


@tj.kernel
def plus_one(x, out, N: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(N,)) + 1)


@pytest.mark.cuda_only(reason="the CUDA backend's per-thread register budget for one tile")
def test_the_largest_tile_the_backend_accepts_runs(rng: np.random.Generator) -> None:
    """256 float32 per thread with 256 threads: the backend's per-thread budget (a larger tile is refused)."""
    n = 65536 + 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = poisoned(n, np.float32)
    plus_one[2](dev(x), out, N=65536)
    assert_same(out.numpy(), x + np.float32(1), "x + 1 over two (65536,) tiles")
    with pytest.raises(tj.TileCompileError, match="32-bit words of one tile"):
        plus_one[1](dev(x), out, N=131072)


@tj.kernel
def widen_rows(h, d, out64, out16, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(h, index=(i,), shape=(TILE,))  # 16-bit data: 8 elements a vector, so the f64 vectors are 64 B
    b = tj.load(d, index=(i,), shape=(TILE,), padding=0.0)
    tj.store(out64, index=(i,), tile=a.astype(tj.float64) + b)
    tj.store(out16, index=(i,), tile=(b * 2.0).astype(tj.float16))


@pytest.mark.parametrize("n", [1, 7, 31, 100, 2047, 2049, 4093])
def test_ragged_vectors_wider_than_16_bytes(rng: np.random.Generator, n: int) -> None:
    """Fuse seeds 2, 37, 138, ...: the ragged last vector of a row kept only its first 16 bytes of 64-bit (and
    32-bit) elements when the layout's vector width came from 16-bit data."""
    h = rng.standard_normal(n).astype(np.float16)
    d = rng.standard_normal(n)
    out64, out16 = poisoned(n, np.float64), poisoned(n, np.float16)
    widen_rows[(n + 2047) // 2048](dev(h), dev(d), out64, out16, TILE=2048)
    np.testing.assert_array_equal(out64.numpy(), h.astype(np.float64) + d)
    np.testing.assert_array_equal(out16.numpy(), (d * 2.0).astype(np.float16))
