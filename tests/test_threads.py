"""CPU tests of launches from several threads at once: tile kernels and RawKernels against a stand-in
``cuLaunchKernelEx`` (a ctypes callback) that reads the configuration and parameter block at the addresses
it is handed, so each launch is checked for exactly what a kernel would have received, and from which thread.
Each thread has its own current device and stream, as in the CUDA runtime."""

from __future__ import annotations

import collections
import ctypes
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import tilejit as tj
from tilejit.api.loader import loaded
from tilejit.errors import CUDAError
from tilejit.runtime import context as context_state
from tilejit.runtime import device as device_state
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind
from tilejit.runtime.stream import Stream, current_stream, set_current_stream, stream_handle

_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_CONFIG = struct.Struct("=7I4xQ")

Record = tuple[int, tuple[int, int, int], tuple[int, int, int], int, int, "bytes | None"]


class PyDriver:
    """``cuLaunchKernelEx`` as a Python callback: each launch's (thread, grid, block, shared bytes, stream,
    parameter block) as read from memory, and (thread, function handle, stream) in ``launches``;
    ``hook(record)`` runs in the launching thread, ``status(record)`` says what the launch returns."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.launches: list[tuple[int, int, int]] = []
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
            self.launches.append((rec[0], function, stream))
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
def driver(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any]) -> Iterator[PyDriver]:
    drv = PyDriver()
    use_device(object.__new__(StandInDevice))
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


def test_another_threads_calls_of_one_kernel_grid_leave_the_fused_relaunch_intact(driver: PyDriver) -> None:
    """Another thread calling the same ``kernel[grid]`` goes on to a launch function of its own (its own memo
    and private launchers): the first thread's fused relaunch still delivers exactly its own arguments,
    through buffers that stay alive while the other thread's come and go."""
    launch = tile[1]
    x, y = view(0x1000), view(0x2000)
    for _ in range(CHECKED_LAUNCHES + 3):  # generated shared launcher, then a private one and the fused memo
        launch(x, 7)

    def other() -> None:
        for _ in range(CHECKED_LAUNCHES + 3):
            launch(y, 9)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert [r[5] for r in driver.records if r[0] == t.ident] == [pack([y, 9])] * (CHECKED_LAUNCHES + 3)
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
    assert launcher.first_launches.threads() == tids and len(tids) <= MAX_THREAD_LAUNCHERS
    by_thread = collections.defaultdict(list)
    for tid, grid, _, _, _, params in drv.records[1:]:
        by_thread[tid].append((grid, params))
    for k, t in enumerate(threads):
        want = [((k + 1, 1, 1), pack([view(0x1000 * (k + 2)), 100 * k + i])) for i in range(CHECKED_LAUNCHES + 40)]
        assert by_thread[t.ident] == want


# --------------------------------------------------------------------------- per-thread device and stream


