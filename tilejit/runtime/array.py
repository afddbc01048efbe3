"""``DeviceArray``: tilejit's own small n-d array in device memory.

Enough to feed kernels and check results without another GPU library: create (``empty``,
``zeros``, ``full``, ``asarray`` from host data), read back (``numpy()``), basic slicing to views,
and the two exchange protocols (``__cuda_array_interface__`` v3 and DLPack) so torch, CuPy and
others can use one without a copy. Strides are in bytes, as in numpy.
"""

from __future__ import annotations

import ctypes
import math
import operator
from collections.abc import Sequence
from typing import Any

from tilejit.runtime.device import Device, get_device, initialized_driver
from tilejit.runtime.dtypes import ITEMSIZE, NAME_TO_DLPACK, NAME_TO_TYPESTR, dtype_name, numpy_dtype
from tilejit.runtime.interop import (
    KDL_CUDA,
    ArrayView,
    DLDevice,
    DLManagedTensor,
    DLPackOwner,
    DLTensor,
    NotDeviceArrayError,
    as_view,
    byte_span,
    c_strides,
    is_contiguous,
    register_converter,
)
from tilejit.runtime.memory import MAX_NBYTES, DeviceBuffer, memset_d8
from tilejit.runtime.stream import stream_handle


def _dim(d: Any) -> int:
    n = -1 if isinstance(d, bool) else operator.index(d)
    if n < 0:
        raise ValueError(d)
    return n


def _shape_tuple(shape: int | Sequence[int]) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; other ints (numpy's) are read through ``operator.index``."""
    try:
        if not isinstance(shape, tuple | list):
            try:
                return (_dim(shape),)
            except TypeError:
                pass  # not one int: a sequence of them
        return tuple([_dim(d) for d in shape])  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"shape must be non-negative ints, got {shape!r}") from None


