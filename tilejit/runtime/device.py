"""CUDA devices: how many there are, what each one is, and which one each thread uses now.

``cuInit`` runs here, once, the first time anything asks for the driver through
:func:`initialized_driver`; until then nothing is loaded. :func:`device_count` never raises, so
code (and the test suite's ``gpu`` marker) can ask "is there a GPU?" on any machine.

The current device and the current stream are per thread, as in the CUDA runtime (the driver's current
context already is): each thread's are kept in a :class:`ThreadState` of one-element lists, which
generated launch code binds for the one thread it runs on, so a launch reads them without a
thread-local lookup.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tilejit.bindings.driver import Driver
    from tilejit.runtime.context import Context
    from tilejit.runtime.stream import Stream

# Device attribute numbers (CUdevice_attribute in cuda.h; stable across CUDA 11-13).
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_WARP_SIZE = 10
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_L2_CACHE_SIZE = 38
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97

_lock = threading.RLock()
_driver: Driver | None = None
_devices: dict[int, Device] = {}


def initialized_driver() -> Driver:
    """The driver binding, with ``cuInit`` done (once per process, thread-safe).

    Raises ``LibraryNotFoundError`` when no driver is installed, ``CUDAError`` when ``cuInit`` fails.
    """
    global _driver
    d = _driver
    if d is not None:
        return d
    with _lock:
        if _driver is None:
            from tilejit.bindings.driver import driver

            d = driver()
            d.check(d.cuInit(0), "cuInit")
            _driver = d
        return _driver


def device_count() -> int:
    """Number of CUDA devices; 0 (never an exception) when there is no driver or no GPU."""
    try:
        d = initialized_driver()
        n = ctypes.c_int(0)
        if d.cuDeviceGetCount(ctypes.byref(n)) != 0:
            return 0
        return int(n.value)
    except Exception:
        return 0


class Device:
    """One CUDA device. ``Device(0) is Device(0)``: devices are created once and cached.

    Properties are read from the driver on first use and remembered.
    """

    ordinal: int
    handle: int

    def __new__(cls, ordinal: int | Device = 0) -> Device:
        if isinstance(ordinal, Device):
            return ordinal
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise TypeError(f"a device ordinal is an int, got {type(ordinal).__name__}")
        dev = _devices.get(ordinal)
        if dev is not None:
            return dev
        with _lock:
            dev = _devices.get(ordinal)
            if dev is not None:
                return dev
            d = initialized_driver()
            count = device_count()
            if not 0 <= ordinal < count:
                raise ValueError(
                    f"CUDA device {ordinal} does not exist: this machine has {count} CUDA device(s)"
                )
            handle = ctypes.c_int(0)
            d.check(d.cuDeviceGet(ctypes.byref(handle), ordinal), "cuDeviceGet")
            dev = super().__new__(cls)
            dev.ordinal = ordinal
            dev.handle = int(handle.value)
            dev._props = {}
            dev._context = None
            _devices[ordinal] = dev
            return dev

    _props: dict[str, Any]
    _context: Context | None

    def __repr__(self) -> str:
        return f"<tilejit.Device {self.ordinal}: {self.name} ({self.arch})>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (self.ordinal,))

    def attribute(self, attr: int) -> int:
        """A raw ``CUdevice_attribute`` value (see cuda.h)."""
        d = initialized_driver()
        out = ctypes.c_int(0)
        d.check(d.cuDeviceGetAttribute(ctypes.byref(out), attr, self.handle), "cuDeviceGetAttribute")
        return int(out.value)

    def _cached_attr(self, key: str, attr: int) -> int:
        value = self._props.get(key)
        if value is None:
            value = self._props[key] = self.attribute(attr)
        return int(value)

    @property
    def name(self) -> str:
        name = self._props.get("name")
        if name is None:
            d = initialized_driver()
            buf = ctypes.create_string_buffer(256)
            d.check(d.cuDeviceGetName(buf, len(buf), self.handle), "cuDeviceGetName")
            name = self._props["name"] = buf.value.decode(errors="replace")
        return str(name)

    @property
    def compute_capability(self) -> tuple[int, int]:
        return (
            self._cached_attr("cc_major", ATTR_COMPUTE_CAPABILITY_MAJOR),
            self._cached_attr("cc_minor", ATTR_COMPUTE_CAPABILITY_MINOR),
        )

    @property
    def arch(self) -> str:
        """The exact compile target of this device, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def multiprocessor_count(self) -> int:
        return self._cached_attr("sms", ATTR_MULTIPROCESSOR_COUNT)

    @property
    def max_threads_per_block(self) -> int:
        return self._cached_attr("max_threads", ATTR_MAX_THREADS_PER_BLOCK)

    @property
    def warp_size(self) -> int:
        return self._cached_attr("warp_size", ATTR_WARP_SIZE)

    @property
    def l2_cache_size(self) -> int:
        return self._cached_attr("l2", ATTR_L2_CACHE_SIZE)

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """Most dynamic + static shared memory one block can opt in to, in bytes."""
        return self._cached_attr("smem_optin", ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    @property
    def total_memory(self) -> int:
        value = self._props.get("total_memory")
        if value is None:
            d = initialized_driver()
            out = ctypes.c_size_t(0)
            d.check(d.cuDeviceTotalMem(ctypes.byref(out), self.handle), "cuDeviceTotalMem")
            value = self._props["total_memory"] = int(out.value)
        return int(value)

    @property
    def context(self) -> Context:
        """This device's primary context (retained on first use; shared with torch, CuPy, ...)."""
        ctx = self._context
        if ctx is None:
            from tilejit.runtime.context import primary_context

            ctx = self._context = primary_context(self)
        return ctx

    def set_current(self) -> Device:
        """Make this device the one tilejit allocates and launches on in the calling thread, and its
        context current on it. Other threads keep theirs."""
        self.context.make_current()
        thread_state().device[0] = self
        return self

    def synchronize(self) -> None:
        """Wait for all work on this device to finish."""
        ctx = self.context
        ctx.ensure_current()
        d = initialized_driver()
        d.check(d.cuCtxSynchronize(), "cuCtxSynchronize")


def get_device(ordinal: int | None = None) -> Device:
    """``Device(ordinal)``, or with no ordinal the calling thread's current device.

    A thread's current device is the last one it gave to ``Device.set_current()``; before that, the
    device of the CUDA context current on the thread (e.g. set by torch), else device 0. Its context
    is made current on the thread when it is first chosen.
    """
    if ordinal is not None:
        return Device(ordinal)
    cell = thread_state().device
    dev = cell[0]
    if dev is None:
        dev = cell[0] = _device_of_this_thread()
    return dev


def _device_of_this_thread() -> Device:
    """The device of the context current on this thread (device 0 if none), its context made current."""
    d = initialized_driver()
    ctx = ctypes.c_void_p(None)
    ordinal = 0
    if d.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value:
        out = ctypes.c_int(0)
        if d.cuCtxGetDevice(ctypes.byref(out)) == 0:
            ordinal = _ordinal_of_handle(int(out.value))
    dev = Device(ordinal)
    dev.context.ensure_current()
    return dev


def _ordinal_of_handle(handle: int) -> int:
    """The ordinal of a CUdevice handle (they are equal on every driver so far, but look it up)."""
    for i in range(device_count()):
        if Device(i).handle == handle:
            return i
    return 0


# ------------------------------------------------------------------ per-thread state


class ThreadState:
    """One thread's current device and stream: one-element lists (cells) that the thread's generated
    launch functions bind once and read on every launch. ``stream[0]`` None means the legacy default
    stream; ``handle[0]`` is the current stream's raw handle, what a launch reads."""

    __slots__ = ("device", "handle", "stream")

    def __init__(self) -> None:
        self.device: list[Device | None] = [None]
        self.stream: list[Stream | None] = [None]
        self.handle: list[int] = [0]

    def reset(self) -> None:
        """Back to the defaults, in place: the cells stay the ones already bound."""
        self.device[0] = None
        self.stream[0] = None
        self.handle[0] = 0


class _ResetAtExit:
    """Kept in the thread-local data, which Python drops when the thread ends: resets the thread's cells
    then, before the thread's id can be reused, so a new thread of that id starts from the defaults even
    in functions generated for the old one that it calls before anything else."""

    __slots__ = ("state",)

    def __init__(self, state: ThreadState) -> None:
        self.state = state

    def __del__(self) -> None:
        self.state.reset()


_states: dict[int, ThreadState] = {}
_local = threading.local()


def state_of(thread_id: int) -> ThreadState:
    """The state cells of the thread ``thread_id`` (from any thread, for code generated for that one).
    A thread id is reused after its thread ends; the new thread gets the same cells, reset."""
    st = _states.get(thread_id)
    if st is None:
        with _lock:
            st = _states.setdefault(thread_id, ThreadState())
    return st


def thread_state() -> ThreadState:
    """The calling thread's state cells; the first call on a thread resets them (an ended thread of the
    same id may have left its own in them)."""
    try:
        return _local.state  # type: ignore[no-any-return]
    except AttributeError:
        pass
    st = state_of(threading.get_ident())
    st.reset()
    _local.state = st
    _local.reset_at_exit = _ResetAtExit(st)
    return st


def all_states() -> list[ThreadState]:
    """Every thread's state cells (e.g. to forget a stream that is closed)."""
    with _lock:
        return list(_states.values())



__all__ = ["Device", "device_count", "get_device", "initialized_driver"]
