"""CPU tests of a tile kernel's fused launch: ``kernel[grid](...)`` repeated with the same immutable
arguments relaunches its private launcher's buffers with one ctypes call. Real ``Launcher`` objects run
against the stand-in driver of ``test_runtime_launch`` (it records each launch's parameter block and
configuration), so every launch is checked for exactly what a kernel would receive."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import test_runtime_launch as stand_in
from test_api_dispatch import use_build
from test_runtime_launch import FakeDriver, fn

import tilejit as tj
from tilejit.api.kernel import Kernel, _Compiled
from tilejit.api.loader import loaded
from tilejit.errors import CUDAError, LaunchError
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind
from tilejit.runtime.stream import Stream, set_current_stream

fake_lib = stand_in.fake_lib  # the stand-in driver's fixtures
fake = stand_in.fake

PARAMS = [("x", ParamKind.array("float32", 1)), ("out", ParamKind.array("float32", 1)),
          ("a", ParamKind.scalar("float32")), ("n", ParamKind.scalar("int32"))]


class FakeDevice:
    ordinal = 0
    arch = "sm_90"


@tj.kernel
def axpy(x, out, a, n):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * a)


class Built:
    """Stands in for ``Kernel._build`` with real launchers on the stand-in driver; counts how often a
    private launcher's Python function runs (a fused relaunch runs none)."""

    def __init__(self, kernel: Kernel, driver: FakeDriver) -> None:
        self.driver = driver
        self.compiled: list[_Compiled] = []
        self.own_calls = 0
        use_build(kernel, self.build)

    def build(self, arg_types: dict[str, Any], hints: dict[str, Any], consts: tuple[Any, ...],
              device: Any) -> _Compiled:
        launcher = Launcher(fn("axpy"), PARAMS, block=128, driver=self.driver)
        make_own = launcher.private_launch

        def private_launch(thread: int) -> Any:
            inner = make_own(thread)

            def counted(*args: Any) -> None:
                self.own_calls += 1
                inner(*args)

            counted.now = inner.now  # type: ignore[attr-defined]
            return counted

        launcher.private_launch = private_launch  # type: ignore[method-assign]
        compiled = loaded(launcher, None, None)
        self.compiled.append(compiled)
        return compiled


@pytest.fixture(autouse=True)
def current_device(use_device: Callable[[Any], Any]) -> Any:
    return use_device(FakeDevice())


def view(ptr: int, n: int = 16) -> ArrayView:
    return ArrayView(ptr, (n,), (1,), "float32", None)


def expect(fake: FakeDriver, grid: tuple[int, int, int], args: list[Any], stream: int = 0) -> None:
    """The last launch received ``args`` packed as the kernel reads them, on ``grid`` and ``stream``."""
    block = Launcher(fn("axpy"), PARAMS, block=128, driver=fake).pack(args)
    assert fake.params() == block
    c = fake.config()
    assert (c.gx, c.gy, c.gz, c.bx) == (*grid, 128)
    assert (c.stream or 0) == stream


def warm(launch: Any, args: list[Any]) -> None:
    for _ in range(CHECKED_LAUNCHES + 1):
        launch(*args)


def test_repeated_calls_relaunch_without_python_packing(fake: FakeDriver) -> None:
    built = Built(axpy, fake)
    x, out = view(0x1000), view(0x2000)
    args = [x, out, 2.0, 16]
    launch = axpy[4]
    warm(launch, args)
    launch(*args)  # the first call after the shared launcher is generated makes the private one
    own_before, calls_before = built.own_calls, fake.calls()
    for _ in range(50):
        launch(*args)
    assert fake.calls() == calls_before + 50
    assert built.own_calls == own_before  # no Python launcher ran: one ctypes call each
    expect(fake, (4, 1, 1), args)


