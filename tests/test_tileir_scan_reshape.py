"""Reshapes of values computed from a scan (cumsum) on the Tile IR backend. tileiras 13.5 aborts (or exits 5 with
only "failed to compile Tile IR program") on a reshape that splits the scan axis of a scan of fewer than 128
elements; the lowering passes such a scan's result through a ``max`` reduce over a leading unit dimension, which
changes no value. On the CPU: the patterns (and the GPU fuzzer's programs 371 and 388 that found it) compile
for each target, the barrier sits where it should and changes no CUBIN without a reshape; on a GPU: the values
against numpy on both backends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import fuzz_model as fm
import numpy as np
import pytest
from test_fuzz_gpu import load_kernel, run_program, signature
from test_tileir_coverage import same_module_text

import tilejit as tj
from tilejit.backends.tileir import generate_bytecode, module_text
from tilejit.backends.tileir.lower import reduce as lower_reduce
from tilejit.compiler.tileiras import disassemble, run_tileiras
from tilejit.errors import CompileError

#: Each target with the oldest bytecode version that may target it, and 13.5.
TARGET_VERSIONS = [("sm_80", "13.2"), ("sm_80", "13.5"), ("sm_90", "13.3"), ("sm_90", "13.5"),
                   ("sm_100", "13.1"), ("sm_100", "13.5")]


@tj.kernel
def scan_reshape(x, out, SHAPE: tj.Constant, AXIS: tj.Constant[int], TO: tj.Constant):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,) * len(SHAPE), shape=SHAPE)
    tj.store(out, index=(0,) * len(TO), tile=(t.cumsum(AXIS) * 2).reshape(TO))


@tj.kernel
def scan_cast_reshape(x, out, SHAPE: tj.Constant, AXIS: tj.Constant[int], TO: tj.Constant):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,) * len(SHAPE), shape=SHAPE)
    tj.store(out, index=(0,) * len(TO), tile=tj.reshape(tj.astype(tj.cumsum(t, axis=AXIS), tj.float64), TO))


@tj.kernel
def scan_reshape_sum(x, out, SHAPE: tj.Constant, AXIS: tj.Constant[int], TO: tj.Constant):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,) * len(SHAPE), shape=SHAPE)
    tj.store(out, index=(0,) * (len(TO) - 1), tile=tj.sum((t.cumsum(AXIS) + t).reshape(TO), 0))


@tj.kernel
def scan_only(x, out, SHAPE: tj.Constant, AXIS: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,) * len(SHAPE), shape=SHAPE)
    tj.store(out, index=(0,) * len(SHAPE), tile=t.cumsum(AXIS) * 2)


#: (input shape, scan axis, reshape): each splits the scan axis of a scan of fewer than 128 elements (the last
#: one has 512 elements: no barrier, and tileiras compiles it).
PATTERNS = [((4, 8), 1, (8, 4)), ((4, 8), 1, (4, 2, 4)), ((4, 8), 0, (2, 16)), ((1, 32), 1, (2, 8, 2)),
            ((32,), 0, (4, 8)), ((2, 4, 8), 1, (2, 2, 2, 8)), ((8, 8), 1, (8, 2, 4)), ((8, 64), 1, (8, 8, 8))]
PATTERN_IDS = ["x".join(map(str, s)) + f"-axis{a}-to-" + "x".join(map(str, t)) for s, a, t in PATTERNS]
#: (kernel, input dtype, output dtype) of the patterns: an elementwise op, a cast, a reduce after the reshape.
KERNELS = [(scan_reshape, "float32", "float32"), (scan_reshape, "float16", "float16"),
           (scan_reshape, "bfloat16", "bfloat16"), (scan_reshape, "float64", "float64"),
           (scan_reshape, "int32", "int32"), (scan_reshape, "uint32", "uint32"), (scan_reshape, "int8", "int32"),
           (scan_reshape, "int64", "int64"), (scan_cast_reshape, "float32", "float64"),
           (scan_reshape_sum, "float32", "float32")]
KERNEL_IDS = [f"{k.__name__}-{i}" for k, i, _ in KERNELS]


def _array(dtype: str, ndim: int) -> Any:
    """The ``tj.compile`` type of a rank-``ndim`` array of ``dtype``."""
    return getattr(tj, dtype)[(slice(None),) * ndim]


def _artifact(kernel: Any, in_dt: str, out_dt: str, shape: tuple[int, ...], axis: int, to: tuple[int, ...],
              target: str = "sm_90") -> Any:
    """``kernel`` compiled for ``target`` on the Tile IR backend (``scan_only`` takes no ``to``)."""
    constants: dict[str, Any] = {"SHAPE": shape, "AXIS": axis}
    if kernel is scan_only:
        out_ndim = len(shape)
    else:
        constants["TO"] = to
        out_ndim = len(to) - 1 if kernel is scan_reshape_sum else len(to)
    return tj.compile(kernel, (_array(in_dt, len(shape)), _array(out_dt, out_ndim)), constants=constants,
                      target=target, backend="tileir")


def _cubin(art: Any, target: str, version: str, toolchain: Any) -> bytes:
    """The CUBIN tileiras makes of ``art``'s kernel for ``target`` from bytecode ``version``."""
    return run_tileiras(generate_bytecode(art.ir(), target, version, art.hints), target, toolchain=toolchain)


