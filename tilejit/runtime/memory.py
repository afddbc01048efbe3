"""Device memory: one allocation, freed by ``close()`` or when the last reference goes.

Copies to and from the host go through the current stream and wait for it, so they see the
results of kernels launched there without an explicit synchronize.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tilejit.runtime.device import Device, get_device, initialized_driver
from tilejit.runtime.stream import stream_handle

#: The most bytes one allocation or copy can name: the driver takes sizes as 64-bit ``size_t``.
MAX_NBYTES = (1 << 64) - 1


def _host_address(buf: Any, *, writable: bool) -> tuple[int, int, Any]:
    """(address, nbytes, keep-alive) of a C-contiguous host numpy array or buffer-protocol object.
    A numpy source (``writable=False``) in non-native byte order is converted to native order."""
    import numpy as np

    if isinstance(buf, np.ndarray):
        if not writable and not buf.dtype.isnative:
            buf = buf.astype(buf.dtype.newbyteorder("="))  # the device reads native (little-endian) values
        arr, readonly = buf, not buf.flags.writeable
    else:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(
                f"expected a host buffer (numpy array, bytes, bytearray...), got {type(buf).__name__}"
            ) from None
        if not mv.c_contiguous:
            raise ValueError("the host buffer must be C-contiguous")
        arr = np.frombuffer(mv.cast("B"), dtype=np.uint8) if mv.nbytes else np.empty(0, np.uint8)
        readonly = mv.readonly
    if not arr.flags.c_contiguous:
        raise ValueError("the host array must be C-contiguous (use numpy.ascontiguousarray)")
    if writable and readonly:
        raise ValueError("the destination host buffer is read-only")
    return int(arr.ctypes.data), int(arr.nbytes), arr


def copy_dtod(device: Device, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
    """Queue a copy of ``nbytes`` from device address ``src`` to ``dst`` (both on ``device``) on ``stream``."""
    if nbytes:
        device.context.ensure_current()
        d = initialized_driver()
        d.check(d.cuMemcpyDtoDAsync(dst, src, nbytes, ctypes.c_void_p(stream_handle(stream))), "cuMemcpyDtoDAsync")


def memset_d8(device: Device, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
    """Queue setting ``nbytes`` bytes at device address ``ptr`` (on ``device``) to the byte ``value`` on ``stream``."""
    if nbytes:
        device.context.ensure_current()
        d = initialized_driver()
        d.check(d.cuMemsetD8Async(ptr, value, nbytes, ctypes.c_void_p(stream_handle(stream))), "cuMemsetD8Async")


class DeviceBuffer:
    """``nbytes`` of memory on ``device`` (default: the current device). ``ptr`` is its address."""

    __slots__ = ("__weakref__", "device", "nbytes", "ptr")

    def __init__(self, nbytes: int, device: Device | int | None = None) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes must be a non-negative int, got {nbytes!r}")
        if nbytes > MAX_NBYTES:
            raise ValueError(f"cannot allocate {nbytes} bytes: device sizes are 64-bit (at most 2**64 - 1 bytes)")
        dev = get_device() if device is None else Device(device)
        self.device = dev
        self.nbytes = nbytes
        self.ptr = 0
        if nbytes:
            dev.context.ensure_current()
            d = initialized_driver()
            out = ctypes.c_uint64(0)
            d.check(d.cuMemAlloc(ctypes.byref(out), nbytes), "cuMemAlloc", f"allocating {nbytes} bytes on {dev.arch}")
            self.ptr = int(out.value)

    def __repr__(self) -> str:
        return f"<tilejit.DeviceBuffer {self.nbytes} bytes at {self.ptr:#x}>"

    def _check_range(self, offset: int, nbytes: int) -> None:
        if self.ptr == 0 and self.nbytes:
            raise ValueError("the device buffer was closed")
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        if offset > self.nbytes:
            raise ValueError(f"offset {offset} is beyond the end of the {self.nbytes}-byte buffer")
        if nbytes < 0:
            raise ValueError(f"cannot copy a negative number of bytes ({nbytes})")
        if offset + nbytes > self.nbytes:
            raise ValueError(f"range [{offset}, {offset + nbytes}) is outside the {self.nbytes}-byte buffer")

    def copy_from_host(self, src: Any, offset: int = 0, *, stream: Any = None) -> None:
        """Copy a host buffer (numpy array, bytes, ...) into this buffer at ``offset``; waits for it."""
        addr, n, keep = _host_address(src, writable=False)
        self._check_range(offset, n)
        if n:
            self.device.context.ensure_current()
            h = stream_handle(stream)
            d = initialized_driver()
            d.check(d.cuMemcpyHtoDAsync(self.ptr + offset, ctypes.c_void_p(addr), n, ctypes.c_void_p(h)),
                    "cuMemcpyHtoDAsync")
            d.check(d.cuStreamSynchronize(ctypes.c_void_p(h)), "cuStreamSynchronize")
        del keep

    def copy_to_host(self, dst: Any = None, offset: int = 0, nbytes: int | None = None, *, stream: Any = None) -> Any:
        """Copy into the writable host buffer ``dst`` (default: a new bytearray) after the current
        stream's work has finished; returns ``dst`` (a numpy ``dst`` in non-native byte order gets
        the values, byte-swapped)."""
        import numpy as np

        if dst is None:
            count = self.nbytes - offset if nbytes is None else nbytes
            self._check_range(offset, count)
            dst = bytearray(count)
        addr, n, keep = _host_address(dst, writable=True)
        swapped = isinstance(dst, np.ndarray) and not dst.dtype.isnative
        if swapped:  # receive native values, then store them byte-swapped
            keep = np.empty(dst.shape, dst.dtype.newbyteorder("="))
            addr = int(keep.ctypes.data)
        if nbytes is not None and nbytes != n:
            raise ValueError(f"the destination holds {n} bytes, {nbytes} were asked for")
        self._check_range(offset, n)
        if n:
            self.device.context.ensure_current()
            h = stream_handle(stream)
            d = initialized_driver()
            d.check(d.cuMemcpyDtoHAsync(ctypes.c_void_p(addr), self.ptr + offset, n, ctypes.c_void_p(h)),
                    "cuMemcpyDtoHAsync")
            d.check(d.cuStreamSynchronize(ctypes.c_void_p(h)), "cuStreamSynchronize")
        if swapped:
            dst[...] = keep
        del keep
        return dst

    def copy_from_device(self, src_ptr: int, nbytes: int, offset: int = 0, *, stream: Any = None) -> None:
        """Copy ``nbytes`` from device address ``src_ptr`` into this buffer (queued on the stream)."""
        self._check_range(offset, nbytes)
        copy_dtod(self.device, self.ptr + offset, src_ptr, nbytes, stream)

    def memset(self, value: int, offset: int = 0, nbytes: int | None = None, *, stream: Any = None) -> None:
        """Set bytes to ``value`` (0..255), queued on the stream."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise ValueError(f"memset value must be a byte 0..255, got {value!r}")
        n = self.nbytes - offset if nbytes is None else nbytes
        self._check_range(offset, n)
        memset_d8(self.device, self.ptr + offset, value, n, stream)

    def close(self) -> None:
        """Free the memory now (idempotent). Work still queued that uses it must be finished first."""
        ptr, self.ptr = self.ptr, 0
        if ptr:
            d = initialized_driver()
            self.device.context.ensure_current()
            d.check(d.cuMemFree(ptr), "cuMemFree")

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "ptr", 0):
            try:  # noqa: SIM105 - contextlib may already be gone at interpreter exit
                self.close()
            except Exception:
                pass


__all__ = ["MAX_NBYTES", "DeviceBuffer", "copy_dtod", "memset_d8"]
