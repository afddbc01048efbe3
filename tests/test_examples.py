"""The examples: each compiles to CUBIN for sm_70, sm_80 and sm_90 with no GPU, and runs correctly on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ["vector_add", "softmax", "layer_norm", "rms_norm", "matmul", "row_sum", "attention", "grouped_matmul"]
#: The row examples' kernels (issue 19): whole rows, chunked rows, backward passes and their partial sums.
ROW_KERNELS = {
    "softmax": ["softmax", "softmax_chunked", "softmax_bwd", "softmax_bwd_chunked"],
    "layer_norm": ["layer_norm", "layer_norm_fwd", "layer_norm_fwd_chunked", "layer_norm_bwd", "layer_norm_bwd_sums",
                   "layer_norm_bwd_chunked", "sum_partials"],
    "rms_norm": ["rms_norm", "rms_norm_chunked", "rms_norm_bwd", "rms_norm_bwd_sums", "rms_norm_bwd_chunked",
                 "sum_partials"],
}


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=EXAMPLES, capture_output=True, text=True, encoding="utf-8", timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("arch", ["sm_70", "sm_80", "sm_90"])
@pytest.mark.parametrize("name", NAMES)
def test_example_compiles_without_gpu(name: str, arch: str, toolkit: Any, tmp_path: Path) -> None:
    """Each CUDA major's NVRTC compiles every example for each target it supports (13.x dropped sm_70)."""
    env = {"TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_NVRTC": str(toolkit.nvrtc)}
    proc = _run([f"{name}.py", "--compile-only", "--arch", arch], env)
    if toolkit.major >= 13 and arch == "sm_70":
        assert proc.returncode != 0
        assert "sm_70" in proc.stderr and "sm_75" in proc.stderr, proc.stderr  # names the target and what works
        assert "Traceback" not in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"for {arch}" in proc.stdout and "bytes of CUBIN" in proc.stdout
    for kernel in ROW_KERNELS.get(name, []):
        assert f"compiled {kernel} for {arch} (cuda): " in proc.stdout, proc.stdout