@pytest.mark.parametrize(("shape", "axis", "to"), PATTERNS, ids=PATTERN_IDS)
def test_reshapes_splitting_a_small_scans_axis_compile_for_each_target(
        shape: tuple[int, ...], axis: int, to: tuple[int, ...], tileir_env: Any) -> None:
    """``(t.cumsum(axis) * 2).reshape(to)`` on float32: tileiras compiles it for sm_80, sm_90 and sm_100 at the
    oldest bytecode version each takes and at 13.5, and tileirdisasm reads it back."""
    art = _artifact(scan_reshape, "float32", "float32", shape, axis, to)
    for target, version in TARGET_VERSIONS:
        assert _cubin(art, target, version, tileir_env)[:4] == b"\x7fELF", (target, version)
    assert same_module_text(disassemble(art.tileir_bytecode(), toolchain=tileir_env), art.tileir_text())


@pytest.mark.parametrize(("kernel", "in_dt", "out_dt"), KERNELS, ids=KERNEL_IDS)
def test_each_dtype_and_consumer_of_the_reshape_compiles(kernel: Any, in_dt: str, out_dt: str,
                                                          tileir_env: Any) -> None:
    """The doc's example ((4, 8) scanned along 1, reshaped to (8, 4)) for each dtype, through a cast, and
    with a reduce after the reshape: a CUBIN for each target through the artifact."""
    for target in ("sm_80", "sm_90", "sm_100"):
        art = _artifact(kernel, in_dt, out_dt, (4, 8), 1, (8, 4), target)
        assert art.cubin()[:4] == b"\x7fELF", target


@pytest.mark.parametrize("seed", [371, 388])
def test_the_fuzz_programs_that_found_it_compile(seed: int, tileir_env: Any, tmp_path: Path) -> None:
    """The GPU fuzzer's programs 371 ((1, 32) cumsum reshaped to (2, 8, 2)) and 388 ((1, 32) to (4, 4, 2), then a
    cumsum of that) compile to CUBINs for each target."""
    prog = fm.generate(seed)
    assert "cumsum" in prog.source and "reshape" in prog.source
    kernel = load_kernel(prog, tmp_path)
    for target in ("sm_80", "sm_90", "sm_100"):
        art = tj.compile(kernel, signature(prog), target=target, backend="tileir")
        assert art.cubin()[:4] == b"\x7fELF", target