def test_every_change_reaches_the_kernel(fake: FakeDriver) -> None:
    """Arguments, grids (each kernel[grid] has its own buffers), streams and constants changing in any
    order: each launch delivers exactly its own arguments, grid and stream."""
    Built(axpy, fake)
    x, out, y = view(0x1000), view(0x2000), view(0x3000, 40)
    a4, a8 = axpy[4], axpy[(8, 2)]
    warm(a4, [x, out, 2.0, 16])
    warm(a8, [x, out, 2.0, 16])
    s = Stream._wrap(0x77)
    steps: list[tuple[Any, tuple[int, int, int], list[Any], int | None]] = [
        (a4, (4, 1, 1), [x, out, 2.0, 16], None),
        (a4, (4, 1, 1), [x, out, 2.0, 16], None),
        (a8, (8, 2, 1), [x, out, 2.0, 16], None),
        (a4, (4, 1, 1), [x, out, 2.0, 16], None),
        (a4, (4, 1, 1), [y, out, 2.0, 16], None),
        (a4, (4, 1, 1), [y, out, 2.0, 16], None),
        (a4, (4, 1, 1), [y, out, 3.5, 16], None),
        (a4, (4, 1, 1), [y, out, 3.5, 16], 0x55),
        (a4, (4, 1, 1), [y, out, 3.5, 16], 0x55),
        (a4, (4, 1, 1), [y, out, 3.5, 16], None),
        (a8, (8, 2, 1), [x, y, 1.0, 7], None),
        (a8, (8, 2, 1), [x, y, 1.0, 7], None),
        (axpy[4, s], (4, 1, 1), [x, out, 2.0, 16], None),
        (axpy[4, s], (4, 1, 1), [x, out, 2.0, 16], None),
        (a4, (4, 1, 1), [y, out, 3.5, 16], None),
    ]
    for launch, grid, args, current in steps:
        previous = set_current_stream(Stream._wrap(current) if current else None)
        try:
            launch(*args)
        finally:
            set_current_stream(previous)
        stream = 0x77 if launch is not a4 and launch is not a8 else (current or 0)
        expect(fake, grid, args, stream)


def test_a_failed_relaunch_raises_and_the_next_launch_is_right(fake: FakeDriver) -> None:
    built = Built(axpy, fake)
    x, out = view(0x1000), view(0x2000)
    launch = axpy[2]
    warm(launch, [x, out, 2.0, 16])
    launch(x, out, 2.0, 16)
    own_before = built.own_calls
    fake.lib.fake_set_status(700)
    with pytest.raises(CUDAError, match=r"kernel 'axpy' with grid=\(2, 1, 1\)"):
        launch(x, out, 2.0, 16)
    assert built.own_calls == own_before  # it failed on the fused relaunch
    launch(x, out, 2.0, 16)
    expect(fake, (2, 1, 1), [x, out, 2.0, 16])


def test_a_failed_pack_never_leaves_a_stale_relaunch(fake: FakeDriver) -> None:
    """A bad argument fails after the private launcher may have written part of its block: the next
    call, with the earlier arguments, must pack them again rather than relaunch the half-written block."""
    Built(axpy, fake)
    x, out = view(0x1000), view(0x2000)
    launch = axpy[1]
    warm(launch, [x, out, 2.0, 16])
    launch(x, out, 2.0, 16)
    with pytest.raises(LaunchError, match="parameter 'a'"):
        launch(view(0x5000), view(0x6000), 1e300, 16)  # the same specialization; a does not fit float32
    launch(x, out, 2.0, 16)
    expect(fake, (1, 1, 1), [x, out, 2.0, 16])


def test_other_threads_launch_their_own_arguments(fake: FakeDriver) -> None:
    """Another thread never relaunches the creating thread's buffers, nor makes it relaunch stale ones."""
    Built(axpy, fake)
    x, out, y = view(0x1000), view(0x2000), view(0x3000)
    launch = axpy[3]
    warm(launch, [x, out, 2.0, 16])
    launch(x, out, 2.0, 16)
    launch(x, out, 2.0, 16)
    seen: list[bytes] = []

    def other() -> None:
        launch(y, out, 5.0, 9)
        seen.append(fake.params())
        launch(y, out, 5.0, 9)
        seen.append(fake.params())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    pack = Launcher(fn("axpy"), PARAMS, block=128, driver=fake).pack
    assert seen == [pack([y, out, 5.0, 9])] * 2
    launch(y, out, 5.0, 9)  # what the other thread launched last: this thread's buffers still hold x
    expect(fake, (3, 1, 1), [y, out, 5.0, 9])
    launch(x, out, 2.0, 16)
    expect(fake, (3, 1, 1), [x, out, 2.0, 16])


def test_a_device_switch_takes_the_other_devices_specialization(fake: FakeDriver,
                                                                use_device: Callable[[Any], Any]) -> None:
    built = Built(axpy, fake)
    x, out = view(0x1000), view(0x2000)
    launch = axpy[1]
    warm(launch, [x, out, 2.0, 16])
    launch(x, out, 2.0, 16)
    assert len(built.compiled) == 1
    use_device(FakeDevice())
    launch(x, out, 2.0, 16)
    assert len(built.compiled) == 2  # compiled (here: built) again for the new device
