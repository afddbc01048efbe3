"""Hints (issue 20): ``tj.multiple_of`` / ``tj.max_contiguous`` as backend-neutral facts in the IR (an ``AssumeOp``)
that the CUDA backend turns into vector gathers and scatters and ``__builtin_assume``, and Tile IR into ``assume
div_by``; ``num_warps`` (Triton's name for the block size) and ``num_stages`` (the CUDA backend's cp.async pipeline
depth) per kernel, per compile and per autotune config."""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Toolkit
from source_lines import where_in

import tilejit as tj
from tilejit.errors import IRVerificationError, TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.passes import run_passes
from tilejit.language.ir.printer import print_function
from tilejit.language.ir.types import ArrayType, TileType, float32, int32, scalar
from tilejit.language.ir.verifier import verify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from matmul import matmul  # noqa: E402

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
F32 = ArrayType(float32, 1)
I32 = scalar(int32)
MATMUL_SIG = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])


@tj.kernel
def runs_copy(x, out, start: int, BLOCK: tj.Constant[int], ALIGN: tj.Constant[int]):
    base = tj.multiple_of(start + tj.bid(0) * BLOCK, ALIGN)
    offs = tj.max_contiguous(tj.multiple_of(base + tj.arange(BLOCK), ALIGN), BLOCK)
    tj.scatter(out, offs, tj.gather(x, offs) + 1)


@tj.kernel
def plain_copy(x, out, start: int, BLOCK: tj.Constant[int], ALIGN: tj.Constant[int]):
    offs = start + tj.bid(0) * BLOCK + tj.arange(BLOCK)
    tj.scatter(out, offs, tj.gather(x, offs) + 1)


def _copy(kernel: Any, dtype: Any = tj.float32, layout: Any = slice(None, None, 1), align: int = 16,
          block: int = 1024, backend: str = "cuda", target: str = "sm_80", num_threads: int | None = None) -> Any:
    arr = dtype[layout]
    return tj.compile(kernel, (arr, arr, tj.int32), constants={"BLOCK": block, "ALIGN": align}, target=target,
                      backend=backend, num_threads=num_threads)


def _assumes(fn: ops.Function) -> list[ops.AssumeOp]:
    return [op for op in fn.body.walk() if isinstance(op, ops.AssumeOp)]


# ------------------------------------------------------------------------------------------ the IR


def test_hints_are_one_assume_op_of_the_value_they_were_stated_of() -> None:
    fn = _copy(runs_copy).ir()
    scalar_fact, runs = _assumes(fn)
    assert (scalar_fact.div_by, scalar_fact.contiguous, scalar_fact.result.type) == (16, 1, I32)
    assert (runs.div_by, runs.contiguous, runs.result.type) == (16, 1024, TileType(int32, (1024,)))
    assert isinstance(runs.x, Value) and runs.x not in {a.result for a in _assumes(fn)}, "merged into one op"
    text = print_function(fn)
    assert "%base = assume %" in text and "{div_by=16, contiguous=1} : i32" in text
    assert re.search(r"%offs = assume %\d+ \{div_by=16, contiguous=1024\} : tile<1024xi32>", text), text


def test_merge_takes_the_stronger_facts_in_either_order() -> None:
    def k(x, out):
        a = tj.multiple_of(tj.max_contiguous(tj.arange(64) + tj.bid(0) * 64, 32), 8)
        b = tj.max_contiguous(tj.multiple_of(a, 4), 64)
        tj.scatter(out, b, 1.0)

    (op,) = _assumes(run_passes(translate(k, {"x": F32, "out": F32}, {})))
    assert (op.div_by, op.contiguous) == (8, 64)


def test_facts_of_a_constant_fold_away_and_a_compile_time_number_is_checked() -> None:
    def k(x, out, BLOCK: tj.Constant[int]):
        n = tj.multiple_of(BLOCK, 64)
        tj.store(out, (tj.bid(0),), tj.load(x, (tj.bid(0),), (n,)))
        tj.scatter(out, tj.multiple_of(tj.full((16,), 32), 8), 1.0)

    fn = run_passes(translate(k, {"x": F32, "out": F32}, {"BLOCK": 128}))
    assert _assumes(fn) == []
    assert "tile<128xf32>" in print_function(fn), "tj.multiple_of of a compile-time int is that int"


