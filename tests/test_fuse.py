"""``tj.fuse`` without a GPU: tracing (operations, the tile language's promotion, located errors), numpy
broadcasting and the layouts calls get, which kernels a call compiles (one per layout, for every size), the
generated source (a golden text), compiles through NVRTC, ahead-of-time compiles and the command line, the disk
cache across processes; and the generated kernels run end to end by a numpy interpreter of tile IR
(``tile_interp``) on random fused functions (``fuse_cases``), through the call path's own argument building.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import fuse_cases as fc
import numpy as np
import pytest
import tile_interp as ti

import tilejit as tj
from tilejit.api import fuse as fuse_mod
from tilejit.api.fuse_layout import access, aligned_strides, broadcast_shapes, c_strides, coalesce, span
from tilejit.runtime.interop import ArrayView

CPU_CASES = int(os.environ.get("TILEJIT_FUSE_CPU_CASES", "120"))
BY_NAME_DT = {"float32": tj.float32, "float64": tj.float64, "bfloat16": tj.bfloat16}


class StandInDevice:
    """The current device as a fused call sees it: its ordinal, architecture and SM count (for splits)."""

    ordinal = 0
    arch = "sm_90"
    multiprocessor_count = 4


@pytest.fixture(autouse=True)
def device(use_device: Any) -> Any:
    return use_device(StandInDevice())


def view(shape: tuple[int, ...], dtype: str = "float32", strides: tuple[int, ...] | None = None,
         ptr: int = 0x10000) -> ArrayView:
    """An array as a call sees it (no memory behind it: for planning only)."""
    return ArrayView(ptr, tuple(shape), c_strides(tuple(shape)) if strides is None else tuple(strides), dtype, None)


@tj.fuse
def gelu_mul(x, y, bias):  # type: ignore[no-untyped-def]
    g = 0.5 * x * (1 + tj.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
    return g * y + bias


# =============================================================================================== tracing


def test_operations_are_recorded_with_the_users_lines() -> None:
    from tilejit.api.fuse_trace import ArraySpec, trace

    def f(x, y):  # type: ignore[no-untyped-def]
        a = x * 2.0
        return tj.exp(a) + y

    g = trace(f, ["x", "y"], [ArraySpec(tj.float32, 2), ArraySpec(tj.float32, 1)])
    ops = [(n.form[:2], n.where.line if n.where else None) for n in g.nodes if n.kind == "op"]
    line = f.__code__.co_firstlineno
    assert ops == [(("binary", "mul"), line + 1), (("call", "exp"), line + 2), (("binary", "add"), line + 2)]
    out = g.outputs[0]
    assert out.dtype == tj.float32 and out.rank == 2 and out.deps == frozenset({0, 1})


@pytest.mark.parametrize("a, b", [("bfloat16", "float32"), ("float16", "bfloat16"), ("int8", "uint8"),
                                  ("int32", "float16"), ("bool", "int16"), ("uint64", "int64"), ("bool", "bool")])
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "**", "&", "maximum", "<", "where", "exp"])
def test_promotion_is_the_tile_languages(a: str, b: str, op: str, tmp_path: Path) -> None:
    """A fused function's result dtype is what the same expression gives in a tile kernel, and what the kernel
    refuses, the fused function refuses with the same message."""
    special = {"maximum": "tj.maximum(x, y)", "where": "tj.where(x > 0, x, y)", "exp": "tj.exp(x) * y"}
    expr = special.get(op, f"x {op} y")
    ns: dict[str, Any] = {"tj": tj}
    exec(f"def f(x, y):\n    return {expr}\n", ns)
    fused = tj.fuse(ns["f"])
    path = tmp_path / "k.py"
    path.write_text(f"import tilejit as tj\n\n@tj.kernel\ndef k(x, y, out):\n"
                    f"    x = tj.load(x, index=(0,), shape=(4,))\n    y = tj.load(y, index=(0,), shape=(4,))\n"
                    f"    r = {expr}\n    tj.store(out, index=(0,), tile=r)\n")
    kernel = tmp_kernel(path)
    types = tuple(getattr(tj, d if d != "bool" else "bool_")[:] for d in (a, b, "float64"))
    try:
        fn = tj.compile(kernel, types, target="sm_90").ir()
    except tj.TileCompileError as exc:
        with pytest.raises(tj.TileCompileError) as refused:
            fused.specialize(view((4,), a), view((4,), b))
        assert refused.value.message == exc.message
        return
    want = next(o.results[0].type.dtype for o in fn.body.walk() if o.results and o.results[0].name == "r")
    assert fused.specialize(view((4,), a), view((4,), b)).out_dtypes == [want]


def tmp_kernel(path: Path) -> Any:
    """The ``@tj.kernel`` named ``k`` of the file ``path`` (tile kernels are read from their source file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.k


def test_python_numbers_are_weak_and_numpy_scalars_typed() -> None:
    @tj.fuse
    def scale(x, s):  # type: ignore[no-untyped-def]
        return x * s

    assert scale.specialize(view((8,), "bfloat16"), 2.5).out_dtypes == [tj.bfloat16]
    assert scale.specialize(view((8,), "int8"), 3).out_dtypes == [tj.int8]
    assert scale.specialize(view((8,), "int8"), 2.5).out_dtypes == [tj.float32]  # a float number with ints
    assert scale.specialize(view((8,), "bfloat16"), np.float32(2.5)).out_dtypes == [tj.float32]
    assert scale.specialize(view((8,), "float16"), True).out_dtypes == [tj.float16]
    src = scale.specialize(view((8,), "bfloat16"), 2.5).sources[0]
    assert "s: tj.float64" in src and "x_v * s.astype(tj.bfloat16)" in src

    @tj.fuse
    def both(x, s, t):  # type: ignore[no-untyped-def]
        return x * (s / t)  # numbers alone: computed in 64 bits, still weak

    src = both.specialize(view((8,), "float16"), 3, 4).sources[0]
    assert both.specialize(view((8,), "float16"), 3, 4).out_dtypes == [tj.float16]
    assert "s.astype(tj.float64) / t.astype(tj.float64)" in src


def test_numpy_functions_and_methods_trace() -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return np.where(x > y, np.exp(x), -np.abs(y)) + np.maximum(x, 1), np.tanh(x).astype(np.float16)

    spec = f.specialize(view((3, 4)), view((4,)))
    assert spec.out_dtypes == [tj.float32, tj.float16] and spec.out_shapes == [(3, 4), (3, 4)]
    src = spec.sources[0]
    for piece in ("tj.where(", "tj.exp(", "tj.abs(", "tj.maximum(", "tj.tanh(", ".astype(tj.float16)"):
        assert piece in src


def test_reductions_trace_with_their_dtypes() -> None:
    @tj.fuse
    def stats(x):  # type: ignore[no-untyped-def]
        return x.sum(axis=1), tj.max(x, axis=1), x.mean(axis=1), tj.min(x, axis=-1)

    assert stats.specialize(view((5, 6), "int8")).out_dtypes == [tj.int32, tj.int8, tj.float32, tj.int8]
    assert stats.specialize(view((5, 6), "bfloat16")).out_dtypes == [tj.bfloat16] * 4
    spec = stats.specialize(view((5, 6), "bfloat16"))
    assert spec.out_shapes == [(5,)] * 4
    assert "tj.full((" in spec.sources[0] and "tj.float32)" in spec.sources[0]  # bf16 sums accumulate in f32


# =============================================================================================== errors


def _raises_at(exc: pytest.ExceptionInfo[Any], func: Any, line_offset: int, text: str) -> None:
    e = exc.value
    assert e.filename == func.__code__.co_filename and e.line == func.__code__.co_firstlineno + line_offset, str(e)
    assert text in e.message, e.message


def test_unsupported_operations_are_located() -> None:
    def uses(expr: str) -> Any:
        ns: dict[str, Any] = {"tj": tj, "np": np, "math": __import__("math")}
        src = f"def f(x, y):\n    z = x + 1\n    return {expr}\n"
        path = Path(__file__).parent / "__fuse_error_case__.py"
        import linecache

        linecache.cache[str(path)] = (len(src), None, src.splitlines(True), str(path))
        exec(compile(src, str(path), "exec"), ns)
        return tj.fuse(ns["f"])

    cases = {
        "tj.cumsum(z)": "tj.cumsum() is not an elementwise operation",
        "tj.load(z, (0,), (4,))": "tj.load() is a memory operation",
        "z @ y": "operator @ is not elementwise",
        "z[0]": "cannot be indexed",
        "z if z > 0 else y": "truth value",
        "max(z, y)": "truth value",
        "math.exp(z)": "not a Python number",
        "np.fft.fft(z)": "not supported in a fused function",
        "z.shape[0] * z": "shape of a value is not known",
        "tj.exp(2.0) * z": "tj.* functions take traced values",
        "x.sum(axis=1) + y": "combines the result of a reduction",
        "tj.sum(tj.max(z, axis=0))": "nested reductions",
        "(x.astype(tj.int8) + 300)": "does not fit in int8",
        "(x > 0) - True": "not defined for bool tiles",
    }
    for expr, message in cases.items():
        f = uses(expr)
        with pytest.raises(tj.TileCompileError) as exc:
            f.specialize(view((3, 4)), view((4,)))
        _raises_at(exc, f.func, 2, message)
        assert exc.value.source_line is not None and exc.value.col is not None


def test_shapes_that_do_not_broadcast_name_both_arguments_at_the_operation() -> None:
    @tj.fuse
    def f(x, y, z):  # type: ignore[no-untyped-def]
        a = x * 2
        return a + y + z

    with pytest.raises(tj.TileCompileError) as exc:
        f.specialize(view((3, 4)), view((5,)), view((4,)))
    _raises_at(exc, f.func, 3, "argument 'x' of shape (3, 4) and argument 'y' of shape (5,) cannot be broadcast")


def test_argument_errors_name_the_argument_and_the_function() -> None:
    where = f"{__file__}:"
    with pytest.raises(tj.LaunchError, match=r"argument 'y' .*host \(CPU\) array") as exc:
        gelu_mul.specialize(view((4,)), np.ones(4, np.float32), view((4,)))
    assert where in str(exc.value)
    with pytest.raises(tj.LaunchError, match=r"argument .bias. .*complex64 array: the tile language has no such dtype"):
        gelu_mul.specialize(view((4,)), view((4,)), view((4,), "complex64"))
    with pytest.raises(tj.LaunchError, match=r"argument .x. .*does not fit in int64"):
        gelu_mul.specialize(1 << 70, view((4,)), view((4,)))
    with pytest.raises(tj.LaunchError, match=r"argument .y. .*expected a device array"):
        gelu_mul.specialize(view((4,)), "text", view((4,)))

    @tj.fuse
    def narrow(x, c):  # type: ignore[no-untyped-def]
        return x + c

    with pytest.raises(tj.LaunchError, match=r"argument 'c' .*300 does not fit the integer type it meets \(-128"):
        narrow(view((4,), "int8"), 300)


class _OtherDeviceArray:
    """A CuPy-like array on device 1 (``_device_ordinal`` reads ``.device.id`` of CuPy arrays)."""

    __module__ = "cupy"

    def __init__(self) -> None:
        self.device = type("D", (), {"id": 1})()

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (4,), "typestr": "<f4", "data": (0x10000, False), "version": 3, "strides": None}


