"""The examples: each compiles to CUBIN for sm_70, sm_80 and sm_90 with no GPU, and runs correctly on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ["vector_add", "softmax", "layer_norm", "matmul", "row_sum"]


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=EXAMPLES, capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("arch", ["sm_70", "sm_80", "sm_90"])
@pytest.mark.parametrize("name", NAMES)
def test_example_compiles_without_gpu(name: str, arch: str, tmp_path: Path) -> None:
    proc = _run([f"{name}.py", "--compile-only", "--arch", arch], {"TILEJIT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"for {arch}" in proc.stdout and "bytes of CUBIN" in proc.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_example_runs_on_gpu(name: str) -> None:
    proc = _run([f"{name}.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "relative error" in proc.stdout and "ok" in proc.stdout


@pytest.mark.parametrize("name", NAMES)
def test_example_compiles_with_each_cuda_major(name: str, toolkit: object, tmp_path: Path) -> None:
    """NVRTC 11.8, 12.x and 13.x (pip wheels) each compile every example for sm_80."""
    env = {"TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_NVRTC": str(toolkit.nvrtc)}  # type: ignore[attr-defined]
    proc = _run([f"{name}.py", "--compile-only", "--arch", "sm_80"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bytes of CUBIN" in proc.stdout
