"""tj.compile with no GPU: every stage's output for named targets, and located errors for bad kernels."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.runtime.interop import ArrayView


@tj.kernel
def vadd(x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + tj.load(y, index=(i,), shape=(TILE,)))


SIG = (tj.float32[:], tj.float32[:], tj.float32[:])


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_compile_every_stage(arch: str) -> None:
    art = tj.compile(vadd, SIG, constants={"TILE": 1024}, target=arch)
    ir = art.ir_text()
    assert "func @vadd(" in ir and "load" in ir and "store" in ir and "tile<1024xf32>" in ir
    src = art.cuda_source()
    assert 'extern "C"' in src and "vadd" in src
    ptx = art.ptx()
    assert f".target {arch}" in ptx
    cubin = art.cubin()
    assert cubin[:4] == b"\x7fELF"


def test_signature_by_name_and_scalars() -> None:
    @tj.kernel
    def scale(x, out, a, n, TILE: tj.Constant[int]):
        i = tj.bid(0)
        tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * a + n)

    art = tj.compile(scale, {"x": tj.float32[:], "out": tj.float32[:], "a": float, "n": tj.int64},
                     constants={"TILE": 256}, target="sm_80")
    text = art.ir_text()
    assert "%a: f32" in text and "%n: i64" in text


def test_contiguous_signature_gets_the_fast_paths() -> None:
    """``[:, ::1]`` promises what a launch would detect: the AOT compile vectorizes and pipelines."""
    from test_frontend_kernels import matmul  # the example kernel

    plain = tj.compile(matmul, (tj.bfloat16[:, :],) * 2 + (tj.float32[:, :],),
                       constants={"BM": 128, "BN": 256, "BK": 64}, target="sm_90a")
    fast = tj.compile(matmul, (tj.bfloat16[:, ::1],) * 2 + (tj.float32[:, ::1],),
                      constants={"BM": 128, "BN": 256, "BK": 64}, target="sm_90a")
    assert "cp_async" not in plain.cuda_source() and "TensorCore<" in plain.cuda_source()
    assert "cp_async_tile" in fast.cuda_source() and "wgmma.mma_async" in fast.cuda_source()
    assert fast.ir_text() == plain.ir_text()  # a launch promise, not a different type
    assert fast.cubin()[:4] == b"\x7fELF"
    with pytest.raises(TypeError, match=r"::1 as the last dimension"):
        tj.float32[::1, :]
    with pytest.raises(TypeError, match=r"tj.float32\[:\] \(rank 1\)"):
        tj.float32[0]


def test_signature_length_mismatch_is_clear() -> None:
    with pytest.raises(TypeError, match="3 non-constant parameters"):
        tj.compile(vadd, (tj.float32[:],), constants={"TILE": 1024}, target="sm_90")


def test_bad_target_is_clear() -> None:
    with pytest.raises(tj.TilejitError, match="sm_"):
        tj.compile(vadd, SIG, constants={"TILE": 1024}, target="sm_9x").cubin()


def _line_of(fragment: str, func: object) -> int:
    lines, start = inspect.getsourcelines(func)  # type: ignore[arg-type]
    for off, text in enumerate(lines):
        if fragment in text:
            return start + off
    raise AssertionError(fragment)


def test_unsupported_syntax_is_located() -> None:
    def bad(x, TILE: tj.Constant[int]):
        t = tj.load(x, index=(0,), shape=(TILE,))
        try:
            pass
        finally:
            pass
        tj.store(x, index=(0,), tile=t)

    with pytest.raises(tj.TileCompileError) as info:
        tj.compile(tj.kernel(bad), (tj.float32[:],), constants={"TILE": 128}, target="sm_90").ir_text()
    err = info.value
    assert err.filename == __file__
    assert err.line == _line_of("try:", bad)
    assert "^" in str(err) and "try" in str(err)


def test_non_power_of_two_shape_is_located() -> None:
    def bad(x):
        t = tj.load(x, index=(0,), shape=(100,))
        tj.store(x, index=(0,), tile=t)

    with pytest.raises(tj.TileCompileError) as info:
        tj.compile(tj.kernel(bad), (tj.float32[:],), target="sm_90").ir_text()
    assert info.value.line == _line_of("shape=(100,)", bad)
    assert "power of two" in str(info.value)


def test_shape_mismatch_is_located() -> None:
    def bad(x, y):
        a = tj.load(x, index=(0,), shape=(128,))
        b = tj.load(y, index=(0,), shape=(64,))
        tj.store(x, index=(0,), tile=a + b)

    with pytest.raises(tj.TileCompileError) as info:
        tj.compile(tj.kernel(bad), (tj.float32[:], tj.float32[:]), target="sm_90").ir_text()
    assert info.value.line == _line_of("a + b", bad)


def test_non_constant_where_constant_needed_is_located() -> None:
    def bad(x, n):
        t = tj.load(x, index=(0,), shape=(n,))
        tj.store(x, index=(0,), tile=t)

    with pytest.raises(tj.TileCompileError) as info:
        tj.compile(tj.kernel(bad), (tj.float32[:], tj.int32), target="sm_90").ir_text()
    assert info.value.line == _line_of("shape=(n,)", bad)
    assert "constant" in str(info.value)


def test_import_is_lazy() -> None:
    """``import tilejit`` loads no CUDA library and imports no numpy (its time: bench/bench_first_call.py)."""
    code = (
        "import sys; import tilejit\n"
        "maps=open('/proc/self/maps').read()\n"
        "assert 'libcuda' not in maps and 'libnvrtc' not in maps, 'CUDA library loaded at import'\n"
        "assert 'numpy' not in sys.modules, 'numpy imported at import'\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_defining_a_kernel_imports_neither_the_translator_nor_dataclasses(tmp_path: Path) -> None:
    """``@tj.kernel`` reads the parameters from the code object: the front end, the IR ops and the backends
    are imported when a kernel is first compiled, not when it is defined."""
    (tmp_path / "defs.py").write_text(
        "import tilejit as tj\n\n\n@tj.kernel\ndef scale(x, out, a: float, TILE: tj.Constant[int]):\n"
        "    i = tj.bid(0)\n    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * a)\n"
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import tilejit, defs\n"
        "heavy = ['dataclasses', 'inspect', 'ast', 'tilejit.language.frontend.translate', 'tilejit.language.ir.ops',\n"
        "         'tilejit.backends', 'tilejit.compiler']\n"
        "print([m for m in heavy if m in sys.modules], defs.scale._args, defs.scale._constants)\n"
        "import tilejit as tj\n"
        "sig = (tj.float32[:], tj.float32[:], tj.float32)\n"
        "tj.compile(defs.scale, sig, constants={'TILE': 128}, target='sm_80').ir_text()\n"
        "print('tilejit.language.frontend.translate' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, capture_output=True, text=True)
    defined, compiled = out.stdout.strip().splitlines()
    assert defined == "[] ['x', 'out', 'a'] ['TILE']"
    assert compiled == "True"


def test_constants_of_equal_value_but_other_type_are_distinct_specializations() -> None:
    """1, 1.0 and True hash alike in Python; a kernel specialized on one must not serve the others."""
    from tilejit.api.kernel import Kernel

    @tj.kernel
    def k(x, C: tj.Constant[object]):
        tj.store(x, index=(0,), tile=tj.full((16,), C, x.dtype))

    assert isinstance(k, Kernel)
    seen: list[tuple[Any, ...]] = []
    k._build = lambda arg_types, hints, consts, device: seen.append(consts) or object()  # type: ignore[method-assign]
    view = ArrayView(4096, (16,), (1,), "float32", None)
    compiled = [k._specialize(("fast", i), [view], [view], (c,)) for i, c in enumerate((1, 1.0, True))]
    assert len({id(c) for c in compiled}) == 3
    assert [type(c[0]) for c in seen] == [int, float, bool]


@pytest.mark.parametrize("n, exc", [(1.5, TypeError), (True, TypeError), ("128", TypeError), (0, ValueError),
                                    (48, ValueError), (2048, ValueError), (16, ValueError)])
def test_num_threads_is_checked_at_decoration(n: object, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="num_threads"):
        @tj.kernel(num_threads=n)
        def k(x):
            pass


def test_signature_must_be_a_sequence_or_mapping() -> None:
    with pytest.raises(TypeError, match="signature must be a tuple or list of parameter types"):
        tj.compile(vadd, None, constants={"TILE": 16}, target="sm_90")  # type: ignore[arg-type]


def test_array_parameter_annotated_constant_is_named() -> None:
    with pytest.raises(TypeError, match=r"'TILE' is annotated tj\.Constant"):
        tj.compile(vadd, {"x": tj.float32[:], "y": tj.float32[:], "out": tj.float32[:], "TILE": tj.float32[:]},
                   target="sm_90")



@tj.kernel
def _mm_step(a, b, c, step, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, tj.num_tiles(a, 1, (BM, BK)), step):
        acc = tj.mma(tj.load(a, index=(i, k), shape=(BM, BK)), tj.load(b, index=(k, j), shape=(BK, BN)), acc)
    tj.store(c, index=(i, j), tile=acc)


MM_SIG = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])


def _matmul() -> Any:
    from test_frontend_kernels import matmul  # the example kernel

    return matmul


@pytest.mark.parametrize(("arch", "limit"), [("sm_80", 166912), ("sm_86", 101376), ("sm_89", 101376),
                                             ("sm_90", 232448), ("sm_120", 101376)])
@pytest.mark.parametrize("tiles", [(128, 128, 64), (256, 128, 64)])
def test_pipelines_fit_the_targets_shared_memory(arch: str, limit: int, tiles: tuple[int, int, int]) -> None:
    """A cp.async pipeline's stages must fit the target's shared memory per block (99 KiB on sm_86/89/120):
    more makes the launch fail."""
    bm, bn, bk = tiles
    ck = tj.compile(_matmul(), MM_SIG, constants={"BM": bm, "BN": bn, "BK": bk}, target=arch).cuda_kernel()
    assert ck.shared_bytes <= limit


def test_shared_memory_beyond_the_target_is_a_compile_error() -> None:
    # (128, 128) @ (128, 128) float32 tiles through shared memory: 135 KB, more than sm_75's 64 KiB
    sig = (tj.float32[:, ::1], tj.float32[:, ::1], tj.float32[:, ::1])
    with pytest.raises(TileCompileError, match=r"matmul\.py:\d+:\d+: error: this mma .* needs 135168 bytes of shared "
                       r"memory per block; sm_75 allows at most 65536"):
        tj.compile(_matmul(), sig, constants={"BM": 128, "BN": 128, "BK": 128}, target="sm_75").cuda_source()


def test_pipelined_loop_with_a_run_time_step_never_divides_by_zero() -> None:
    src = tj.compile(_mm_step, (*MM_SIG, tj.int32), constants={"BM": 64, "BN": 64, "BK": 32},
                     target="sm_80").cuda_source()
    assert "cp_async_tile" in src
    line = next(ln for ln in src.splitlines() if "_n = " in ln and "tj::i64" in ln)
    assert "_step > 0 ?" in line
    assert "cp_async_tile" in tj.compile(_matmul(), MM_SIG, constants={"BM": 128, "BN": 128, "BK": 64},
                                         target="sm_86").cuda_source()  # still pipelined, in fewer stages


# ---------------------------------------------------------------------------------------------- text signatures


def test_text_signatures_are_accepted() -> None:
    """The command line's spelling works in tj.compile: one string, a string per parameter, or by name."""
    want = tj.compile(vadd, SIG, constants={"TILE": 64}, target="sm_80").arg_types
    text = "float32[:], f32[:], float32[ : ]"
    assert tj.compile(vadd, text, constants={"TILE": 64}, target="sm_80").arg_types == want
    assert tj.compile(vadd, ["float32[:]"] * 3, constants={"TILE": 64}, target="sm_80").arg_types == want
    by_name = {"x": "float32[:]", "y": tj.float32[:], "out": "float32[:]"}
    assert tj.compile(vadd, by_name, constants={"TILE": 64}, target="sm_80").arg_types == want

    @tj.kernel
    def scale(x, out, a, n, TILE: tj.Constant[int]):
        i = tj.bid(0)
        tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * a + n)

    text = tj.compile(scale, "f16[:, ::1], float16[:,::1], float, int64", constants={"TILE": 64}, target="sm_80")
    objs = tj.compile(scale, (tj.float16[:, ::1], tj.float16[:, ::1], float, tj.int64), constants={"TILE": 64},
                      target="sm_80")
    assert text.arg_types == objs.arg_types and text.hints == objs.hints and len(text.hints) == 2


