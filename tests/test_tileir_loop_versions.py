"""Versioned read-only loops (docs/tileir.md, "Read-only loops"): a ``for`` that only reads, with tile loads, runs
a copy that carries no load token when the arrays it reads share no byte with any array the kernel writes (known
from the launch, ``ArrayHint.disjoint``, or checked at run time), else the copy whose carried token orders the
later stores after its loads. On the CPU: the structure of examples/matmul.py's K loop, which loops are not
versioned, the launch facts, and tileiras's CUBIN; on a GPU: both copies compute what numpy does, the
token-carrying one when the output overlaps an input."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import matmul

CONSTS = {"BM": 128, "BN": 128, "BK": 64}
ROWS = (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1], tj.bfloat16[:, ::1])


@tj.kernel
def scale_rows_in_place(x, n, TM: tj.Constant[int], TN: tj.Constant[int]):
    """x[i-tile, 0] = the sum of x's first n column tiles (rows of tile i): the loop reads what the kernel writes."""
    i = tj.bid(0)
    acc = tj.zeros((TM, TN), tj.float32)
    for k in range(n):
        acc = acc + tj.load(x, index=(i, k), shape=(TM, TN))
    tj.store(x, index=(i, 0), tile=acc)


def matmul_text() -> str:
    """The Tile IR text of examples/matmul.py's kernel, bf16 ``[:, ::1]`` arrays, 128x128x64, sm_90."""
    return tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="cuda").tileir_text()


def loop_headers(text: str) -> list[str]:
    """The ``for`` lines of ``text``."""
    return [ln.strip() for ln in text.splitlines() if " = for " in ln]


# --------------------------------------------------------------------------------------------- CPU


def test_matmul_k_loop_without_tokens_where_the_arrays_are_disjoint() -> None:
    """The copy that runs for disjoint arrays carries only the accumulator (cuTile's loop: tileiras then pipelines
    its TMA loads without a handshake per stage); the other carries the join of its loads' tokens."""
    text = matmul_text()
    fast, slow = text.split("} else {")
    cond = re.search(r"%\w+:2 = if (%\d+) -> \(tile<128x128xf32>, token\) \{", fast)
    assert cond and re.search(rf"{cond.group(1)} = cmpi greater_than_or_equal %\d+, %\d+, signed", fast)
    assert [ln.count("ptr_to_int") for ln in text.splitlines() if "ptr_to_int" in ln] == [1, 1, 1]  # a, b, c
    fast_loop = fast.split(" = if ")[1]
    assert re.search(r"= for %k\w* in .* iter_values\(%acc_\d+ = %acc\) -> \(tile<128x128xf32>\) \{", fast_loop)
    assert "join_tokens" not in fast_loop and "token" not in loop_headers(fast_loop)[0]
    assert len(re.findall(r"load_view_tko weak .* token = %start :", fast_loop)) == 2  # after the stores before
    slow_loop = slow.split("yield")[0]
    assert re.search(r"iter_values\(%acc_\d+ = %acc, %loaded = %start\) -> \(tile<128x128xf32>, token\)", slow_loop)
    assert re.search(r"join_tokens %loaded, %\d+, %\d+ : token\n\s+continue", slow_loop)
    assert re.search(r"(%\d+) = join_tokens %start, %\w+#1 : token\n\s+%\d+ = store_view_tko weak %\d+, "
                     r"%c_tiles\[%bid_x, %bid_y\] token = \1 :", slow)


def test_no_copies_where_the_loop_reads_what_the_kernel_writes() -> None:
    """The same array read in the loop and stored after it: one loop, carrying its loads' token (no check)."""
    art = tj.compile(scale_rows_in_place, (tj.float32[:, :], tj.int32), constants={"TM": 16, "TN": 32},
                     target="sm_90", backend="cuda")
    text = art.tileir_text()
    assert " = if " not in text and "ptr_to_int" not in text
    (header,) = loop_headers(text)
    assert "%loaded = %start" in header and "token" in header


