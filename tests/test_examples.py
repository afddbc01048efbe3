"""The examples: each compiles to CUBIN for sm_70, sm_80 and sm_90 with no GPU, and runs correctly on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ["vector_add", "softmax", "layer_norm", "rms_norm", "matmul", "row_sum", "attention"]
#: The row examples' kernels (issue 19): whole rows, chunked rows, backward passes and their partial sums.
ROW_KERNELS = {
    "softmax": ["softmax", "softmax_chunked"],
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