def test_an_unused_fact_is_dead_code_and_equal_facts_are_one() -> None:
    def k(x, out, s: int):
        unused = tj.multiple_of(s, 4)
        a, b = tj.multiple_of(s, 16), tj.multiple_of(s, 16)
        tj.store(out, (a + b,), tj.load(x, (0,), (16,)))

    (op,) = _assumes(run_passes(translate(k, {"x": F32, "out": F32, "s": I32}, {})))
    assert op.div_by == 16


@pytest.mark.parametrize(("fields", "why"), [
    ({"div_by": 3}, "div_by must be a positive power of two, got 3"),
    ({"contiguous": 0}, "contiguous must be a positive power of two, got 0"),
    ({"contiguous": 2}, "contiguous=2 is longer than the last axis of i32"),
    ({"div_by": True}, "div_by must be a positive power of two, got True"),
])
def test_the_verifier_refuses_malformed_facts(fields: dict[str, Any], why: str) -> None:
    x = Value(I32, "x")
    op = ops.AssumeOp(results=[Value(I32)], x=x, **fields)
    fn = ops.Function("k", ["x"], Block(args=[x], ops=[op, ops.ReturnOp()]))
    with pytest.raises(IRVerificationError, match=re.escape(why)):
        verify(fn)
    f = Value(scalar(float32), "f")
    bad = ops.Function("k", ["f"], Block(args=[f], ops=[ops.AssumeOp(results=[Value(scalar(float32))], x=f),
                                                        ops.ReturnOp()]))
    with pytest.raises(IRVerificationError, match="facts are stated of integers"):
        verify(bad)


# ------------------------------------------------------------------------------------------ located errors


def k_not_pow2(x, out, s: int):
    a = tj.multiple_of(s, 12)


def k_runtime_n(x, out, s: int):
    a = tj.multiple_of(s, s)


def k_float(x, out):
    a = tj.max_contiguous(tj.load(x, (0,), (16,)), 4)


def k_scalar_runs(x, out, s: int):
    a = tj.max_contiguous(s, 4)


def k_false_constant(x, out):
    a = tj.multiple_of(20, 8)


def k_tuple_n(x, out):
    a = tj.max_contiguous(tj.arange(16), (16,))


def k_zero(x, out, s: int):
    a = tj.multiple_of(s, 0)


def k_bool(x, out, s: int):
    a = tj.multiple_of(s > 0, 2)


@pytest.mark.parametrize(("kernel", "at", "message"), [
    (k_not_pow2, "tj.multiple_of(s, 12)", "tj.multiple_of(): n must be a positive power of two, got 12 (hints state "
                                          "alignments and run lengths, which backends use in powers of two)"),
    (k_runtime_n, "tj.multiple_of(s, s)", "tj.multiple_of() n must be a compile-time int, got "),
    (k_float, "tj.max_contiguous(tj.load", "tj.max_contiguous() states a fact of an integer scalar or tile (an "
                                           "offset, an index), got "),
    (k_scalar_runs, "tj.max_contiguous(s, 4)", "tj.max_contiguous(): x is a scalar "),
    (k_false_constant, "tj.multiple_of(20, 8)", "tj.multiple_of(20, 8): 20 is not a multiple of 8"),
    (k_tuple_n, "tj.max_contiguous(tj.arange(16), (16,))", "tj.max_contiguous() n must be a compile-time int, got"),
    (k_zero, "tj.multiple_of(s, 0)", "n must be a positive power of two, got 0"),
    (k_bool, "tj.multiple_of(s > 0, 2)", "states a fact of an integer scalar or tile"),
])
def test_bad_hints_are_located_errors(kernel: Any, at: str, message: str) -> None:
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": F32, "out": F32, "s": I32} if "s" in kernel.__code__.co_varnames else
                  {"x": F32, "out": F32}, {})
    err = info.value
    assert (err.filename, (err.line, err.col)) == (__file__, where_in(LINES, at)), str(err)
    assert message in err.message, str(err)


def test_hints_outside_a_kernel_say_where_they_belong() -> None:
    with pytest.raises(TileCompileError, match=r"tj\.multiple_of\(\) can only be used inside a @tj\.kernel"):
        tj.multiple_of(16, 16)
    assert "multiple_of" in tj.__all__ and "max_contiguous" in tj.__all__


# ------------------------------------------------------------------------------------------ the CUDA backend


def _memory_ops(ptx: str) -> set[str]:
    return set(re.findall(r"\b(?:ld|st)\.global(?:\.\w+)*", ptx))


