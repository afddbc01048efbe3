"""CPU tests of launches from several threads at once: tile kernels and RawKernels against a stand-in
``cuLaunchKernelEx`` (a ctypes callback) that reads the configuration and parameter block at the addresses
it is handed, so each launch is checked for exactly what a kernel would have received, and from which thread."""

from __future__ import annotations

import collections
import ctypes
import struct
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import tilejit as tj
from tilejit.api.loader import loaded
from tilejit.errors import CUDAError
from tilejit.runtime import device as device_state
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind
from tilejit.runtime.stream import Stream, set_current_stream

_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_CONFIG = struct.Struct("=7I4xQ")

Record = tuple[int, tuple[int, int, int], tuple[int, int, int], int, int, "bytes | None"]


class PyDriver:
    """``cuLaunchKernelEx`` as a Python callback: each launch's (thread, grid, block, shared bytes, stream,
    parameter block) as read from memory; ``hook(record)`` runs in the launching thread, ``status(record)``
    says what the launch returns."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.lock = threading.Lock()
        self.hook: Any = None
        self.status: Any = None
        self.entry = _PROTO(self._launch)
        self.ns = SimpleNamespace(cuLaunchKernelEx=self.entry, check=None)

    def _launch(self, config: int, function: int, kernel_params: int, extra: int) -> int:
        gx, gy, gz, bx, by, bz, shared, stream = _CONFIG.unpack(ctypes.string_at(config, _CONFIG.size))
        params = None
        if extra:  # read the block only through an intact extra array (freed memory is not followed)
            ex = struct.unpack("=5Q", ctypes.string_at(extra, 40))
            if ex[0] == 1 and ex[2] == 2 and ex[3] == extra + 40 and ex[4] == 0:
                size = ctypes.c_size_t.from_address(ex[3]).value
                if size < 4096:
                    params = ctypes.string_at(ex[1], size)
        rec: Record = (threading.get_ident(), (gx, gy, gz), (bx, by, bz), shared, stream, params)
        with self.lock:
            self.records.append(rec)
        if self.hook is not None:
            self.hook(rec)
        return 0 if self.status is None else int(self.status(rec))


class StandInDevice(device_state.Device):
    ordinal = 0
    arch = "sm_90"  # type: ignore[assignment]


PARAMS = [("x", ParamKind.array("float32", 1)), ("n", ParamKind.scalar("int32"))]


@tj.kernel
def tile(x, n):
    tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * n)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[PyDriver]:
    drv = PyDriver()
    monkeypatch.setattr(device_state, "_current", object.__new__(StandInDevice))
    monkeypatch.setattr(device_state, "initialized_driver", lambda: drv.ns)
    tile._build = lambda *a: loaded(  # type: ignore[method-assign]
        Launcher(SimpleNamespace(name="tile", handle=1), PARAMS, block=32, driver=drv.ns), None, None)
    for memo in (tile._specs, tile._fast, tile._bound):
        memo.clear()
    yield drv
    set_current_stream(None)
    del tile._build


def view(ptr: int, n: int = 16) -> ArrayView:
    return ArrayView(ptr, (n,), (1,), "float32", None)


def pack(args: list[Any]) -> bytes:
    return Launcher(SimpleNamespace(name="tile", handle=1), PARAMS, block=32, driver=PyDriver().ns).pack(args)


def run_threads(worker: Any, n: int) -> list[threading.Thread]:
    """``worker(i)`` in ``n`` threads at once, switching between them as often as Python allows."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return threads


def test_a_fused_relaunch_survives_another_thread_replacing_the_private_launcher(driver: PyDriver) -> None:
    """The dispatch remembers the private launcher's ``now``; another thread that made a private launcher of
    its own at the same time replaces the first one in ``owns`` and drops it. ``now`` must keep the buffers it
    relaunches alive (they were freed: the relaunch read freed memory)."""
    launch = tile[1]
    x, y = view(0x1000), view(0x2000)
    for _ in range(CHECKED_LAUNCHES):  # the shared launcher is generated; no private one yet
        launch(x, 7)
    base = next(iter(tile._specs.values())).base
    make_own = base.own_launch
    other_inside, main_in_driver, other_done = threading.Event(), threading.Event(), threading.Event()

    def own_launch() -> Any:  # the other thread's private launcher is stored after the main thread's
        made = make_own()
        if threading.current_thread().name == "other":
            other_inside.set()
            main_in_driver.wait(10)
        return made

    base.own_launch = own_launch
    pause = [False]

    def hook(rec: Record) -> None:  # the main thread's launch waits for the other thread to finish
        if pause[0] and threading.current_thread() is threading.main_thread():
            pause[0] = False
            main_in_driver.set()
            other_done.wait(10)

    driver.hook = hook
    other = threading.Thread(target=lambda: (launch(y, 9), other_done.set()), name="other")
    other.start()
    assert other_inside.wait(10)
    pause[0] = True
    launch(x, 7)  # makes a private launcher, launches x; the other thread then replaces that launcher
    other.join()
    junk = [bytearray(b"\xff" * 56) for _ in range(2000)]  # reuse freed memory, as a busy program would
    launch(x, 7)  # the fused relaunch
    del junk
    assert driver.records[-1][1:] == ((1, 1, 1), (32, 1, 1), 0, 0, pack([x, 7]))