def test_without_the_barrier_tileiras_13_5_fails_on_the_pattern(tileir_env: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The trigger, measured: with the barrier off, tileiras 13.5 cannot compile the doc's example for any
    target (a 128-element scan split the same way compiles, so the barrier stops below 128)."""
    if not tileir_env.tileiras_version.startswith("13.5"):
        pytest.skip(f"the failure was measured with tileiras 13.5, not {tileir_env.tileiras_version}")
    small = _artifact(scan_reshape, "float32", "float32", (4, 8), 1, (8, 4))
    big = _artifact(scan_reshape, "float32", "float32", (128,), 0, (4, 32))
    small.ir(), big.ir()  # the session's coverage check records them here, with the barrier
    monkeypatch.setattr(lower_reduce, "SMALL_SCAN", 0)
    for target in ("sm_80", "sm_90", "sm_100"):
        with pytest.raises(CompileError):
            _cubin(small, target, "13.5", tileir_env)
        assert _cubin(big, target, "13.5", tileir_env)[:4] == b"\x7fELF"


def test_the_barrier_follows_scans_of_fewer_than_128_elements_only(tileir_env: Any) -> None:
    """A scan of 64 elements is followed by a reshape to a leading unit dimension and a max reduce over it
    (identity -inf for floats, the lowest value for integers); a scan of 128 elements is not."""
    small = module_text(_artifact(scan_only, "float32", "float32", (8, 8), 1, ()).ir(), "sm_90")
    lines = [line.strip() for line in small.splitlines()]
    at = next(i for i, line in enumerate(lines) if " = scan " in line)
    assert lines[at + 5].endswith("= reshape %" + lines[at].split()[0][1:] + " : tile<8x8xf32> -> tile<1x8x8xf32>")
    assert " = reduce " in lines[at + 6] and "dim=0 identities=[0xFF800000 : f32]" in lines[at + 6]
    assert "maxf %elem, %accum propagate_nan" in lines[at + 8]
    ints = module_text(_artifact(scan_only, "int8", "int32", (64,), 0, ()).ir(), "sm_90")
    assert "identities=[-2147483648 : i32] : tile<1x64xi32> -> tile<64xi32>" in ints
    assert "maxi %elem, %accum signed" in ints
    unsigned = module_text(_artifact(scan_only, "uint32", "uint32", (64,), 0, ()).ir(), "sm_90")
    assert "identities=[0 : i32] : tile<1x64xi32> -> tile<64xi32>" in unsigned
    assert "maxi %elem, %accum unsigned" in unsigned
    big = module_text(_artifact(scan_only, "float32", "float32", (8, 16), 1, ()).ir(), "sm_90")
    assert " = scan " in big and " = reduce " not in big


@pytest.mark.parametrize(("shape", "axis"), [((4, 8), 1), ((32,), 0), ((2, 4, 8), 2)])
def test_the_barrier_changes_no_cubin_without_a_reshape(shape: tuple[int, ...], axis: int, tileir_env: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no reshape follows, tileiras folds the barrier away: the same CUBIN with and without it."""
    art = _artifact(scan_only, "float32", "float32", shape, axis, ())
    art.ir()  # recorded for the session's coverage check with the barrier
    with_barrier = _cubin(art, "sm_90", "13.5", tileir_env)
    assert " = reduce " in module_text(art.ir(), "sm_90")
    monkeypatch.setattr(lower_reduce, "SMALL_SCAN", 0)
    assert " = reduce " not in module_text(art.ir(), "sm_90")
    assert _cubin(art, "sm_90", "13.5", tileir_env) == with_barrier


# --------------------------------------------------------------------------------------------------- on a GPU


def _np_dtype(name: str) -> Any:
    from test_ops_gpu import np_dtype

    return np_dtype(name)


def _poison(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An output filled with a value no test result takes (-2048.0, exact in every float type; the int max)."""
    dt = _np_dtype(dtype)
    fill = np.iinfo(dt).max if np.dtype(dt).kind in "iu" else -2048.0
    return np.full(shape, fill).astype(dt)


def _inputs(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Small integers for floats (every partial sum exact in any order and type); integers over the whole
    range (the sums wrap)."""
    dt = _np_dtype(dtype)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=np.int64, endpoint=True).astype(dt)
    return rng.integers(-4, 5, shape).astype(np.float32).astype(dt)


def _expected(kernel: Any, x: np.ndarray, in_dt: str, out_dt: str, axis: int, to: tuple[int, ...]) -> np.ndarray:
    """numpy's value of ``kernel`` on ``x``: ints under 32 bits accumulate in int32, wrapping; floats are exact."""
    acc = {"int8": np.int32}.get(in_dt, x.dtype if in_dt not in ("float16", "bfloat16") else np.float32)
    with np.errstate(over="ignore"):
        s = np.cumsum(x.astype(acc), axis=axis, dtype=acc)
        if kernel is scan_reshape:
            r = (s * np.array(2, acc)).astype(_np_dtype(out_dt)).reshape(to)
        elif kernel is scan_cast_reshape:
            r = s.astype(np.float64).reshape(to)
        else:
            r = (s + x.astype(acc)).reshape(to).sum(axis=0)
    return r.astype(_np_dtype(out_dt))


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "axis", "to"), PATTERNS, ids=PATTERN_IDS)
@pytest.mark.parametrize(("kernel", "in_dt", "out_dt"), KERNELS, ids=KERNEL_IDS)
def test_reshaped_scans_match_numpy_gpu(kernel: Any, in_dt: str, out_dt: str, shape: tuple[int, ...], axis: int,
                                        to: tuple[int, ...]) -> None:
    """Every pattern, dtype and consumer: exactly numpy's values, every output element written."""
    rng = np.random.default_rng()
    x = _inputs(shape, in_dt, rng)
    want = _expected(kernel, x, in_dt, out_dt, axis, to)
    out = tj.asarray(_poison(want.shape, out_dt))
    kernel[1](tj.asarray(x), out, SHAPE=shape, AXIS=axis, TO=to)
    got = out.numpy()
    assert got.shape == want.shape
    if np.dtype(_np_dtype(out_dt)).kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:  # bfloat16 (ml_dtypes) compared through float64
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.gpu
def test_nan_and_infinities_pass_through_the_barrier_gpu() -> None:
    """NaN and +-inf in a small scan's input reach the reshaped output as numpy gives them (the barrier's max
    keeps NaN and -inf)."""
    x = np.array([[1, np.nan, 2, 3, -1, 0, 4, 5], [np.inf, 1, -np.inf, 2, 0, 0, 1, 1],
                  [-np.inf, -2, -1, 0, 3, 3, 1, 2], [0, 0, 0, 0, -1, -1, -1, -np.inf]], np.float32)
    want = (np.cumsum(x, axis=1) * np.float32(2)).reshape(8, 4)
    assert np.isnan(want).any() and np.isposinf(want).any() and np.isneginf(want).any()
    out = tj.asarray(_poison((8, 4), "float32"))
    scan_reshape[1](tj.asarray(x), out, SHAPE=(4, 8), AXIS=1, TO=(8, 4))
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [371, 388])
def test_the_fuzz_programs_that_found_it_match_the_model_gpu(seed: int, tmp_path: Path) -> None:
    """Programs 371 and 388 of the GPU fuzzer against its numpy model."""
    prog = fm.generate(seed)
    problems = run_program(prog, tmp_path)
    assert not problems, prog.report() + "\n".join(problems)


def test_the_patterns_are_small_scans_split_along_their_axis() -> None:
    """Each pattern but the last splits the scan axis of fewer than 128 elements (the trigger); the last does not
    need the barrier."""
    for shape, axis, to in PATTERNS:
        split = not any(math.prod(to[:k]) == math.prod(shape[:axis]) and math.prod(to[:k + 1])
                        == math.prod(shape[:axis + 1]) for k in range(len(to)))
        assert split, (shape, axis, to)
        assert (math.prod(shape) < lower_reduce.SMALL_SCAN) == (shape != (8, 64))
