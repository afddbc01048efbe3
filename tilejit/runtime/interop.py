"""Zero-copy views of other libraries' device arrays: torch, CuPy, JAX, Numba, anything with
``__cuda_array_interface__`` (v2/v3) or DLPack (``__dlpack__``/``__dlpack_device__``).

:func:`as_view` is on the launch hot path: it remembers, per Python type, which way of reading
an array works, and tries tilejit's own arrays and torch tensors (read through their attributes,
the fastest way) before the generic protocols.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from tilejit.errors import NotDeviceArrayError
from tilejit.runtime.dtypes import DLPACK_TO_NAME, ITEMSIZE, TYPESTR_TO_NAME

# The functional form: the class form compiles each (string) annotation when it is defined.
ArrayView = NamedTuple(  # noqa: UP014
    "ArrayView",
    [("ptr", int), ("shape", tuple[int, ...]), ("strides", tuple[int, ...]), ("dtype", str), ("owner", object)],
)
ArrayView.__doc__ = "Where an array's elements are: strides are in ELEMENTS; ``owner`` keeps the memory alive."
#: ``new_view((ptr, shape, strides, dtype, owner))``: an ArrayView without the namedtuple's Python-level ``__new__``
#: (a launch with a torch tensor makes one per argument; tj.fuse one per reshaped argument).
new_view: Callable[[tuple[Any, ...]], ArrayView] = functools.partial(tuple.__new__, ArrayView)


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides = [0] * len(shape)
    step = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def byte_span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """(lowest, highest+1) byte offsets from element 0 that the elements of an array touch; ``strides`` in bytes."""
    if 0 in shape:
        return 0, 0
    lo = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0)
    hi = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0)
    return lo, hi + itemsize


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether elements of ``shape`` at ``strides`` (in elements) are packed in C order; dimensions of
    length 1 may have any stride, and an empty array is contiguous."""
    if 0 in shape:
        return True
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def not_contiguous_error(shape: tuple[int, ...], strides: tuple[int, ...]) -> ValueError:
    """Why a ``T*`` parameter refuses a strided view: it would get the first element's address only."""
    return ValueError(
        f"the array is not contiguous (shape {tuple(shape)}, strides {tuple(strides)} in elements), and a "
        "pointer parameter receives only the address of its first element; pass a contiguous array "
        "(e.g. x.contiguous() in torch), or pass the address as an int (e.g. x.data_ptr()) if the kernel "
        "indexes the view itself"
    )


def _host_error(obj: Any) -> NotDeviceArrayError:
    cls = type(obj)
    return NotDeviceArrayError(
        f"a host (CPU) array ({cls.__module__}.{cls.__qualname__}) was passed where device memory is needed; "
        "copy it to the GPU first, e.g. tilejit.asarray(x) (or x.cuda() for a torch tensor)"
    )


# --------------------------------------------------------------------------- torch and CuPy


_TORCH_DTYPES: dict[Any, str] = {}
_TORCH_DTYPE_OF: dict[str, Any] = {}


def torch_dtypes() -> dict[Any, str]:
    """torch dtype -> tilejit dtype name, for the dtypes both have (torch must be imported); filled once and kept,
    so launch code may hold it."""
    if not _TORCH_DTYPES:
        torch = sys.modules["torch"]
        names = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
        table = {getattr(torch, n): n for n in names if hasattr(torch, n)}
        _TORCH_DTYPE_OF.update({n: d for d, n in table.items()})  # first: whoever sees one table sees both
        _TORCH_DTYPES.update(table)
    return _TORCH_DTYPES


def torch_dtype_of() -> dict[str, Any]:
    """tilejit dtype name -> torch dtype, the inverse of :func:`torch_dtypes` (one torch dtype per name): empty
    until torch's table is made (by the first torch tensor read), then kept, so launch code may hold it."""
    return _TORCH_DTYPE_OF


class _NoTensor:
    """Stands for ``torch.Tensor`` in launch code made while torch is not imported: no argument is of its type."""


def torch_tensor_type() -> type:
    """``torch.Tensor`` when torch is imported, else a class no argument has: generated launch code reads a torch
    tensor's ``data_ptr()``, ``shape``, ``stride()``, ``dtype`` and ``is_cuda`` inline (its other array arguments
    go through :func:`as_view`)."""
    torch = sys.modules.get("torch")
    cls = getattr(torch, "Tensor", None)
    return cls if isinstance(cls, type) else _NoTensor


def torch_view(t: Any) -> ArrayView:
    """The view of a torch tensor (the converter :func:`as_view` keeps for torch's tensor types): a launch may
    remember a tensor it read so, with its address, dtype, shape and strides, and repeat itself while they read the
    same (torch tensors change in place: ``set_``, ``resize_``, ``transpose_``, ``.data =``)."""
    if not t.is_cuda:
        raise _host_error(t)
    name = _TORCH_DTYPES.get(t.dtype)
    if name is None:
        name = torch_dtypes().get(t.dtype)  # the table, filled on first use
        if name is None:
            raise TypeError(f"unsupported torch dtype {t.dtype}")
    return new_view((t.data_ptr(), t.shape, t.stride(), name, t))  # type: ignore[no-any-return]


