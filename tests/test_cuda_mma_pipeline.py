"""The CUDA backend's cp.async K pipeline for mma operands beyond ``load(a, (m, k))``/``load(b, (k, n))``:
a transposed load (``transpose(load(a, (k, m)))``, ``transpose(load(b, (n, k)))``: ldmatrix(.trans) and
mma.sync on sm_80, wgmma with imm-trans on sm_90a) and a batched 3-D load reshaped to 2-D. CPU tests
read the generated source and PTX; GPU tests check the results on ragged sizes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype, poison

import tilejit as tj


@tj.kernel
def matmul_t(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int],
             TRANS_A: tj.Constant[bool], TRANS_B: tj.Constant[bool]):
    """c = op(a) @ op(b): a stored (K, M) when TRANS_A, b stored (N, K) when TRANS_B."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    k_dim = a.shape[1]
    if TRANS_A:
        k_dim = a.shape[0]
    for k in range(tj.cdiv(k_dim, BK)):
        if TRANS_A:
            ta = tj.transpose(tj.load(a, index=(k, pid_m), shape=(BK, BM)))
        else:
            ta = tj.load(a, index=(pid_m, k), shape=(BM, BK))
        if TRANS_B:
            tb = tj.transpose(tj.load(b, index=(pid_n, k), shape=(BN, BK)))
        else:
            tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tj.kernel
