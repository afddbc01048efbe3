"""The Tile IR view facts (docs/tileir.md, "mma and matmul speed") from launch-checked knowledge only: which
``assume`` ops the hints give, that tileiras then makes its TMA CUBIN, and that no launch can break them
(the index32 fact in the key, shapes refused by the launchers)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_runtime_launch import FakeDriver, fake, fake_lib, fn, view  # noqa: F401 (fixtures)

import tilejit as tj
from tilejit.api.signature import array_key
from tilejit.errors import LaunchError
from tilejit.language.ir.types import ArrayHint
from tilejit.runtime.launch import Launcher, ParamKind

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import matmul

CONSTS = {"BM": 128, "BN": 128, "BK": 64}
ROWS = (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1], tj.float32[:, ::1])
PLAIN = (tj.bfloat16[:, :], tj.bfloat16[:, :], tj.float32[:, :])


def text_of(sig: tuple[Any, ...], hints: dict[str, ArrayHint] | None = None) -> str:
    """The Tile IR text of examples/matmul.py's kernel for ``sig`` (with ``hints`` instead of the signature's)."""
    art = tj.compile(matmul, sig, constants=CONSTS, target="sm_90", backend="cuda")
    if hints is not None:
        art.hints = hints
    return art.tileir_text()


def assumes(text: str, name: str) -> list[str]:
    """The predicates assumed of parameter ``name``'s base, shapes and strides, in order."""
    return re.findall(rf"= assume ([^%]+), %{name}(?:_shape\d|_stride\d)?(?:_\w+)? :", text)


# --------------------------------------------------------------------------------------------- CPU


@pytest.mark.parametrize(("strides", "index32"), [((4, 1), True), ((2**31 - 1, 1), True), ((-4, 1), False),
                                                  ((4, -1), False), ((2**31, 1), False), ((), True)])
def test_index32_fact_of_strides(strides: tuple[int, ...], index32: bool) -> None:
    assert array_key("float16", (3,) * len(strides), strides, 0x1000)[4] is index32


def test_facts_appear_exactly_when_the_hints_allow() -> None:
    rows = text_of(ROWS)  # [:, ::1]: unit stride, aligned rows, shapes and strides below 2**31
    assert assumes(rows, "a") == ["bounded<0, 2147483647>"] * 4 + ["div_by<8>", "div_by<16>"]
    assert assumes(rows, "c") == ["bounded<0, 2147483647>"] * 4 + ["div_by<4>", "div_by<16>"]
    assert "assume" not in text_of(PLAIN)  # no launch facts: nothing assumed
    aligned_only = text_of(PLAIN, {n: ArrayHint(True, True, False) for n in "abc"})
    assert assumes(aligned_only, "a") == ["bounded<0, ?>"] * 2 + ["div_by<8>", "div_by<16>"]
    assert "2147483647" not in aligned_only
    index_only = text_of(PLAIN, {"a": ArrayHint(False, False, True)})
    assert assumes(index_only, "a") == ["bounded<0, 2147483647>"] * 4 and "div_by" not in index_only
    assert assumes(index_only, "b") == []
    # unit_stride alone: no assume, but the inner stride is static 1 in the tensor view
    unit = text_of(PLAIN, {"a": ArrayHint(True, False, False)})
    assert "assume" not in unit
    assert "make_tensor_view %a, shape = [%a_shape0, %a_shape1], strides = [%a_stride0, 1] " in unit
    assert "strides = [%b_stride0, %b_stride1] " in unit


def test_image_marks_index32_arrays_in_its_params(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    image = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="tileir").image()
    assert image.params == (("a", ("array", "bfloat16", 2, "index32")), ("b", ("array", "bfloat16", 2, "index32")),
                            ("c", ("array", "float32", 2, "index32")))
    # TMA loads + warp specialization: 384 threads (two consumer warpgroups) since the K loop is versioned
    # (docs/tileir.md, "Read-only loops"); tileiras gave 256 (cuTile's shape) to the loop alone
    assert image.num_threads == 384
    plain = tj.compile(matmul, PLAIN, constants=CONSTS, target="sm_90", backend="tileir").image()
    assert [spec for _, spec in plain.params] == [("array", "bfloat16", 2), ("array", "bfloat16", 2),
                                                  ("array", "float32", 2)]
    assert plain.num_threads == 256  # element-wise loads (ld.global; 128 threads before the K loop was versioned)


def test_tma_cubin_for_the_matmul_example(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.backends.tileir_backend import elf_sections

    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    art = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="tileir")
    assert art.image().num_threads == 384
    assert any(name.startswith(".nv.info.matmul") for name in elf_sections(art.cubin()))


def test_cache_key_holds_index32() -> None:
    from tilejit.api.loader import _specialization_key

    art = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="cuda")
    key = _specialization_key(art, "fp")
    art.hints = {n: h.replace(index32=False) for n, h in art.hints.items()}
    assert _specialization_key(art, "fp") != key


def test_param_kind_index32_spec() -> None:
    k = ParamKind.from_spec(("array", "bfloat16", 2, "index32"))
    assert k.index32 and k != ParamKind.array("bfloat16", 2) and str(k) == "array<bfloat16, 2, index32>"
    with pytest.raises(ValueError, match="spec"):
        ParamKind.from_spec(("array", "bfloat16", 2, "int32"))
    with pytest.raises(ValueError, match="arrays only"):
        ParamKind("scalar", "int32", 0, True)


