"""Issue 20: Python's ``abs``, ``min`` and ``max`` on run-time values (tiles and scalars) are ``tj.abs`` and nested
``tj.minimum``/``tj.maximum``: the same IR, so the same CUDA C++ and Tile IR, dtypes and NaN rule; with compile-time
arguments only they stay Python's (folded); what cannot be supported is a located error."""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype, poison
from source_lines import assert_located

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir.types import ArrayType, float32, int32, scalar

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()


# ---------------------------------------------------------------------------------------------- same IR as tj.*


@tj.function
def pick(PY, CASE, a, b, c, n, u):
    """One expression written with the builtins (``PY``) or with the tj functions, by ``CASE``."""
    if CASE == "tiles":
        r = (min(a, b), max(a, b), abs(a)) if PY else (tj.minimum(a, b), tj.maximum(a, b), tj.abs(a))
    elif CASE == "three":
        r = min(a, b, c) if PY else tj.minimum(tj.minimum(a, b), c)
    elif CASE == "four_max":
        r = max(c, a, b, n) if PY else tj.maximum(tj.maximum(tj.maximum(c, a), b), n)
    elif CASE == "broadcast":
        r = max(a[:, None], c[None, :]) if PY else tj.maximum(a[:, None], c[None, :])
    elif CASE == "weak_float":
        r = (max(a, 2.5), min(-1.5, a)) if PY else (tj.maximum(a, 2.5), tj.minimum(-1.5, a))
    elif CASE == "weak_int":
        r = (min(c, 3), max(7, c, 2)) if PY else (tj.minimum(c, 3), tj.maximum(tj.maximum(7, c), 2))
    elif CASE == "uint_scalar":
        r = (min(a, u), max(u, n)) if PY else (tj.minimum(a, u), tj.maximum(u, n))
    elif CASE == "const_prefix":
        r = max(1, 2.5, a) if PY else tj.maximum(tj.maximum(1, 2.5), a)
    elif CASE == "scalars":
        i = tj.bid(0)
        r = (min(i, n), max(n, i, 0), abs(n - i)) if PY else (tj.minimum(i, n), tj.maximum(tj.maximum(n, i), 0),
                                                             tj.abs(n - i))
    elif CASE == "bools":
        r = (min(a > 0, b > 0), max(a > 0, b > 0)) if PY else (tj.minimum(a > 0, b > 0), tj.maximum(a > 0, b > 0))
    return r