def test_an_array_on_another_device_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.runtime import interop

    monkeypatch.setitem(interop._BY_TYPE, _OtherDeviceArray, interop._cai_view)
    with pytest.raises(tj.LaunchError, match=r"argument 'y' .*on device 1, but the current device is 0"):
        gelu_mul.specialize(view((4,)), _OtherDeviceArray(), view((4,)))


def test_out_must_match_the_results() -> None:
    with pytest.raises(tj.LaunchError, match=r"output 0 has shape \(4,\), the result has shape \(3, 4\)"):
        gelu_mul.specialize(view((3, 4)), view((3, 4)), view((4,)), out=view((4,)))
    with pytest.raises(tj.LaunchError, match="2 arrays given, the function returns 1"):
        gelu_mul.specialize(view((4,)), view((4,)), view((4,)), out=(view((4,)), view((4,))))
    with pytest.raises(tj.LaunchError, match="pass out= as one array"):
        gelu_mul.specialize(view((4,)), view((4,)), view((4,)), out=[view((4,))])


def test_overlapping_out_is_refused_unless_it_is_the_same_view(heap: ti.Heap) -> None:
    @tj.fuse
    def axpy(a, x, y):  # type: ignore[no-untyped-def]
        return a * x + y

    x, y = heap.put(np.arange(8.0, dtype=np.float32), "float32"), heap.put(np.ones(8, np.float32), "float32")
    emulate(axpy, [2.0, x, y], heap, out=y)  # in place
    np.testing.assert_array_equal(heap.read(y), 2 * np.arange(8) + 1)
    rev = ArrayView(y.ptr + 7 * 4, (8,), (-1,), "float32", None)
    with pytest.raises(tj.LaunchError, match=r"output 0 shares memory with argument 'y' .*laid out differently"):
        emulate(axpy, [2.0, x, rev], heap, out=y)

    @tj.fuse
    def total(x):  # type: ignore[no-untyped-def]
        return x.sum(keepdims=True)

    with pytest.raises(tj.LaunchError, match=r"shares memory with argument 'x' .*a reduction reads every input"):
        emulate(total, [x], heap, out=ArrayView(x.ptr, (1,), (1,), "float32", None))


