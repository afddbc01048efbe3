"""CUDA backend limits on the CPU: tiles too large for a thread's registers, shared memory beyond the target
and kernel parameters beyond the parameter space are located TileCompileErrors (at the user's op or def
line) found before NVRTC runs, and the largest tiles the backend accepts compile in seconds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_backend_codegen import _from_source

import tilejit as tj
from tilejit.backends.cuda import codegen
from tilejit.backends.cuda.codegen import LARGE_PARAM_BYTES, PARAM_BYTES, param_bytes
from tilejit.backends.cuda.plan import MAX_THREAD_WORDS
from tilejit.errors import CompileError, TileCompileError

pytestmark = pytest.mark.cuda_only(reason="the CUDA backend's own limits (registers, parameter bytes): kernels at "
                                          "its largest sizes, not recorded for the Tile IR coverage check")


@tj.kernel
def _plus_one(x, out, N: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,), shape=(N,))
    tj.store(out, index=(0,), tile=t + 1)


@tj.kernel
def _minus_row_sum(x, out, R: tj.Constant[int], C: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0, 0), shape=(R, C))
    tj.store(out, index=(0, 0), tile=t - tj.sum(t, axis=1, keepdims=True))


@tj.kernel
def _row_argmax(x, out, R: tj.Constant[int], C: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0, 0), shape=(R, C))
    tj.store(out, index=(0,), tile=tj.argmax(t, axis=1))


def _line_of(kernel: Any, text: str) -> int:
    """The file line of the first line of ``kernel``'s source that contains ``text``."""
    import inspect

    lines, first = inspect.getsourcelines(kernel.func)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize(("kernel", "dtype", "consts", "per_thread", "at"), [
    (_plus_one, tj.float32, {"N": 2**20}, 4096, "tj.load("),  # NVRTC took ~80 s per output
    (_plus_one, tj.float32, {"N": 2**17}, 512, "tj.load("),
    (_plus_one, tj.float64, {"N": 2**16}, 256, "tj.load("),
    (_minus_row_sum, tj.float64, {"R": 1024, "C": 1024}, 4096, "tj.load("),  # NVRTC ran for over 15 minutes
])
def test_a_tile_too_large_for_a_thread_is_a_located_error_within_a_second(
    kernel: Any, dtype: Any, consts: dict[str, int], per_thread: int, at: str
) -> None:
    sig = (dtype[::1], dtype[::1]) if len(consts) == 1 else (dtype[:, ::1], dtype[:, ::1])
    start = time.perf_counter()
    with pytest.raises(TileCompileError) as info:
        tj.compile(kernel, sig, constants=consts, target="sm_90").cuda_source()
    assert time.perf_counter() - start < 1.0
    err = info.value
    assert err.filename == __file__ and err.line == _line_of(kernel, at) and err.source_line is not None
    words = 2 if dtype == tj.float64 else 1
    assert f"are {per_thread} per thread, but a thread holds at most {MAX_THREAD_WORDS} 32-bit words" in err.message
    assert f"({MAX_THREAD_WORDS // words} {dtype.name} elements, so at most {256 * MAX_THREAD_WORDS // words} " \
           "with 256 threads)" in err.message


def test_an_argmax_counts_its_value_and_index_pairs() -> None:
    """argmax keeps (value, int32 index) pairs: 16 bytes for float64. A (128, 256) float64 argmax (128 pairs,
    512 words per thread) took NVRTC 17 s, a (256, 256) float32 one 12 s; half of each compiles in seconds."""
    with pytest.raises(TileCompileError) as info:
        tj.compile(_row_argmax, (tj.float64[:, ::1], tj.int32[::1]), constants={"R": 128, "C": 256},
                   target="sm_90").cuda_source()
    assert info.value.line == _line_of(_row_argmax, "tj.argmax(")
    assert "a float64 tile (its argmax keeps 16-byte value and index pairs) of shape (128, 256) is too large" \
           in info.value.message and "(64 pairs, so at most 16384 with 256 threads)" in info.value.message
    with pytest.raises(TileCompileError, match="its argmax keeps 8-byte value and index pairs"):
        tj.compile(_row_argmax, (tj.float32[:, ::1], tj.int32[::1]), constants={"R": 256, "C": 256},
                   target="sm_90").cuda_source()


def test_the_budget_counts_the_threads_the_kernel_runs() -> None:
    sig = (tj.float32[::1], tj.float32[::1])
    with pytest.raises(TileCompileError, match="over 32 threads are 512 per thread"):
        tj.compile(tj.kernel(_plus_one.func, num_threads=32), sig, constants={"N": 2**14}, target="sm_90").cuda_source()
    assert tj.compile(tj.kernel(_plus_one.func, num_threads=1024), sig, constants={"N": 2**18},
                      target="sm_90").cuda_source()


