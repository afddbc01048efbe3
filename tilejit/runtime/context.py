"""Primary contexts: tilejit uses each device's primary context, the one torch, CuPy and the CUDA
runtime share, so device pointers and streams pass freely between them.

A context is retained once per process and made current on a thread when something there first
needs it (allocation, module load, stream creation). Launches skip that check: a launch that
fails because no or another context is current makes the right one current and tries again.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

from tilejit.runtime.device import initialized_driver

if TYPE_CHECKING:
    from tilejit.runtime.device import Device

_lock = threading.Lock()
_primary: dict[int, Context] = {}


class Context:
    """A retained primary context of one device. ``close()`` releases the retain."""

    def __init__(self, device: Device, handle: int) -> None:
        self.device = device
        self.handle = handle
        self._released = False

    def __repr__(self) -> str:
        return f"<tilejit.Context of device {self.device.ordinal} at {self.handle:#x}>"

    def make_current(self) -> None:
        """Make this context current on the calling thread."""
        d = initialized_driver()
        d.check(d.cuCtxSetCurrent(ctypes.c_void_p(self.handle)), "cuCtxSetCurrent")

    def is_current(self) -> bool:
        return current_context_handle() == self.handle

    def ensure_current(self) -> None:
        """Make this context current unless it already is (one cheap driver query)."""
        if current_context_handle() != self.handle:
            self.make_current()

    def synchronize(self) -> None:
        self.ensure_current()
        d = initialized_driver()
        d.check(d.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self) -> None:
        """Release the primary-context retain taken by tilejit (other users keep theirs)."""
        with _lock:
            if self._released:
                return
            self._released = True
            if _primary.get(self.device.ordinal) is self:
                del _primary[self.device.ordinal]
            self.device._context = None
        d = initialized_driver()
        d.check(d.cuDevicePrimaryCtxRelease(self.device.handle), "cuDevicePrimaryCtxRelease")

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def current_context_handle() -> int:
    """The context current on this thread, 0 when none is."""
    d = initialized_driver()
    out = ctypes.c_void_p(None)
    d.check(d.cuCtxGetCurrent(ctypes.byref(out)), "cuCtxGetCurrent")
    return int(out.value or 0)


def primary_context(device: Device) -> Context:
    """The device's primary context, retained on the first call (thread-safe)."""
    ctx = _primary.get(device.ordinal)
    if ctx is not None:
        return ctx
    with _lock:
        ctx = _primary.get(device.ordinal)
        if ctx is None:
            d = initialized_driver()
            out = ctypes.c_void_p(None)
            d.check(d.cuDevicePrimaryCtxRetain(ctypes.byref(out), device.handle), "cuDevicePrimaryCtxRetain")
            ctx = _primary[device.ordinal] = Context(device, int(out.value or 0))
        return ctx


__all__ = ["Context", "current_context_handle", "primary_context"]