@pytest.mark.parametrize(("text", "col", "why"), [
    ("float32[", 8, "expected ':' or '::1' for a dimension"),
    ("float32[:],float32[", 19, "expected ':' or '::1' for a dimension"),
    ("float32[:], float32[:],", 23, "expected a parameter type after ','"),
    ("float32[:], floot[:], float32[:]", 12, "unknown type 'floot[:]'"),
    ("float32[:] float32[:]", 11, "expected ',' or the end after 'float32[:]'"),
    ("float32[::1, :], f32[:], f32[:]", 8, "::1 is allowed only as the last dimension"),
    ("int[:], f32[:], f32[:]", 3, "'int' is a Python scalar type"),
])
def test_malformed_text_signature_shows_the_column(text: str, col: int, why: str) -> None:
    with pytest.raises(ValueError) as info:
        tj.compile(vadd, text, constants={"TILE": 64}, target="sm_80")
    message = str(info.value)
    assert message.startswith(f"signature, column {col}: {why}")
    assert message.endswith(f"\n  {text}\n  {' ' * col}^")


def test_parse_signature_is_the_one_parser() -> None:
    from tilejit.api.signature import parse_signature
    from tilejit.language.ir.types import scalar

    assert parse_signature("") == ()
    assert parse_signature(" float32[:, :] , i64, bool ") == (tj.float32[:, :], scalar(tj.int64), scalar(tj.bool_))
    with pytest.raises(ValueError, match=r"^--signature, column 0: expected a parameter type"):
        parse_signature(",", what="--signature")
    with pytest.raises(TypeError, match="signature must be str"):
        parse_signature(b"float32[:]", what="signature")  # type: ignore[arg-type]


