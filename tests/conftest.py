"""Shared test fixtures: the GPU marker, and the CUDA toolkits (one per major) that CPU tests compile with.

``TILEJIT_TEST_CUDA_ROOTS`` lists folders (os.pathsep-separated), each a ``pip install --target``
of one CUDA major's ``nvidia-cuda-nvrtc`` and ``nvidia-cuda-runtime`` wheels; ``.ci/run`` makes them.

Every ``gpu`` test runs once per tile-kernel backend (``tj_backend``: "cuda", "tileir"; ``TILEJIT_BACKEND``
set for it), both variants drawing the same random inputs (an unseeded ``np.random.default_rng()`` is seeded
from ``TILEJIT_TEST_SEED`` and the test's id without the backend); tests marked ``cuda_only`` (CUDA C++
features) or ``own_backend`` (they choose backends themselves, or compile no tile kernel) run once.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
    """Every test (and every process a test starts) caches in a temporary folder, never the user's cache (Triton's
    too); tests that need a cache of their own set TILEJIT_CACHE_DIR themselves."""
    global _TEST_CACHE
    _TEST_CACHE = tempfile.mkdtemp(prefix="tilejit-test-cache-")
    os.environ["TILEJIT_CACHE_DIR"] = _TEST_CACHE
    os.environ["TRITON_CACHE_DIR"] = os.path.join(_TEST_CACHE, "triton")  # the peer a GPU test compares with
    # Chosen once, before pytest-xdist starts its workers (which inherit it), so every process seeds alike.
    os.environ.setdefault(SEED_VARIABLE, str(secrets.randbits(32)))
    if not hasattr(config, "workerinput"):  # the controller (or the only process): one folder for every worker
        os.environ[_RECORDS_VARIABLE] = tempfile.mkdtemp(prefix="tilejit-test-tileir-records-")
    _record_cuda_compiles()


def pytest_report_header(config: pytest.Config) -> str:
    """The seed of the GPU tests' random inputs, to repeat a run with ``TILEJIT_TEST_SEED=...``."""
    return f"tilejit GPU test inputs: {SEED_VARIABLE}={os.environ.get(SEED_VARIABLE)}"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TEST_CACHE is not None:
        shutil.rmtree(_TEST_CACHE, ignore_errors=True)
    if not hasattr(config, "workerinput") and os.environ.get(_RECORDS_VARIABLE):
        shutil.rmtree(os.environ.pop(_RECORDS_VARIABLE), ignore_errors=True)


# ------------------------------------------------------------------ Tile IR coverage of the CPU tests' kernels

#: The folder where each process leaves the kernels its CPU tests compiled with the CUDA backend.
_RECORDS_VARIABLE = "TILEJIT_TEST_TILEIR_RECORDS"
#: ``test_tileir_coverage.Record`` of each kernel this process's CPU tests had the CUDA backend generate.
CUDA_COMPILED: list[Any] = []
_RECORDING_FOR: list[str] = [""]  # the node id of the CPU test running now ("" for a gpu test or none)
_COVERAGE: dict[str, Any] = {}  # what the session's check found: "outcome" or "skipped"


def _record_cuda_compiles() -> None:
    """Wrap the CUDA code generator and the IR passes (before any test module imports them) so that each kernel
    a CPU test has the CUDA backend generate code for, or takes to optimized IR that the CUDA backend compiles,
    is lowered to Tile IR and recorded (``test_tileir_coverage.record``)."""
    from tilejit.backends.cuda import codegen
    from tilejit.language.ir import passes

    generate, run_passes = codegen.generate, passes.run_passes
    if getattr(generate, "_tilejit_records", False):
        return

    def record(fn: Any, cuda_compiled: bool) -> None:
        if not _RECORDING_FOR[0] or id(fn) in _RECORDED:
            return
        if not cuda_compiled:
            from tilejit.compiler.targets import Target

            try:
                generate(fn, target=Target(9, 0), hints={})
            except Exception:  # not a kernel the CUDA backend compiles
                return
        from test_tileir_coverage import record as lower

        _RECORDED[id(fn)] = fn  # kept alive for the test, so the id names it alone
        CUDA_COMPILED.append(lower(fn, _RECORDING_FOR[0]))

    @functools.wraps(generate)
    def recording_generate(fn: Any, *args: Any, **kwargs: Any) -> Any:
        made = generate(fn, *args, **kwargs)
        record(fn, True)
        return made

    @functools.wraps(run_passes)
    def recording_run_passes(fn: Any) -> Any:
        optimized = run_passes(fn)
        record(optimized, False)
        return optimized

    recording_generate._tilejit_records = True  # type: ignore[attr-defined]
    codegen.generate = recording_generate
    passes.run_passes = recording_run_passes