def _torch_pointer(t: Any) -> tuple[int, str]:
    name = _TORCH_DTYPES.get(t.dtype)
    if name is None or not t.is_cuda or not t.is_contiguous():
        return _pointer_via_view(t)  # raises the host / dtype / layout error
    return t.data_ptr(), name


def _cupy_view(a: Any) -> ArrayView:
    name = a.dtype.name
    item = ITEMSIZE.get(name)
    if item is None:
        raise TypeError(f"unsupported CuPy dtype {a.dtype}")
    strides = a.strides
    if any(s % item for s in strides):
        raise ValueError(f"CuPy array strides {strides} are not a multiple of the item size {item}")
    return ArrayView(a.data.ptr, a.shape, tuple(s // item for s in strides), name, a)


# --------------------------------------------------------------------------- __cuda_array_interface__


def parse_cuda_array_interface(cai: Mapping[str, Any], owner: object) -> ArrayView:
    """An :class:`ArrayView` from a ``__cuda_array_interface__`` dict (versions 0 to 3).

    The v3 ``stream`` entry is not synchronized on: launch on the producer's stream (or the legacy
    default stream, which is ordered with blocking streams) when that matters.
    """
    try:
        shape = tuple(operator.index(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr = operator.index(cai["data"][0] or 0)
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"malformed __cuda_array_interface__ {dict(cai)!r}: {exc}") from None
    if any(n < 0 for n in shape) or not 0 <= ptr < 1 << 64:
        raise ValueError(f"malformed __cuda_array_interface__ {dict(cai)!r}: a negative size or an address "
                         "that is not a 64-bit pointer")
    if cai.get("mask") is not None:
        raise ValueError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    if not isinstance(typestr, str) or len(typestr) < 3 or typestr[0] not in "<|=":
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {typestr!r} (need little-endian)")
    name = TYPESTR_TO_NAME.get(typestr[1:])
    if name is None:
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {typestr!r}")
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = c_strides(shape)
    else:
        item = ITEMSIZE[name]
        try:
            byte_strides = tuple(operator.index(s) for s in byte_strides)
        except TypeError as exc:
            raise ValueError(f"malformed __cuda_array_interface__ strides {byte_strides!r}: {exc}") from None
        if len(byte_strides) != len(shape):
            raise ValueError(f"__cuda_array_interface__ has {len(shape)} dims but {len(byte_strides)} strides")
        if any(s % item for s in byte_strides):
            raise ValueError(f"strides {byte_strides} (bytes) are not a multiple of the item size {item}")
        strides = tuple(s // item for s in byte_strides)
    return ArrayView(ptr, shape, strides, name, owner)


def _cai_view(obj: Any) -> ArrayView:
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        # A class whose instances have the attribute only on the GPU (JAX arrays): read this one
        # afresh, without caching (a CPU instance gets the host-array error).
        conv = _choose(obj.__class__, obj)
        if conv is _cai_view:  # the attribute is there and then not: nothing else to try
            raise
        return conv(obj)
    return parse_cuda_array_interface(cai, obj)


# --------------------------------------------------------------------------- DLPack

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_DEVICE_OK = (KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED)
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm",
                 11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DLDeleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

# Capsule names must outlive the capsules; these module constants do.
_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"


class DLPackOwner:
    """Holds a consumed DLPack tensor and calls its deleter when dropped (or on ``close()``).
    ``device_id`` is the producer's device ordinal."""

    __slots__ = ("_deleter", "_managed", "device_id", "source")

    def __init__(self, managed: int, deleter: int, source: object, device_id: int = 0) -> None:
        self._managed = managed
        self._deleter = deleter
        self.source = source
        self.device_id = device_id

    def close(self) -> None:
        managed, self._managed = self._managed, 0
        if managed and self._deleter:
            DLDeleter(self._deleter)(managed)

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may already be gone at interpreter exit
            self.close()
        except Exception:
            pass


def parse_dlpack_capsule(capsule: object, source: object = None) -> ArrayView:
    """Consume a DLPack capsule (legacy ``dltensor`` or ``dltensor_versioned``) into a view.

    The capsule is renamed ``used_...`` as the protocol requires; the view's owner calls the
    producer's deleter once the view is no longer referenced. Only CUDA device memory is accepted.
    """
    if _capsule_is_valid(capsule, _NAME):
        addr = _capsule_get_pointer(capsule, _NAME)
        managed: Any = DLManagedTensor.from_address(addr)
        used = _USED
    elif _capsule_is_valid(capsule, _NAME_VERSIONED):
        addr = _capsule_get_pointer(capsule, _NAME_VERSIONED)
        managed = DLManagedTensorVersioned.from_address(addr)
        used = _USED_VERSIONED
        if managed.version.major > 1:
            raise ValueError(f"unsupported DLPack version {managed.version.major}.{managed.version.minor}")
    else:
        raise TypeError("expected a DLPack capsule named 'dltensor' (was it already consumed?)")
    t = managed.dl_tensor
    dev_type = t.device.device_type
    if dev_type not in _DEVICE_OK:
        where = _DEVICE_NAMES.get(dev_type, f"device type {dev_type}")
        if dev_type == KDL_CPU:
            raise _host_error(source if source is not None else capsule)
        raise TypeError(f"the DLPack tensor lives on {where} memory; tilejit needs CUDA device memory")
    dt = t.dtype
    name = DLPACK_TO_NAME.get((dt.code, dt.bits))
    if name is None or dt.lanes != 1:
        raise TypeError(f"unsupported DLPack dtype (code={dt.code}, bits={dt.bits}, lanes={dt.lanes})")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    strides = tuple(t.strides[i] for i in range(ndim)) if t.strides else c_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    _capsule_set_name(capsule, used)
    owner = DLPackOwner(addr, managed.deleter or 0, source, int(t.device.device_id))
    return ArrayView(ptr, shape, strides, name, owner)


def _dlpack_stream_arg() -> int:
    from tilejit.runtime.stream import stream_handle

    h = stream_handle(None)
    return h if h else 1  # 1 = the legacy default stream in the DLPack protocol


def _dlpack_view(obj: Any) -> ArrayView:
    dev_type, _ = obj.__dlpack_device__()
    if dev_type == KDL_CPU:
        raise _host_error(obj)
    if dev_type not in _DEVICE_OK:
        where = _DEVICE_NAMES.get(int(dev_type), f"device type {dev_type}")
        raise TypeError(f"{type(obj).__name__} lives on {where} memory; tilejit needs CUDA device memory")
    return parse_dlpack_capsule(obj.__dlpack__(stream=_dlpack_stream_arg()), obj)


# --------------------------------------------------------------------------- dispatch


def _identity(v: ArrayView) -> ArrayView:
    return v


_BY_TYPE: dict[type, Callable[[Any], ArrayView]] = {ArrayView: _identity}
#: The converter :func:`as_view` has chosen for each array type met so far (exact type), read-only and live: a
#: caller on a hot path may look a type up (``converters.get(cls)``) before it calls ``as_view``.
converters: Mapping[type, Callable[[Any], ArrayView]] = MappingProxyType(_BY_TYPE)


def register_converter(cls: type, converter: Callable[[Any], ArrayView]) -> None:
    """Teach :func:`as_view` how to read instances of ``cls`` (exact type)."""
    _BY_TYPE[cls] = converter


def _host_view(obj: Any) -> ArrayView:
    raise _host_error(obj)


def _choose(cls: type, obj: Any) -> Callable[[Any], ArrayView]:
    module = cls.__module__.split(".")[0]
    if module == "torch" and hasattr(obj, "data_ptr"):
        return torch_view
    if module == "cupy" and hasattr(obj, "data") and hasattr(obj, "strides") and hasattr(obj, "dtype"):
        return _cupy_view
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_view
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_view
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return _host_view
    raise NotDeviceArrayError(
        "expected a device array (tilejit.DeviceArray, a torch/CuPy/JAX array, or any object with "
        f"__cuda_array_interface__ or __dlpack__), got {cls.__module__}.{cls.__qualname__}"
    )


_POINTER_BY_TYPE: dict[type, Callable[[Any], tuple[int, str]]] = {}


def _pointer_via_view(obj: Any) -> tuple[int, str]:
    v = as_view(obj)
    if not is_contiguous(v.shape, v.strides):
        raise not_contiguous_error(v.shape, v.strides)
    return v.ptr, v.dtype


def pointer_of(obj: Any) -> tuple[int, str]:
    """(address, dtype) of a device array: what a ``T*`` kernel parameter needs, read more cheaply
    than a full view where the library allows (torch)."""
    cls = obj.__class__
    conv = _POINTER_BY_TYPE.get(cls)
    if conv is None:
        as_view(obj)  # raises the right error for non-arrays before anything is cached
        conv = _torch_pointer if _BY_TYPE.get(cls) is torch_view else _pointer_via_view
        _POINTER_BY_TYPE[cls] = conv
    return conv(obj)


def as_view(obj: Any) -> ArrayView:
    """A zero-copy :class:`ArrayView` of a device array; ``TypeError``/``ValueError`` if ``obj`` is
    not one (host arrays get a message saying to copy them to the GPU)."""
    cls = obj.__class__
    conv = _BY_TYPE.get(cls)
    if conv is None:
        conv = _choose(cls, obj)
        # A host instance of a class that also has device instances (the class has a device protocol
        # attribute, as JAX's does) must not decide for the class: choose afresh for each such object.
        if conv is not _host_view or not (hasattr(cls, "__cuda_array_interface__") or hasattr(cls, "__dlpack__")):
            _BY_TYPE[cls] = conv
    return conv(obj)


__all__ = [
    "ArrayView", "DLPackOwner", "NotDeviceArrayError", "as_view", "byte_span", "c_strides", "converters",
    "is_contiguous", "new_view", "not_contiguous_error", "parse_cuda_array_interface", "parse_dlpack_capsule",
    "pointer_of", "register_converter", "torch_dtype_of", "torch_dtypes", "torch_tensor_type", "torch_view",
]
