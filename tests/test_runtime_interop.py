"""CPU tests of reading other libraries' arrays: ``__cuda_array_interface__`` dicts and DLPack
capsules (built here with ctypes, or numpy's own CPU capsules, which must be refused clearly)."""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any

import numpy as np
import pytest

from tilejit.runtime import interop
from tilejit.runtime.dtypes import dtype_name, float_to_bfloat16_bits
from tilejit.runtime.interop import (
    ArrayView,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLTensor,
    as_view,
    c_strides,
    parse_cuda_array_interface,
    parse_dlpack_capsule,
)


class CAI:
    """A stand-in device array exposing only ``__cuda_array_interface__``."""

    def __init__(self, **cai: Any) -> None:
        self.__cuda_array_interface__ = {"version": 3, "strides": None, **cai}


def test_cai_c_contiguous_and_strided() -> None:
    v = as_view(CAI(data=(0x7000, False), shape=(3, 4), typestr="<f4"))
    assert v == ArrayView(0x7000, (3, 4), (4, 1), "float32", v.owner)
    v = as_view(CAI(data=(0x7000, False), shape=(4, 3), typestr="<f8", strides=(8, 32)))
    assert (v.shape, v.strides, v.dtype) == ((4, 3), (1, 4), "float64")
    v = as_view(CAI(data=(0x10, True), shape=(5,), typestr="|b1", version=2))
    assert v.dtype == "bool" and v.strides == (1,)
    v = as_view(CAI(data=(0, False), shape=(0, 3), typestr="<i2"))
    assert v.ptr == 0 and v.shape == (0, 3)
    neg = parse_cuda_array_interface({"data": (0x100, False), "shape": (3,), "typestr": "<i8", "strides": (-8,)}, None)
    assert neg.strides == (-1,)


@pytest.mark.parametrize(
    ("cai", "error", "pattern"),
    [
        ({"data": (1, False), "shape": (3,), "typestr": ">f4"}, TypeError, "little-endian"),
        ({"data": (1, False), "shape": (3,), "typestr": "<c8"}, TypeError, "unsupported"),
        ({"data": (1, False), "shape": (3,), "typestr": "<f4", "strides": (6,)}, ValueError, "multiple of the item"),
        ({"data": (1, False), "shape": (3, 2), "typestr": "<f4", "strides": (8,)}, ValueError, "2 dims but 1"),
        ({"data": (1, False), "shape": (3,), "typestr": "<f4", "mask": object()}, ValueError, "mask"),
        ({"shape": (3,), "typestr": "<f4"}, ValueError, "malformed"),
    ],
)
def test_cai_errors(cai: dict[str, Any], error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        as_view(CAI(**cai))


def test_host_and_foreign_objects_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match=r"host \(CPU\) array \(numpy.ndarray\).*tilejit.asarray"):
        as_view(np.zeros(3))
    with pytest.raises(TypeError, match=r"expected a device array .* got builtins.int"):
        as_view(3)
    with pytest.raises(TypeError, match=r"got builtins\.list"):
        as_view([1.0, 2.0])


# --------------------------------------------------------------------------- DLPack

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
DELETED: list[int] = []


@interop.DLDeleter
def _record_delete(managed: int | None) -> None:
    DELETED.append(int(managed or 0))


class Producer:
    """Builds a DLManagedTensor in ctypes memory, as a CUDA library's ``__dlpack__`` would."""

    def __init__(self, device_type: int, code: int, bits: int, shape: tuple[int, ...],
                 strides: tuple[int, ...] | None, ptr: int = 0x9000, byte_offset: int = 0, lanes: int = 1) -> None:
        n = max(len(shape), 1)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = (ctypes.c_int64 * n)(*(strides or ()))
        tensor = DLTensor(
            ctypes.c_void_p(ptr), DLDevice(device_type, 0), len(shape), DLDataType(code, bits, lanes),
            ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
            ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)) if strides is not None else None,
            byte_offset,
        )
        deleter = ctypes.cast(_record_delete, ctypes.c_void_p).value
        self.managed = DLManagedTensor(tensor, None, deleter)
        self.address = ctypes.addressof(self.managed)
        self.device_type = device_type

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)

    def __dlpack__(self, stream: Any = None) -> Any:
        self.stream = stream
        return _capsule_new(self.address, b"dltensor", None)