def test_launch_facts_of_disjoint_arrays_leave_one_loop_without_tokens() -> None:
    """Where the launch says an array overlaps no other (``ArrayHint.disjoint``), the pairs it is in need no
    check: with a and b (or c) alone, one loop without tokens and no span computation; with only a alone, the
    check of (b, c) remains."""
    from tilejit.backends.tileir import module_text

    art = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="cuda")
    for alone, versioned in [((), True), (("a", "b"), False), (("c",), False), (("a",), True)]:
        hints = {n: h.replace(disjoint=n in alone) for n, h in art.hints.items()}
        text = module_text(art.ir(), "sm_90", hints)
        assert (" = if " in text) == versioned, alone
        assert text.count("ptr_to_int") == (2 if alone == ("a",) else 3 if versioned else 0), alone
        if not versioned:
            (header,) = loop_headers(text)
            assert "token" not in header and "join_tokens" not in text.split(" = for ")[1].split("continue")[0]


def test_launch_facts_of_array_views() -> None:
    """``signature.launch_facts``: ALONE from byte spans (pointer, shape, strides in elements, negative ones too,
    itemsize; an array meeting another in any byte is not alone), EXTENT16 from the innermost extent's bytes;
    scalars have none."""
    from tilejit.api.signature import ALONE, EXTENT16, launch_facts
    from tilejit.runtime.interop import ArrayView

    def view(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str = "float32") -> Any:
        return ArrayView(ptr, shape, strides, dtype, None)

    def alone(views: list[Any]) -> tuple[bool | None, ...]:
        return tuple(None if f is None else bool(f & ALONE) for f in launch_facts(views))

    a = view(0x1000, (4, 8), (8, 1))  # bytes [0x1000, 0x1080)
    b = view(0x1080, (4,), (1,))  # right after a
    c = view(0x107C, (2,), (1,))  # a's last element
    assert alone([a, b, 3.0]) == (True, True, None)
    assert alone([a, b, c]) == (False, False, False)
    rev = view(0x10FC, (16,), (-1,))  # bytes [0x10C0, 0x1100)
    assert alone([a, rev]) == (True, True)
    assert alone([view(0x10BC, (2,), (1,)), rev]) == (False, False)
    halves = view(0x2000, (4, 4), (8, 1)), view(0x2010, (4, 4), (8, 1))  # interleaved rows: spans overlap
    assert alone(list(halves)) == (False, False)
    assert alone([view(0x3000, (0, 4), (4, 1)), view(0x4000, (2,), (1,), "float64")]) == (True, True)
    extents = [view(0, (3, 8), (8, 1), "bfloat16"), view(0, (8, 12), (12, 1), "bfloat16"),
               view(0, (5,), (1,), "float32"), view(0, (2, 4), (1, 2), "float32"), view(0, (6,), (1,), "float64")]
    assert [bool(f & EXTENT16) for f in launch_facts(extents)] == [True, False, False, True, True]


