"""``tj.fuse`` on the GPU: random fused functions (``fuse_cases.generate``: seeded expression trees over the
elementwise op set, on random shapes with broadcasting, in random layouts) against numpy in float64, outputs
poisoned first (``out=`` arrays, some of them views inside larger poisoned buffers); and targeted checks: torch
tensors in and out, in-place updates, reductions split over blocks, empty and 0-d arrays, rank 6, the disk cache.

``TILEJIT_FUSE_CASES`` (default 300) random cases run, in blocks; ``TILEJIT_FUSE_SEEDS=3,17`` runs just those;
``python tests/fuse_cases.py SEED`` prints one.
"""

from __future__ import annotations

import linecache
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import fuse_cases as fc
import numpy as np
import pytest

import tilejit as tj

CASES = int(os.environ.get("TILEJIT_FUSE_CASES", "300"))
BLOCKS = 10
_CHOSEN = [int(s) for s in os.environ.get("TILEJIT_FUSE_SEEDS", "").replace(",", " ").split()]
SEED_BLOCKS = [_CHOSEN] if _CHOSEN else [list(range(b, CASES, BLOCKS)) for b in range(BLOCKS)]

_POISON = {"float16": 0x7D5A, "bfloat16": 0x7FA5, "float32": 0x7FA5A5A5, "float64": 0x7FF5A5A5A5A5A5A5}
_RAW = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# --------------------------------------------------------------------------------------------- device arrays