def test_dlpack_cuda_tensor_is_read_and_deleted_once() -> None:
    p = Producer(interop.KDL_CUDA, 2, 32, (2, 3), (1, 2), ptr=0x9000, byte_offset=16)
    v = as_view(p)
    assert (v.ptr, v.shape, v.strides, v.dtype) == (0x9000 + 16, (2, 3), (1, 2), "float32")
    assert p.stream == 1, "the consumer names the legacy default stream (1) when none is current"
    assert DELETED.count(p.address) == 0
    del v
    gc.collect()
    assert DELETED.count(p.address) == 1


@pytest.mark.parametrize(
    ("code", "bits", "name"),
    [(4, 16, "bfloat16"), (6, 8, "bool"), (1, 64, "uint64"), (0, 8, "int8"), (2, 16, "float16")],
)
def test_dlpack_dtypes(code: int, bits: int, name: str) -> None:
    v = as_view(Producer(interop.KDL_CUDA, code, bits, (4,), None))
    assert v.dtype == name and v.strides == (1,)


def test_dlpack_capsule_consumed_once_and_renamed() -> None:
    p = Producer(interop.KDL_CUDA_MANAGED, 2, 64, (3,), (1,))
    capsule = p.__dlpack__()
    v = parse_dlpack_capsule(capsule, p)
    assert v.dtype == "float64"
    assert not _capsule_is_valid(capsule, b"dltensor") and _capsule_is_valid(capsule, b"used_dltensor")
    with pytest.raises(TypeError, match="already consumed"):
        parse_dlpack_capsule(capsule, p)