def in_thread(fn: Any) -> Any:
    """``fn()`` on a new thread; its result, or its exception raised here."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # handed back to the test
            out.append((False, exc))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def test_each_thread_launches_on_its_own_current_stream(driver: PyDriver) -> None:
    """Two threads set different current streams, then launch at once past the checked launches: a tile
    kernel (one ``kernel[grid]`` made here, one by a thread), a RawKernel, a Launcher made here and one of
    their own. Every launch goes to the launching thread's stream; this thread's stays the legacy one."""
    raw = tj.RawKernel('extern "C" __global__ void r(float* x, int n) {}', "r")
    raw._functions[0] = SimpleNamespace(name="r", handle=2)
    shared = Launcher(SimpleNamespace(name="k", handle=3), PARAMS, block=32, driver=driver.ns)
    launch = tile[1]
    streams = [0x5100, 0x5200]
    together = threading.Barrier(2)
    errors: list[BaseException] = []
    rounds = CHECKED_LAUNCHES + 20

    def worker(i: int) -> None:
        try:
            set_current_stream(Stream._wrap(streams[i]) if i else streams[i])
            together.wait(10)  # both streams are set before either thread launches
            own = Launcher(SimpleNamespace(name="k", handle=4), PARAMS, block=32, driver=driver.ns)
            x = view(0x1000 * (i + 1))
            for it in range(rounds):
                launch(x, it)
                tile[2](x, it)
                raw(1, 32, (x.ptr, it))
                shared(1, (x, it))
                own(1, (x, it))
            assert current_stream().handle == stream_handle(None) == streams[i]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = run_threads(worker, 2)
    assert not errors, errors
    for i, t in enumerate(threads):
        mine = [(function, stream) for tid, function, stream in driver.launches if tid == t.ident]
        assert len(mine) == 5 * rounds
        assert {stream for _, stream in mine} == {streams[i]}
        assert {function for function, _ in mine} == {1, 2, 3, 4}
    assert current_stream() is Stream.legacy() and stream_handle(None) == 0
    launch(view(0x1000), 1)
    raw(1, 32, (0x1000, 1))
    shared(1, (view(0x1000), 1))
    assert [stream for _, _, stream in driver.launches[-3:]] == [0, 0, 0]


class TwoDevices(PyDriver):
    """PyDriver plus what choosing a device asks of the driver: two devices, a primary context each (handle
    0xC000 + ordinal) and the current context per thread, as the driver keeps it."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()
        self.ns = SimpleNamespace(
            cuLaunchKernelEx=self.entry, check=self.check, cuInit=lambda flags: 0,
            cuDeviceGetCount=self.device_count, cuDeviceGet=self.device_get,
            cuDevicePrimaryCtxRetain=self.retain, cuCtxSetCurrent=self.set_context,
            cuCtxGetCurrent=self.get_context, cuCtxGetDevice=self.context_device,
        )

    def context(self) -> int:
        """The context current on the calling thread, 0 for none."""
        return int(getattr(self.local, "ctx", 0))

    @staticmethod
    def check(status: int, function: str, detail: str = "") -> None:
        if status:
            raise CUDAError(function, status, "CUDA_ERROR_FAKE", "fake driver", detail)

    def device_count(self, out: Any) -> int:
        out._obj.value = 2
        return 0

    def device_get(self, out: Any, ordinal: int) -> int:
        out._obj.value = ordinal
        return 0

    def retain(self, out: Any, dev: int) -> int:
        out._obj.value = 0xC000 + dev
        return 0

    def set_context(self, ctx: ctypes.c_void_p) -> int:
        self.local.ctx = ctx.value or 0
        return 0

    def get_context(self, out: Any) -> int:
        out._obj.value = self.context() or None
        return 0

    def context_device(self, out: Any) -> int:
        if not self.context():
            return 201
        out._obj.value = self.context() - 0xC000
        return 0


@pytest.fixture
def two_devices(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any]) -> Iterator[TwoDevices]:
    """The runtime on a TwoDevices driver, no device chosen; the tile kernel's specialization for device i
    launches function 0x100 + i."""
    drv = TwoDevices()
    monkeypatch.setattr(device_state, "_driver", drv.ns)
    monkeypatch.setattr(device_state, "_devices", {})
    use_device(None)
    monkeypatch.setattr(context_state, "_primary", {})

    def build(arg_types: Any, hints: Any, consts: Any, device: Any) -> Any:
        function = SimpleNamespace(name="tile", handle=0x100 + device.ordinal)
        return loaded(Launcher(function, PARAMS, block=32, driver=drv.ns), None, None)

    tile._build = build  # type: ignore[method-assign]
    for memo in (tile._specs, tile._fast, tile._bound):
        memo.clear()
    yield drv
    del tile._build


def test_each_thread_launches_on_its_own_current_device(two_devices: TwoDevices) -> None:
    """One thread per device sets it current and launches a tile kernel (a specialization per device) and a
    RawKernel (a function per device) past the checked launches, both threads at once: every launch runs the
    function of the launching thread's device. A thread that sets none gets the device of the context
    current on it, else device 0 with its context made current; the main thread's device is not changed."""
    drv = two_devices
    raw = tj.RawKernel('extern "C" __global__ void r(float* x, int n) {}', "r")
    raw._functions.update({i: SimpleNamespace(name="r", handle=0x200 + i) for i in (0, 1)})
    launch = tile[1]
    together = threading.Barrier(2)
    errors: list[BaseException] = []
    seen: dict[int, tuple[int, int]] = {}
    rounds = CHECKED_LAUNCHES + 20

    def worker(i: int) -> None:
        try:
            device_state.Device(i).set_current()
            together.wait(10)  # both devices are set before either thread launches
            x = view(0x1000 * (i + 1))
            for it in range(rounds):
                launch(x, it)
                tile[2](x, it)
                raw(1, 32, (x.ptr, it))
            seen[i] = (device_state.get_device().ordinal, drv.context())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = run_threads(worker, 2)
    assert not errors, errors
    for i, t in enumerate(threads):
        functions = [function for tid, function, _ in drv.launches if tid == t.ident]
        assert len(functions) == 3 * rounds
        assert set(functions) == {0x100 + i, 0x200 + i}
        assert seen[i] == (i, 0xC000 + i)
    assert in_thread(lambda: (device_state.get_device().ordinal, drv.context())) == (0, 0xC000)

    def under_another_library() -> int:  # e.g. torch made device 1's context current on this thread
        device_state.Device(1).context.make_current()
        return device_state.get_device().ordinal

    assert in_thread(under_another_library) == 1
    assert device_state.thread_state().device[0] is None  # this thread never chose one