@pytest.mark.parametrize("path", ["checked", "generated"])
@pytest.mark.parametrize(("shape", "strides", "what"), [((2**31, 4), (4, 1), r"shape\[0\] is 2147483648"),
                                                        ((4, 2**31 + 5), (2**31 + 5, 1), r"shape\[1\] is 2147483653"),
                                                        ((4, 4), (-4, 1), r"strides\[0\] is -4")])
def test_launchers_refuse_index32_arrays_beyond_int32(fake: FakeDriver, path: str, shape: tuple[int, int],  # noqa: F811
                                                      strides: tuple[int, int], what: str) -> None:
    params = [("a", ParamKind.array("bfloat16", 2, index32=True)), ("n", ParamKind.scalar("int32"))]
    launcher = Launcher(fn("matmul"), params, driver=fake)
    launch = launcher.launch_checked if path == "checked" else launcher.launch
    calls = fake.calls()
    launch(1, [view(0x1000, (2**31 - 1, 8), (8, 1), "bfloat16"), 3])  # the largest shape allowed launches
    assert fake.calls() == calls + 1
    with pytest.raises(LaunchError, match=f"parameter 'a' .* of kernel 'matmul': {what}, outside \\[0, 2\\*\\*31\\)"
                                          ".*backend='cuda'"):
        launch(1, [view(0x1000, shape, strides, "bfloat16"), 3])
    assert fake.calls() == calls + 1
    # an array parameter without the fact (the CUDA backend's) takes the same array
    plain = Launcher(fn("matmul"), [("a", ParamKind.array("bfloat16", 2)), ("n", ParamKind.scalar("int32"))],
                     driver=fake)
    (plain.launch_checked if path == "checked" else plain.launch)(1, [view(0x1000, shape, strides, "bfloat16"), 3])
    assert fake.calls() == calls + 2


def test_cuda_launcher_code_is_unchanged(fake: FakeDriver) -> None:  # noqa: F811
    """A parameter without the fact generates no check: the CUDA backend's launches do no more work."""
    plain = Launcher(fn(), [("a", ParamKind.array("float32", 2))], driver=fake)
    index32 = Launcher(fn(), [("a", ParamKind.array("float32", 2, index32=True))], driver=fake)
    seen = [launcher.launch.source for launcher in (plain, index32)]  # type: ignore[attr-defined]
    assert "2147483648" not in seen[0] and "2147483648" in seen[1]


# --------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["aligned", "column_offset", "transposed_b", "reversed_rows", "odd_k"])
def test_tileir_matmul_on_aligned_and_strided_inputs(layout: str, tileir_env: None) -> None:
    """examples/matmul.py's kernel on Tile IR (f16 in, f32 out) matches numpy whatever the inputs' layout: with the
    facts (aligned rows: TMA) and without (a base off 16 bytes, a transposed or reversed view, rows of 2 bytes)."""
    from tilejit.runtime.interop import ArrayView

    kernel = tj.kernel(matmul.func, backend="tileir")
    m, n, k = 256, 384, 200 if layout == "odd_k" else 192
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    keep: list[Any] = []
    if layout == "column_offset":  # a's base 2 bytes past a 16-byte boundary
        big = np.zeros((m, k + 1), np.float16)
        big[:, 1:] = a
        da = tj.asarray(big)
        keep.append(da)
        arg_a: Any = da[:, 1:]
    elif layout == "reversed_rows":  # negative row stride: no index32 fact
        da = tj.asarray(a[::-1].copy())
        keep.append(da)
        arg_a = ArrayView(da.ptr + (m - 1) * k * 2, (m, k), (-k, 1), "float16", da)
    else:
        arg_a = tj.asarray(a)
    if layout == "transposed_b":  # b stored as (n, k): strides (1, k), no unit inner stride
        db = tj.asarray(np.ascontiguousarray(b.T))
        keep.append(db)
        arg_b: Any = ArrayView(db.ptr, (k, n), (1, k), "float16", db)
    else:
        arg_b = tj.asarray(b)
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    grid = (tj.cdiv(m, CONSTS["BM"]), tj.cdiv(n, CONSTS["BN"]))
    for _ in range(2 + 16):  # the checked launches, then the generated fast path
        dc.fill(float("nan"))
        kernel[grid](arg_a, arg_b, dc, **CONSTS)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = dc.numpy().astype(np.float64)
    assert not np.isnan(got).any()
    assert float(np.linalg.norm(got - want) / np.linalg.norm(want)) <= 1e-3


@pytest.mark.gpu
def test_tileir_launch_refuses_a_dim_of_2_31(tileir_env: None) -> None:
    """A Tile IR kernel compiled with the facts refuses (named, before launching) an array with a dim >= 2**31; the
    same array with index32 strides but a huge shape never reaches the GPU (a view of 2**31 rows of 0 stride)."""
    from tilejit.runtime.interop import ArrayView

    kernel = tj.kernel(matmul.func, backend="tileir")
    a = tj.asarray(np.ones((128, 64), np.float16))
    b = tj.asarray(np.ones((64, 128), np.float16))
    c = tj.asarray(np.zeros((128, 128), np.float32))
    kernel[(1, 1)](a, b, c, **CONSTS)  # a specialization with the facts for these strides
    huge = ArrayView(a.ptr, (2**31, 64), (64, 1), "float16", a)
    with pytest.raises(LaunchError, match=r"parameter 'a' .*shape\[0\] is 2147483648.*backend='cuda'"):
        kernel[(1, 1)](huge, b, c, **CONSTS)