class DeviceArray:
    """An n-d array in device memory. ``strides`` are in bytes (numpy-style); ``ptr`` is the address
    of element 0. Views (from slicing) share their base's memory and keep it alive. Immutable."""

    __slots__ = ("__weakref__", "_base", "_contiguous", "_dtname", "_view", "device", "ptr", "shape", "strides")
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    ptr: int
    device: Device
    _dtname: str
    _base: object
    _view: ArrayView
    _contiguous: bool  # C order (is_contiguous), computed once: pointer parameters read it every launch

    def __init__(
        self,
        shape: int | Sequence[int],
        dtype: Any = "float32",
        *,
        device: Device | int | None = None,
        strides: Sequence[int] | None = None,
        ptr: int | None = None,
        base: object = None,
    ) -> None:
        shape_t = _shape_tuple(shape)
        dtname = dtype_name(dtype)
        item = ITEMSIZE[dtname]
        nbytes = math.prod(shape_t) * item
        if nbytes > MAX_NBYTES:
            raise ValueError(f"shape {shape_t} of {dtname} is {nbytes} bytes, more than a 64-bit size can hold "
                             "(at most 2**64 - 1 bytes)")
        owner: object
        if ptr is None:
            buf = DeviceBuffer(nbytes, device)
            dev, address, owner = buf.device, buf.ptr, buf
            strides_t = tuple(s * item for s in c_strides(shape_t))
        else:
            dev, address, owner = get_device() if device is None else Device(device), ptr, base
            if strides is None:
                strides_t = tuple(s * item for s in c_strides(shape_t))
            else:
                strides_t = tuple(int(s) for s in strides)
                if len(strides_t) != len(shape_t) or any(s % item for s in strides_t):
                    raise ValueError(f"strides {tuple(strides)} do not fit shape {shape_t} of {dtname}")
        view = ArrayView(address, shape_t, tuple(s // item for s in strides_t), dtname, owner)
        for name, value in (("shape", shape_t), ("_dtname", dtname), ("device", dev), ("ptr", address),
                            ("_base", owner), ("strides", strides_t), ("_view", view),
                            ("_contiguous", is_contiguous(view.shape, view.strides))):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        # Launches remember the last arguments by identity, so an array must not change after creation.
        raise AttributeError(f"DeviceArray is immutable: cannot set {name!r} (slice or create a new array)")

    # ------------------------------------------------------------------ properties

    @property
    def dtype(self) -> Any:
        """The numpy dtype (bfloat16 needs ml_dtypes)."""
        return numpy_dtype(self._dtname)

    @property
    def dtype_name(self) -> str:
        return self._dtname

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self._dtname]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        return self._contiguous

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<tilejit.DeviceArray shape={self.shape} dtype={self._dtname} device={self.device.ordinal}>"

    # ------------------------------------------------------------------ slicing

    def __getitem__(self, key: Any) -> DeviceArray:
        """Basic indexing (ints and slices, with steps) returns a view sharing this memory."""
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) > self.ndim:
            raise IndexError(f"too many indices ({len(keys)}) for a {self.ndim}-d array")
        offset = 0
        shape: list[int] = []
        strides: list[int] = []
        for axis, k in enumerate(keys):
            n, st = self.shape[axis], self.strides[axis]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                length = len(range(start, stop, step))
                offset += start * st if length else 0
                shape.append(length)
                strides.append(st * step)
            elif isinstance(k, bool):  # numpy would add an axis (a mask); not supported
                raise IndexError("only ints and slices index a DeviceArray, got bool")
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise IndexError(f"only ints and slices index a DeviceArray, got {type(k).__name__}") from None
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
                offset += (i % n) * st
        shape += self.shape[len(keys):]
        strides += self.strides[len(keys):]
        return DeviceArray(shape, self._dtname, device=self.device, strides=strides, ptr=self.ptr + offset,
                           base=self._base)

    # ------------------------------------------------------------------ host transfers

    def _span(self) -> tuple[int, int]:
        """(lowest, highest+1) byte offsets from ``ptr`` that the elements touch."""
        return byte_span(self.shape, self.strides, self.itemsize)

    def numpy(self, *, stream: Any = None) -> Any:
        """A new host numpy array with this array's contents (after the current stream's work)."""
        import numpy as np

        dt = self.dtype
        if self.size == 0:
            return np.empty(self.shape, dt)
        lo, hi = self._span()
        raw = np.empty(hi - lo, np.uint8)
        _copy_dtoh(self.device, raw, self.ptr + lo, hi - lo, stream)
        if self.is_c_contiguous:
            return raw.view(dt).reshape(self.shape)
        return np.ndarray(self.shape, dt, buffer=raw, offset=-lo, strides=self.strides).copy()

    to_numpy = numpy

    def view(self, dtype: Any) -> DeviceArray:
        """The same memory as elements of ``dtype``, of the same size (numpy's ``view``): e.g. float8 data as its
        uint8 bits, where numpy has no float8 dtype (without ml_dtypes)."""
        name = dtype_name(dtype)
        if ITEMSIZE[name] != self.itemsize:
            raise TypeError(f"view: {name} elements are {ITEMSIZE[name]} bytes, {self._dtname} ones "
                            f"{self.itemsize}; a view keeps the element size")
        return DeviceArray(self.shape, name, device=self.device, strides=self.strides, ptr=self.ptr,
                           base=self._base)

    def copy_to_host(self, *, stream: Any = None) -> Any:
        return self.numpy(stream=stream)

    def copy_from_host(self, src: Any, *, stream: Any = None) -> None:
        """Overwrite the contents from a host array of the same shape (cast to this dtype)."""
        import numpy as np

        if not self.is_c_contiguous:
            raise ValueError("copy_from_host needs a C-contiguous destination")
        # np.asarray keeps 0-d data 0-d (np.ascontiguousarray makes it 1-d), and gives native byte order.
        a = np.asarray(src, dtype=self.dtype, order="C")
        if a.shape != self.shape:
            a = np.asarray(np.broadcast_to(a, self.shape), order="C")
        if a.nbytes:
            _copy_htod(self.device, self.ptr, a, stream)

    def fill(self, value: Any, *, stream: Any = None) -> DeviceArray:
        """Set every element to ``value``; returns self."""
        import numpy as np

        if not self.is_c_contiguous:
            raise ValueError("fill needs a C-contiguous array")
        if self.size == 0:
            return self
        one = np.asarray(value, dtype=self.dtype).reshape(1).view(np.uint8)
        if np.all(one == one[0]):
            memset_d8(self.device, self.ptr, int(one[0]), self.nbytes, stream)
        else:
            _copy_htod(self.device, self.ptr, np.full(self.shape, value, dtype=self.dtype), stream)
        return self

    def poison(self, *, stream: Any = None) -> DeviceArray:
        """Fill with 0xFF bytes (NaN for floats, -1 / max for ints) to catch unwritten outputs."""
        if not self.is_c_contiguous:
            raise ValueError("poison needs a C-contiguous array")
        memset_d8(self.device, self.ptr, 0xFF, self.nbytes, stream)
        return self

    # ------------------------------------------------------------------ exchange protocols

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        typestr = NAME_TO_TYPESTR.get(self._dtname)
        if typestr is None:
            raise AttributeError(f"{self._dtname} has no __cuda_array_interface__ typestr; use DLPack")
        h = stream_handle(None)
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None if self.is_c_contiguous else self.strides,
            "version": 3,
            "stream": h if h else 1,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device.ordinal)

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """A DLPack ``dltensor`` capsule; the consumer's ``stream`` is made to wait for the current one
        (``None``, as the DLPack protocol says, means the legacy default stream; ``-1``: no ordering)."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {dl_device}: the array is on {self.__dlpack_device__()}")
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy")
        if stream is None:
            stream = 1
        if stream != -1:
            _order_streams(stream, self.device)
        return _make_capsule(self)


register_converter(DeviceArray, operator.attrgetter("_view"))


# --------------------------------------------------------------------------- construction


def empty(shape: int | Sequence[int], dtype: Any = "float32", *, device: Device | int | None = None) -> DeviceArray:
    """An uninitialized device array."""
    return DeviceArray(shape, dtype, device=device)


def zeros(shape: int | Sequence[int], dtype: Any = "float32", *, device: Device | int | None = None) -> DeviceArray:
    a = DeviceArray(shape, dtype, device=device)
    memset_d8(a.device, a.ptr, 0, a.nbytes)
    return a


def full(
    shape: int | Sequence[int], value: Any, dtype: Any = "float32", *, device: Device | int | None = None
) -> DeviceArray:
    return DeviceArray(shape, dtype, device=device).fill(value)


def asarray(obj: Any, dtype: Any = None, *, device: Device | int | None = None) -> DeviceArray:
    """A device array of ``obj``: a DeviceArray is returned as is; another library's device array is
    wrapped without a copy (its dtype must match ``dtype`` if given, and its device ``device``); host
    data is copied. Nothing is copied between devices: a ``device`` other than the array's is an error."""
    if isinstance(obj, DeviceArray):
        if dtype is not None and dtype_name(dtype) != obj._dtname:
            raise TypeError(f"asarray: the array is {obj._dtname}, {dtype_name(dtype)} was asked for")
        if device is not None:
            _same_device(Device(device), obj.device.ordinal)
        return obj
    if not _is_host(obj):
        try:
            v = as_view(obj)
        except NotDeviceArrayError:
            v = None  # host data (or not an array at all): copied from the host below
        if v is not None:
            if dtype is not None and dtype_name(dtype) != v.dtype:
                raise TypeError(f"asarray: the device array is {v.dtype}, {dtype_name(dtype)} was asked for")
            producer = _producer_device(v.owner)
            dev: Device | int | None = device
            if device is None:
                dev = producer
            elif producer is not None:
                dev = _same_device(Device(device), producer)
            item = ITEMSIZE[v.dtype]
            return DeviceArray(v.shape, v.dtype, device=dev, strides=[s * item for s in v.strides], ptr=v.ptr,
                               base=v.owner)
    return from_numpy(obj, dtype, device=device)