@tj.kernel
def both(x, y, z, out, n, u, CASE: tj.Constant[str], PY: tj.Constant[bool], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    c = tj.load(z, index=(i,), shape=(TILE,))
    r = pick(PY, CASE, a, b, c, n, u)
    parts = r if isinstance(r, tuple) else (r,)
    for k in tj.static_range(len(parts)):
        p = parts[k]
        if p.ndim == 2:
            p = tj.sum(p.astype(tj.float32), axis=1)
        tj.store(out, index=(i * len(parts) + k,), tile=p + tj.zeros((TILE,), tj.float32))


#: (CASE, dtype of x and y, dtype of z, the dtypes the result's parts have in the IR)
CASES = [
    ("tiles", "int32", "int32", ["i32"]),
    ("tiles", "float16", "float16", ["f16"]),
    ("tiles", "int8", "int8", ["i8"]),
    ("three", "int32", "float32", ["f32"]),
    ("three", "uint8", "int8", ["i16"]),
    ("four_max", "float16", "bfloat16", ["f32"]),
    ("broadcast", "int16", "float64", ["f64"]),
    ("weak_float", "int32", "int32", ["f32"]),
    ("weak_float", "float16", "float16", ["f16"]),
    ("weak_int", "float32", "uint8", ["u8"]),
    ("uint_scalar", "int32", "int32", ["i64"]),
    ("uint_scalar", "uint16", "uint16", ["u32"]),
    ("const_prefix", "int8", "int8", ["f32"]),
    ("const_prefix", "float64", "float64", ["f64"]),
    ("scalars", "float32", "float32", ["i32"]),
    ("bools", "float32", "float32", ["i1"]),
]


def _compile(case: str, xd: str, zd: str, py: bool) -> Any:
    d = {name: getattr(tj, "bool_" if name == "bool" else name) for name in (xd, zd)}
    sig = (d[xd][:], d[xd][:], d[zd][:], tj.float32[:], tj.int32, tj.uint32)
    return tj.compile(both, sig, constants={"CASE": case, "PY": py, "TILE": 16}, target="sm_90", backend="cuda")


@pytest.mark.parametrize(("case", "xd", "zd", "types"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_same_ir_and_code_as_the_tj_functions(case: str, xd: str, zd: str, types: list[str]) -> None:
    py, tj_form = _compile(case, xd, zd, True), _compile(case, xd, zd, False)
    text = py.ir_text()
    assert text == tj_form.ir_text()
    for t in types:
        assert f": tile<16x{t}>" in text or f": {t}\n" in text or f": tile<16x16x{t}>" in text, text
    assert py.cuda_source() == tj_form.cuda_source()
    assert py.tileir_text() == tj_form.tileir_text()  # the Tile IR module (made from the IR; needs no toolchain)


def test_promotion_types_are_the_tj_functions() -> None:
    """Spot checks of the result dtypes (numpy's promotion with weak Python numbers, tilejit's int/float rule)."""
    text = _compile("uint_scalar", "int32", "int32", True).ir_text()
    assert "{fn='minimum'} : tile<16xi64>" in text  # int32 tile with a uint32 scalar: int64, as numpy
    text = _compile("weak_float", "int32", "int32", True).ir_text()
    assert "{fn='maximum'} : tile<16xf32>" in text  # an int tile with a Python float: float32
    text = _compile("weak_int", "float32", "uint8", True).ir_text()
    assert "{fn='minimum'} : tile<16xu8>" in text and "{fn='maximum'} : tile<16xu8>" in text  # weak ints: uint8


# ---------------------------------------------------------------------------------------------- compile-time folding


@tj.kernel
def folded(out, K: tj.Constant[int], PY: tj.Constant[bool]):
    if PY:
        n = max(8, K, 2)  # a compile-time int: arange needs one
        v = min(3, 2.5) + abs(-4) + max((1, -7), key=abs) + min(K, 100) + abs(-K)
    else:
        n = 16
        v = 2.5 + 4 + -7 + 16 + 16
    tj.store(out, index=(0,), tile=tj.arange(n).astype(tj.float32) + v)


def test_constant_arguments_fold_with_python_semantics() -> None:
    arts = [tj.compile(folded, (tj.float32[:],), constants={"K": 16, "PY": p}, target="sm_90", backend="cuda")
            for p in (True, False)]
    assert arts[0].ir_text() == arts[1].ir_text()
    assert "minimum" not in arts[0].ir_text() and "abs" not in arts[0].ir_text()


@tj.function
def nan_order(A, B):
    return min(A, B), max(A, B)


@tj.kernel
def nan_kernel(out, FIRST_NAN: tj.Constant[bool]):
    nan = float("nan")
    lo, hi = nan_order(nan, 1.0) if FIRST_NAN else nan_order(1.0, nan)
    tj.store(out, index=(0,), tile=tj.full((2,), lo) + tj.full((2,), hi))


@tj.kernel
def tj_nan_kernel(out, FIRST_NAN: tj.Constant[bool]):
    nan = float("nan")
    a, b = (nan, 1.0) if FIRST_NAN else (1.0, nan)
    tj.store(out, index=(0,), tile=tj.full((2,), tj.minimum(a, b)) + tj.full((2,), tj.maximum(a, b)))


@pytest.mark.parametrize("first_nan", [True, False])
def test_tj_minimum_maximum_of_constants_fold_to_nan_in_either_order(first_nan: bool) -> None:
    """tj.minimum / tj.maximum fold as they compute at run time: NaN when either operand is NaN, in either order
    (not Python's order-dependent rule, which only Python's own min/max of constants keep)."""
    text = tj.compile(tj_nan_kernel, (tj.float32[:],), constants={"FIRST_NAN": first_nan}, target="sm_90").ir_text()
    assert "value=nan" in text and "value=2.0" not in text


def test_constant_nan_keeps_python_order_rule() -> None:
    """With compile-time arguments only, Python's rule: min(nan, 1) is nan, min(1, nan) is 1."""
    first = tj.compile(nan_kernel, (tj.float32[:],), constants={"FIRST_NAN": True}, target="sm_90").ir_text()
    second = tj.compile(nan_kernel, (tj.float32[:],), constants={"FIRST_NAN": False}, target="sm_90").ir_text()
    assert "value=nan" in first
    assert "value=2.0" in second and "value=nan" not in second  # min(1, nan) + max(1, nan) is 1 + 1


# ---------------------------------------------------------------------------------------------- located errors


def check(kernel: Callable[..., Any], at: str, message: str) -> None:
    """Translating ``kernel`` raises the located error ``message`` at the first character of ``at``."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": ArrayType(float32, 1), "out": ArrayType(float32, 1), "n": scalar(int32)}, {})
    assert_located(info.value, __file__, LINES, at, message)


def k_min_one_tile(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = min(t)


def k_max_iterable(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = max((t, t))


def k_max_shape(x, out, n):
    r = max(x.shape)


def k_key(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = min(t, n, key=abs)


def k_default(x, out, n):
    r = max(n, default=0)


def k_no_args(x, out, n):
    r = min()


def k_array_arg(x, out, n):
    r = max(x, n)


def k_abs_two(x, out, n):
    r = abs(n, n)


def test_one_run_time_argument_points_to_the_reductions() -> None:
    check(k_min_one_tile, "min(t)", "min() of one run-time argument (a tile of type tile<16xf32>) is not supported: "
          "for the minimum of a tile's elements use tj.min(t, axis=...)")
    check(k_max_iterable, "max((t, t))", "for the maximum of a tile's elements use tj.max(t, axis=...)")
    check(k_max_shape, "max(x.shape)", "max() of one run-time argument (x.shape) is not supported")


def test_keywords_are_refused_on_run_time_values() -> None:
    check(k_key, "min(t, n, key=abs)", "min() of run-time values takes no keyword arguments (got key=)")
    check(k_default, "max(n, default=0)", "max() of run-time values takes no keyword arguments (got default=)")


def test_other_refused_forms() -> None:
    check(k_no_args, "min()", "min expected at least 1 argument, got 0")
    check(k_array_arg, "max(x, n)", "max() of run-time values expects tiles or numbers, got the array 'x'")
    check(k_abs_two, "abs(n, n)", "abs() takes exactly one argument (2 given)")


# ---------------------------------------------------------------------------------------------- on the GPU


@tj.kernel
def gpu_minmax(x, y, lo, hi, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(lo, index=(i,), tile=min(a, b))
    tj.store(hi, index=(i,), tile=max(a, b))


@tj.kernel
def gpu_three_abs(x, y, z, lo, hi, ab, sc, s, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    c = tj.load(z, index=(i,), shape=(TILE,))
    tj.store(lo, index=(i,), tile=min(a, b, c, 3))
    tj.store(hi, index=(i,), tile=max(1, a, b, c))
    tj.store(ab, index=(i,), tile=abs(a))
    tj.store(sc, index=(i,), tile=min(max(i, s), 5) + abs(i - s))  # scalars: bid and a scalar parameter


NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float16", "bfloat16", "float32",
           "float64"]


def _rand(n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.startswith(("int", "uint")):
        lo = 0 if dtype.startswith("u") else -100
        return rng.integers(lo, 100, n).astype(dtype)
    a = rng.standard_normal(n).astype(np_dtype(dtype))
    a[rng.integers(0, n, 8)] = np.nan  # NaN in either operand gives NaN (numpy's minimum/maximum)
    return a


def _host(a: np.ndarray) -> np.ndarray:
    """``a`` as numpy computes on it exactly (bfloat16 widened to float32: min/max/abs of it are exact)."""
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def _same(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """Exact (min/max/abs pick or negate a value); NaN where numpy has NaN."""
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        got, want = got.astype(np.float64), np.asarray(want).astype(np.float64)
    np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bool", *NUMERIC])
def test_gpu_min_max_of_two(dtype: str, rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x, y = _rand(n, dtype, rng), _rand(n, dtype, rng)
    lo, hi = tj.asarray(poison((n,), dtype)), tj.asarray(poison((n,), dtype))
    gpu_minmax[tj.cdiv(n, tile)](tj.asarray(x), tj.asarray(y), lo, hi, TILE=tile)
    _same(lo.numpy(), np.minimum(_host(x), _host(y)), dtype)
    _same(hi.numpy(), np.maximum(_host(x), _host(y)), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", NUMERIC)
def test_gpu_min_max_abs_of_run_time_values(dtype: str, rng: np.random.Generator) -> None:
    n, tile, s = 777, 128, 2
    x, y, z = (_rand(n, dtype, rng) for _ in range(3))
    xs, ys, zs = _host(x), _host(y), _host(z)
    outs = [tj.asarray(poison((n,), dtype)) for _ in range(3)]
    blocks = tj.cdiv(n, tile)
    sc = tj.asarray(poison((blocks,), "int32"))
    gpu_three_abs[blocks](tj.asarray(x), tj.asarray(y), tj.asarray(z), *outs, sc, s, TILE=tile)
    # numpy with the same promotion: the Python ints are weak (take the arrays' dtype)
    t = xs.dtype
    want_lo = np.minimum(np.minimum(np.minimum(xs, ys), zs), np.asarray(3).astype(t))
    want_hi = np.maximum(np.maximum(np.maximum(np.asarray(1).astype(t), xs), ys), zs)
    _same(outs[0].numpy(), want_lo, dtype)
    _same(outs[1].numpy(), want_hi, dtype)
    _same(outs[2].numpy(), np.abs(xs), dtype)
    ids = np.arange(blocks)
    np.testing.assert_array_equal(sc.numpy(), np.minimum(np.maximum(ids, s), 5) + np.abs(ids - s))
