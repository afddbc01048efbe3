"""bench/bench_fuse.py's first-call parts and bench/bench_launch_cpu.py's ``tj.fuse`` rows on the CPU: the parts of
a first call add up to its time on a stand-in device (real front end, NVRTC, disk cache), and each ``tj.fuse`` row
and its hand-written row launch once per call through the stand-in driver (the lead runs the GPU benchmark)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from test_threads import PyDriver

ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> ModuleType:
    """A benchmark script as a module (it puts the repository and tests/ on sys.path for its own imports)."""
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_first_call_parts_on_the_cpu(nvrtc_here: Path) -> None:
    """Each part of tilejit's first call is timed in a fresh process with an empty cache: NVRTC compiles (the
    largest part), nothing reaches a GPU, and the parts add up to the call's time."""
    env = {k: v for k, v in os.environ.items() if k != "TILEJIT_CACHE_DIR"}  # the script gives each its own
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_fuse.py"), "--first-call-cpu", "--runs", "1"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in done.stdout.splitlines()
            if line.startswith("| tilejit fuse parts")}
    name = "tilejit fuse parts (CPU, stand-in device)"
    parts = {k.split(": ", 1)[1]: float(v) for k, v in rows.items() if ": " in k}
    assert list(parts) == ["imports", "device", "nvrtc_load", "nvrtc_compile", "module_load", "gpu_wait", "rest"]
    total = float(rows[name])
    assert parts["nvrtc_compile"] > 0 and parts["nvrtc_compile"] == max(parts.values())
    assert parts["device"] == parts["module_load"] == parts["gpu_wait"] == 0
    assert abs(sum(parts.values()) - total) <= 0.0015 * len(parts)  # each printed to the millisecond


def test_fuse_rows_of_the_cpu_launch_benchmark_launch_once_per_call(monkeypatch: pytest.MonkeyPatch,
                                                                    use_device: Any) -> None:
    """Each row of ``fused``: one launch through the stand-in driver per call, the fused ones the very launch of the
    hand-written kernel of the same arrays (grid, block, parameter block): tilejit views and torch-like tensors."""
    bl = load("bench_launch_cpu")
    fake_torch = sys.modules["fake_torch"]
    monkeypatch.setitem(sys.modules, "torch", fake_torch.TORCH)
    use_device(object.__new__(bl._StandInDevice))
    driver = PyDriver()
    rows = bl.fused(driver.ns, SimpleNamespace(name="empty", handle=0xF00D))
    kinds = ("tilejit arrays", "torch-like tensors")
    hand, fused = "hand-written tile kernel hand[1](x, y, out, TILE=4096)", "tj.fuse chain(x, y, out=out)"
    assert sorted(rows) == sorted(f"{what}, {kind}" for kind in kinds for what in (hand, fused))
    seen: dict[str, Any] = {}
    for name, call in rows.items():
        driver.records.clear()
        for _ in range(5):
            call()
        assert len(driver.records) == 5, name
        assert len({r[1:] for r in driver.records}) == 1, name  # grid, block, shared memory, stream, parameters
        seen[name] = driver.records[0][1:]
    for kind in kinds:
        assert seen[f"{fused}, {kind}"] == seen[f"{hand}, {kind}"]