def _same_device(asked: Device, have: int) -> Device:
    if asked.ordinal != have:
        raise ValueError(f"asarray: the array is on device {have}, device {asked.ordinal} was asked for; "
                         "tilejit does not copy arrays between devices")
    return asked


def _producer_device(owner: object) -> int | None:
    """The device ordinal a foreign array's library reports (DLPack, torch, CuPy); None when unknown
    (``__cuda_array_interface__`` has no device)."""
    if isinstance(owner, DLPackOwner):
        return owner.device_id
    module = type(owner).__module__.split(".")[0]
    try:
        if module == "torch":
            return int(owner.get_device())  # type: ignore[attr-defined]
        if module == "cupy":
            return int(owner.device.id)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        pass
    return None


def from_numpy(obj: Any, dtype: Any = None, *, device: Device | int | None = None) -> DeviceArray:
    """Copy host data (a numpy array or anything ``numpy.asarray`` takes) to a new device array."""
    import numpy as np

    a = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=numpy_dtype(dtype_name(dtype)))
    name = dtype_name(a.dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))  # the device reads native (little-endian) values
    a = np.asarray(a, order="C")  # keeps 0-d data 0-d, as np.ascontiguousarray does not
    out = DeviceArray(a.shape, name, device=device)
    if out.nbytes:
        _copy_htod(out.device, out.ptr, a, None)
    return out


