"""examples/matmul.py's split-K matmul for few output tiles (small M): ``splitk_slices`` (the host's choice of
slices), ``matmul_splitk`` (one K slice a block into a float32 workspace; on sm_90a the warp-specialized wgmma loop
with TMA, its partial stored from registers) and ``splitk_sum`` (the slices added in order, cast to C's dtype).
GPU tests check both launches against float64 on small and ragged shapes."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype, poison

import tilejit as tj
from tilejit.backends.cuda.plan import ws_registers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import MIN_SLICE_TILES, SUM_TILE, matmul_splitk, matmul_splitk_into, splitk_slices, splitk_sum

DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}


# --------------------------------------------------------------------------- the host's choice


@pytest.mark.parametrize(("shape", "tiles", "want"), [
    ((16, 4096, 4096), (128, 256, 64), 8),  # 16 tiles: 8 slices of 8 K tiles, 128 blocks
    ((16, 4096, 4096), (128, 128, 64), 4),  # 32 tiles: 4 slices of 16
    ((128, 4096, 4096), (128, 256, 32), 8),
    ((1, 4096, 14336), (128, 256, 64), 8),
    ((33, 1000, 712), (128, 256, 64), 3),  # 4 tiles, 12 K tiles: at most 3 slices (of 4 K tiles)
    ((16, 4096, 1152), (128, 256, 64), 4),  # 18 K tiles: 4 slices of 5, 5, 5, 3
    ((16, 4096, 128), (128, 256, 64), 1),  # 2 K tiles: too few to split
    ((512, 4096, 4096), (128, 256, 64), 2),  # 64 tiles: two slices fill the SMs
    ((1024, 4096, 4096), (128, 256, 64), 1),  # 128 tiles: about one wave already
    ((4096, 4096, 4096), (128, 256, 64), 1),
])
def test_splitk_slices(shape: tuple[int, int, int], tiles: tuple[int, int, int], want: int) -> None:
    assert splitk_slices(*shape, 132, *tiles) == want


def test_splitk_slices_never_leave_a_slice_empty() -> None:
    """Whatever the shape and SM count: every slice gets K tiles, at least MIN_SLICE_TILES when there are several,
    and the blocks stay within about one per SM."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        m, n, k = (int(x) for x in rng.integers(1, 5000, 3))
        sms = int(rng.choice([1, 8, 78, 108, 132, 148]))
        bm, bn, bk = (128, 256, int(rng.choice([32, 64])))
        split = splitk_slices(m, n, k, sms, bm, bn, bk)
        k_tiles, tiles = tj.cdiv(k, bk), tj.cdiv(m, bm) * tj.cdiv(n, bn)
        per = tj.cdiv(k_tiles, split)
        assert split >= 1 and (split - 1) * per < k_tiles, (m, n, k, sms, split)
        if split > 1:
            assert k_tiles // split >= MIN_SLICE_TILES and split * tiles <= sms, (m, n, k, sms, split)


# --------------------------------------------------------------------------- the generated kernels


def compile_splitk(dtype: str, tiles: tuple[int, int, int], target: str = "sm_90a") -> Any:
    bm, bn, bk = tiles
    t = DTYPES[dtype]
    return tj.compile(matmul_splitk, (t[:, ::1], t[:, ::1], tj.float32[:, :, ::1]),
                      constants={"BM": bm, "BN": bn, "BK": bk}, target=target, backend="cuda")


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The backend's defaults (warp specialization and TMA on), a fresh disk cache."""
    monkeypatch.delenv("TILEJIT_CUDA_WARP_SPECIALIZE", raising=False)
    monkeypatch.delenv("TILEJIT_CUDA_TMA", raising=False)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))


@pytest.mark.usefixtures("fresh_cache")
@pytest.mark.parametrize(("dtype", "tiles"), [("bfloat16", (128, 256, 64)), ("float16", (128, 256, 32)),
                                              ("bfloat16", (128, 128, 64))])
