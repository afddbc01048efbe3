"""The Tile IR entry's hints (lower/occupancy.py): the ``occupancy`` chosen for the example row kernels, none for
mma kernels or targets the rule was not checked on; 8 worker warps for wide matmul accumulators on sm_90; and
tileiras compiling the hinted modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import tilejit as tj
from tilejit.backends.tileir.lower.occupancy import choose_no_tma, choose_occupancy, choose_worker_warps, entry_hints

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from layer_norm import layer_norm
from matmul import matmul
from softmax import softmax
from vector_add import vector_add


def compiled(name: str, dtype: str, block: int, target: str = "sm_90", backend: str = "cuda",
             bn: int | None = None) -> Any:
    """The artifact of examples/<name>.py's kernel on contiguous ``dtype`` arrays with tile size ``block``
    (a matmul's BM; its BN is ``bn``, default ``block``)."""
    dt = getattr(tj, dtype)
    kernel, sig, consts = {
        "softmax": (softmax, (dt[:, ::1], dt[:, ::1]), {"ROWS": 1, "BLOCK": block}),
        "layer_norm": (layer_norm, (dt[:, ::1], dt[::1], dt[::1], dt[:, ::1], tj.float32), {"BLOCK": block}),
        "vector_add": (vector_add, (dt[::1], dt[::1], dt[::1]), {"TILE": block}),
        "matmul": (matmul, (dt[:, ::1], dt[:, ::1], tj.float32[:, ::1]), {"BM": block, "BN": bn or block, "BK": 64}),
    }[name]
    return tj.compile(kernel, sig, constants=consts, target=target, backend=backend)


#: (kernel, BLOCK) -> the occupancy chosen, the same for float32, bfloat16 and float16 (all compute in f32);
#: checked with ptxas -v for sm_90 (docs/tileir.md, "Occupancy hint"). None: no hint.
EXPECTED = {
    ("softmax", 1024): 8, ("softmax", 2048): 8, ("softmax", 4096): 4, ("softmax", 8192): 4,
    ("softmax", 16384): 2, ("softmax", 32768): None,
    ("layer_norm", 256): 8, ("layer_norm", 1024): 8, ("layer_norm", 2048): 8, ("layer_norm", 4096): 4,
    ("layer_norm", 8192): 2, ("layer_norm", 16384): 2, ("layer_norm", 32768): None,
    ("vector_add", 1024): 8, ("vector_add", 4096): 4, ("vector_add", 8192): 2, ("vector_add", 16384): 2,
    ("vector_add", 32768): None,
}


#: every case in float32, and the 16-bit dtypes where ptxas spills a little by the rule's measured choice (each
#: case also goes through tileiras at the end of the session, so not every one in every dtype)
CASES = [(name, block, "float32") for name, block in sorted(EXPECTED)] + [
    (name, block, dtype) for name, block in [("softmax", 8192), ("layer_norm", 2048)]
    for dtype in ("bfloat16", "float16")
]


@pytest.mark.parametrize(("name", "block", "dtype"), CASES)
def test_occupancy_of_the_example_kernels(name: str, block: int, dtype: str) -> None:
    """The rule's choice per example kernel and tile size (a change to the rule shows here)."""
    art = compiled(name, dtype, block)
    assert choose_occupancy(art.ir()) == EXPECTED[name, block]


@pytest.mark.parametrize("block", [64, 128])
def test_no_hint_for_mma_kernels(block: int) -> None:
    """A kernel with an mma gets no hint (tileiras's warp-specialized matmul wants every register)."""
    art = compiled("matmul", "bfloat16", block)
    assert choose_occupancy(art.ir()) is None
    assert "optimization_hints=<sm" not in art.tileir_text()


@pytest.mark.parametrize(("target", "printed"), [
    ("sm_90", "optimization_hints=<sm_90 = {occupancy = 4}>"),
    ("sm_80", "optimization_hints=<sm_80 = {occupancy = 4}>"),
    ("sm_100", None),  # not checked there: its softmax needs more registers
])
def test_hint_in_the_text_for_its_target(target: str, printed: str | None) -> None:
    """The hint is written under the target's own name, for the targets the rule was checked on only."""
    text = compiled("softmax", "float32", 4096, target).tileir_text()
    if printed is None:
        assert "optimization_hints=<sm" not in text
    else:
        assert printed in text


def test_entry_hints_for_no_target() -> None:
    """Without a target (``""``) the lowering writes no hint; with one, the chosen occupancy under its name."""
    fn = compiled("layer_norm", "float32", 1024).ir()
    assert entry_hints(fn, "") == {}
    assert entry_hints(fn, "sm_90") == {"sm_90": {"occupancy": 8}}
    assert entry_hints(fn, "sm_100") == {}


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize(("name", "block"), [("softmax", 8192), ("layer_norm", 1024), ("vector_add", 4096)])
def test_tileiras_compiles_the_hinted_kernels(name: str, block: int, target: str, tileir_env: Any) -> None:
    """tileiras accepts the hinted modules (bytecode 13.5) and makes a CUBIN for each target."""
    art = compiled(name, "float32", block, target, backend="tileir")
    assert (f"optimization_hints=<{target} = {{occupancy = " in art.tileir_text()) == (target != "sm_100")
    image = art.image()
    assert image.image[:4] == b"\x7fELF"


@pytest.mark.parametrize(("bm", "bn", "warps"), [(128, 256, 8), (256, 128, 8), (64, 512, 8), (128, 128, None),
                                                 (64, 256, None)])
def test_worker_warps_for_wide_accumulators(bm: int, bn: int, warps: int | None) -> None:
    """8 worker warps from a 128x256-element accumulator on (measured: 0.06x -> 0.9x cuBLAS), else tileiras's own."""
    fn = compiled("matmul", "bfloat16", bm, bn=bn).ir()
    assert choose_worker_warps(fn) == warps
    assert entry_hints(fn, "sm_90") == ({} if warps is None else {"sm_90": {"num_worker_warps_per_cta": warps}})
    assert entry_hints(fn, "sm_80") == {} and entry_hints(fn, "sm_100") == {}


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100"])
def test_tileiras_gives_a_wide_matmul_its_worker_warps(target: str, tileir_env: Any) -> None:
    """On sm_90 the hint is written and tileiras makes 384 threads (2 consumer warpgroups and a producer warp)."""
    art = compiled("matmul", "bfloat16", 128, target, backend="tileir", bn=256)
    assert ("num_worker_warps_per_cta = 8" in art.tileir_text()) == (target == "sm_90")
    image = art.image()
    assert image.image[:4] == b"\x7fELF"
    if target == "sm_90":
        assert image.num_threads == 384


@pytest.mark.parametrize(("name", "block"), sorted(EXPECTED))
def test_worker_warps_for_rows_no_occupancy_holds(name: str, block: int) -> None:
    """A kernel without an mma gets 8 worker warps on sm_90 exactly where no occupancy's cap holds its tiles
    (rows of 32768 elements), and then no occupancy; elsewhere the occupancy alone."""
    fn = compiled(name, "float32", block).ir()
    wide = EXPECTED[name, block] is None
    assert choose_worker_warps(fn) == (8 if wide else None)
    want = {"num_worker_warps_per_cta": 8} if wide else {"occupancy": EXPECTED[name, block]}
    assert entry_hints(fn, "sm_90") == {"sm_90": want}
    assert "num_worker_warps_per_cta" not in str(entry_hints(fn, "sm_80"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_tileiras_gives_a_long_row_its_worker_warps(dtype: str, tileir_env: Any) -> None:
    """A softmax over rows of 32768 elements: 384 threads on sm_90 (at tileiras's own 256 it spills 1192 B in
    bf16), tileiras's own choice on sm_80. (float32 rows go without TMA: tileiras then gives 256 threads of 254
    registers, no spill.)"""
    for target, threads in (("sm_90", 384), ("sm_80", None)):
        art = compiled("softmax", dtype, 32768, target, backend="tileir")
        assert ("num_worker_warps_per_cta = 8" in art.tileir_text()) == (target == "sm_90")
        if threads is not None:
            assert art.image().num_threads == threads


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("name", "block"), [
    *[(n, b) for n in ("softmax", "layer_norm") for b in (1024, 4096, 8192, 16384)], ("softmax", 32768),
    ("layer_norm", 32768), ("vector_add", 4096)])
def test_no_tma_for_float32_rows_of_4k_to_8k(name: str, block: int, dtype: str) -> None:
    """View accesses without TMA exactly for float32 row kernels whose largest tile is 4096-32768 elements with one
    large load (softmax) or 4096-8192 with more (layer norm), where it was measured faster, on sm_90 only; the hint
    is on every view load and store of such a kernel."""
    sizes = (4096, 8192, 16384, 32768) if name == "softmax" else (4096, 8192)
    want = dtype == "float32" and name != "vector_add" and block in sizes
    art = compiled(name, dtype, block)
    assert choose_no_tma(art.ir()) is want
    text = art.tileir_text()
    accesses = [ln for ln in text.splitlines() if "load_view_tko" in ln or "store_view_tko" in ln]
    assert accesses
    assert all(("optimization_hints = <sm_90 = {allow_tma = false}>" in ln) is want for ln in accesses), text
    for other in ("sm_80", "sm_100"):
        assert "allow_tma" not in compiled(name, dtype, block, other).tileir_text()


def test_tileiras_compiles_rows_without_tma(tileir_env: Any) -> None:
    """tileiras takes the access hints (bytecode 13.5) and makes the sm_90 CUBIN."""
    art = compiled("layer_norm", "float32", 8192, backend="tileir")
    assert "allow_tma = false" in art.tileir_text()
    assert art.image().image[:4] == b"\x7fELF"