def test_closing_a_stream_makes_every_thread_that_had_it_current_use_the_legacy_stream(
        driver: PyDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.runtime import stream as stream_mod

    monkeypatch.setattr(stream_mod, "initialized_driver",
                        lambda: SimpleNamespace(cuStreamDestroy=lambda h: 0, check=lambda *a: None))
    s = Stream._wrap(0x77)
    s._owned = True
    other = Stream._wrap(0x88)
    started, closed = threading.Event(), threading.Event()
    seen: list[int] = []

    def uses(stream: Stream) -> None:
        set_current_stream(stream)
        started.set()
        closed.wait(10)
        seen.append(stream_handle(None))

    for stream in (s, other):
        t = threading.Thread(target=uses, args=(stream,))
        t.start()
        assert started.wait(10)
        started.clear()
        set_current_stream(s)
        s.close()
        closed.set()
        t.join()
        closed.clear()
        assert current_stream() is Stream.legacy()
        s = Stream._wrap(0x77)
        s._owned = True
    assert seen == [0, 0x88]


def test_a_thread_that_reuses_an_ended_threads_id_starts_from_the_defaults(
        driver: PyDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread ids are reused once a thread ends. A new thread of an ended one's id starts from the default
    stream and device, also in the launch functions generated for the old one (bound to the id's cells),
    which then follow what the new thread sets. Both threads get one id here, whatever the system reuses."""
    real = threading.get_ident
    fake_ids: dict[int, int] = {}
    monkeypatch.setattr(threading, "get_ident", lambda: fake_ids.get(real(), real()))
    monkeypatch.setattr(tile, "_make", None)  # the dispatch binds get_ident when first made
    reused = 0x4242
    launcher = Launcher(SimpleNamespace(name="k", handle=3), PARAMS, block=32, driver=driver.ns)
    raw = tj.RawKernel('extern "C" __global__ void r(float* x, int n) {}', "r")
    raw._functions.update({0: SimpleNamespace(name="r", handle=2), 1: SimpleNamespace(name="r", handle=2)})
    launch = tile[1]
    x = view(0x1000)
    special = object.__new__(StandInDevice)
    special.ordinal = 1
    special._context = SimpleNamespace(make_current=lambda: None)  # type: ignore[assignment]

    def launch_all() -> list[int]:
        """One launch of each kind, past their checked launches; the streams they went to."""
        before = len(driver.launches)
        launch(x, 1)
        raw(1, 32, (x.ptr, 1))
        launcher(1, (x, 1))
        return [stream for _, _, stream in driver.launches[before:]]

    def as_reused(fn: Any) -> Any:
        def run() -> Any:
            fake_ids[real()] = reused
            try:
                return fn()
            finally:
                del fake_ids[real()]  # threading's own bookkeeping ends the thread under its real id

        return in_thread(run)

    def first() -> None:
        set_current_stream(0xA1)
        special.set_current()
        for _ in range(CHECKED_LAUNCHES + 2):
            launch_all()
        assert launch_all() == [0xA1] * 3

    as_reused(first)
    assert driver.launches[-1][0] == reused

    def second() -> tuple[list[int], list[int], Any, Any]:
        default = launch_all()  # before anything touches this thread's state
        state = current_stream(), device_state.get_device()
        set_current_stream(0xB2)
        return default, launch_all(), *state

    default, after, stream, device = as_reused(second)
    assert default == [0, 0, 0] and after == [0xB2] * 3
    assert stream is Stream.legacy() and device is not special
    assert device_state.state_of(reused).handle[0] == 0  # reset again when the thread ended

    # An ended thread whose cells were never reset (no thread-exit cleanup ran: e.g. after a fork): a new
    # thread of its id still starts from the defaults.
    device_state.state_of(reused).handle[0] = 0xDEAD
    device_state.state_of(reused).stream[0] = Stream._wrap(0xDEAD)
    device_state.state_of(reused).device[0] = special
    assert as_reused(lambda: (stream_handle(None), current_stream(), device_state.get_device())) == (
        0, Stream.legacy(), device_state.get_device())