def test_runs_make_vector_gathers_and_scatters(nvrtc_here: Path) -> None:
    hinted, plain = _copy(runs_copy), _copy(plain_copy)
    source = hinted.cuda_source()
    assert re.search(r"tj::gather_runs<4>\(t\d+, u_x, t\d+, 0\.0f\);", source), source
    assert re.search(r"tj::scatter_runs<4>\(u_out, t\d+, t\d+\);", source), source
    assert re.search(r"__builtin_assume\(\(v\d+\) % 16 == 0\);", source), source
    assert "_runs<" not in plain.cuda_source() and "__builtin_assume" not in plain.cuda_source()
    assert {"ld.global.v4.u32", "st.global.v4.f32"} <= _memory_ops(hinted.ptx())
    assert not any(".v" in op for op in _memory_ops(plain.ptx()))


@pytest.mark.parametrize(("dtype", "block", "align", "vec"), [
    (tj.float16, 1024, 16, 8), (tj.float64, 1024, 16, 2), (tj.int8, 4096, 16, 16), (tj.float32, 1024, 2, 2),
    (tj.float32, 1024, 1, 0), (tj.float32, 128, 16, 0), (tj.float16, 512, 16, 4),
])
def test_the_vector_width_is_what_the_facts_and_the_layout_allow(dtype: Any, block: int, align: int, vec: int) -> None:
    """16 bytes, at most the facts' alignment, at most the elements each of 128 threads holds (none: 1 per thread)."""
    source = _copy(runs_copy, dtype, align=align, block=block, num_threads=128).cuda_source()
    assert re.findall(r"tj::gather_runs<(\d+)>", source) == ([str(vec)] if vec else [])


@pytest.mark.parametrize("layout", [slice(None), (slice(None), slice(None, None, 1))])
def test_no_vector_access_without_a_unit_stride_aligned_rank_1_array(layout: Any) -> None:
    if isinstance(layout, tuple):
        def two_d(x, out, start: int, BLOCK: tj.Constant[int], ALIGN: tj.Constant[int]):
            offs = tj.max_contiguous(tj.multiple_of(start + tj.arange(BLOCK), ALIGN), BLOCK)
            tj.scatter(out, (0, offs), tj.gather(x, (0, offs)))

        art = _copy(tj.kernel(two_d), layout=layout)
    else:
        art = _copy(runs_copy, layout=layout)
    assert "_runs<" not in art.cuda_source()