def _raw(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host elements of ``dtype`` (bfloat16 as its 16 bits) from values held as float64 or integers."""
    if dtype == "bfloat16":
        return (np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(values, dtype=dtype)


def _typed(raw: Any, dtype: str, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> Any:
    """A view of ``dtype`` over the device buffer ``raw`` (strides in elements)."""
    item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    return tj.DeviceArray(shape, dtype, device=raw.device, strides=[s * item for s in strides],
                          ptr=raw.ptr + offset * item, base=raw)


def _strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def device_arg(arg: fc.Arg) -> Any:
    """The argument as the fused function gets it: a device view in its layout (``fc.physical``), or the number."""
    if arg.kind == "weak":
        return arg.values
    if arg.kind == "scalar":
        return np.dtype("float32" if arg.dtype == "bfloat16" else arg.dtype).type(arg.values)
    phys, strides, offset = fc.physical(arg)
    return _typed(tj.asarray(_raw(phys, arg.dtype)), arg.dtype, np.shape(arg.values), strides, offset)


def poisoned_out(shape: tuple[int, ...], dtype: str, spaced: bool) -> tuple[Any, Any]:
    """(the whole poisoned device buffer, the output view: every other element of it when ``spaced``)."""
    item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    phys_shape = tuple(2 * n for n in shape) if spaced else shape
    if dtype in _POISON:
        host = np.full(phys_shape, _POISON[dtype], dtype=_RAW[item])
    else:
        host = np.full(phys_shape + (item,), 0xAB, np.uint8).view(dtype).reshape(phys_shape)
    raw = tj.asarray(host)
    st = _strides(np.empty(phys_shape, dtype=_RAW.get(item, np.uint8)))
    view = _typed(raw, dtype, shape, tuple(2 * s for s in st) if spaced else st)
    return raw, view


def host(a: Any, dtype: str) -> np.ndarray:
    """A device array's values as float64 (floats, bfloat16 included) or its integers."""
    if hasattr(a, "cpu"):  # torch
        a = a.float() if str(a.dtype) == "torch.bfloat16" else a
        return a.cpu().numpy()
    if dtype == "bfloat16":
        raw = tj.DeviceArray(a.shape, "uint16", device=a.device, strides=a.strides, ptr=a.ptr, base=a)
        return (raw.numpy().astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.numpy()


def raw_bytes(a: Any) -> bytes:
    return bytes(a.numpy().tobytes())


# --------------------------------------------------------------------------------------------- random functions


def load(case: fc.Case) -> Any:
    """The case's fused function, from its source (registered with linecache, as a file would be)."""
    filename = f"<fuse case {case.seed}>"
    linecache.cache[filename] = (len(case.source), None, case.source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(case.source, filename, "exec"), namespace)
    return namespace["f"]


def run_case(case: fc.Case) -> list[str]:
    """Run one case; what differs from numpy (empty: nothing)."""
    f = load(case)
    args = [device_arg(a) for a in case.args]
    problems: list[str] = []
    if case.use_out:
        spec = f.specialize(*args)
        bufs = [poisoned_out(tuple(s), d.name, spaced=(k % 2 == 1)) for k, (s, d) in
                enumerate(zip(spec.out_shapes, spec.out_dtypes))]
        views = [v for _, v in bufs]
        given = views[0] if len(case.expected) == 1 else tuple(views)
        assert f(*args, out=given) is given
        outs = views
        for k, (raw, _) in enumerate(bufs):
            if k % 2 == 1:  # the elements between the output's are untouched
                whole = raw.numpy()
                mask = np.ones(whole.shape, bool)
                mask[tuple(slice(None, None, 2) for _ in whole.shape)] = False
                if np.any(whole[mask] != np.full(whole.shape, whole.flat[-1])[mask]):
                    problems.append(f"output {k}: elements outside the out= view were written")
    else:
        result = f(*args)
        outs = [result] if len(case.expected) == 1 else list(result)
    for k, (got_arr, want) in enumerate(zip(outs, case.expected)):
        dtype = got_arr.dtype_name
        got = host(got_arr, dtype)
        if got.shape != want.shape:
            problems.append(f"output {k}: shape {got.shape}, numpy {want.shape}")
            continue
        if not np.issubdtype(want.dtype, np.floating):
            bad = got != want.astype(got.dtype)
        else:
            tol = case.tolerance(k)
            bad = ~(np.abs(got - want) <= tol)
        if np.any(bad):
            idx = np.argwhere(bad)[:3]
            shown = [(tuple(int(i) for i in ix), got[tuple(ix)], want[tuple(ix)]) for ix in idx]
            problems.append(f"output {k} ({dtype}): {int(bad.sum())} of {bad.size} elements differ, e.g. {shown}")
    return problems


@pytest.mark.gpu
@pytest.mark.parametrize("seeds", SEED_BLOCKS, ids=lambda s: f"seeds{s[0]}-{s[-1]}" if s else "none")
def test_random_fused_functions_match_numpy(seeds: list[int]) -> None:
    failures = []
    for seed in seeds:
        case = fc.generate(seed)
        try:
            problems = run_case(case)
        except tj.CUDAError as exc:  # the context may be unusable after a fault: stop this block
            failures.append(f"{case.report()}\nCUDA error: {exc}")
            break
        except Exception as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            failures.append(case.report() + "\n" + "\n".join(problems))
    assert not failures, f"{len(failures)} of {len(seeds)} fused functions differ from numpy:\n\n" + \
        "\n\n".join(failures[:4])


# --------------------------------------------------------------------------------------------- targeted checks


@tj.fuse
def gelu_mul(x, y, bias):  # type: ignore[no-untyped-def]
    g = 0.5 * x * (1 + tj.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
    return g * y + bias


def gelu_ref(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, y, b = (np.asarray(a, np.float64) for a in (x, y, b))
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x))) * y + b


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1,), (4097,), (3, 5000), (1000, 777), (2, 3, 4, 5, 6, 7)])
def test_gelu_bias_broadcast_and_flat(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1:]).astype(np.float32)
    out = tj.asarray(np.full(shape, np.nan, np.float32))  # poisoned
    gelu_mul(tj.asarray(x), tj.asarray(y), tj.asarray(b), out=out)
    np.testing.assert_allclose(out.numpy(), gelu_ref(x, y, b), rtol=1e-5, atol=1e-5)
    full = gelu_mul(tj.asarray(x), tj.asarray(y), tj.asarray(np.broadcast_to(b, shape).copy()))
    np.testing.assert_allclose(full.numpy(), gelu_ref(x, y, b), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_torch_tensors_in_and_out() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(513, 1025, device="cuda")
    y = torch.randn(513, 1025, device="cuda")
    b = torch.randn(1025, device="cuda")
    r = gelu_mul(x, y, b)
    assert isinstance(r, torch.Tensor) and r.shape == x.shape and r.dtype == torch.float32
    np.testing.assert_allclose(r.cpu().numpy(), gelu_ref(x.cpu(), y.cpu(), b.cpu()), rtol=1e-5, atol=1e-5)
    xb, yb, bb = x.bfloat16(), y.bfloat16(), b.bfloat16()
    rb = gelu_mul(xb, yb, bb)
    assert rb.dtype == torch.bfloat16
    want = gelu_ref(xb.float().cpu(), yb.float().cpu(), bb.float().cpu())
    np.testing.assert_allclose(rb.float().cpu().numpy(), want, rtol=0.05, atol=0.05)
    xt = x.t()  # a transposed view
    rt = gelu_mul(xt, 2.0, b[:513])
    np.testing.assert_allclose(rt.cpu().numpy(), gelu_ref(xt.cpu(), 2.0, b[:513].cpu()), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_repeated_torch_calls_follow_tensors_changed_in_place() -> None:
    """A call repeating the last one's torch tensors relaunches its kernels only while each tensor still reads the
    same (address, shape, strides, dtype): after ``set_`` (new storage) and ``transpose_`` (new strides) the new
    values are computed, and new contents are always read."""
    torch = pytest.importorskip("torch")

    @tj.fuse
    def axpy(a, x, y):  # type: ignore[no-untyped-def]
        return a * x + y

    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    out = torch.full((64, 64), float("nan"), device="cuda")

    def check() -> None:
        out.fill_(float("nan"))
        assert axpy(2.0, x, y, out=out) is out
        torch.testing.assert_close(out, 2.0 * x + y)

    check()
    check()  # the same tensors: relaunched
    x.add_(1.0)  # new contents, same address
    check()
    x.set_(torch.randn(64, 64, device="cuda"))  # new storage
    check()
    x.transpose_(0, 1)  # new strides
    check()
    y.set_(torch.randn(64, 64, device="cuda", dtype=torch.float64)[:, :].float())
    check()


@pytest.mark.gpu
def test_in_place_update_and_overlap_refused() -> None:
    @tj.fuse
    def axpy(a, x, y):  # type: ignore[no-untyped-def]
        return a * x + y

    rng = np.random.default_rng()
    x, y = rng.standard_normal(10_000).astype(np.float32), rng.standard_normal(10_000).astype(np.float32)
    dx, dy = tj.asarray(x), tj.asarray(y)
    assert axpy(2.0, dx, dy, out=dy) is dy
    np.testing.assert_allclose(dy.numpy(), 2 * x + y, rtol=1e-6)
    with pytest.raises(tj.LaunchError, match="shares memory with argument 'y'"):
        axpy(2.0, dx, dy[::-1], out=dy)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int32"])
@pytest.mark.parametrize("shape, axis", [((3, 100_000), 1), ((100_000, 3), 0), ((1000, 1000), None),
                                         ((64, 33, 17), (0, 2)), ((7, 4096), 0), ((5,), 0)])
def test_reductions(dtype: str, shape: tuple[int, ...], axis: Any) -> None:
    """Sums, maxima, minima and means of a product, split over blocks or not, against numpy (bfloat16: the
    products rounded to bfloat16 first, as the kernel computes them)."""
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)

    @tj.fuse
    def stats(x, y):  # type: ignore[no-untyped-def]
        p = x * y
        return p.sum(axis=axis), tj.max(p, axis=axis), tj.min(p, axis=axis, keepdims=True), p.mean(axis=axis)

    gen = torch.Generator(device="cuda").manual_seed(5)
    if dtype == "int32":
        x = torch.randint(-20, 20, shape, device="cuda", dtype=tdt, generator=gen)
        y = torch.randint(-20, 20, shape, device="cuda", dtype=tdt, generator=gen)
    else:
        x = torch.rand(shape, device="cuda", generator=gen).to(tdt) - 0.5
        y = torch.rand(shape, device="cuda", generator=gen).to(tdt) - 0.5
    s, mx, mn, mean = stats(x, y)
    p = (x * y).double().cpu().numpy()
    n = p.size // max(1, np.sum(np.ones(shape), axis=axis).size)
    tol = {"float32": 1e-5, "bfloat16": 1e-2, "float64": 1e-12, "int32": 0}[dtype]
    np.testing.assert_allclose(s.double().cpu().numpy(), p.sum(axis=axis), rtol=tol, atol=tol * max(1, n) ** 0.5 * 4)
    np.testing.assert_array_equal(mx.double().cpu().numpy(), p.max(axis=axis))
    np.testing.assert_array_equal(mn.double().cpu().numpy(), p.min(axis=axis, keepdims=True))
    np.testing.assert_allclose(mean.double().cpu().numpy(), p.mean(axis=axis), rtol=max(tol, 1e-6), atol=tol)
    assert str(mean.dtype) == ("torch.float32" if dtype == "int32" else str(tdt))


@pytest.mark.gpu
def test_empty_zero_d_and_scalar_only() -> None:
    @tj.fuse
    def f(x, s):  # type: ignore[no-untyped-def]
        return x * s + 1, s * 2

    e = f(tj.empty((0, 5), "float32"), 3.0)
    assert e[0].shape == (0, 5) and e[1].shape == ()
    np.testing.assert_array_equal(e[1].numpy(), 6.0)
    z = f(tj.asarray(np.float32(2.0)), 3.0)
    assert z[0].shape == () and float(z[0].numpy()) == 7.0

    @tj.fuse
    def total(x):  # type: ignore[no-untyped-def]
        return x.sum(), x.mean()

    s, m = total(tj.empty((0,), "float32"))
    assert float(s.numpy()) == 0.0 and np.isnan(m.numpy())


@pytest.mark.gpu
def test_one_kernel_serves_every_size() -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return tj.exp(x) - y

    for n in (1, 1000, 4097, 1 << 20):
        x, y = np.linspace(-1, 1, n, dtype=np.float32), np.ones(n, np.float32)
        np.testing.assert_allclose(f(tj.asarray(x), tj.asarray(y)).numpy(), np.exp(x) - 1, rtol=1e-6, atol=1e-6)
    assert len(f.kernels) == 1
    f(tj.asarray(np.ones((3, 4), np.float32)), tj.asarray(np.ones(4, np.float32)))  # a broadcast: a new kernel
    assert len(f.kernels) == 2


@pytest.mark.gpu
def test_a_new_process_takes_the_kernel_from_the_disk_cache(tmp_path: Path) -> None:
    """The second process finds every kernel in the disk cache: it writes no new entry."""
    script = tmp_path / "fused.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import tilejit as tj

        @tj.fuse
        def f(x, y):
            return x * y + tj.sin(x)

        x = tj.asarray(np.arange(1000, dtype=np.float32))
        r = f(x, x).numpy()
        assert np.allclose(r, np.arange(1000) ** 2 + np.sin(np.arange(1000, dtype=np.float32)), rtol=1e-5)
    """))
    cache = tmp_path / "cache"
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    counts = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        counts.append(sorted(p.name for p in cache.rglob("*") if p.is_file()))
    assert counts[0] and counts[1] == counts[0]


# --------------------------------------------------------------------------------------------- broadcast runs, math


@pytest.mark.gpu
@pytest.mark.parametrize("xshape, yshape, dtype, offset", [
    ((5, 4096), (4096,), "float32", 0),  # a broadcast row of whole vectors: gathered in runs
    ((3, 5, 8), (3, 1, 8), "float32", 0),  # broadcast along the middle axis: offsets q * 8 + i in runs
    ((33, 1000), (1000,), "bfloat16", 0),
    ((7, 64), (64,), "int8", 0),
    ((9, 4100), (4100,), "float32", 1),  # rows of whole vectors, the row misaligned: element by element
    ((1000, 777), (777,), "float32", 0),  # ragged rows: no runs
    ((2, 3, 5, 7), (5, 1), "float64", 0),  # three merged axes: two magic divisions per element
])
def test_broadcast_rows_against_numpy(xshape: tuple[int, ...], yshape: tuple[int, ...], dtype: str,
                                      offset: int) -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x * 3 - y

    rng = np.random.default_rng()
    ints = dtype == "int8"
    x = rng.integers(-9, 9, xshape) if ints else fc.rounded(rng.uniform(-1, 1, xshape), dtype)
    y = rng.integers(-9, 9, yshape) if ints else fc.rounded(rng.uniform(-1, 1, yshape), dtype)
    c_order = lambda shape: _strides(np.empty(shape, np.uint8))  # in elements
    ybuf = tj.asarray(_raw(np.concatenate([np.zeros(offset, y.dtype), np.ravel(y)]), dtype))
    xv = _typed(tj.asarray(_raw(x, dtype)), dtype, xshape, c_order(xshape))
    yv = _typed(ybuf, dtype, yshape, c_order(yshape), offset)  # offset 1: not 16-byte aligned
    _, out = poisoned_out(xshape, dtype, False)
    f(xv, yv, out=out)
    want = (x * 3 - y).astype(np.int8) if ints else x * 3 - y
    tol = 0.0 if ints else fc.FLOAT_EPS[dtype] * 8
    np.testing.assert_allclose(host(out, dtype), want, rtol=0, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_math_functions_against_numpy(dtype: str) -> None:
    @tj.fuse
    def f(x, y, k):  # type: ignore[no-untyped-def]
        a = tj.exp2(x) + tj.log2(y) + tj.log1p(y) + tj.expm1(x) + tj.rsqrt(y)
        b = tj.sinh(x) * tj.cosh(x) + tj.asin(x * 0.5) + tj.acos(x * 0.5) + tj.atan(x) + tj.atan2(x, y)
        c = tj.fma(x, y, 1.0) + tj.truediv(x, y)
        return a, b, c, tj.isnan(tj.log(x)), tj.signbit(x - 0.25), tj.popc(k) + tj.clz(k)

    @tj.fuse(backend="cuda")  # Tile IR has no cube root
    def cube_root(x):  # type: ignore[no-untyped-def]
        return tj.cbrt(x)

    rng = np.random.default_rng()
    shape = (37, 1029)
    x = fc.rounded(rng.uniform(-1, 1, shape), dtype)
    y = fc.rounded(rng.uniform(0.5, 2, shape[-1:]), dtype)
    k = rng.integers(-(1 << 31), 1 << 31, shape).astype(np.int32)
    k[0, :3] = (0, -1, 1)
    xv = _typed(tj.asarray(_raw(x, dtype)), dtype, shape, (shape[1], 1))
    yv = _typed(tj.asarray(_raw(y, dtype)), dtype, y.shape, (1,))
    outs = [poisoned_out(shape, d, False)[1] for d in (dtype, dtype, dtype, "bool", "bool", "int32", dtype)]
    f(xv, yv, tj.asarray(k), out=tuple(outs[:6]))
    cube_root(xv, out=outs[6])
    want = [np.exp2(x) + np.log2(y) + np.log1p(y) + np.expm1(x) + 1 / np.sqrt(y),
            np.sinh(x) * np.cosh(x) + np.arcsin(x * 0.5) + np.arccos(x * 0.5) + np.arctan(x) + np.arctan2(x, y),
            x * y + 1.0 + x / y]
    tol = {"float32": 2e-5, "float64": 1e-12, "bfloat16": 6e-2}[dtype]
    for o, w in zip(outs[:3], want):
        np.testing.assert_allclose(host(o, dtype), w, rtol=tol, atol=tol)
    np.testing.assert_array_equal(host(outs[3], "bool"), x < 0)
    np.testing.assert_array_equal(host(outs[4], "bool"), fc.rounded(x - 0.25, dtype) < 0)
    u = k.view(np.uint32)
    clz = 32 - np.frompyfunc(int.bit_length, 1, 1)(u.astype(object)).astype(np.int32)
    np.testing.assert_array_equal(host(outs[5], "int32"), np.bitwise_count(u).astype(np.int32) + clz)
    np.testing.assert_allclose(host(outs[6], dtype), np.cbrt(x), rtol=tol, atol=tol)
