"""Save an array's contents on its device and put them back, or zero an array: what keeps an in-place or
accumulating kernel's arguments as they were while autotuning launches it many times (``restore_value``,
``reset_to_zero``). Works on any :class:`~tilejit.runtime.interop.ArrayView`: tilejit arrays, torch tensors,
anything ``as_view`` reads; strided views included.
"""

from __future__ import annotations

from typing import Any

from tilejit.runtime.device import Device
from tilejit.runtime.dtypes import ITEMSIZE
from tilejit.runtime.interop import ArrayView, byte_span, is_contiguous
from tilejit.runtime.memory import DeviceBuffer, copy_dtod, memset_d8
from tilejit.runtime.stream import Stream, stream_handle


def _bytes_of(view: ArrayView) -> tuple[int, int]:
    """(address, byte count) of the memory a view's elements span (with the gaps between strided rows)."""
    item = ITEMSIZE[view.dtype]
    lo, hi = byte_span(view.shape, tuple(s * item for s in view.strides), item)
    return view.ptr + lo, hi - lo


class Snapshot:
    """A copy, on ``device``, of the memory an array's elements span, taken on ``stream`` when made (None: the
    current stream); ``restore()`` queues the copy back on that stream (the gaps of a strided view too, as they
    were); ``close()`` waits for the stream, then frees the copy."""

    def __init__(self, view: ArrayView, device: Device, stream: Any = None) -> None:
        self.view = view
        self.device = device
        self._stream = stream_handle(stream)
        self._address, nbytes = _bytes_of(view)
        self._copy = DeviceBuffer(nbytes, device)
        self._copy.copy_from_device(self._address, nbytes, stream=self._stream)

    def restore(self) -> None:
        """Queue the copy back into the array."""
        copy_dtod(self.device, self._address, self._copy.ptr, self._copy.nbytes, self._stream)

    def close(self) -> None:
        """Free the copy once the stream's queued work (a restore among it) has finished."""
        if self._copy.ptr:
            Stream.from_external(self._stream).synchronize()
        self._copy.close()


def zero(view: ArrayView, device: Device, stream: Any = None) -> None:
    """Set every element of ``view`` to zero (all bits 0: 0, 0.0 and False in every dtype), on ``stream``. A
    contiguous array is one memset; a strided view goes through the host, so its gaps keep their bytes."""
    address, nbytes = _bytes_of(view)
    if is_contiguous(view.shape, view.strides):
        memset_d8(device, address, 0, nbytes, stream)
        return
    import numpy as np

    from tilejit.runtime.array import _copy_dtoh, _copy_htod

    item = ITEMSIZE[view.dtype]
    raw = np.empty(nbytes, np.uint8)
    _copy_dtoh(device, raw, address, nbytes, stream)
    elements = np.ndarray((*view.shape, item), np.uint8, buffer=raw, offset=view.ptr - address,
                          strides=(*(s * item for s in view.strides), 1))
    elements[...] = 0
    _copy_htod(device, address, raw, stream)


__all__ = ["Snapshot", "zero"]