@pytest.mark.parametrize(("kernel", "dtype", "consts"), [
    (_plus_one, tj.float32, {"N": 256 * MAX_THREAD_WORDS}),
    (_minus_row_sum, tj.float64, {"R": 128, "C": 256}),
    (_row_argmax, tj.float64, {"R": 64, "C": 256}),
])
def test_the_largest_tiles_allowed_compile_in_seconds(kernel: Any, dtype: Any, consts: dict[str, int],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """At the budget (256 words per thread with 256 threads) NVRTC 13 took 1-2 s for sm_90 CUBIN on an idle
    core, 4-6 s on a loaded two-core machine; the bound leaves room for slower machines, not for minutes."""
    monkeypatch.setenv("TILEJIT_CACHE", "0")
    sig = (dtype[::1], dtype[::1]) if len(consts) == 1 else (dtype[:, ::1], dtype[:, ::1])
    if kernel is _row_argmax:
        sig = (dtype[:, ::1], tj.int32[::1])
    art = tj.compile(kernel, sig, constants=consts, target="sm_90")
    assert art.cuda_kernel().num_threads == 256
    start = time.perf_counter()
    assert art.cubin()[:4] == b"\x7fELF"
    assert time.perf_counter() - start < 20.0


@tj.kernel
def _matmul(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    pm, pn = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        acc = tj.mma(tj.load(a, index=(pm, k), shape=(BM, BK)), tj.load(b, index=(k, pn), shape=(BK, BN)), acc)
    tj.store(c, index=(pm, pn), tile=acc)


@pytest.mark.parametrize(("target", "limit"), [("sm_80", 166912), ("sm_90", 232448), ("sm_90a", 232448)])
def test_shared_memory_beyond_the_target_is_located_at_the_mma(target: str, limit: int) -> None:
    sig = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])
    with pytest.raises(TileCompileError) as info:
        tj.compile(_matmul, sig, constants={"BM": 256, "BN": 256, "BK": 256}, target=target).cuda_source()
    err = info.value
    assert err.filename == __file__ and err.line == _line_of(_matmul, "tj.mma(")
    assert err.col is not None and err.source_line is not None and err.source_line[err.col:].startswith("tj.mma(")
    assert err.message == (
        "this mma of float16 tiles of shapes (256, 256) and (256, 256) needs 270336 bytes of shared memory per "
        f"block; sm_{target[3:5]} allows at most {limit} ({limit // 1024} KiB): use smaller tiles")
    assert tj.compile(_matmul, sig, constants={"BM": 256, "BN": 256, "BK": 64}, target=target).cuda_source()


@tj.kernel
def _transpose(x, out, R: tj.Constant[int], C: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0, 0), shape=(R, C))
    tj.store(out, index=(0, 0), tile=tj.transpose(t) * 2.0)


def test_shared_memory_of_a_transpose_is_located_at_the_transpose() -> None:
    with pytest.raises(TileCompileError, match=r"this transpose needs 262144 bytes of shared memory per block; "
                       r"sm_90 allows at most 232448 \(227 KiB\)") as info:
        tj.compile(_transpose, (tj.float64[:, ::1], tj.float64[:, ::1]), constants={"R": 128, "C": 256},
                   target="sm_90").cuda_source()
    assert info.value.line == _line_of(_transpose, "tj.transpose(")


def _kernel_with(params: list[str]) -> Any:
    """A kernel ``k(out, <params>)`` (each ``name: sig`` entry names a parameter) storing zeros into ``out``."""
    names = ", ".join(p.split(":")[0] for p in params)
    return tj.kernel(_from_source(
        f"def k(out, {names}):\n    tj.store(out, index=(0,), tile=tj.zeros((16,), tj.float32))\n", "k"))


def _params(n_arrays: int, scalars: list[Any]) -> tuple[Any, tuple[Any, ...]]:
    """A kernel taking ``out`` and ``n_arrays`` 1-d float32 arrays (24 bytes each), then ``scalars``."""
    names = [f"a{i}" for i in range(n_arrays)] + [f"s{i}" for i in range(len(scalars))]
    return _kernel_with(names), (tj.float32[:], *([tj.float32[:]] * n_arrays), *scalars)