def test_splitk_slice_is_warp_specialized(dtype: str, tiles: tuple[int, int, int]) -> None:
    """On sm_90a a slice runs the 2-D kernel's loop: TMA producer (two 2-D maps), consumers at the setmaxnreg
    registers, the loop from the slice's first K tile to its last; its partial stored from the wgmma registers into
    the 3-D workspace (no shared-memory remap); ptxas: the launch bound's registers, no spills, no serialization."""
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    bm, bn, _ = tiles
    art = compile_splitk(dtype, tiles)
    ck = art.cuda_kernel()
    entry, prod, cons = ws_registers(2 * bm) or (0, 0, 0)
    src = ck.source
    assert ck.num_threads == 2 * bm + 128 and f"tj::regs_dec<{prod}>();" in src and f"tj::regs_inc<{cons}>();" in src
    assert [spec[:4] for _, spec in ck.params if spec[0] == "tensormap"] == [("tensormap", dtype, 2, "a"),
                                                                            ("tensormap", dtype, 2, "b")]
    lo = re.search(r"const tj::i64 (k\d+)_lo = (v\d+), \1_hi = (v\d+), \1_step = 1LL;", src)
    assert lo is not None and lo.group(2) != "0LL"  # a slice starts at its own K tile
    assert "tj::remap" not in src and f"tj::store<2, tj::Shape<1, {bm}, {bn}>>(u_partial, " in src
    assert src.count("__syncthreads") == 1
    ptx = art.ptx()
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {cons};" in ptx and "wgmma.mma_async" in ptx
    log = compile_cuda(src, name=f"{ck.name}.cu", headers=ck.headers, target=parse_target("sm_90a"), output="cubin",
                       options=("-Xptxas=-v",), cache=False).log
    regs = re.search(r"Used (\d+) registers", log)
    assert regs is not None and int(regs.group(1)) == entry, log
    assert "0 bytes spill stores, 0 bytes spill loads" in log and "C7515" not in log, log


@pytest.mark.usefixtures("fresh_cache")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_splitk_without_wgmma(target: str) -> None:
    """Targets without wgmma build the mma.sync pipeline of the same kernel."""
    art = compile_splitk("float16", (128, 128, 64), target)
    assert "mma.sync.aligned" in art.ptx() and art.cubin()


@pytest.mark.usefixtures("fresh_cache")
@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
def test_splitk_sum_kernel(out: str) -> None:
    """The sum: SLICES slices in one tile load (16-byte loads, all in flight at once), added in slice order in
    registers (each thread holds every slice of its elements: no shared memory, no barrier), one cast and store."""
    bm, bn, slices = SUM_TILE["BM"], SUM_TILE["BN"], SUM_TILE["SLICES"]
    art = tj.compile(splitk_sum, (tj.float32[:, :, ::1], getattr(tj, out)[:, ::1]), constants=SUM_TILE,
                     target="sm_90a", backend="cuda")
    src, ptx = art.cuda_source(), art.ptx()
    assert src.count(f"tj::load<4, false, tj::Shape<{slices}, {bm}, {bn}>>(") == 1
    assert src.count("tj::remap_local<") == slices and "tj::remap<" not in src and "tj::reduce" not in src
    assert re.search(r"for \(tj::i64 \w+ = 0LL; \w+ < v\d+; \w+ \+= 1LL\)", src)
    assert re.search(r"ld\.global\.v4\.[fu]32", ptx) and "bar.sync" not in ptx and "st.shared" not in ptx
    assert art.cubin()


# --------------------------------------------------------------------------- on a GPU


def rand16(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal values rounded to ``dtype`` (exact in the float64 reference)."""
    return rng.standard_normal(shape).astype(np_dtype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize(("split", "out"), [("chosen", "same"), ("11", "float32")])
@pytest.mark.parametrize("nk", [(4096, 4096), (1000, 712), (520, 40)])
@pytest.mark.parametrize("m", [1, 16, 33, 128])
@pytest.mark.parametrize("tiles", [(128, 256, 64), (128, 128, 32)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_matmul_splitk_gpu(dtype: str, tiles: tuple[int, int, int], m: int, nk: tuple[int, int], split: str,
                           out: str) -> None:
    """Both launches against float64 (inputs exact there): small M, N and K off the tile grid, the host's split or
    11 slices (more than splitk_sum's 8 a load: a second, partly padded group; K = 712 at BK = 64: 12 K tiles cut
    2 a slice, slices 6-10 empty; K = 40: one ragged K tile, 10 empty slices: their partials are zeros), 16-bit or
    float32 outputs; workspace and output NaN-poisoned."""
    n, k = nk
    bm, bn, bk = tiles
    rng = np.random.default_rng()
    a, b = rand16(rng, (m, k), dtype), rand16(rng, (k, n), dtype)
    slices = splitk_slices(m, n, k, tj.get_device().multiprocessor_count, bm, bn, bk) if split == "chosen" else 11
    out_dtype = dtype if out == "same" else out
    c = tj.asarray(poison((m, n), out_dtype))
    partial = tj.asarray(poison((slices, m, n), "float32"))
    matmul_splitk_into(tj.asarray(a), tj.asarray(b), c, partial, {"BM": bm, "BN": bn, "BK": bk})
    got = c.numpy().astype(np.float64)
    assert not np.isnan(got).any(), "unwritten (NaN-poisoned) elements in the output"
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
    tol = {"float32": 1e-5, "bfloat16": 4e-3, "float16": 5e-4}[out_dtype]  # 16-bit outputs: their rounding
    assert err <= tol, f"{slices} slices: relative error {err:.2e}"