def test_decorator_forms_and_their_errors() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        return x + 1

    assert isinstance(tj.fuse(f), tj.Fused) and isinstance(tj.fuse(backend="cuda")(f), tj.Fused)
    with pytest.raises(ValueError, match="backend must be one of"):
        tj.fuse(backend="metal")
    with pytest.raises(TypeError, match="expected a Python function"):
        tj.fuse(3)  # type: ignore[arg-type]

    def g(x, out):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(tj.TileCompileError, match="parameter named 'out'"):
        tj.fuse(g)

    def h(*xs):  # type: ignore[no-untyped-def]
        return xs[0]

    with pytest.raises(tj.TileCompileError, match=r"fused function parameters cannot be \*xs"):
        tj.fuse(h)

    @tj.fuse
    def nothing(x):  # type: ignore[no-untyped-def]
        return 3

    with pytest.raises(tj.TileCompileError, match="its result is the number 3"):
        nothing.specialize(view((4,)))


# =============================================================================================== layouts and kernels


def test_layout_helpers() -> None:
    assert broadcast_shapes([(3, 1), (4,), ()]) == (3, 4)
    assert broadcast_shapes([(3,), (4,)]) is None
    assert aligned_strides((4,), (1,), (3, 4)) == (0, 1)
    assert aligned_strides((3, 1), (1, 1), (3, 4)) == (1, 0)
    full = (2, 3, 4)
    sp = coalesce(full, [c_strides(full), c_strides(full)])
    assert sp.shape == (24,) and sp.strides == ((1,), (1,))
    sp = coalesce(full, [c_strides(full), aligned_strides((4,), (1,), full)])
    assert sp.shape == (6, 4) and sp.strides == ((4, 1), (0, 1))
    assert coalesce((3, 1, 4), [(4, 4, 1)]).shape == (12,)
    assert access((6, 4), (4, 1)).flat and not access((6, 4), (0, 1)).flat
    assert access((6, 4), (-4, -1)) == fuse_mod.Access(False, (0, 1), True)
    assert span((3, 4), (-4, 1)) == (-8, 4)