def _is_host(obj: Any) -> bool:
    import numpy as np

    return isinstance(obj, np.ndarray | np.generic | list | tuple | int | float | bool)


# --------------------------------------------------------------------------- helpers


def _copy_htod(device: Device, dst: int, host: Any, stream: Any) -> None:
    device.context.ensure_current()
    d = initialized_driver()
    h = ctypes.c_void_p(stream_handle(stream))
    d.check(d.cuMemcpyHtoDAsync(dst, ctypes.c_void_p(host.ctypes.data), host.nbytes, h), "cuMemcpyHtoDAsync")
    d.check(d.cuStreamSynchronize(h), "cuStreamSynchronize")


def _copy_dtoh(device: Device, host: Any, src: int, nbytes: int, stream: Any) -> None:
    device.context.ensure_current()
    d = initialized_driver()
    h = ctypes.c_void_p(stream_handle(stream))
    d.check(d.cuMemcpyDtoHAsync(ctypes.c_void_p(host.ctypes.data), src, nbytes, h), "cuMemcpyDtoHAsync")
    d.check(d.cuStreamSynchronize(h), "cuStreamSynchronize")


def _order_streams(consumer: int, device: Device) -> None:
    """Make the consumer's stream wait for the work queued so far on the current stream."""
    from tilejit.runtime.event import Event

    producer = stream_handle(None)
    consumer = int(consumer)
    if producer == consumer or (producer == 0 and consumer in (0, 1)):
        return
    with Event(timing=False, device=device) as ev:
        ev.record(producer)
        d = initialized_driver()
        d.check(d.cuStreamWaitEvent(ctypes.c_void_p(consumer), ctypes.c_void_p(ev.handle), 0), "cuStreamWaitEvent")


# DLPack export: each capsule points at a DLManagedTensor kept (with the array) in _EXPORTED until
# the consumer calls the deleter, or until an unconsumed capsule is destroyed.
_EXPORTED: dict[int, tuple[Any, ...]] = {}
_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _dl_deleter(managed: int | None) -> None:
    _EXPORTED.pop(int(managed or 0), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int | None) -> None:
    # Called when a capsule dies; if nobody consumed it (name still "dltensor"), free its tensor.
    if capsule and _is_valid(capsule, _CAPSULE_NAME):
        managed = _get_pointer(capsule, _CAPSULE_NAME)
        _EXPORTED.pop(int(managed or 0), None)


_DELETER_ADDR = ctypes.cast(_dl_deleter, ctypes.c_void_p).value
_DESTRUCTOR_ADDR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def _make_capsule(a: DeviceArray) -> Any:
    ndim = a.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*a._view.strides)
    code, bits = NAME_TO_DLPACK[a._dtname]
    tensor = DLTensor(
        ctypes.c_void_p(a.ptr or None), DLDevice(KDL_CUDA, a.device.ordinal), ndim, (code, bits, 1),
        ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0,
    )
    managed = DLManagedTensor(tensor, None, _DELETER_ADDR)
    addr = ctypes.addressof(managed)
    managed.manager_ctx = addr
    _EXPORTED[addr] = (managed, shape, strides, a)
    return _capsule_new(addr, _CAPSULE_NAME, _DESTRUCTOR_ADDR)


__all__ = ["DeviceArray", "asarray", "empty", "from_numpy", "full", "zeros"]