_RECORDED: dict[int, Any] = {}  # the IR functions recorded during the running test, by id


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Records the CUDA compiles of a CPU test (its fixtures included); not of ``gpu`` tests (they launch with
    each backend themselves) nor of ``cuda_only`` tests (the CUDA backend's own limits and paths)."""
    one_backend = item.get_closest_marker("gpu") or item.get_closest_marker("cuda_only")
    _RECORDING_FOR[0] = "" if one_backend else item.nodeid
    try:
        return (yield)
    finally:
        _RECORDING_FOR[0] = ""
        _RECORDED.clear()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Each process leaves its records in the shared folder; the controller (after every worker) then has the
    Tile IR toolchain check them all, and fails the run on any problem (``test_tileir_coverage``)."""
    import pickle

    folder = os.environ.get(_RECORDS_VARIABLE)
    if not folder or os.environ.get("TILEJIT_TEST_TILEIR_COVERAGE") == "0":  # e.g. a GPU run after a CPU one
        return
    if CUDA_COMPILED:
        with open(os.path.join(folder, f"records-{os.getpid()}.pickle"), "wb") as f:
            pickle.dump(CUDA_COMPILED, f)
    if hasattr(session.config, "workerinput"):
        return
    records = []
    for path in sorted(Path(folder).glob("records-*.pickle")):
        with open(path, "rb") as f:
            records += pickle.load(f)
    if not records:
        return
    found = _tileir_toolchain()
    if isinstance(found, str):
        _COVERAGE["skipped"] = found
        return
    from test_tileir_coverage import check_records

    outcome = _COVERAGE["outcome"] = check_records(records, found)
    if outcome.problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The Tile IR coverage check's result: each problem, or what was checked, or why it was skipped."""
    if "skipped" in _COVERAGE:
        terminalreporter.write_line(f"Tile IR coverage of the CPU tests' kernels skipped: {_COVERAGE['skipped']}")
        return
    outcome = _COVERAGE.get("outcome")
    if outcome is None:
        return
    summary = (f"Tile IR coverage: {outcome.kernels} kernels the CPU tests compiled with the CUDA backend, "
               f"{outcome.refused} refused by the lowering, {outcome.modules} distinct modules "
               f"through tileiras for sm_80, sm_90 and sm_100 and tileirdisasm")
    if not outcome.problems:
        terminalreporter.write_line(summary)
        return
    terminalreporter.section("Tile IR coverage of the CPU tests' kernels (test_tileir_coverage.py)", red=True)
    for problem in outcome.problems:
        terminalreporter.write_line(problem)
    terminalreporter.write_line(f"{len(outcome.problems)} problems; {summary}", red=True)


#: The tile-kernel backends every ``gpu`` test runs with (``tj_backend``).
BACKENDS = ("cuda", "tileir")
#: The variable seeding the GPU tests' unseeded generators (random per run unless set).
SEED_VARIABLE = "TILEJIT_TEST_SEED"
#: Markers that keep a ``gpu`` test to one run: ``cuda_only`` pins the CUDA backend.
_ONE_RUN_MARKERS = ("cuda_only", "own_backend")


@pytest.hookimpl(trylast=True)  # last: the backend's id ends the test's id, where _seed_key finds it
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each ``gpu`` test not marked ``cuda_only``/``own_backend``, and not taking a ``backend``/``backends``
    argument of its own (the Tile IR tests run both backends side by side), runs once per backend of ``BACKENDS``."""
    node = metafunc.definition
    if node.get_closest_marker("gpu") is None or any(node.get_closest_marker(m) for m in _ONE_RUN_MARKERS):
        return
    if {"backend", "backends"} & set(metafunc.fixturenames):  # the test runs its backends itself
        return
    metafunc.parametrize("tj_backend", BACKENDS, indirect=True)


def _seed_key(nodeid: str, backend: str) -> int:
    """A number naming the test ``nodeid`` apart from its ``backend`` variant (the last id part)."""
    for end in (f"[{backend}]", f"-{backend}]"):
        if nodeid.endswith(end):
            nodeid = nodeid[: -len(end)] + ("]" if end[0] == "-" else "")
            break
    return zlib.crc32(nodeid.encode())


_KERNELS_BUILT_FOR: list[str | None] = [None]  # the backend the tile kernels' in-memory specializations hold


def _forget_kernel_specializations() -> None:
    """Empty every ``tj.Kernel``'s in-memory specializations and launch functions: they keep the backend
    they were compiled with, whatever ``TILEJIT_BACKEND`` says later (cleared in place: the launch code
    holds these dicts)."""
    import gc

    from tilejit.api.kernel import Kernel

    for obj in gc.get_objects():
        if isinstance(obj, Kernel):
            with obj._lock:
                obj._specs.clear()
                obj._fast.clear()
                obj._bound.clear()


@pytest.fixture(autouse=True)
def tj_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The backend a ``gpu`` test runs with, set as ``TILEJIT_BACKEND`` (``cuda_only`` tests: "cuda"); None
    for other tests. CPU tests run with ``TILEJIT_BACKEND=cuda`` (a test of ``auto`` or of Tile IR sets its own),
    so that a Tile IR toolchain on this machine's ``PATH`` changes none of what they compile; other ``gpu`` tests
    (``own_backend``) keep the environment as it is. The ``tileir`` variant points tilejit at the test toolchain
    (skips with the reason where it is missing or cannot compile for this GPU), and both variants draw the same
    inputs from unseeded ``np.random.default_rng()``."""
    backend: str | None = getattr(request, "param", None)
    gpu = request.node.get_closest_marker("gpu")
    if backend is None and gpu and request.node.get_closest_marker("cuda_only"):
        backend = "cuda"
    if not gpu:
        monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    if backend == "tileir":
        found = _tileir_toolchain()
        if isinstance(found, str):
            pytest.skip(found)
        monkeypatch.setenv("TILEJIT_TILEIRAS", found.tileiras)
        _skip_unless_tileir_targets_this_gpu()
    if backend is not None:
        monkeypatch.setenv("TILEJIT_BACKEND", backend)
    # An own_backend test launches with the environment's backend (auto: CUDA C++ unless a toolchain is found).
    built_for = "tileir" if backend == "tileir" else "cuda"
    if _KERNELS_BUILT_FOR[0] not in (None, built_for):
        _forget_kernel_specializations()
    _KERNELS_BUILT_FOR[0] = built_for
    if backend is not None and "tj_backend" in getattr(getattr(request.node, "callspec", None), "params", {}):
        _seed_unseeded_generators(monkeypatch, _seed_key(request.node.nodeid, backend))
    return backend


def _skip_unless_tileir_targets_this_gpu() -> None:
    """Skips, saying why, when the Tile IR backend cannot compile for this process's GPU."""
    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target
    from tilejit.runtime.device import get_device

    reason = get_backend("tileir").available(parse_target(get_device().arch))
    if reason is not None:
        pytest.skip(f"the Tile IR backend cannot run on this GPU: {reason}")


def _seed_unseeded_generators(monkeypatch: pytest.MonkeyPatch, key: int) -> None:
    """``np.random.default_rng()`` without a seed gives, in call order, the same generators to every backend
    variant of one test: seeded from ``TILEJIT_TEST_SEED``, ``key`` and the call's number."""
    import numpy as np

    original = np.random.default_rng
    session = int(os.environ.get(SEED_VARIABLE) or 0)
    calls = [0]

    def default_rng(seed: Any = None) -> np.random.Generator:
        if seed is None:
            calls[0] += 1
            seed = [session, key, calls[0]]
        return original(seed)

    monkeypatch.setattr(np.random, "default_rng", default_rng)


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


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh random generator (on GPU tests seeded as every unseeded one is: both backends draw alike)."""
    return np.random.default_rng()


@pytest.fixture(params=_MAJORS or [None], ids=lambda m: f"cuda{m}")
def toolkit(request: pytest.FixtureRequest) -> Toolkit:
    """Each available CUDA major's toolkit in turn; skips when none was installed."""
    if request.param is None:
        pytest.skip("no CUDA toolkits in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    return next(tk for tk in toolkits() if tk.major == request.param)


@pytest.fixture
def nvrtc_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TILEJIT_NVRTC set to the newest toolkit's NVRTC (skips without one) and a private disk cache folder, returned."""
    found = toolkits()
    if not found:
        pytest.skip("no CUDA toolkits in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    monkeypatch.setenv("TILEJIT_NVRTC", str(found[0].nvrtc))
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


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


@pytest.fixture
def tileir_env(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """tilejit pointed at the tests' Tile IR toolchain (``TILEJIT_TILEIRAS``) with a disk cache of the test's own;
    the toolchain. Skips with the reason where it is absent."""
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "tilejit-cache"))
    return tileir_toolchain
