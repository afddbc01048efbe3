"""Shared test fixtures: the GPU marker, and the CUDA toolkits (one per major) that CPU tests compile with.

``TILEJIT_TEST_CUDA_ROOTS`` lists folders (os.pathsep-separated), each a ``pip install --target``
of one CUDA major's ``nvidia-cuda-nvrtc`` and ``nvidia-cuda-runtime`` wheels; ``.ci/run`` makes them.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@functools.cache
def has_gpu() -> bool:
    """True when a CUDA driver loads and reports at least one device."""
    try:
        from tilejit.runtime.device import device_count

        return device_count() > 0
    except Exception:
        return False


_TEST_CACHE: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Every test (and every process a test starts) caches in a temporary folder, never the user's cache;
    tests that need a cache of their own set TILEJIT_CACHE_DIR themselves."""
    global _TEST_CACHE
    _TEST_CACHE = tempfile.mkdtemp(prefix="tilejit-test-cache-")
    os.environ["TILEJIT_CACHE_DIR"] = _TEST_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TEST_CACHE is not None:
        shutil.rmtree(_TEST_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU/driver on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class Toolkit:
    """One CUDA major's pip-wheel files: NVRTC library and the cuda.h / nvrtc.h headers."""

    major: int
    root: Path
    nvrtc: Path
    cuda_h: Path
    nvrtc_h: Path


_NVRTC_NAMES = {13: "libnvrtc.so.13", 12: "libnvrtc.so.12", 11: "libnvrtc.so.11.2"}


def _toolkit_at(root: Path) -> Toolkit | None:
    for major, soname in _NVRTC_NAMES.items():
        libs = sorted(root.glob(f"nvidia/*/lib/{soname}"))
        if not libs:
            continue
        lib = libs[0]
        cuda_h = sorted(root.glob("nvidia/*/include/cuda.h"))
        nvrtc_h = lib.parent.parent / "include" / "nvrtc.h"
        if cuda_h and nvrtc_h.exists():
            return Toolkit(major, root, lib, cuda_h[0], nvrtc_h)
    return None


@functools.cache
def toolkits() -> tuple[Toolkit, ...]:
    """The toolkits named by TILEJIT_TEST_CUDA_ROOTS (or found in .ci-cache/), newest major first."""
    raw = os.environ.get("TILEJIT_TEST_CUDA_ROOTS", "")
    roots = [Path(p) for p in raw.split(os.pathsep) if p]
    if not roots:
        ci_cache = Path(__file__).resolve().parent.parent / ".ci-cache"
        roots = sorted(ci_cache.glob("cu*")) if ci_cache.is_dir() else []
    found = [tk for tk in (_toolkit_at(r) for r in roots) if tk is not None]
    return tuple(sorted(found, key=lambda t: -t.major))


_MAJORS: list[int | None] = [tk.major for tk in toolkits()]


@pytest.fixture(params=_MAJORS or [None], ids=lambda m: f"cuda{m}")
def toolkit(request: pytest.FixtureRequest) -> Toolkit:
    """Each available CUDA major's toolkit in turn; skips when none was installed."""
    if request.param is None:
        pytest.skip("no CUDA toolkits in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    return next(tk for tk in toolkits() if tk.major == request.param)


@pytest.fixture
def use_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any], Any]]:
    """``use_device(dev)`` makes ``dev`` (a stand-in device; None: none chosen yet) the calling thread's
    current device for the test, and, unless None, the device that threads which choose none start from
    (no driver asked). The thread's cell keeps its identity, since generated launch code binds it."""
    from tilejit.runtime import device as device_state

    cell = device_state.thread_state().device
    old = cell[0]

    def use(device: Any) -> Any:
        cell[0] = device
        if device is not None:
            monkeypatch.setattr(device_state, "_device_of_this_thread", lambda: device)
        return device

    yield use
    cell[0] = old


def tileir_root() -> Path:
    """The folder of the CUDA Tile IR toolchain for the tests: ``TILEJIT_TEST_TILEIR_ROOT`` or
    ``.ci-cache/tileir`` (a ``pip install --target`` of the ``tilejit[tileir]`` set; ``.ci/run`` makes it)."""
    raw = os.environ.get("TILEJIT_TEST_TILEIR_ROOT")
    return Path(raw) if raw else Path(__file__).resolve().parent.parent / ".ci-cache" / "tileir"


@functools.cache
def _tileir_toolchain() -> Any:
    """The checked toolchain under ``tileir_root()``, or the text of why there is none."""
    from tilejit.bindings import tileiras
    from tilejit.errors import LibraryNotFoundError

    exe = tileir_root() / "nvidia" / "cu13" / "bin" / "tileiras"
    if not exe.is_file():
        return f"no CUDA Tile IR toolchain at {exe} (.ci/run installs it; or set TILEJIT_TEST_TILEIR_ROOT)"
    try:
        return tileiras.probe(str(exe), "tests")
    except LibraryNotFoundError as exc:
        return f"the CUDA Tile IR toolchain at {exe} is not usable: {exc}"


@pytest.fixture
def tileir_toolchain() -> Any:
    """The CUDA Tile IR toolchain (``tilejit.bindings.tileiras.Toolchain``) the tests run; skips with the
    reason when it is absent or incomplete."""
    found = _tileir_toolchain()
    if isinstance(found, str):
        pytest.skip(found)
    return found