@pytest.mark.parametrize("shape", [(1,), (4095,), (4096,), (10, 10), (1000, 777), (2, 3, 4, 5, 6, 7)])
def test_one_kernel_for_every_size_of_contiguous_arrays(shape: tuple[int, ...]) -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x * y + 1

    before = len(f.kernels)
    spec = f.specialize(view(shape), view(shape))
    assert spec.grids == [-(-int(np.prod(shape)) // 4096)]
    if before:
        assert len(f.kernels) == 1
    src = spec.sources[0]
    assert "tj.load(x, index=(pid,), shape=(4096,))" in src and "tj.gather" not in src


def test_kernels_are_made_per_layout_and_reused_for_every_size() -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x - y

    for n in (1, 100, 5000, 1 << 20):
        f.specialize(view((n,)), view((n,)))
        f.specialize(view((3, n)), view((3, n)))  # merged to one axis: the same kernel
    assert len(f.kernels) == 1
    for m, n in ((3, 4), (5, 5000), (2, 1 << 12)):
        f.specialize(view((m, n)), view((n,)))  # y broadcast along rows, rows of whole 16-byte vectors
    assert len(f.kernels) == 2 and "tj.max_contiguous(tj.multiple_of(i1, 4), 4)" in f.kernels[1]
    for m, n in ((100, 7), (3, 6)):
        f.specialize(view((m, n)), view((n,)))  # ragged rows: element by element
    assert len(f.kernels) == 3 and "max_contiguous" not in f.kernels[2]
    f.specialize(view((7, 3)), view((7, 1)))  # along columns: another pattern
    f.specialize(view((7, 3), strides=(1, 7)), view((7, 3)))  # a transposed view: strided
    f.specialize(view((4,), strides=(-1,), ptr=0x1000c), view((4,)))  # reversed: offsets from the lowest element
    assert len(f.kernels) == 6
    f.specialize(view((7, 3)), view((7, 3)), out=view((7, 3), strides=(1, 7)))
    assert len(f.kernels) == 7
    f.specialize(view((9, 5)), view((9, 1)))  # the column pattern again, other sizes
    assert len(f.kernels) == 7
    big = f.specialize(view((1 << 20, 1 << 12)), view((1 << 12,)))  # 2**32 elements: 64-bit indices
    assert len(f.kernels) == 8 and "tj.int64" in big.sources[0] and "umulhi" not in big.sources[0]


def test_golden_elementwise_kernel() -> None:
    """The kernel of ``gelu_mul`` with a bias along the rows, as generated (readable, commented with lines)."""
    src = gelu_mul.specialize(view((64, 1000)), view((64, 1000)), view((1000,))).sources[0]
    head, doc, body = src.split('"""')
    assert head.endswith("\n@tj.kernel\ndef gelu_mul(x, y, bias, out, n1: tj.int32, n1_m: tj.uint32, "
                         "n1_s: tj.uint32):\n    ")
    assert " ".join(doc.split()) == (f"tj.fuse of gelu_mul ({gelu_mul.func.__code__.co_filename}:"
                                     f"{gelu_mul.func.__code__.co_firstlineno}): elementwise over 2 merged axes, "
                                     "tiles of 4096, 32-bit indices; x flat, y flat, bias gathered in runs of 4.")
    line = gelu_mul.func.__code__.co_firstlineno
    want = """
        pid = tj.bid(0)
        e = pid * 4096 + tj.arange(4096)  # the flat (C order) index of each element of this tile
        q1 = (tj.umulhi(e.astype(tj.uint32), n1_m) >> n1_s).astype(tj.int32)  # e // n1
        i1 = e - q1 * n1
        bias_off = tj.max_contiguous(tj.multiple_of(i1, 4), 4)  # runs of 4 consecutive offsets
        x_v = tj.load(x, index=(pid,), shape=(4096,))
        y_v = tj.load(y, index=(pid,), shape=(4096,))
        bias_v = tj.gather(bias, bias_off)
        v3 = 0.5 * x_v  # L2
        v4 = 0.044715 * x_v  # L2
        v5 = v4 * x_v  # L2
        v6 = v5 * x_v  # L2
        v7 = x_v + v6  # L2
        v8 = 0.7978845608 * v7  # L2
        v9 = tj.tanh(v8)  # L2
        v10 = 1 + v9  # L2
        v11 = v3 * v10  # L2
        v12 = v11 * y_v  # L3
        v13 = v12 + bias_v  # L3
        tj.store(out, index=(pid,), tile=v13)
    """
    here = gelu_mul.func.__code__.co_filename
    want = textwrap.dedent(want).replace("L2", f"{here}:{line + 2}").replace("L3", f"{here}:{line + 3}")
    assert body == textwrap.indent(want, "    ")


def test_golden_reduction_kernel() -> None:
    @tj.fuse
    def rms(x, eps):  # type: ignore[no-untyped-def]
        return tj.rsqrt((x * x).mean(axis=-1) + eps)

    src = rms.specialize(view((4096, 4096), "bfloat16"), 1e-6).sources[0]
    body = src.split('"""')[2]
    want = '''
        pid = tj.bid(0)
        ek = pid * 1 + tj.arange(1)  # the flat index of each output of this tile (kept axes)
        x_koff = (ek * x_k0)[:, None]
        acc3 = tj.full((1,), 0, tj.float32)
        for r in range(0, nr, 4096):
            er = (r + tj.arange(4096))[None, :]  # the flat index of each reduced element (reduced axes)
            x_v = tj.gather(x, x_koff + er * x_r0)
            v2 = x_v * x_v  # LOC
            valid = er < nr  # lanes past the end hold the identity
            acc3 = acc3 + tj.sum(tj.where(valid, v2.astype(tj.float32), 0), axis=1)  # LOC
        v3 = (acc3 / count).astype(tj.bfloat16)  # LOC
        v4 = v3 + eps.astype(tj.bfloat16)  # LOC
        v5 = tj.rsqrt(v4)  # LOC
        tj.store(out, index=(pid,), tile=v5)
    '''
    loc = f"{rms.func.__code__.co_filename}:{rms.func.__code__.co_firstlineno + 2}"
    assert body == textwrap.indent(textwrap.dedent(want).replace("LOC", loc), "    ")


def test_generated_source_is_registered_and_errors_point_at_the_users_line() -> None:
    import inspect
    import linecache

    spec = gelu_mul.specialize(view((10,)), view((10,)), view((10,)))
    prog = next(p for p in gelu_mul._programs.values() if p.source.text == spec.sources[0])
    linecache.clearcache()
    prog.register()
    assert inspect.getsource(prog.kernel.func).startswith("@tj.kernel")
    line = next(k for k, n in prog.source.lines.items() if n.form[:2] == ("call", "tanh"))
    err = tj.TileCompileError("something the backend refused", prog.filename, line, 4, "    v9 = tj.tanh(v8)")
    moved = prog.relocated(err)
    assert moved.filename == gelu_mul.func.__code__.co_filename
    assert moved.line == gelu_mul.func.__code__.co_firstlineno + 2
    assert "something the backend refused" in moved.message and prog.filename in moved.message


# =============================================================================================== compiling


@pytest.fixture
def heap() -> ti.Heap:
    return ti.Heap()


LAYOUT_CASES = [
    ((64, 100), (64, 100), None),
    ((64, 100), (100,), None),
    ((64, 100), (64, 1), None),
    ((2, 3, 4, 5, 6, 7), (7,), None),
    ((), (), None),
]


@pytest.mark.parametrize("xs, ys, _", LAYOUT_CASES)
def test_kernels_compile_through_nvrtc(nvrtc_here: Path, xs: tuple[int, ...], ys: tuple[int, ...], _: Any) -> None:
    @tj.fuse
    def f(x, y, s):  # type: ignore[no-untyped-def]
        return tj.where(x > y, x * s, tj.sigmoid(y)), (x - y).astype(tj.bfloat16)

    spec = f.specialize(view(xs), view(ys, "bfloat16"), 0.5)
    for art in spec.compile("sm_90", backend="cuda"):
        assert art.cubin()[:4] == b"\x7fELF"
        assert ".entry f(" in art.ptx()


def test_strided_reversed_and_reduction_kernels_compile(nvrtc_here: Path) -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x / (tj.abs(y) + 1)

    spec = f.specialize(view((30, 40), strides=(1, 30)), view((40,), strides=(-1,), ptr=0x10000 + 39 * 4),
                        out=view((30, 40), strides=(80, 2)))
    src = spec.sources[0]
    assert "y_base" in src and "tj.scatter(out" in src and "tj.gather(x" in src
    for art in spec.compile("sm_90", backend="cuda"):
        assert art.cubin()[:4] == b"\x7fELF"

    @tj.fuse
    def g(x):  # type: ignore[no-untyped-def]
        return (x * x).sum(axis=0), tj.max(x, axis=0)

    spec = g.specialize(view((100_000, 3)))  # few outputs, many elements: split over blocks, then combined
    assert len(spec.sources) == 2 and "nsplit" in spec.sources[0] and "ntiles" in spec.sources[1]
    for art in spec.compile("sm_90", backend="cuda"):
        assert art.cubin()[:4] == b"\x7fELF"


def test_tj_compile_and_the_command_line_compile_ahead_of_time(nvrtc_here: Path, tmp_path: Path) -> None:
    art = tj.compile(gelu_mul, "float32[:, :], float32[:, :], float32[:]", target="sm_90", backend="cuda")
    assert ".entry gelu_mul(" in art.ptx() and art.cubin()[:4] == b"\x7fELF"
    assert "gather" in art.ir_text()  # the bias is broadcast over the rows
    flat = tj.compile(gelu_mul, (tj.bfloat16[:, :], tj.bfloat16[:, :], tj.bfloat16[:, :]), target="sm_90",
                      backend="cuda")
    assert "gather" not in flat.ir_text() and "tj::load<8" in flat.cuda_source()
    with pytest.raises(TypeError, match="takes 3 parameters"):
        tj.compile(gelu_mul, "float32[:]", target="sm_90")
    with pytest.raises(TypeError, match="takes a signature, target= and backend= only"):
        tj.compile(gelu_mul, "float32[:], float32[:], float32[:]", target="sm_90", constants={"T": 1})
    src = tmp_path / "fused.py"
    src.write_text(textwrap.dedent("""
        import tilejit as tj

        @tj.fuse
        def scale_add(x, y, a):
            return x * a + y
    """))
    done = subprocess.run([sys.executable, "-m", "tilejit", "compile", str(src), "--kernel", "scale_add",
                           "--signature", "float16[:,:], float16[:], float", "--arch", "sm_80,sm_90", "--emit",
                           "ir,cuda,cubin", "--backend", "cuda", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": _repo()}, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    want = [f"fused.scale_add.{sm}.{ext}" for sm in ("sm_80", "sm_90") for ext in ("cu", "cubin", "ir")]
    assert names == [*want, "tilejit"]  # the device headers the .cu includes, beside it
    assert "a: f64" in (tmp_path / "out" / "fused.scale_add.sm_90.ir").read_text()


def _repo() -> str:
    return str(Path(__file__).resolve().parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")


def test_a_new_process_finds_the_kernels_in_the_disk_cache(nvrtc_here: Path, tmp_path: Path) -> None:
    script = tmp_path / "fused.py"
    script.write_text(textwrap.dedent("""
        import tilejit as tj
        from tilejit.runtime import device
        from tilejit.runtime.interop import ArrayView

        class Device:
            ordinal, arch, multiprocessor_count = 0, "sm_90", 4

        device.thread_state().device[0] = Device()

        @tj.fuse
        def f(x, y):
            return x * y + tj.sin(x)

        from tilejit.api import loader
        from tilejit.api.kernel import _source_fingerprint

        compiled = []
        record = loader._compile_recorded
        loader._compile_recorded = lambda *a: compiled.append(1) or record(*a)

        x = ArrayView(0x10000, (5, 7), (7, 1), "float32", None)
        b = ArrayView(0x10000, (7,), (1,), "float32", None)
        for art in f.specialize(x, b).compile("sm_90", backend="cuda"):
            fresh = tj.Artifact(art.kernel_func, art.name, art.arg_types, art.constants, art.target, None, art.hints,
                                "cuda")  # not yet translated, as a launch's
            loader._entry(fresh, _source_fingerprint(art.kernel_func), False)  # what a launch loads
            print("compiled" if compiled else "cached")
    """))
    env = {**os.environ, "PYTHONPATH": _repo()}
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert [r.stdout.split() for r in runs] == [["compiled"], ["cached"]]


# =============================================================================================== running (interpreted)


def heap_arg(heap: ti.Heap, arg: fc.Arg) -> Any:
    """The argument in ``heap`` in its layout (``fc.physical``, as tests/test_fuse_gpu.py places it on a device)."""
    if arg.kind == "weak":
        return arg.values
    if arg.kind == "scalar":
        return np.dtype("float32" if arg.dtype == "bfloat16" else arg.dtype).type(arg.values)
    phys, strides, offset = fc.physical(arg)
    buf = heap.put(phys, arg.dtype)
    item = 2 if arg.dtype == "bfloat16" else np.dtype(arg.dtype).itemsize
    return ArrayView(buf.ptr + offset * item, np.shape(arg.values), strides, arg.dtype, None)


def emulate(f: Any, args: list[Any], heap: ti.Heap, out: Any = None) -> list[np.ndarray]:
    """Call ``f`` as a GPU call would (its key, recipe and kernel arguments), running each launch's kernel (its
    optimized IR) with the interpreter; outputs are poisoned first; returns the outputs' values."""
    spec = f.specialize(*args, out=out)
    key, views, nums, out_views, _ = f._key(args, out, f._local.cell)
    recipe = f._recipes[key]
    if out is None:
        out_views = [heap.put(np.full(s, np.nan if d.is_float else 77).astype(ti.HOLD[d.name]), d.name)
                     for s, d in zip(recipe.out_shapes, recipe.out_dtypes)]
    else:
        f._check_overlaps(recipe, views, out_views)  # as a call does
    works = [heap.put(np.full(s, 1e30 if d.is_float else 77).astype(ti.HOLD[d.name]), d.name) for s, d in recipe.works]
    arts = spec.compile("sm_90", backend="cuda")
    for launch, art in zip(recipe.launches, arts):
        ti.run(art.ir(), heap, launch.grid, fuse_mod.kernel_args(launch, views, nums, out_views, works))
    return [heap.read(o) for o in out_views]


def test_interpreted_gelu_bias_and_reductions(heap: ti.Heap) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((33, 4100)).astype(np.float32)
    y = rng.standard_normal((33, 4100)).astype(np.float32)
    b = rng.standard_normal(4100).astype(np.float32)
    got = emulate(gelu_mul, [heap.put(x, "float32"), heap.put(y, "float32"), heap.put(b, "float32")], heap)[0]
    want = 0.5 * x * (1 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x))) * y + b
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    @tj.fuse
    def stats(x, y):  # type: ignore[no-untyped-def]
        p = x * y
        return p.sum(axis=1), tj.max(p, axis=1), tj.min(p, axis=1, keepdims=True), p.mean(axis=1)

    for shape, columns in (((3, 20_000), False), ((20_000, 3), True), ((50, 300), False), ((7, 5), False)):
        a = rng.standard_normal(shape).astype(np.float32)
        c = rng.standard_normal(shape).astype(np.float32)
        va, vc = heap.put(a, "float32"), heap.put(c, "float32")
        if columns:  # reduce the outer axis of transposed views
            va = ArrayView(va.ptr, shape[::-1], va.strides[::-1], "float32", None)
            vc = ArrayView(vc.ptr, shape[::-1], vc.strides[::-1], "float32", None)
            a, c = a.T, c.T
        s, mx, mn, mean = emulate(stats, [va, vc], heap)
        p = a.astype(np.float64) * c
        np.testing.assert_allclose(s, p.sum(axis=1), rtol=1e-5, atol=1e-3)
        np.testing.assert_array_equal(mx, (a * c).max(axis=1))
        np.testing.assert_array_equal(mn, (a * c).min(axis=1, keepdims=True))
        np.testing.assert_allclose(mean, p.mean(axis=1), rtol=1e-5, atol=1e-6)
    assert any("nsplit" in k for k in stats.kernels)  # few outputs: split over blocks, then combined
    assert any("[None, :]" in k and "axis=0)" in k for k in stats.kernels)  # columns: (TR, TK) tiles


def test_interpreted_strided_out_and_broadcast_outputs(heap: ti.Heap) -> None:
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x * y, y + 1  # the second depends on y alone: shape (7,)

    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    y = np.arange(7, dtype=np.float32)
    o1 = heap.put(np.full((7, 10), np.nan, np.float32), "float32")
    o1v = ArrayView(o1.ptr, (5, 7), (1, 10), "float32", None)  # transposed, inside a larger poisoned buffer
    o2 = heap.put(np.full(14, np.nan, np.float32), "float32")
    o2v = ArrayView(o2.ptr + 13 * 4, (7,), (-2,), "float32", None)  # every other element, reversed
    r1, r2 = emulate(f, [heap.put(x, "float32"), heap.put(y, "float32")], heap, out=(o1v, o2v))
    np.testing.assert_array_equal(r1, x * y)
    np.testing.assert_array_equal(r2, y + 1)
    whole1, whole2 = heap.read(o1), heap.read(o2)
    assert np.isnan(whole1[:, 5:]).all() and np.isnan(whole2[::2]).all()  # nothing outside the views written


def test_magic_numbers_divide_every_32_bit_index() -> None:
    """``umulhi(n, m) >> s == n // d`` for the extremes and random dividends and divisors (the kernels' index
    decomposition with 32-bit indices)."""
    from tilejit.api.fuse_layout import magic

    rng = np.random.default_rng(5)
    divisors = [2, 3, 4, 5, 7, 1000, 4096, 4097, (1 << 30) + 1, (1 << 31) - 1, *rng.integers(2, 1 << 31, 2000)]
    for d in map(int, divisors):
        m, sh = magic(d)
        assert 0 < m < 1 << 32 and sh >= 0
        for n in (0, 1, d - 1, d, d + 1, (1 << 31) - 1, ((1 << 31) - 1) // d * d - 1, *rng.integers(0, 1 << 31, 8)):
            if n >= 0:
                assert ((int(n) * m) >> 32) >> sh == int(n) // d, (n, d)


@pytest.mark.parametrize("xshape, yshape, dtype, runs", [
    ((3, 5, 8), (5, 8), "float32", 4),  # a broadcast matrix: rows of 40 merged
    ((3, 5, 8), (3, 1, 8), "float32", 4),  # broadcast along the middle axis: offsets q * 8 + i
    ((6, 16), (16,), "bfloat16", 8),
    ((4, 32), (32,), "int8", 16),
    ((5, 6), (6,), "float32", 0),  # rows of 6: not whole vectors
])
def test_interpreted_gathers_in_runs(heap: ti.Heap, xshape: tuple[int, ...], yshape: tuple[int, ...], dtype: str,
                                     runs: int) -> None:
    """A broadcast operand whose rows are whole vectors is gathered with run promises (the interpreter checks them)
    and sizes are divided by magic numbers; results are numpy's."""
    @tj.fuse
    def f(x, y):  # type: ignore[no-untyped-def]
        return x * 3 + y

    rng = np.random.default_rng(11)
    x = rng.integers(-9, 9, xshape).astype(ti.HOLD[dtype])
    y = rng.integers(-9, 9, yshape).astype(ti.HOLD[dtype])
    got = emulate(f, [heap.put(x, dtype), heap.put(y, dtype)], heap)[0]
    np.testing.assert_array_equal(got, (x * 3 + y).astype(ti.HOLD[dtype]))
    src = f.kernels[-1]
    code = [line.split("#")[0] for line in src.split('"""')[2].splitlines()]
    assert "tj.umulhi(e.astype(tj.uint32)" in src and not any(" // " in c for c in code)
    assert ("tj.max_contiguous(tj.multiple_of(" in src) == bool(runs)
    if runs:
        assert f"{runs}), {runs})  # runs of {runs} consecutive offsets" in src


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_interpreted_math_functions(heap: ti.Heap, dtype: str) -> None:
    """The language's further math functions fuse (one kernel, several outputs) and compute numpy's values."""
    @tj.fuse
    def f(x, y, k):  # type: ignore[no-untyped-def]
        a = tj.exp2(x) + tj.log2(y) + tj.log1p(y) + tj.expm1(x) + tj.rsqrt(y)
        b = tj.sinh(x) * tj.cosh(x) + tj.asin(x * 0.5) + tj.acos(x * 0.5) + tj.atan(x) + tj.atan2(x, y)
        c = tj.fma(x, y, 1.0) + tj.truediv(x, y)
        return a, b, c, tj.isnan(tj.log(x)), tj.isinf(tj.exp(x * 1000.0)), tj.signbit(x - 0.25), \
            tj.popc(k) + tj.clz(k)

    @tj.fuse
    def cube_root(x):  # type: ignore[no-untyped-def]
        return tj.cbrt(x)  # the CUDA backend's alone (Tile IR has no cbrt)

    rng = np.random.default_rng(8)
    x = ti.hold(rng.uniform(-1, 1, (7, 33)), BY_NAME_DT[dtype])
    x[0, :3] = 0.0
    y = ti.hold(rng.uniform(0.5, 2, (33,)), BY_NAME_DT[dtype])
    k = rng.integers(-(1 << 31), 1 << 31, (7, 33)).astype(np.int32)
    k[0, :3] = (0, -1, 1)
    vx = heap.put(x, dtype)
    got = emulate(f, [vx, heap.put(y, dtype), heap.put(k, "int32")], heap)
    assert len(f.kernels) == 1
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = [np.exp2(x64) + np.log2(y64) + np.log1p(y64) + np.expm1(x64) + 1 / np.sqrt(y64),
            np.sinh(x64) * np.cosh(x64) + np.arcsin(x64 * 0.5) + np.arccos(x64 * 0.5) + np.arctan(x64)
            + np.arctan2(x64, y64),
            x64 * y64 + 1.0 + x64 / y64]
    tol = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 5e-2}[dtype]
    for g, w in zip(got[:3], want):
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol)
    np.testing.assert_array_equal(got[3], x < 0)
    limit = 709.78 if dtype == "float64" else 88.72  # bfloat16 computes in float32
    np.testing.assert_array_equal(got[4], x64 * 1000.0 > limit)
    assert got[4].any() and not got[4].all()
    np.testing.assert_array_equal(got[5], ti.hold(x64 - 0.25, BY_NAME_DT[dtype]) < 0)
    u = k.view(np.uint32)
    clz = 32 - np.frompyfunc(int.bit_length, 1, 1)(u.astype(object)).astype(np.int32)
    np.testing.assert_array_equal(got[6], np.bitwise_count(u).astype(np.int32) + clz)
    root = emulate(cube_root, [vx], heap)[0]
    np.testing.assert_allclose(root.astype(np.float64), np.cbrt(x64), rtol=tol, atol=tol)


@pytest.mark.parametrize("block", range(4))
def test_interpreted_random_fused_functions_match_numpy(block: int) -> None:
    """Random fused functions (``fuse_cases``), run by the interpreter through the call path, against numpy."""
    from test_fuse_gpu import load

    failures = []
    seeds = range(block, CPU_CASES, 4)
    for seed in seeds:
        case = fc.generate(seed)
        heap = ti.Heap()
        try:
            f = load(case)
            args = [heap_arg(heap, a) for a in case.args]
            got = emulate(f, args, heap)
            for k, want in enumerate(case.expected):
                if got[k].shape != want.shape:
                    raise AssertionError(f"output {k}: shape {got[k].shape}, numpy {want.shape}")
                if not np.issubdtype(want.dtype, np.floating):
                    bad = got[k] != want.astype(got[k].dtype)
                else:
                    bad = ~(np.abs(got[k].astype(np.float64) - want) <= case.tolerance(k))
                if np.any(bad):
                    ix = tuple(np.argwhere(bad)[0])
                    raise AssertionError(f"output {k}: {int(bad.sum())} of {bad.size} differ, e.g. at {ix}: "
                                         f"{got[k][ix]} vs {want[ix]}")
        except Exception as exc:
            failures.append(f"{case.report()}\n{type(exc).__name__}: {exc}")
    assert not failures, f"{len(failures)} of {len(seeds)} differ:\n\n" + "\n\n".join(failures[:3])


def test_the_readme_examples_trace() -> None:
    """The fused functions of README.md's section define and specialize as written."""
    import ast
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Fused elementwise functions", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    tree = ast.parse(code.group(1))
    defs = ast.Module([n for n in tree.body if isinstance(n, ast.FunctionDef)], type_ignores=[])
    ns: dict[str, Any] = {"tj": tj, "np": np}
    exec(compile(defs, "<README.md>", "exec"), ns)
    spec = ns["gelu_bias"].specialize(view((8, 16)), view((8, 16)), view((16,)), 2.0)
    assert spec.out_dtypes == [tj.float32, tj.float16] and spec.out_shapes == [(8, 16), (8, 16)]
    spec = ns["rms"].specialize(view((8, 16), "bfloat16"), 1e-6)
    assert spec.out_dtypes == [tj.bfloat16] and spec.out_shapes == [(8,)]


def test_interpreted_reductions_into_strided_out(heap: ti.Heap) -> None:
    """Reductions written through out= views (reversed, every other element, keepdims), split or not."""

    @tj.fuse
    def stats(x):  # type: ignore[no-untyped-def]
        return tj.max(x, axis=0, keepdims=True), (x * 2).sum(axis=0)

    rng = np.random.default_rng(4)
    for rows in (5, 30_000):  # one tile of rows, and split over blocks then combined
        x = rng.standard_normal((rows, 9)).astype(np.float32)
        o1 = heap.put(np.full(9, np.nan, np.float32), "float32")
        o2 = heap.put(np.full(18, np.nan, np.float32), "float32")
        v1 = ArrayView(o1.ptr + 8 * 4, (1, 9), (9, -1), "float32", None)
        v2 = ArrayView(o2.ptr, (9,), (2,), "float32", None)
        mx, s = emulate(stats, [heap.put(x, "float32")], heap, out=(v1, v2))
        np.testing.assert_array_equal(mx, x.max(axis=0, keepdims=True))
        np.testing.assert_allclose(s, (2 * x.astype(np.float64)).sum(axis=0), rtol=1e-5, atol=1e-3)
        assert np.isnan(heap.read(o2)[1::2]).all()
    assert any("nsplit" in k for k in stats.kernels) and any("tj.scatter(out" in k for k in stats.kernels)


def test_interpreted_outputs_next_to_an_empty_one(heap: ti.Heap) -> None:
    @tj.fuse
    def f(x, y, s):  # type: ignore[no-untyped-def]
        return x * y, y + s, s * 2

    y = np.arange(5, dtype=np.float32)
    e, r, t = emulate(f, [heap.put(np.empty((0, 5), np.float32), "float32"), heap.put(y, "float32"), 1.5], heap)
    assert e.shape == (0, 5) and r.shape == (5,) and t.shape == ()
    np.testing.assert_array_equal(r, y + 1.5)
    assert float(t) == 3.0


def test_interpreted_reduction_of_an_empty_array(heap: ti.Heap) -> None:
    """A sum over zero elements is one block writing 0 (its mean: NaN), not a launch of zero blocks."""

    @tj.fuse
    def total(x):  # type: ignore[no-untyped-def]
        return x.sum(), x.mean()

    s, m = emulate(total, [heap.put(np.empty((0,), np.float32), "float32")], heap)
    assert float(s) == 0.0 and np.isnan(m)