@pytest.mark.parametrize(
    ("producer", "pattern"),
    [
        (Producer(interop.KDL_CPU, 2, 32, (3,), None), r"host \(CPU\) array"),
        (Producer(10, 2, 32, (3,), None), "ROCm"),
        (Producer(interop.KDL_CUDA, 5, 64, (3,), None), "unsupported DLPack dtype"),
        (Producer(interop.KDL_CUDA, 2, 32, (3,), None, lanes=4), "lanes=4"),
    ],
)
def test_dlpack_errors(producer: Producer, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        as_view(producer)


def test_numpy_dlpack_capsule_is_refused_as_host_memory() -> None:
    a = np.arange(6, dtype=np.float32)
    with pytest.raises(TypeError, match=r"host \(CPU\) array"):
        parse_dlpack_capsule(a.__dlpack__(), a)


def test_c_strides_and_dtype_names() -> None:
    assert c_strides((2, 3, 4)) == (12, 4, 1)
    assert c_strides((0, 5)) == (5, 1)
    assert c_strides(()) == ()
    assert dtype_name(np.float16) == "float16"
    assert dtype_name(np.dtype("bool")) == "bool"
    assert dtype_name("bf16") == "bfloat16"
    assert dtype_name(float) == "float64"
    with pytest.raises(TypeError, match="unsupported dtype"):
        dtype_name("complex64")
    assert float_to_bfloat16_bits(1.0) == 0x3F80
    assert float_to_bfloat16_bits(1.00390625) == 0x3F80  # halfway: rounds to even
    assert float_to_bfloat16_bits(1.01171875) == 0x3F82  # halfway: rounds to even (up)
    assert float_to_bfloat16_bits(-3.0) == 0xC040
    assert float_to_bfloat16_bits(float("nan")) & 0x7FC0 == 0x7FC0


# --------------------------------------------------------------------------- per-object converters


class SometimesOnGpu:
    """One class for host and device arrays, as JAX's: ``__cuda_array_interface__`` raises
    AttributeError on a host instance, whose ``__dlpack_device__`` says CPU."""

    def __init__(self, ptr: int | None) -> None:
        self.ptr = ptr

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if self.ptr is None:
            raise AttributeError("a CPU array has no __cuda_array_interface__")
        return {"data": (self.ptr, False), "shape": (3,), "typestr": "<f4", "version": 3}

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.arange(3, dtype=np.float32)


class SometimesOnGpuDLPack(SometimesOnGpu):
    def __dlpack__(self, stream: Any = None) -> Any:
        assert self.ptr is not None, "a host array is not exported"
        self.producer = Producer(interop.KDL_CUDA, 2, 32, (3,), None, ptr=self.ptr)
        return self.producer.__dlpack__(stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (interop.KDL_CPU, 0) if self.ptr is None else (interop.KDL_CUDA, 0)


@pytest.mark.parametrize("base", [SometimesOnGpu, SometimesOnGpuDLPack])
def test_converter_is_chosen_per_object_when_the_class_has_both(base: type[SometimesOnGpu]) -> None:
    host = r"host \(CPU\) array \(.*GpuFirst\)"
    gpu_first = type("GpuFirst", (base,), {})
    assert as_view(gpu_first(0x7000)).ptr == 0x7000
    for _ in range(2):  # the cached converter stays, and still refuses host instances clearly
        with pytest.raises(interop.NotDeviceArrayError, match=host):
            as_view(gpu_first(None))
    assert as_view(gpu_first(0x7100)).ptr == 0x7100

    cpu_first = type("CpuFirst", (base,), {})
    with pytest.raises(interop.NotDeviceArrayError, match=r"host \(CPU\) array"):
        as_view(cpu_first(None))
    assert as_view(cpu_first(0x7200)).ptr == 0x7200
    with pytest.raises(TypeError, match=r"host \(CPU\) array"):
        as_view(cpu_first(None))


def test_host_converter_is_cached_for_host_only_classes() -> None:
    class HostOnly:
        def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
            return np.zeros(2)

    with pytest.raises(interop.NotDeviceArrayError, match=r"host \(CPU\) array"):
        as_view(HostOnly())
    assert HostOnly in interop._BY_TYPE
    with pytest.raises(interop.NotDeviceArrayError, match="expected a device array"):
        as_view(object())


def test_cai_strides_that_are_not_a_sequence() -> None:
    with pytest.raises(ValueError, match="malformed __cuda_array_interface__ strides 4"):
        as_view(CAI(data=(0x7000, False), shape=(3,), typestr="<f4", strides=4))


def test_dlpack_view_owner_knows_the_device() -> None:
    p = Producer(interop.KDL_CUDA, 2, 32, (4,), None)
    p.managed.dl_tensor.device.device_id = 1
    v = as_view(p)
    assert isinstance(v.owner, interop.DLPackOwner) and v.owner.device_id == 1


def test_converters_is_a_live_read_only_view_and_new_view_makes_views() -> None:
    """The public names tj.fuse reads the dispatch through: ``converters`` follows ``register_converter`` and
    refuses writes; ``new_view`` builds an ArrayView from a 5-tuple."""
    class Fake:
        pass

    convert = lambda obj: interop.ArrayView(16, (2,), (1,), "float32", obj)
    assert Fake not in interop.converters
    interop.register_converter(Fake, convert)
    try:
        assert interop.converters.get(Fake) is convert
        with pytest.raises(TypeError):
            interop.converters[Fake] = convert  # type: ignore[index]
    finally:
        del interop._BY_TYPE[Fake]
    v = interop.new_view((32, (3, 4), (4, 1), "int8", None))
    assert type(v) is interop.ArrayView and v.ptr == 32 and v.shape == (3, 4) and v.dtype == "int8"


def test_torch_dtype_of_is_the_inverse_of_torch_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launch code remembers a torch tensor's dtype from its view's dtype name: each name gives back the very
    torch dtype object the tensor had, and whoever sees one table filled sees both."""
    import fake_torch

    monkeypatch.setitem(sys.modules, "torch", fake_torch.TORCH)
    inverse = interop.torch_dtype_of()
    table = interop.torch_dtypes()
    assert interop.torch_dtype_of() is inverse and table and len(inverse) == len(table)
    for dtype, name in table.items():
        assert inverse[name] is dtype and getattr(fake_torch.TORCH, name) is dtype
    t = fake_torch.Tensor(0x1000, (4,), fake_torch.TORCH.bfloat16)
    assert inverse[interop.torch_view(t).dtype] is t.dtype