def matmul_batched(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """c[z] = a[z] @ b[z] for 3-D a (Z, M, K), b (Z, K, N), c (Z, M, N)."""
    pid_m, pid_n, z = tj.bid(0), tj.bid(1), tj.bid(2)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[2], BK)):
        ta = tj.load(a, index=(z, pid_m, k), shape=(1, BM, BK)).reshape((BM, BK))
        tb = tj.load(b, index=(z, k, pid_n), shape=(1, BK, BN)).reshape((BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(z, pid_m, pid_n), tile=acc.reshape((1, BM, BN)).astype(c.dtype))


@tj.kernel
def matmul_t_twice(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """B's loaded tile is used transposed by the mma and again elsewhere: no stage can stand in for it."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        tb = tj.load(b, index=(pid_n, k), shape=(BN, BK))
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.transpose(tb), acc)
        acc = acc + tj.sum(tb.astype(tj.float32)) * 0.0
    tj.store(c, index=(pid_m, pid_n), tile=acc)


DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}
TRANS = [(True, False), (False, True), (True, True)]
WGMMA_IMM = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.(?:f16|bf16)\.(?:f16|bf16)[^;]*?,"
                       r"\s*(\d)\s*,\s*(\d)\s*;")


def compile_t(dt: Any, target: str, ta: bool, tb: bool, tiles: tuple[int, int, int] = (128, 128, 64),
              contiguous: bool = True) -> Any:
    """``matmul_t`` compiled for ``target`` with contiguous (pipelinable) or strided operands."""
    arr = dt[:, ::1] if contiguous else dt[:, :]
    bm, bn, bk = tiles
    return tj.compile(matmul_t, (arr, arr, tj.float32[:, ::1]),
                      constants={"BM": bm, "BN": bn, "BK": bk, "TRANS_A": ta, "TRANS_B": tb}, target=target)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("ta", "tb"), TRANS)
def test_transposed_operands_pipeline_with_ldmatrix_on_sm80(dtype: str, ta: bool, tb: bool) -> None:
    """sm_80: both operands stream through cp.async as stored; A^T is read with ldmatrix.trans, B^T (N rows
    of K: mma.sync's "col" B) with plain ldmatrix; no register → shared memory staging per iteration."""
    art = compile_t(DTYPES[dtype], "sm_80", ta, tb)
    src, ptx = art.cuda_source(), art.ptx()
    ctype = "tj::half" if dtype == "float16" else "tj::bf16"
    lda, ldb = (128 + 8 if ta else 64 + 8), (64 + 8 if tb else 128 + 8)
    assert f"tj::TensorCore<{ctype}, 128, 128, 64, 2, 4, {lda}, {ldb}, {str(ta).lower()}, {str(tb).lower()}>" in src
    a_tile, b_tile = ("64, 128" if ta else "128, 64"), ("128, 64" if tb else "64, 128")
    assert f"tj::cp_async_tile<{a_tile}, {lda}, 256, 0>" in src and f"tj::cp_async_tile<{b_tile}, {ldb}, 256, 0>" in src
    assert "to_smem" not in src and "tj::remap" not in src  # the transposes are not computed in registers
    assert "cp.async.cg.shared.global" in ptx and "mma.sync.aligned.m16n8k16.row.col.f32" in ptx
    trans = ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")
    plain = ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
    # A: plain unless transposed; B: .trans unless transposed (then plain)
    assert (trans > 0) == (ta or not tb) and (plain > 0) == (tb or not ta), (trans, plain)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("ta", "tb"), TRANS)
def test_transposed_operands_pipeline_with_wgmma_trans_on_sm90a(dtype: str, ta: bool, tb: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """sm_90a: cp.async into swizzled stages as stored; the wgmma reads A M-major (imm-trans-a = 1) or
    B K-major (imm-trans-b = 0) instead of the plain loop's K-major A and N-major B (0, 1). The plain pipeline: the
    warp-specialized loop switched off (tests/test_cuda_warp_specialize.py covers it)."""
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "0")
    art = compile_t(DTYPES[dtype], "sm_90a", ta, tb)
    src, ptx = art.cuda_source(), art.ptx()
    ctype = "tj::half" if dtype == "float16" else "tj::bf16"
    assert f"tj::Wgmma<{ctype}, 128, 128, 64, 8, 1, 128, 128, {str(ta).lower()}, {str(tb).lower()}>::run<1>(" in src
    assert "to_smem" not in src and "tj::remap" not in src and "cp_async_tile<" in src
    assert "cp.async.cg.shared.global" in ptx and "mma.sync" not in ptx and "ldmatrix" not in ptx
    assert set(WGMMA_IMM.findall(ptx)) == {(str(int(ta)), str(int(not tb)))}
    plain = compile_t(DTYPES[dtype], "sm_90a", False, False).ptx()
    assert set(WGMMA_IMM.findall(plain)) == {("0", "1")}


def test_transposed_wgmma_narrow_tiles_and_cubin() -> None:
    """64x64x32 tiles (a 64-byte swizzle for B^T's K-major rows) make a cubin with ptxas."""
    art = compile_t(tj.bfloat16, "sm_90a", True, True, (64, 64, 32))
    assert "tj::Wgmma<tj::bf16, 64, 64, 32, 4, 1, 128, 64, true, true>" in art.cuda_source()
    assert set(WGMMA_IMM.findall(art.ptx())) == {("1", "0")}
    assert art.cubin()
    assert compile_t(tj.float16, "sm_80", True, True, (64, 64, 32)).cubin()


def test_transposed_operands_off_the_pipeline_stay_in_registers() -> None:
    """Strided operands (no 16-byte rows promised), a loaded tile used twice, or tf32: the unpipelined path."""
    src = compile_t(tj.float16, "sm_80", True, True, contiguous=False).cuda_source()
    assert "cp_async" not in src and "tj::to_smem<" in src and "true, true>" not in src
    twice = tj.compile(matmul_t_twice, (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1]),
                       constants={"BM": 64, "BN": 64, "BK": 32}, target="sm_80").cuda_source()
    assert "cp_async" not in twice and "tj::to_smem<" in twice
    tf32 = tj.compile(matmul_t, (tj.float32[:, ::1], tj.float32[:, ::1], tj.float32[:, ::1]),
                      constants={"BM": 64, "BN": 64, "BK": 32, "TRANS_A": False, "TRANS_B": True},
                      target="sm_80").cuda_source()
    assert "cp_async" not in tf32


@pytest.mark.parametrize(("src", "dst", "same"), [
    ((128, 256), (1, 128, 256), True), ((1, 128, 256), (128, 256), True), ((128, 256), (128, 1, 256), True),
    ((128, 256), (256, 128), False), ((128, 256), (128, 256, 1), False), ((128, 256), (32768,), False),
    ((1, 1), (1,), True),
])
def test_accumulator_layout_through_unit_axis_reshapes(src: tuple[int, ...], dst: tuple[int, ...], same: bool) -> None:
    """An mma accumulator keeps its layout through a reshape that only adds or drops axes of 1 and keeps the
    innermost axis (its row vectors stay rows); any other reshape goes through shared memory as before."""
    from tilejit.backends.cuda.layouts import unit_dims_only
    from tilejit.language.ir.core import Value
    from tilejit.language.ir.types import TileType

    assert unit_dims_only(Value(TileType(tj.float32, src)), Value(TileType(tj.float32, dst))) == same


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_batched_3d_loads_pipeline(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """(1, BM, BK) loads of 3-D arrays reshaped to 2-D stream like 2-D loads, the batch index an origin (the plain
    pipeline: the warp-specialized loop switched off)."""
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "0")
    art = tj.compile(matmul_batched, (tj.bfloat16[:, :, ::1], tj.bfloat16[:, :, ::1], tj.float32[:, :, ::1]),
                     constants={"BM": 128, "BN": 128, "BK": 64}, target=target)
    src, ptx = art.cuda_source(), art.ptx()
    calls = re.findall(r"tj::cp_async_tile<[^>]*>\(([^;]*)\);", src)
    assert calls and all(c.count(",") == 4 for c in calls), calls  # dst, array, batch, row and column origins
    # the epilogue's reshape to (1, BM, BN) keeps the accumulator's layout: stored from registers
    assert "to_smem" not in src and "tj::remap" not in src
    assert "tj::store<2, tj::Shape<1, 128, 128>>(u_c, " in src
    assert "cp.async.cg.shared.global" in ptx
    if target == "sm_80":
        assert "tj::TensorCore<tj::bf16, 128, 128, 64, 2, 4, 72, 136>::run(" in src
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16" in ptx
    else:
        assert "tj::Wgmma<tj::bf16, 128, 128, 64, 8, 1, 128, 128>::run<1>(" in src
        assert set(WGMMA_IMM.findall(ptx)) == {("0", "1")}


# --------------------------------------------------------------------------- on a GPU

TILES = [(128, 128, 64), (64, 64, 32)]


def rand16(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Standard normal values rounded to ``dtype`` (the reference uses these rounded values)."""
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def rel2(got: np.ndarray, want: np.ndarray) -> float:
    """Relative 2-norm error, after checking that every element was written (outputs start as NaN)."""
    g = got.astype(np.float64)
    assert not np.isnan(g).any(), "unwritten (NaN-poisoned) elements in the output"
    return float(np.linalg.norm(g - want) / np.linalg.norm(want))


def run_t(dtype: str, ta: bool, tb: bool, tiles: tuple[int, int, int], shape: tuple[int, int, int],
          rng: np.random.Generator) -> float:
    """Launch ``matmul_t`` on fresh inputs of ``shape`` (M, N, K); the relative error against float64."""
    m, n, k = shape
    bm, bn, bk = tiles
    a = rand16((k, m) if ta else (m, k), dtype, rng)
    b = rand16((n, k) if tb else (k, n), dtype, rng)
    c = tj.asarray(poison((m, n), "float32"))
    kernel = tj.kernel(matmul_t.func)  # fresh: TILEJIT_ARCH_SPECIFIC is read when it builds
    kernel[(tj.cdiv(m, bm), tj.cdiv(n, bn))](tj.asarray(a), tj.asarray(b), c, BM=bm, BN=bn, BK=bk,
                                             TRANS_A=ta, TRANS_B=tb)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return rel2(c.numpy(), (a64.T if ta else a64) @ (b64.T if tb else b64))


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's cp.async pipeline for transposed operands (wgmma / mma.sync)")
@pytest.mark.parametrize("arch_specific", ["1", "0"])
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize(("ta", "tb"), TRANS)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_transposed_matmul_gpu(dtype: str, ta: bool, tb: bool, tiles: tuple[int, int, int], arch_specific: str,
                               rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A^T, B^T and both on 16-byte-aligned rows (pipelined: wgmma on sm_90a, mma.sync on sm_90 and older)
    with M, N and K off the tile grid (K = 712: neither a multiple of 64 nor of 32)."""
    monkeypatch.setenv("TILEJIT_ARCH_SPECIFIC", arch_specific)
    err = run_t(dtype, ta, tb, tiles, (1000, 1096, 712), rng)
    assert err <= 1e-2, f"relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's unpipelined path for transposed operands on unaligned rows")
@pytest.mark.parametrize(("ta", "tb"), TRANS)
def test_transposed_matmul_unaligned_rows_gpu(ta: bool, tb: bool, rng: np.random.Generator) -> None:
    """Rows of 700/1100/1000 f16 elements are not all 16-byte aligned: the unpipelined path, still right."""
    err = run_t("float16", ta, tb, (64, 64, 32), (1000, 1100, 700), rng)
    assert err <= 1e-2, f"relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's cp.async pipeline for batched (3-D) operands")
