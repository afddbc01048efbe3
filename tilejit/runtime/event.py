"""CUDA events: mark a point in a stream, wait for it, or time the work between two of them."""

from __future__ import annotations

import ctypes
from typing import Any

from tilejit.runtime.device import Device, get_device, initialized_driver
from tilejit.runtime.stream import stream_handle

EVENT_BLOCKING_SYNC = 0x1
EVENT_DISABLE_TIMING = 0x2
_CUDA_ERROR_NOT_READY = 600


class Event:
    """A CUDA event on the current device. ``timing=False`` makes record/wait cheaper; ``close()``
    (or leaving a ``with`` block) destroys it."""

    def __init__(self, *, timing: bool = True, blocking: bool = False, device: Device | int | None = None) -> None:
        dev = get_device() if device is None else Device(device)
        dev.context.ensure_current()
        d = initialized_driver()
        flags = (0 if timing else EVENT_DISABLE_TIMING) | (EVENT_BLOCKING_SYNC if blocking else 0)
        out = ctypes.c_void_p(None)
        d.check(d.cuEventCreate(ctypes.byref(out), flags), "cuEventCreate")
        self.handle = int(out.value or 0)
        self.timing = timing
        self.device = dev
        self._recorded = False

    def __repr__(self) -> str:
        return f"<tilejit.Event {self.handle:#x}>"

    def record(self, stream: Any = None) -> Event:
        """Record the event on ``stream`` (default: the current stream); returns self."""
        d = initialized_driver()
        d.check(d.cuEventRecord(ctypes.c_void_p(self.handle), ctypes.c_void_p(stream_handle(stream))),
                "cuEventRecord")
        self._recorded = True
        return self

    def synchronize(self) -> None:
        """Wait until the work before the recorded point has finished."""
        d = initialized_driver()
        d.check(d.cuEventSynchronize(ctypes.c_void_p(self.handle)), "cuEventSynchronize")

    def query(self) -> bool:
        """True when the work before the recorded point has finished (or nothing was recorded)."""
        d = initialized_driver()
        status = d.cuEventQuery(ctypes.c_void_p(self.handle))
        if status == _CUDA_ERROR_NOT_READY:
            return False
        d.check(status, "cuEventQuery")
        return True

    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float:
        """Milliseconds of GPU time between two recorded timing events (waits for ``end``)."""
        for name, ev in (("start", start), ("end", end)):
            if not ev.timing:
                raise ValueError(f"the {name} event was created with timing=False and cannot be timed")
            if not ev._recorded:
                raise ValueError(f"the {name} event was never recorded")
        end.synchronize()
        d = initialized_driver()
        ms = ctypes.c_float(0.0)
        d.check(
            d.cuEventElapsedTime(ctypes.byref(ms), ctypes.c_void_p(start.handle), ctypes.c_void_p(end.handle)),
            "cuEventElapsedTime",
        )
        return float(ms.value)

    def close(self) -> None:
        if self.handle:
            handle, self.handle = self.handle, 0
            d = initialized_driver()
            d.check(d.cuEventDestroy(ctypes.c_void_p(handle)), "cuEventDestroy")

    def __enter__(self) -> Event:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "handle", 0):
            try:  # noqa: SIM105 - contextlib may already be gone at interpreter exit
                self.close()
            except Exception:
                pass


def elapsed_ms(start: Event, end: Event) -> float:
    """Milliseconds between two recorded events; see :meth:`Event.elapsed_ms`."""
    return Event.elapsed_ms(start, end)


__all__ = ["Event", "elapsed_ms"]