def test_a_failed_launch_leaves_no_fused_relaunch_on_its_stream(driver: PyDriver) -> None:
    """A launch that fails on another stream (e.g. one another thread destroyed) has rewritten the private
    launcher's stream; the dispatch must not relaunch those buffers for the stream it remembered."""
    launch = tile[1]
    x = view(0x1000)
    for _ in range(CHECKED_LAUNCHES + 3):
        launch(x, 7)
    driver.status = lambda rec: 400 if rec[4] == 0xBAD else 0
    set_current_stream(0xBAD)
    with pytest.raises(CUDAError):
        launch(x, 7)
    set_current_stream(None)
    launch(x, 7)
    assert driver.records[-1][1:] == ((1, 1, 1), (32, 1, 1), 0, 0, pack([x, 7]))


def test_a_launcher_never_lowers_the_functions_shared_memory_limit() -> None:
    """Two launchers of one function with different dynamic shared sizes (two threads, two ``shared_mem``):
    the one made second must not lower the limit the first one's launches need."""
    limit = [0]

    def attribute(attr: int) -> int:
        assert attr == 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        return limit[0]

    def set_max_dynamic_shared(nbytes: int) -> None:
        limit[0] = nbytes

    function = SimpleNamespace(name="k", handle=1, attribute=attribute, set_max_dynamic_shared=set_max_dynamic_shared)
    drv = PyDriver()
    Launcher(function, PARAMS, 32, 96 * 1024, driver=drv.ns)
    Launcher(function, PARAMS, 32, 64 * 1024, driver=drv.ns)
    assert limit[0] == 96 * 1024
    Launcher(function, PARAMS, 32, 128 * 1024, driver=drv.ns)
    assert limit[0] == 128 * 1024


def test_threads_launch_the_same_kernels_with_their_own_arguments_grids_streams_and_blocks(
        driver: PyDriver) -> None:
    """Six threads launch one tile kernel and one RawKernel at once, each with its own arrays, scalars, grids,
    streams and block shapes; every launch reaches the driver with exactly its own."""
    raw = tj.RawKernel('extern "C" __global__ void r(float* x, int n) {}', "r")
    raw._functions[0] = SimpleNamespace(name="r", handle=2)
    raw_pack = Launcher(SimpleNamespace(name="r", handle=2), raw.params, block=32, driver=driver.ns).pack
    expected: dict[int, list[Any]] = collections.defaultdict(list)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        me = threading.get_ident()
        streams = {h: Stream._wrap(h) for h in (0x1000 + i, 0x2000 + i)}
        xs = [ArrayView(0x10000 * (i + 1) + 256 * j, (16 + j,), (1,), "float32", None) for j in range(3)]
        try:
            for it in range(1500):
                x = xs[it % 3 if it % 7 else 0]
                n = i * 100 + it % 5
                grid: Any = (i + 1, it % 3 + 1) if it % 2 else i + 1
                g = (grid, 1, 1) if isinstance(grid, int) else (*grid, 1)
                stream = (None, 0x1000 + i, 0x2000 + i)[it % 3]
                if it % 4 < 2:
                    (tile[grid] if stream is None else tile[grid, streams[stream]])(x, n)
                    expected[me].append((g, (32, 1, 1), 0, stream or 0, pack([x, n])))
                else:
                    block: Any = (32, (64, 2), 128)[(it + i) % 3]
                    raw(grid, block, (x.ptr, n), stream)
                    b = (block, 1, 1) if isinstance(block, int) else (*block, 1)
                    expected[me].append((g, b, 0, stream or 0, raw_pack([x.ptr, n])))
        except BaseException as exc:
            errors.append(exc)

    run_threads(worker, 6)
    assert not errors, errors
    got: dict[int, list[Any]] = collections.defaultdict(list)
    for rec in driver.records:
        got[rec[0]].append(rec[1:])
    assert set(got) == set(expected)
    for me, launches in expected.items():
        assert got[me] == launches


def test_another_thread_gets_a_generated_launcher_of_its_own_after_its_checked_launches() -> None:
    """The generated functions' buffers are the creating thread's; another thread used to take the checked
    path on every launch (~20x slower). It now takes it CHECKED_LAUNCHES times, then launches through a
    function with buffers of its own, and every launch still carries that thread's own arguments."""
    from tilejit.runtime.launch import MAX_THREAD_LAUNCHERS

    drv = PyDriver()
    launcher = Launcher(SimpleNamespace(name="k", handle=1), PARAMS, block=32, driver=drv.ns)
    launch = launcher.launch
    launch(1, (view(0x1000), 1))  # the creating thread
    checked = collections.Counter[int]()
    real_checked = launcher.launch_checked

    def counting(grid: Any, args: Any, stream: Any = None, retry: bool = True) -> None:
        checked[threading.get_ident()] += 1
        real_checked(grid, args, stream, retry)

    launcher.launch_checked = counting  # type: ignore[method-assign]
    errors: list[BaseException] = []
    together = threading.Barrier(4)  # all alive at once: thread ids are not reused among them

    def worker(k: int) -> None:
        try:
            together.wait(10)
            for i in range(CHECKED_LAUNCHES + 40):
                launch((k + 1, 1, 1), (view(0x1000 * (k + 2)), 100 * k + i))
            together.wait(10)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = run_threads(worker, 4)
    assert not errors, errors
    tids = {t.ident for t in threads}
    assert set(checked) == tids and all(checked[t] == CHECKED_LAUNCHES for t in tids)  # then generated ones
    assert set(launcher._thread_launches) == tids and len(tids) <= MAX_THREAD_LAUNCHERS
    by_thread = collections.defaultdict(list)
    for tid, grid, _, _, _, params in drv.records[1:]:
        by_thread[tid].append((grid, params))
    for k, t in enumerate(threads):
        want = [((k + 1, 1, 1), pack([view(0x1000 * (k + 2)), 100 * k + i])) for i in range(CHECKED_LAUNCHES + 40)]
        assert by_thread[t.ident] == want
