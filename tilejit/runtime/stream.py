"""CUDA streams: tilejit's own, and any other library's (``__cuda_stream__``, torch, CuPy, int).

A launch given no stream goes to the calling thread's *current stream*: the legacy default stream
(handle 0, the one torch and CuPy also use by default) until :func:`set_current_stream` names another
on that thread.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilejit.runtime.device import Device, all_states, get_device, initialized_driver, thread_state

if TYPE_CHECKING:
    from tilejit.runtime.event import Event

STREAM_NON_BLOCKING = 0x1
#: Special handles the driver accepts anywhere a stream goes (cuda.h ``CU_STREAM_LEGACY`` / ``_PER_THREAD``).
STREAM_LEGACY = 0x1
STREAM_PER_THREAD = 0x2
_CUDA_ERROR_NOT_READY = 600


class Stream:
    """A CUDA stream. ``Stream()`` creates a non-blocking stream on the current device, which
    ``close()`` (or leaving a ``with`` block) destroys; wrapped foreign streams are never destroyed.
    A closed stream refuses further use (a launch on it would go to whatever the handle means next);
    every thread whose current stream it was goes back to the legacy default stream."""

    __slots__ = ("__weakref__", "_closed", "_owned", "_owner", "device", "handle")

    handle: int
    device: Device | None
    _owned: bool
    _owner: object
    _closed: bool

    def __init__(self, device: Device | int | None = None, *, non_blocking: bool = True) -> None:
        dev = get_device() if device is None else Device(device)
        dev.context.ensure_current()
        d = initialized_driver()
        out = ctypes.c_void_p(None)
        flags = STREAM_NON_BLOCKING if non_blocking else 0
        d.check(d.cuStreamCreate(ctypes.byref(out), flags), "cuStreamCreate")
        self.handle = int(out.value or 0)
        self.device = dev
        self._owned = True
        self._owner = None
        self._closed = False

    @classmethod
    def _wrap(cls, handle: int, owner: object = None) -> Stream:
        s = cls.__new__(cls)
        s.handle = handle
        s.device = None
        s._owned = False
        s._owner = owner
        s._closed = False
        return s

    @classmethod
    def legacy(cls) -> Stream:
        """The legacy default stream (handle 0): ordered with every blocking stream of its context."""
        return _LEGACY

    @classmethod
    def from_external(cls, obj: Any) -> Stream:
        """Wrap another library's stream without taking ownership; ``obj`` is kept alive.

        Accepts a :class:`Stream`, an object with ``__cuda_stream__`` (returning ``(version, handle)``),
        a ``torch.cuda.Stream`` (``.cuda_stream``), a CuPy stream (``.ptr``) or an int handle.
        """
        if isinstance(obj, Stream):
            return obj
        return cls._wrap(stream_handle(obj), obj)

    def __repr__(self) -> str:
        kind = "closed" if self._closed else "owned" if self._owned else "external"
        return f"<tilejit.Stream {self.handle:#x} ({kind})>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, _handle_of_own(self))

    def synchronize(self) -> None:
        """Wait until all work queued on this stream has finished."""
        h = ctypes.c_void_p(_handle_of_own(self))
        d = initialized_driver()
        d.check(d.cuStreamSynchronize(h), "cuStreamSynchronize")

    def query(self) -> bool:
        """True when all work queued on this stream has finished."""
        h = ctypes.c_void_p(_handle_of_own(self))
        d = initialized_driver()
        status = d.cuStreamQuery(h)
        if status == _CUDA_ERROR_NOT_READY:
            return False
        d.check(status, "cuStreamQuery")
        return True

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` has completed."""
        h = ctypes.c_void_p(_handle_of_own(self))
        d = initialized_driver()
        d.check(d.cuStreamWaitEvent(h, ctypes.c_void_p(event.handle), 0),
                "cuStreamWaitEvent")

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        from tilejit.runtime.event import Event

        ev = Event() if event is None else event
        ev.record(self)
        return ev

    def close(self) -> None:
        """Destroy the stream if tilejit created it (queued work still completes); later use of it is
        an error. Threads whose current stream it is go back to the legacy default stream."""
        if self._owned and self.handle:
            handle, self.handle, self._owned, self._closed = self.handle, 0, False, True
            states = all_states()
            with _lock:
                for st in states:
                    if st.stream[0] is self:
                        st.stream[0] = None
                        st.handle[0] = 0
            d = initialized_driver()
            d.check(d.cuStreamDestroy(ctypes.c_void_p(handle)), "cuStreamDestroy")

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_owned", False) and self.handle:
            try:  # noqa: SIM105 - contextlib may already be gone at interpreter exit
                self.close()
            except Exception:
                pass