@pytest.mark.parametrize("arch_specific", ["1", "0"])
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(3, 1000, 1096, 712), (3, 1000, 1100, 700)])
def test_batched_matmul_gpu(shape: tuple[int, int, int, int], dtype: str, tiles: tuple[int, int, int],
                            arch_specific: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 3, M, N and K off the tile grid; 16-byte-aligned rows (pipelined) and unaligned ones (not)."""
    monkeypatch.setenv("TILEJIT_ARCH_SPECIFIC", arch_specific)
    z, m, n, k = shape
    bm, bn, bk = tiles
    a, b = rand16((z, m, k), dtype, rng), rand16((z, k, n), dtype, rng)
    c = tj.asarray(poison((z, m, n), "float32"))
    kernel = tj.kernel(matmul_batched.func)  # fresh: TILEJIT_ARCH_SPECIFIC is read when it builds
    kernel[(tj.cdiv(m, bm), tj.cdiv(n, bn), z)](tj.asarray(a), tj.asarray(b), c, BM=bm, BN=bn, BK=bk)
    err = rel2(c.numpy(), np.matmul(a.astype(np.float64), b.astype(np.float64)))
    assert err <= 1e-2, f"relative error {err:.2e}"


@pytest.fixture
def rng() -> np.random.Generator:
    """Fresh random inputs each run (conftest seeds unseeded generators per test)."""
    return np.random.default_rng()