def test_a_text_entry_must_be_one_type() -> None:
    with pytest.raises(ValueError, match=r"parameter 'x': expected one type, got 2"):
        tj.compile(vadd, ["float32[:], float32[:]", "float32[:]", "float32[:]"], constants={"TILE": 64},
                   target="sm_80")


# ---------------------------------------------------------------------------------------------- default target


def test_no_target_follows_tilejit_arch_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default target is read when asked for (it was remembered from the first tj.compile of the process)."""
    from conftest import has_gpu

    from tilejit.compiler.targets import Target
    from tilejit.errors import TargetError

    if has_gpu():
        pytest.skip("with a GPU the default target is the GPU's")
    monkeypatch.setenv("TILEJIT_ARCH", "sm_80")
    assert tj.compile(vadd, SIG, constants={"TILE": 64}).target == Target(8, 0)
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    assert tj.compile(vadd, SIG, constants={"TILE": 64}).target == Target(8, 6)
    monkeypatch.setenv("TILEJIT_ARCH", "sm_9")
    with pytest.raises(TargetError, match="TILEJIT_ARCH='sm_9': invalid target 'sm_9'"):
        tj.compile(vadd, SIG, constants={"TILE": 64})
    monkeypatch.delenv("TILEJIT_ARCH")
    with pytest.raises(TargetError, match=r"^no GPU is present to choose a compile target: pass target='sm_90'"
                                          r", set TILEJIT_ARCH=sm_90, or run where a GPU is$"):
        tj.compile(vadd, SIG, constants={"TILE": 64})


# ---------------------------------------------------------------------------------------------- repr


def test_repr_of_a_compiled_program_shows_sizes_not_bytes() -> None:
    art = tj.compile(vadd, SIG, constants={"TILE": 64}, target="sm_80")
    cubin = art.cubin()
    prog = art._progs["cubin"]
    text = repr(prog)
    assert f"code=<{len(cubin)} bytes>" in text and len(text) < 400
    assert "\\x" not in text
