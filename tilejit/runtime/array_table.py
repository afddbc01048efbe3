"""Array-list arguments (issue 20): a tuple or list of device arrays of one dtype and rank, passed to a kernel
parameter, becomes one device table that the kernel indexes at run time.

The table has one row of ``1 + 2 * ndim`` int64 per array (pointer, shape, strides in elements) and one more
row of zeros, an empty array, which the kernel reads for an index out of range. The kernel receives it as a
rank-2 int64 array of shape ``(count, 1 + 2 * ndim)`` (``backends.base.ARRAY_LIST_SPEC``), so the launchers
pack it like any array, and one compiled kernel serves every count.

Tables are immutable and kept per device by their bytes (the last :data:`MAX_TABLES`), so a launch with the same
arrays again copies nothing; a new table is copied on a private stream and waited for (about 10-20 us), so it
never waits for other work. Dropping the oldest table synchronizes its device first: a kernel still running
may read it.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections import OrderedDict
from typing import Any

from tilejit.errors import LaunchError
from tilejit.runtime.dtypes import ITEMSIZE
from tilejit.runtime.interop import ArrayView, as_view

#: Tables kept per process (all devices together); the oldest goes first.
MAX_TABLES = 256


class ArrayTable:
    """The owner of an array-list argument's table view: its device buffer and the arrays it names (kept alive
    while a launch may use them)."""

    __slots__ = ("buffer", "dtype", "ndim", "views")

    def __init__(self, buffer: Any, dtype: str, ndim: int, views: tuple[ArrayView, ...]) -> None:
        self.buffer = buffer
        self.dtype = dtype
        self.ndim = ndim
        self.views = views

    def __repr__(self) -> str:
        return f"<tilejit array list: {len(self.views)} {self.dtype} arrays of rank {self.ndim}>"


_lock = threading.Lock()
_tables: OrderedDict[tuple[int, bytes], Any] = OrderedDict()  # (device ordinal, rows) -> DeviceBuffer
_streams: dict[int, Any] = {}  # device ordinal -> the private stream new tables are copied on


def _item_views(name: str, items: tuple[Any, ...] | list[Any]) -> tuple[ArrayView, ...]:
    """The views of an array list's items, all of one dtype and rank (else a ``LaunchError`` naming the item)."""
    if not items:
        raise LaunchError(f"parameter '{name}': an array list needs at least one array (the kernel is compiled for "
                          "their dtype and rank); got an empty " + type(items).__name__)
    views: list[ArrayView] = []
    for i, item in enumerate(items):
        try:
            v = as_view(item)
        except (TypeError, ValueError) as exc:
            raise LaunchError(f"parameter '{name}': item {i} of the array list is not a device array: {exc}") from None
        first = views[0] if views else v
        if v.dtype != first.dtype or len(v.shape) != len(first.shape):
            raise LaunchError(
                f"parameter '{name}': the arrays of an array list share one dtype and rank; item 0 is a "
                f"{len(first.shape)}-d {first.dtype} array, item {i} a {len(v.shape)}-d {v.dtype} array"
            )
        if v.ptr % ITEMSIZE[v.dtype]:
            raise LaunchError(f"parameter '{name}': item {i} starts at {v.ptr:#x}, which is not a multiple of "
                              f"{ITEMSIZE[v.dtype]}: {v.dtype} elements must be aligned on the GPU")
        views.append(v)
    return tuple(views)


def table_view(name: str, items: tuple[Any, ...] | list[Any]) -> ArrayView:
    """The table of the array list ``items`` (argument of parameter ``name``) on the calling thread's current
    device, as the int64 array view the kernel receives; its owner is an :class:`ArrayTable`."""
    from tilejit.runtime.device import get_device

    views = _item_views(name, items)
    ndim = len(views[0].shape)
    words: list[int] = []
    for v in views:
        words.append(v.ptr)
        words += v.shape
        words += v.strides
    record = 1 + 2 * ndim
    rows = struct.pack(f"<{len(words) + record}q", *words, *([0] * record))
    device = get_device()
    buffer = _table(device, rows)
    return ArrayView(buffer.ptr, (len(views), record), (record, 1), "int64",
                     ArrayTable(buffer, views[0].dtype, ndim, views))


def _table(device: Any, rows: bytes) -> Any:
    """The device buffer holding ``rows`` on ``device``: a kept one, or a new one copied and waited for."""
    from tilejit.runtime.device import initialized_driver
    from tilejit.runtime.memory import DeviceBuffer
    from tilejit.runtime.stream import Stream

    key = (device.ordinal, rows)
    with _lock:
        found = _tables.get(key)
        if found is not None:
            _tables.move_to_end(key)
            return found
        stream = _streams.get(device.ordinal)
        if stream is None:
            stream = _streams[device.ordinal] = Stream(device, non_blocking=True)
        buffer = DeviceBuffer(len(rows), device)
        d = initialized_driver()
        device.context.ensure_current()
        d.check(d.cuMemcpyHtoDAsync(buffer.ptr, ctypes.c_char_p(rows), len(rows), ctypes.c_void_p(stream.handle)),
                "cuMemcpyHtoDAsync")
        d.check(d.cuStreamSynchronize(ctypes.c_void_p(stream.handle)), "cuStreamSynchronize")
        _tables[key] = buffer
        while len(_tables) > MAX_TABLES:
            _, old = _tables.popitem(last=False)
            old.device.synchronize()  # a kernel still queued may read it
            old.close()
        return buffer


def is_table(view: Any) -> bool:
    """Whether an argument's view is an array list's table."""
    return view.__class__ is ArrayView and view[4].__class__ is ArrayTable


__all__ = ["MAX_TABLES", "ArrayTable", "is_table", "table_view"]