@pytest.mark.parametrize("name", sorted(ROW_KERNELS))
def test_row_examples_compile_with_tileir(name: str, tileir_env: Any) -> None:
    """Every kernel of the row examples also compiles with the Tile IR backend (``--backend tileir``)."""
    proc = _run([f"{name}.py", "--compile-only", "--arch", "sm_90", "--backend", "tileir"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln.split(" for ")[0] for ln in proc.stdout.splitlines()] == [f"compiled {k}" for k in ROW_KERNELS[name]]
    assert proc.stdout.count("for sm_90 (tileir): ") == len(ROW_KERNELS[name])


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_example_runs_on_gpu(name: str) -> None:
    proc = _run([f"{name}.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "relative error" in proc.stdout and "ok" in proc.stdout



@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_matmul_example_compiles_bfloat16(arch: str, toolkit: Any, tmp_path: Path) -> None:
    """Issue 16: the README called the matmul example 'f16/bf16 in', but it built f16 only."""
    env = {"TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_NVRTC": str(toolkit.nvrtc)}
    for dtype, other in (("bfloat16", "half"), ("float16", "bf16")):
        proc = _run(["matmul.py", "--compile-only", "--arch", arch, "--dtype", dtype, "--show", "cuda"], env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kernel = proc.stdout.split("compiled matmul")[0]
        mine = "bf16" if dtype == "bfloat16" else "half"
        assert f"tj::Array<tj::{mine}, 2> u_a" in kernel and f"tj::Array<tj::{mine}, 2> u_b" in kernel, kernel[:800]
        assert f"tj::{other}" not in kernel
    proc = _run(["matmul.py", "--compile-only", "--dtype", "float32"], env)
    assert proc.returncode == 2 and "invalid choice: 'float32'" in proc.stderr


@pytest.mark.gpu
def test_matmul_example_runs_bfloat16_on_gpu() -> None:
    proc = _run(["matmul.py", "--dtype", "bfloat16"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matmul bfloat16: relative error" in proc.stdout and "(ok" in proc.stdout


def test_row_example_references_match_finite_differences() -> None:
    """The float64 gradients the row examples and tests/test_rows_gpu.py check the backward kernels against: central
    finite differences of the forward formulas (and torch autograd, where torch is installed)."""
    import numpy as np

    sys.path.insert(0, str(EXAMPLES))
    import layer_norm as ln
    import rms_norm as rn
    import softmax as sm

    rng = np.random.default_rng(7)
    x, dy = rng.standard_normal((3, 50)) + 2, rng.standard_normal((3, 50))
    w, b, eps, h = rng.standard_normal(50), rng.standard_normal(50), 1e-5, 1e-6

    def softmax(x: Any) -> Any:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def loss_softmax(x: Any) -> float:
        return float((softmax(x) * dy).sum())

    def loss_ln(x: Any, w: Any, b: Any) -> float:
        return float((ln.reference(x, w, b, dy, eps)[0] * dy).sum())

    def loss_rms(x: Any, w: Any) -> float:
        return float((rn.reference(x, w, dy, eps)[0] * dy).sum())

    def fd(f: Any, args: list[Any], which: int, at: tuple[int, ...]) -> float:
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[which][at] += h
        lo[which][at] -= h
        return (f(*hi) - f(*lo)) / (2 * h)

    _, mu, rstd, dx, dw, db = ln.reference(x, w, b, dy, eps)
    assert np.allclose(mu, x.mean(axis=1)) and np.allclose(rstd, 1 / np.sqrt(x.var(axis=1) + eps))
    dx_softmax = sm.reference_backward(softmax(x), dy)
    for at in ((0, 0), (2, 49), (1, 17)):
        assert fd(loss_ln, [x, w, b], 0, at) == pytest.approx(dx[at], rel=1e-6, abs=1e-8)
        assert fd(loss_softmax, [x], 0, at) == pytest.approx(dx_softmax[at], rel=1e-6, abs=1e-8)
        assert fd(loss_rms, [x, w], 0, at) == pytest.approx(rn.reference(x, w, dy, eps)[2][at], rel=1e-6, abs=1e-8)
    for j in (0, 31):
        assert fd(loss_ln, [x, w, b], 1, (j,)) == pytest.approx(dw[j], rel=1e-6, abs=1e-8)
        assert fd(loss_ln, [x, w, b], 2, (j,)) == pytest.approx(db[j], rel=1e-6, abs=1e-8)
        assert fd(loss_rms, [x, w], 1, (j,)) == pytest.approx(rn.reference(x, w, dy, eps)[3][j], rel=1e-6, abs=1e-8)
    torch_ln, torch_rms = ln.torch_reference(x, w, b, dy, eps), rn.torch_reference(x, w, dy, eps)
    if torch_ln is not None and torch_rms is not None:
        for got, want in zip(torch_ln, (ln.reference(x, w, b, dy, eps)[i] for i in (0, 3, 4, 5))):
            assert np.allclose(got, want, rtol=1e-10, atol=1e-12)
        for got, want in zip(torch_rms, (rn.reference(x, w, dy, eps)[i] for i in (0, 2, 3))):
            assert np.allclose(got, want, rtol=1e-10, atol=1e-12)
        import torch

        xt = torch.tensor(x, requires_grad=True)
        torch.softmax(xt, 1).backward(torch.tensor(dy))
        assert xt.grad is not None and np.allclose(xt.grad.numpy(), dx_softmax, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_backward_kernels_interpreted(dtype: str) -> None:
    """The softmax backward kernels' optimized IR, run on the CPU by tests/tile_interp.py: whole rows one a block and
    four a block (the last block ragged), and 256-element chunks of 1000-element rows (the last one ragged), against
    float64 from the same (rounded) y and dy; outputs poisoned first."""
    import numpy as np
    import tile_interp as ti

    import tilejit as tj

    sys.path.insert(0, str(EXAMPLES))
    import softmax as sm

    rng = np.random.default_rng(5)
    m, n = 11, 1000
    x = rng.standard_normal((m, n)) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y, dy = (e / e.sum(axis=1, keepdims=True)).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    if dtype == "bfloat16":
        y, dy = ti.round_bf16(y), ti.round_bf16(dy)
    want = sm.reference_backward(y, dy)
    arr = getattr(tj, dtype)[:, ::1]
    for kernel, grid, constants in ((sm.softmax_bwd, m, {"ROWS": 1, "BLOCK": 1024}),
                                    (sm.softmax_bwd, 3, {"ROWS": 4, "BLOCK": 1024}),
                                    (sm.softmax_bwd_chunked, m, {"BLOCK": 256})):
        heap = ti.Heap()
        views = [heap.put(a, dtype) for a in (y, dy, np.full((m, n), np.nan, np.float32))]
        art = tj.compile(kernel, (arr, arr, arr), constants=constants, target="sm_90", backend="cuda")
        ti.run(art.ir(), heap, grid, views)
        got = heap.read(views[2]).astype(np.float64)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= (4e-3 if dtype == "bfloat16" else 1e-6), (kernel.func.__name__, constants, err)


def test_host_plans_follow_the_backend_setting_as_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_common.backend_of(None)`` reads ``TILEJIT_BACKEND`` at each call (a cached first answer gave the CUDA
    backend's launch options to kernels that then built for Tile IR: a ValueError on the H100), and asks
    ``tj.backend_for`` once per value."""
    sys.path.insert(0, str(EXAMPLES))
    import _common

    import tilejit as tj

    asked: list[str | None] = []

    def backend_for(backend: str | None = None, target: Any = None, *, num_threads: int | None = None) -> str:
        asked.append(os.environ.get("TILEJIT_BACKEND"))
        return os.environ.get("TILEJIT_BACKEND") or "cuda"

    monkeypatch.setattr(tj, "backend_for", backend_for)
    _common._chosen_backend.cache_clear()
    try:
        for setting in ("cuda", "tileir", "cuda", "tileir"):
            monkeypatch.setenv("TILEJIT_BACKEND", setting)
            assert _common.backend_of(None) == setting
        assert asked == ["cuda", "tileir"]
        assert _common.backend_of("cuda") == "cuda" and len(asked) == 2
    finally:
        _common._chosen_backend.cache_clear()


def test_row_examples_choose_whole_rows_or_chunks() -> None:
    """The host functions' choice (issues 17 and 19): the whole row as one tile up to each kernel's limit, several
    short rows a block on Tile IR, chunks beyond (16 KB, or 32 KB on CUDA), no length refused; backward groups fill
    two blocks per SM."""
    from types import SimpleNamespace

    sys.path.insert(0, str(EXAMPLES))
    import layer_norm as ln
    import softmax as sm
    from _common import on_backend

    def rows(m: int, n: int, itemsize: int) -> Any:
        return SimpleNamespace(shape=(m, n), itemsize=itemsize)

    for be in ("cuda", "tileir"):
        assert sm.row_plan(rows(4, 3000, 4), be) == (sm.softmax, 4, {"ROWS": 1, "BLOCK": 4096})
        assert sm.row_plan(rows(4, 32768, 4), be) == (sm.softmax, 4, {"ROWS": 1, "BLOCK": 32768})
    # session 20: Tile IR's chunks are 8192 elements with tileiras asked for 4 CTAs per SM, from 16-bit rows of
    # 16385 elements on; its 16-bit layer and RMS norm rows stay whole up to 32768
    for n, itemsize in ((32768, 2), (16385, 2), (32769, 4), (65537, 2)):
        want = (sm.softmax_chunked, 4, {"BLOCK": 8192, "occupancy": 4})
        assert sm.row_plan(rows(4, n, itemsize), "tileir") == want
    assert ln.forward_plan(rows(8, 32768, 2), "tileir") == (ln.layer_norm_fwd, 8, {"ROWS": 1, "BLOCK": 32768})
    assert ln.forward_plan(rows(8, 32769, 2), "tileir") == (ln.layer_norm_fwd_chunked, 8, {"BLOCK": 2048})
    assert ln.forward_plan(rows(8, 12288, 4), "tileir") == (ln.layer_norm_fwd_chunked, 8,
                                                            {"BLOCK": 8192, "occupancy": 2})
    assert sm.row_plan(rows(4, 65537, 2), "cuda") == (sm.softmax_chunked, 4, {"BLOCK": 16384})  # 32 KB on CUDA
    # Short rows: several a block on Tile IR (a 2048-element tile for softmax, 32 KB for the norms), one on CUDA.
    assert sm.row_plan(rows(1001, 256, 2), "tileir") == (sm.softmax, 126, {"ROWS": 8, "BLOCK": 256})
    assert sm.row_plan(rows(1001, 100, 4), "tileir") == (sm.softmax, 63, {"ROWS": 16, "BLOCK": 128})
    assert sm.row_plan(rows(1001, 256, 2), "cuda") == (sm.softmax, 1001, {"ROWS": 1, "BLOCK": 256})
    # The softmax backward holds y and dy whole up to 16384 elements on Tile IR (as the forward: several short rows a
    # block), up to 32768 on CUDA (16 warps for a 16384-element tile, 8 for 32768), but 16-bit rows shorter than that
    # tile in 4096- or 8192-element chunks with 16 warps; in chunks of the forward's size beyond.
    bwd, bwd_chunked = sm.softmax_bwd, sm.softmax_bwd_chunked
    assert sm.backward_row_plan(rows(1001, 256, 2), "tileir") == (bwd, 126, {"ROWS": 8, "BLOCK": 256})
    assert sm.backward_row_plan(rows(1001, 256, 2), "cuda") == (bwd, 1001, {"ROWS": 1, "BLOCK": 256})
    assert sm.backward_row_plan(rows(4, 12288, 2), "tileir") == (bwd, 4, {"ROWS": 1, "BLOCK": 16384})
    assert sm.backward_row_plan(rows(4, 16384, 4), "tileir") == (bwd, 4, {"ROWS": 1, "BLOCK": 16384})
    assert sm.backward_row_plan(rows(4, 16385, 4), "tileir") == (bwd_chunked, 4, {"BLOCK": 4096})
    assert sm.backward_row_plan(rows(4, 12288, 2), "cuda") == (bwd_chunked, 4, {"BLOCK": 4096, "num_warps": 16})
    assert sm.backward_row_plan(rows(4, 12288, 4), "cuda") == (bwd, 4, {"ROWS": 1, "BLOCK": 16384, "num_warps": 16})
    assert sm.backward_row_plan(rows(4, 16384, 2), "cuda") == (bwd, 4, {"ROWS": 1, "BLOCK": 16384, "num_warps": 16})
    assert sm.backward_row_plan(rows(4, 24576, 2), "cuda") == (bwd_chunked, 4, {"BLOCK": 8192, "num_warps": 16})
    assert sm.backward_row_plan(rows(4, 32768, 2), "cuda") == (bwd, 4, {"ROWS": 1, "BLOCK": 32768, "num_warps": 8})
    assert sm.backward_row_plan(rows(4, 8192, 2), "cuda") == (bwd, 4, {"ROWS": 1, "BLOCK": 8192})
    assert sm.backward_row_plan(rows(4, 16385, 4), "cuda") == (bwd, 4, {"ROWS": 1, "BLOCK": 32768, "num_warps": 8})
    assert sm.backward_row_plan(rows(4, 32769, 4), "cuda") == (bwd_chunked, 4, {"BLOCK": 8192})
    assert sm.backward_row_plan(rows(4, 65537, 2), "cuda") == (bwd_chunked, 4, {"BLOCK": 16384})
    assert sm.backward_row_plan(rows(4, 65537, 2), "tileir") == (bwd_chunked, 4, {"BLOCK": 8192})
    assert ln.forward_plan(rows(1000, 512, 2), "tileir") == (ln.layer_norm_fwd, 63, {"ROWS": 16, "BLOCK": 512})
    assert ln.forward_plan(rows(1000, 2048, 4), "tileir") == (ln.layer_norm_fwd, 250, {"ROWS": 4, "BLOCK": 2048})
    assert ln.forward_plan(rows(1000, 512, 2), "cuda") == (ln.layer_norm_fwd, 1000, {"ROWS": 1, "BLOCK": 512})
    # The CUDA backend's long forward rows: chunks that pad least, with 8 warps, for 16-bit rows over 8192 elements
    # and rows a power-of-two tile pads by a quarter or more.
    chunked = ln.layer_norm_fwd_chunked
    assert ln.forward_plan(rows(8, 12288, 2), "cuda") == (chunked, 8, {"BLOCK": 4096, "num_warps": 8})
    assert ln.forward_plan(rows(8, 16384, 2), "cuda") == (chunked, 8, {"BLOCK": 8192, "num_warps": 8})
    assert ln.forward_plan(rows(8, 12288, 4), "cuda") == (chunked, 8, {"BLOCK": 4096, "num_warps": 8})
    assert ln.forward_plan(rows(8, 16384, 4), "cuda") == (ln.layer_norm_fwd, 8, {"ROWS": 1, "BLOCK": 16384})
    assert ln.forward_plan(rows(8, 12288, 2), "tileir") == (ln.layer_norm_fwd, 8, {"ROWS": 1, "BLOCK": 16384})
    assert ln.forward_plan(rows(8, 20000, 4), "cuda") == (chunked, 8, {"BLOCK": 8192})
    # session 19: float32 rows of 24577-32768 elements in two 16384-element chunks; 16-bit softmax rows of
    # 16385-32768 in two chunks; RMS norm rows a power-of-two tile pads by a quarter or more in 8192-element chunks
    assert ln.forward_plan(rows(8, 32768, 4), "cuda") == (chunked, 8, {"BLOCK": 16384, "num_warps": 8})
    assert ln.forward_plan(rows(8, 32768, 4), "tileir") == (chunked, 8, {"BLOCK": 4096})
    assert ln.forward_plan(rows(8, 8192, 4), "tileir") == (ln.layer_norm_fwd, 8, {"ROWS": 1, "BLOCK": 8192})
    assert ln.forward_plan(rows(8, 32768, 2), "cuda") == (chunked, 8, {"BLOCK": 16384})
    for n in (20000, 32768):
        assert sm.row_plan(rows(4, n, 2), "cuda") == (sm.softmax_chunked, 4, {"BLOCK": 16384, "num_warps": 8})
        assert sm.row_plan(rows(4, n, 4), "cuda") == (sm.softmax, 4, {"ROWS": 1, "BLOCK": 32768})
    import rms_norm as rn

    assert rn.forward_plan(rows(8, 12288, 4), "cuda") == (rn.rms_norm_chunked, 8, {"BLOCK": 8192, "num_warps": 8})
    assert rn.forward_plan(rows(8, 12288, 4), "tileir") == (rn.rms_norm, 8, {"ROWS": 1, "BLOCK": 16384})
    assert rn.forward_plan(rows(8, 16384, 2), "cuda") == (rn.rms_norm, 8, {"ROWS": 1, "BLOCK": 16384})
    assert rn.forward_plan(rows(8, 65536, 4), "cuda") == (rn.rms_norm_chunked, 8, {"BLOCK": 8192})
    assert rn.forward_plan(rows(8, 32768, 2), "tileir") == (rn.rms_norm, 8, {"ROWS": 1, "BLOCK": 32768})
    # Tile IR's 16-bit rows of 8192-16384 elements whole, at occupancy 4
    for n, block in ((8192, 8192), (12288, 16384), (16384, 16384)):
        want_whole = (rn.rms_norm, 8, {"ROWS": 1, "BLOCK": block, "occupancy": 4})
        assert rn.forward_plan(rows(8, n, 2), "tileir") == want_whole
    assert rn.forward_plan(rows(8, 4096, 2), "tileir") == (rn.rms_norm, 2, {"ROWS": 4, "BLOCK": 4096})
    want = (rn.rms_norm_chunked, 8, {"BLOCK": 8192, "occupancy": 4})
    assert rn.forward_plan(rows(8, 32769, 2), "tileir") == want
    assert rn.forward_plan(rows(8, 16385, 4), "tileir") == (rn.rms_norm_chunked, 8, {"BLOCK": 4096})
    assert ln.backward_plan(rows(262144, 256, 4), 132) == ln.BackwardPlan(256, 16, 264)
    assert ln.backward_plan(rows(10, 256, 4), 132) == ln.BackwardPlan(256, 16, 1)
    assert ln.backward_plan(rows(8192, 8192, 2), 132) == ln.BackwardPlan(8192, 1, 264)
    assert ln.backward_plan(rows(1024, 65536, 4), 132, backend="cuda") == ln.BackwardPlan(4096, 0, 16)  # 16 x 16
    # Long rows' backward chunks: 4096 elements on the CUDA backend, 16 KB on Tile IR
    assert ln.backward_plan(rows(5, 65537, 2), 132, backend="cuda") == ln.BackwardPlan(4096, 0, 5)
    assert ln.backward_plan(rows(5, 65537, 2), 132, backend="tileir") == ln.BackwardPlan(8192, 0, 5)
    assert ln.backward_plan(rows(5, 65537, 4), 132, backend="tileir") == ln.BackwardPlan(4096, 0, 5)
    assert on_backend(sm.softmax, None) is sm.softmax
    tileir = on_backend(sm.softmax, "tileir")
    assert tileir is on_backend(sm.softmax, "tileir") and tileir.func is sm.softmax.func
    assert tileir is not on_backend(sm.softmax, "cuda")
    hinted = on_backend(sm.softmax, "tileir", 4)
    assert hinted is on_backend(sm.softmax, "tileir", 4) and hinted is not tileir and hinted.occupancy == 4