def test_builtin_assume_and_vector_runs_compile_with_every_nvrtc(toolkit: Toolkit,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_NVRTC", str(toolkit.nvrtc))
    for dtype in (tj.float16, tj.int8, tj.float64, tj.uint16):
        assert _copy(runs_copy, dtype, target="sm_75").cubin()[:4] == b"\x7fELF"


# ------------------------------------------------------------------------------------------ Tile IR


def test_tile_ir_states_the_facts_as_assume_div_by() -> None:
    text = _copy(runs_copy).tileir_text()
    assert re.search(r"%base = assume div_by<16>, %\w+ : tile<i32>", text), text
    assert re.search(r"%offs = assume div_by<16, every 1024 along 0>, %\w+ : tile<1024xi32>", text), text


def test_the_bytecode_of_every_and_along() -> None:
    from tilejit.backends.tileir.bytecode import TAG_DIV_BY, predicate

    buf = bytearray()
    predicate(("div_by", 16, 4, 1), buf)
    assert bytes(buf) == bytes([TAG_DIV_BY, 16, 3, 8, 2])
    buf = bytearray()
    predicate(("div_by", 16), buf)
    assert bytes(buf) == bytes([TAG_DIV_BY, 16, 0])


def test_tileiras_reads_the_facts(tileir_toolchain: Any) -> None:
    from tilejit.compiler.tileiras import disassemble, run_tileiras

    art = _copy(runs_copy, block=256, target="sm_90")
    text = disassemble(art.tileir_bytecode(), toolchain=tileir_toolchain)
    assert re.search(r"assume div_by<16>, %\w+ : tile<i32>", text), text
    assert re.search(r"assume div_by<16, every 256 along 0>, %\w+ : tile<256xi32>", text), text
    assert run_tileiras(art.tileir_bytecode(), "sm_90", toolchain=tileir_toolchain)[:4] == b"\x7fELF"


# ------------------------------------------------------------------------------------------ num_warps, num_stages


def test_num_warps_is_the_block_size_in_warps(nvrtc_here: Path) -> None:
    k = tj.kernel(num_warps=4)(plain_copy.func)
    assert k.num_threads == 128
    assert tj.kernel(num_threads=256, num_warps=8)(plain_copy.func).num_threads == 256
    art = tj.compile(k, (tj.float32[:], tj.float32[:], tj.int32), constants={"BLOCK": 1024, "ALIGN": 1},
                     target="sm_80")
    assert art.num_threads == 128 and "__launch_bounds__(128)" in art.cuda_source()
    art = tj.compile(k, (tj.float32[:], tj.float32[:], tj.int32), constants={"BLOCK": 1024, "ALIGN": 1},
                     target="sm_80", num_warps=2)
    assert art.num_threads == art.cuda_kernel().num_threads == 64


@pytest.mark.parametrize(("make", "exc", "message"), [
    (lambda: tj.kernel(num_threads=64, num_warps=4), ValueError,
     "@tj.kernel(num_warps=...): num_warps=4 is 128 threads, but num_threads=64; give one of them (num_warps=n is "
     "num_threads=32*n)"),
    (lambda: tj.kernel(num_threads=64, num_warps=4)(plain_copy.func), ValueError, "num_warps=4 is 128 threads"),
    (lambda: tj.Kernel(plain_copy.func, num_threads=64, num_warps=1), ValueError,
     "@tj.kernel(num_warps=...) of plain_copy: num_warps=1 is 32 threads, but num_threads=64"),
    (lambda: tj.kernel(num_warps=3), ValueError,
     "@tj.kernel(num_warps=...): num_warps must be a power of two from 1 to 32 (32 to 1024 threads), got 3"),
    (lambda: tj.kernel(num_warps=64), ValueError, "num_warps must be a power of two from 1 to 32"),
    (lambda: tj.kernel(num_warps=True), TypeError, "@tj.kernel(num_warps=...): num_warps must be an int, got True"),
    (lambda: tj.kernel(num_stages=0), ValueError, "@tj.kernel(num_stages=...): num_stages must be an int >= 1, got 0"),
    (lambda: tj.kernel(num_stages=2.0), TypeError, "num_stages must be an int, got 2.0"),
    (lambda: tj.compile(plain_copy, "float32[:], float32[:], int32", constants={"BLOCK": 64, "ALIGN": 1},
                        target="sm_80", num_threads=128, num_warps=2), ValueError,
     "tj.compile(plain_copy): num_warps=2 is 64 threads, but num_threads=128"),
    (lambda: tj.compile(plain_copy, "float32[:], float32[:], int32", target="sm_80", num_stages=-1), ValueError,
     "tj.compile(plain_copy): num_stages must be an int >= 1, got -1"),
])
def test_bad_num_warps_and_num_stages(make: Any, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        make()


def _matmul(target: str = "sm_80", **hints: Any) -> Any:
    return tj.compile(matmul, MATMUL_SIG, constants={"BM": 128, "BN": 128, "BK": 32}, target=target, backend="cuda",
                      **hints)


def _wait_depth(source: str) -> int | None:
    """How many stages a cp.async K loop keeps in flight beyond the one being multiplied, if it has one."""
    found = re.findall(r"tj::cp_async_wait<(\d+)>", source)
    return int(found[0]) + 2 if found else None


def test_num_stages_sets_the_cp_async_pipeline_depth(caplog: pytest.LogCaptureFixture) -> None:
    assert _wait_depth(_matmul().cuda_source()) == 4, "the plan's own choice"
    assert _wait_depth(_matmul(num_stages=3).cuda_source()) == 3
    assert _wait_depth(_matmul(num_stages=2).cuda_source()) == 2
    plain = _matmul(num_stages=1).cuda_source()
    assert _wait_depth(plain) is None and "cp_async" not in plain, "one stage: no pipeline"
    caplog.set_level(logging.DEBUG, logger="tilejit")
    assert _wait_depth(_matmul(num_stages=64).cuda_source()) == 8, "capped at what shared memory holds"
    assert "kernel matmul: num_stages=64 lowered to 8: 8 stages of 18944 bytes fit 166912 bytes of shared memory" in [
        r.getMessage() for r in caplog.records]
    wgmma = _matmul("sm_90a", num_stages=2).cuda_source()
    assert "wgmma" in wgmma and "copies 2 stages" in wgmma, "the warp-specialized ring, as deep as asked"
    assert re.search(r"tj::u64 \w+_full\[2\];", wgmma), "two full barriers"


def test_num_stages_reaches_the_backends_and_the_kernel_hints() -> None:
    from tilejit.backends.base import KernelHints

    k = tj.kernel(num_stages=3, num_warps=4)(matmul.func)
    art = tj.compile(k, MATMUL_SIG, constants={"BM": 128, "BN": 128, "BK": 32}, target="sm_80", backend="cuda")
    assert (art.num_stages, art.num_threads) == (3, 128)
    assert art.kernel_hints == KernelHints(num_stages=3) and "num_stages=3" in repr(art)
    assert _wait_depth(art.cuda_source()) == 3
    assert tj.compile(k, MATMUL_SIG, constants={"BM": 128, "BN": 128, "BK": 32}, target="sm_80",
                      num_stages=2).num_stages == 2, "tj.compile's own overrides the kernel's"


def test_autotune_configs_carry_num_stages_to_their_variants() -> None:
    tuned = tj.autotune([tj.Config({}, num_stages=2), tj.Config({}, num_warps=4, num_stages=3), tj.Config({})],
                        key=[])(tj.kernel(num_stages=4)(matmul.func))
    two, three, own = (tuned._variant(c, "cuda") for c in tuned.configs)
    assert (two.num_stages, two.num_threads) == (2, None)
    assert (three.num_stages, three.num_threads) == (3, 128)
    assert own is tuned.kernel and own.num_stages == 4


def test_the_command_line_takes_num_warps_and_num_stages(nvrtc_here: Path, tmp_path: Path) -> None:
    from tilejit.cli.main import main

    args = ["compile", str(EXAMPLES / "matmul.py"), "--kernel", "matmul", "--signature",
            "f16[:,::1], float16[:,::1], float32[:,::1]", "-C", "BM=128", "-C", "BN=128", "-C", "BK=32", "--arch",
            "sm_80", "--emit", "cuda", "-o", str(tmp_path)]
    assert main([*args, "--num-warps", "8", "--num-stages", "3"]) == 0
    source = (tmp_path / "matmul.matmul.sm_80.cu").read_text()
    assert "__launch_bounds__(256" in source and _wait_depth(source) == 3
    with pytest.raises(SystemExit) as info:
        main([*args, "--num-warps", "5"])
    assert info.value.code == 2


# ------------------------------------------------------------------------------------------ on a GPU


def _numpy_dtype(dtype: Any) -> Any:
    return np.dtype(dtype.name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [tj.float16, tj.float32, tj.float64, tj.int8, tj.int32, tj.uint16])
@pytest.mark.parametrize(("n", "start", "align"), [(10_000, 0, 1024), (4_099, 48, 16), (333, 2, 2), (64, 0, 1024)])
def test_hinted_gathers_and_scatters_match_numpy(dtype: Any, n: int, start: int, align: int) -> None:
    """Vector accesses where a run is wholly inside the array, element by element at its end (n not a multiple of
    the block), whatever the alignment the facts promise."""
    np_dtype = _numpy_dtype(dtype)
    rng = np.random.default_rng()
    host = (rng.standard_normal(n) * 20).astype(np_dtype) if dtype.is_float else \
        rng.integers(0, 100, n).astype(np_dtype)
    x = tj.asarray(host)
    out = tj.asarray(np.full(n, 77, np_dtype))
    block = 1024
    grid = -(-(n - start) // block)
    runs_copy[(grid,)](x, out, start, BLOCK=block, ALIGN=min(align, block))
    want = np.full(n, 77, np_dtype)
    want[start:] = host[start:] + np_dtype.type(1)
    got = out.numpy()
    if dtype.is_float:
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype.itemsize == 2 else 1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="num_warps and num_stages shape the CUDA backend's block and pipelines")
@pytest.mark.parametrize(("num_warps", "num_stages"), [(4, 1), (4, 2), (8, 3), (None, 6)])
def test_matmul_with_num_warps_and_num_stages_matches_numpy(num_warps: int | None, num_stages: int) -> None:
    rng = np.random.default_rng()
    m, n, k = 300, 200, 170
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = tj.asarray(np.full((m, n), np.nan, np.float32))
    mm = tj.kernel(num_warps=num_warps, num_stages=num_stages)(matmul.func)
    mm[(tj.cdiv(m, 64), tj.cdiv(n, 64))](tj.asarray(a), tj.asarray(b), c, BM=64, BN=64, BK=32)
    np.testing.assert_allclose(c.numpy(), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=2e-2)