@pytest.mark.parametrize(("n_arrays", "scalars", "size"), [
    (169, [tj.float64, tj.float64], PARAM_BYTES),  # out and 169 arrays: 4080 bytes
    (169, [tj.int8, tj.float64, tj.int8], PARAM_BYTES - 6),  # 4097 with the padding before the float64
    (169, [tj.int8, tj.float64, tj.float64], PARAM_BYTES + 1),
    (1364, [tj.int32], LARGE_PARAM_BYTES),  # out and 1364 arrays: 32760 bytes
    (1364, [tj.int8, tj.int32], LARGE_PARAM_BYTES + 1),
    (1364, [tj.int8, tj.float64, tj.int8], LARGE_PARAM_BYTES + 6),
])
def test_param_bytes_match_what_nvrtc_counts(n_arrays: int, scalars: list[Any], size: int, toolkit: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Our count of the parameter space agrees with NVRTC's (the sum of the sizes; padding not counted): a
    kernel at the limit compiles to CUBIN, one byte more does not (checked with our refusal bypassed), for
    each installed CUDA major's limit (4096 bytes before CUDA 12.1, 32764 since)."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    lib = load_nvrtc(str(toolkit.nvrtc))
    limit = LARGE_PARAM_BYTES if lib.version >= (12, 1) else PARAM_BYTES
    if abs(size - limit) > 64:
        pytest.skip(f"NVRTC {lib.version[0]}.{lib.version[1]} allows {limit} bytes")
    kernel, sig = _params(n_arrays, scalars)
    fn = tj.compile(kernel, sig, target="sm_80").ir()
    with monkeypatch.context() as m:
        m.setattr(codegen, "check_param_space", lambda *args: None)  # let NVRTC judge
        ck = codegen.generate(fn, target=parse_target("sm_80"), nvrtc_version=lib.version)
    assert param_bytes(list(ck.params)) == size

    def nvrtc_compiles() -> bool:
        try:
            compile_cuda(ck.source, name="k.cu", headers=ck.headers, target="sm_80", output="cubin", nvrtc=lib,
                         cache=False)
        except CompileError as exc:
            assert "Formal parameter space overflowed" in str(exc)
            return False
        return True

    assert nvrtc_compiles() == (size <= limit)
    if size > limit:
        with pytest.raises(TileCompileError, match=f"take {size} bytes, more than the {limit} bytes"):
            codegen.generate(fn, target=parse_target("sm_80"), nvrtc_version=lib.version)
    else:
        assert codegen.generate(fn, target=parse_target("sm_80"), nvrtc_version=lib.version).source == ck.source


def test_too_many_parameters_is_located_at_the_def_line() -> None:
    """600 arrays of 3 dims (56 bytes each): NVRTC's "Formal parameter space overflowed" pointed into the
    generated code; the error now points at the kernel's signature, before NVRTC runs."""
    kernel = _kernel_with([f"a{i}" for i in range(600)])
    sig = (tj.float32[:], *([tj.float32[:, :, :]] * 600))
    start = time.perf_counter()
    with pytest.raises(TileCompileError) as info:
        tj.compile(kernel, sig, target="sm_90").cuda_source()
    assert time.perf_counter() - start < 1.0
    err = info.value
    assert err.line is not None and err.source_line is not None and err.source_line.startswith("def k(out, a0, a1")
    assert err.col == 0
    assert "kernel k: its 601 parameters (601 arrays, 0 scalars) take 33624 bytes, more than the 32764 bytes of " \
           "kernel parameters that NVRTC " in err.message
    assert "allows for sm_90" in err.message and "an array of N dims takes 8 + 16 * N bytes" in err.message


@pytest.mark.parametrize(("version", "arch", "limit"), [
    ((12, 0), 90, PARAM_BYTES), ((11, 8), 80, PARAM_BYTES), ((12, 1), 70, LARGE_PARAM_BYTES),
    ((13, 0), 90, LARGE_PARAM_BYTES),
])
def test_the_parameter_limit_follows_the_nvrtc_version_and_target(version: tuple[int, int], arch: int,
                                                                  limit: int) -> None:
    kernel, sig = _params(170, [])  # out + 170 arrays: 4104 bytes
    fn = tj.compile(kernel, sig, target=f"sm_{arch}").ir()
    from tilejit.compiler.targets import parse_target

    if limit == PARAM_BYTES:
        with pytest.raises(TileCompileError, match=f"take 4104 bytes, more than the {limit} bytes .* for sm_{arch}"):
            codegen.generate(fn, target=parse_target(arch), nvrtc_version=version)
    else:
        assert codegen.generate(fn, target=parse_target(arch), nvrtc_version=version).params


@pytest.mark.parametrize("num_threads", [None, 512])
def test_a_wgmma_accumulator_too_large_for_the_registers_falls_back_to_mma_sync(
    num_threads: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A (256, 256) float32 accumulator on 512 threads is 128 registers per thread, all a thread of a
    512-thread block may have: wgmma (register operands) stopped ptxas with "Insufficient registers".
    It runs as mma.sync (whose accumulators may spill); (256, 128) still runs as wgmma."""
    monkeypatch.setenv("TILEJIT_CACHE", "0")
    sig = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])
    kernel = tj.kernel(_matmul.func, num_threads=num_threads)
    art = tj.compile(kernel, sig, constants={"BM": 256, "BN": 256, "BK": 64}, target="sm_90a")
    assert "tj::TensorCore<tj::half, 256, 256, 64" in art.cuda_source() and "Wgmma" not in art.cuda_source()
    assert art.cubin()[:4] == b"\x7fELF"
    narrow = tj.compile(kernel, sig, constants={"BM": 256, "BN": 128, "BK": 64}, target="sm_90a").cuda_source()
    assert "tj::Wgmma<tj::half, 256, 128, 64" in narrow