_LEGACY = Stream._wrap(0)
# Orders writes of a thread's current stream with ``Stream.close`` resetting it from another thread
# (reentrant: a stream's ``__del__`` may close it while this thread holds the lock). Nothing else is
# locked while it is held.
_lock = threading.RLock()


def current_stream() -> Stream:
    """The stream the calling thread's launches use when given none."""
    s = thread_state().stream[0]
    return _LEGACY if s is None else s


def set_current_stream(stream: Any) -> Stream:
    """Make ``stream`` (anything :meth:`Stream.from_external` accepts; None = legacy default) the calling
    thread's current stream; other threads keep theirs (launch code reads the thread's ``handle[0]``).

    Returns the previous current stream, so callers can restore it.
    """
    s = None if stream is None else Stream.from_external(stream)
    st = thread_state()
    with _lock:
        previous = st.stream[0]
        st.stream[0] = s
        st.handle[0] = 0 if s is None else s.handle
    return _LEGACY if previous is None else previous


# ------------------------------------------------------------------ handle of any stream object


def _handle_of_own(s: Stream) -> int:
    if s._closed:
        raise ValueError(f"{s!r} was closed; use another stream")
    return s.handle


def _handle_of_int(h: int) -> int:
    if h < 0:
        raise ValueError(f"a stream handle cannot be negative, got {h}")
    if h >= 1 << 64:
        raise ValueError(f"a stream handle is a 64-bit address, got {h}")
    return h


def _checked_handle(value: object, what: str) -> int:
    """A handle another library gave (an int in 0..2**64-1), or a clear error naming where it came from."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int handle, got a bool")
    try:
        h = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an int handle, got {type(value).__name__} {value!r}") from None
    try:
        return _handle_of_int(h)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _handle_of_protocol(obj: Any) -> int:
    attr = obj.__cuda_stream__
    value = attr() if callable(attr) else attr
    name = f"{type(obj).__name__}.__cuda_stream__"
    if not (isinstance(value, tuple) and len(value) == 2):
        raise TypeError(f"{name} must give (version, handle), got {value!r}")
    if value[0] != 0:
        raise ValueError(f"{name} gave protocol version {value[0]!r}; tilejit reads version 0")
    return _checked_handle(value[1], f"the handle of {name}")


def _handle_of_torch(obj: Any) -> int:
    return _checked_handle(obj.cuda_stream, f"{type(obj).__name__}.cuda_stream")


def _handle_of_cupy(obj: Any) -> int:
    return _checked_handle(obj.ptr, f"{type(obj).__name__}.ptr")


_BY_TYPE: dict[type, Callable[[Any], int]] = {Stream: _handle_of_own, int: _handle_of_int}


def _converter(cls: type, obj: Any) -> Callable[[Any], int]:
    if issubclass(cls, Stream):
        return _handle_of_own
    if issubclass(cls, bool):
        raise TypeError("expected a stream, got a bool")
    if issubclass(cls, int):
        return _handle_of_int
    if hasattr(obj, "__cuda_stream__"):
        return _handle_of_protocol
    if hasattr(obj, "cuda_stream"):
        return _handle_of_torch
    if cls.__module__.split(".")[0] == "cupy" and hasattr(obj, "ptr"):
        return _handle_of_cupy
    raise TypeError(
        "expected a stream: tilejit.Stream, an object with __cuda_stream__, a torch.cuda.Stream, a CuPy "
        f"stream or an int handle; got {cls.__module__}.{cls.__qualname__}"
    )


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` handle of ``stream``; None means the calling thread's current stream."""
    if stream is None:
        return thread_state().handle[0]
    cls = type(stream)
    conv = _BY_TYPE.get(cls)
    if conv is None:
        conv = _converter(cls, stream)
        _BY_TYPE[cls] = conv
    return conv(stream)


__all__ = [
    "STREAM_LEGACY", "STREAM_PER_THREAD", "Stream", "current_stream", "set_current_stream", "stream_handle",
]