def test_only_tile_ir_kernels_key_launches_by_their_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking at spans and extents costs every launch, so only kernels whose backend compiles the facts in do."""
    from tilejit.api.kernel import _dispatch_source

    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    assert tj.kernel(matmul.func, backend="tileir")._keys_facts()
    assert not tj.kernel(matmul.func, backend="cuda")._keys_facts()
    assert not tj.kernel(matmul.func)._keys_facts()

    def no_array(n: int):  # type: ignore[no-untyped-def]
        tj.zeros((16,), tj.float32)

    assert not tj.kernel(no_array, backend="tileir")._keys_facts()
    src = _dispatch_source(["a", "b", "c"], ["BM"], [], True)
    assert "_tj_facts((_tj_view_a, _tj_view_b, _tj_view_c, )))" in src
    assert "facts(" not in _dispatch_source(["a", "b", "c"], ["BM"], [])


def test_extent16_lets_tileiras_store_with_tma() -> None:
    """``ArrayHint.extent16`` states the innermost extent's divisibility (16 bytes: 8 bf16 elements), the fact
    tileiras needs to store a tile with TMA; without it no such assume."""
    from tilejit.backends.tileir import module_text

    art = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="cuda")
    plain = module_text(art.ir(), "sm_90", art.hints)
    stated = module_text(art.ir(), "sm_90", {n: h.replace(extent16=True) for n, h in art.hints.items()})
    assert not re.search(r"assume div_by<8>, %\w_shape", plain)
    assert re.search(r"assume div_by<8>, %c_shape1_0 : tile<i64>", stated)
    assert len(re.findall(r"assume div_by<8>, %\w_shape1_0 ", stated)) == 3  # a, b, c; no outer extent
    assert not re.search(r"assume div_by<8>, %\w_shape0", stated)


def test_the_versioned_matmul_cubin_keeps_tma(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """tileiras compiles the versioned K loop to a warp-specialized TMA CUBIN (384 threads: two consumer
    warpgroups)."""
    from tilejit.backends.tileir_backend import elf_sections

    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    art = tj.compile(matmul, ROWS, constants=CONSTS, target="sm_90", backend="tileir")
    assert art.image().num_threads == 384
    assert any(name.startswith(".nv.info.matmul") for name in elf_sections(art.cubin()))


# --------------------------------------------------------------------------------------------- GPU


def _f16(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Random float16 values (small integers: exact sums)."""
    return rng.integers(-3, 4, shape).astype(np.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["separate", "interleaved", "same"])
def test_versioned_matmul_on_disjoint_and_overlapping_arrays(layout: str, tileir_env: None) -> None:
    """examples/matmul.py's kernel on Tile IR: separate arrays (the copy without tokens); a and c as the two
    halves of each row of one buffer (spans overlap, elements do not: the token copy); c the very memory of a
    (one block, so the store must follow every load of a: the token copy)."""
    from tilejit.runtime.interop import ArrayView

    kernel = tj.kernel(matmul.func, backend="tileir")
    consts = {"BM": 64, "BN": 128, "BK": 32}
    m, k = 64, 128
    n = k
    rng = np.random.default_rng(11)
    a, b = _f16(rng, (m, k)), _f16(rng, (k, n))
    want = a.astype(np.float64) @ b.astype(np.float64)
    db = tj.asarray(b)
    keep: list[Any] = []  # the buffers the views point into
    if layout == "separate":
        da = tj.asarray(a)
        dc = tj.asarray(np.full((m, n), np.nan, np.float16))
        arg_a, arg_c, read = da, dc, lambda: dc.numpy()
    elif layout == "interleaved":
        buf = tj.asarray(np.concatenate([a, np.full((m, n), np.nan, np.float16)], axis=1))
        arg_a = ArrayView(buf.ptr, (m, k), (k + n, 1), "float16", buf)
        arg_c = ArrayView(buf.ptr + k * 2, (m, n), (k + n, 1), "float16", buf)
        read = lambda: buf.numpy()[:, k:]
        keep.append(buf)
    else:
        da = tj.asarray(a)
        arg_a = arg_c = da
        read = lambda: da.numpy()
    grid = (tj.cdiv(m, consts["BM"]), tj.cdiv(n, consts["BN"]))
    assert grid == (1, 1)
    kernel[grid](arg_a, db, arg_c, **consts)
    got = read().astype(np.float64)
    np.testing.assert_array_equal(got, want)
    (spec,) = kernel._specs  # separate arrays: the launch's facts say so, and the K loop carries no token at all
    hints = dict(spec[3])
    assert hints["a"].disjoint == (layout == "separate") and hints["b"].disjoint
    assert hints["c"].extent16 and hints["b"].extent16  # 128 float16 elements a row
    assert keep or layout != "interleaved"
