"""DeviceArray and DeviceBuffer: sizes, host data (byte order, 0-d), contexts on other threads, DLPack
streams and devices, and error messages.

The CPU tests run against :class:`FakeDriver`, an in-process stand-in for libcuda whose "device memory"
is host memory: copies and memsets move real bytes (and refuse ranges outside an allocation), and the
current context is per thread, so a memory call on a thread where none is current fails with
CUDA_ERROR_INVALID_CONTEXT (201) as on a GPU. The tests marked ``gpu`` do the same on a real device.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from test_runtime_interop import SometimesOnGpu  # one class for host and device arrays, as JAX's

from tilejit.errors import CUDAError
from tilejit.runtime import context as context_state
from tilejit.runtime import device as device_state
from tilejit.runtime.array import DeviceArray, asarray, empty, from_numpy, full, zeros
from tilejit.runtime.device import get_device
from tilejit.runtime.memory import DeviceBuffer
from tilejit.runtime.module import check_ptx_version
from tilejit.runtime.stream import set_current_stream

_NAMES = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 201: "CUDA_ERROR_INVALID_CONTEXT"}
_CTX0 = 0xC000  # context handle of device i: _CTX0 + i
_SIZE_T = (1 << 64) - 1


class FakeDriver:
    """The driver entry points the array runtime uses, in Python (see the module docstring). Arguments
    arrive as the real binding passes them: sizes are truncated to 64 bits as ctypes does for size_t."""

    version = 13000

    def __init__(self, devices: int = 2) -> None:
        self.devices = devices
        self.local = threading.local()
        self.blocks: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.allocs: list[int] = []
        self.waits: list[int] = []  # consumer streams made to wait for an event
        self._handles = 0x5000

    def check(self, status: int, function: str, detail: str = "") -> None:
        if status:
            raise CUDAError(function, status, _NAMES.get(status, "CUDA_ERROR_FAKE"), "fake driver", detail)

    def _current(self) -> int:
        return int(getattr(self.local, "ctx", 0))

    def _inside(self, ptr: int, n: int) -> bool:
        return any(a <= ptr and ptr + n <= a + len(b) for a, b in self.blocks.items())

    def _handle(self) -> int:
        self._handles += 16
        return self._handles

    # devices and contexts
    def cuInit(self, flags: int) -> int:
        return 0

    def cuDeviceGetCount(self, out: Any) -> int:
        out._obj.value = self.devices
        return 0

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        out._obj.value = ordinal
        return 0

    def cuDeviceGetAttribute(self, out: Any, attr: int, dev: int) -> int:
        out._obj.value = {75: 9, 76: 0}.get(attr, 1)  # compute capability 9.0
        return 0

    def cuDevicePrimaryCtxRetain(self, out: Any, dev: int) -> int:
        out._obj.value = _CTX0 + dev
        return 0

    def cuCtxSetCurrent(self, ctx: ctypes.c_void_p) -> int:
        self.local.ctx = ctx.value or 0
        return 0

    def cuCtxGetCurrent(self, out: Any) -> int:
        out._obj.value = self._current() or None
        return 0

    def cuCtxGetDevice(self, out: Any) -> int:
        if not self._current():
            return 201
        out._obj.value = self._current() - _CTX0
        return 0

    # memory
    def cuMemAlloc(self, out: Any, nbytes: int) -> int:
        nbytes &= _SIZE_T
        self.allocs.append(nbytes)
        if not self._current():
            return 201
        if nbytes > 1 << 30:
            return 2
        block = ctypes.create_string_buffer(max(nbytes, 1))
        self.blocks[ctypes.addressof(block)] = block
        out._obj.value = ctypes.addressof(block)
        return 0

    def cuMemFree(self, ptr: int) -> int:
        return 0 if self.blocks.pop(ptr, None) is not None else 1

    def _copy(self, dst: int, src: int, n: int, device: tuple[int, ...]) -> int:
        n &= _SIZE_T
        if not self._current():
            return 201
        if not all(self._inside(p, n) for p in device):
            return 1
        ctypes.memmove(dst, src, n)
        return 0

    def cuMemcpyHtoDAsync(self, dst: int, src: ctypes.c_void_p, n: int, stream: ctypes.c_void_p) -> int:
        return self._copy(dst, src.value or 0, n, (dst,))

    def cuMemcpyDtoHAsync(self, dst: ctypes.c_void_p, src: int, n: int, stream: ctypes.c_void_p) -> int:
        return self._copy(dst.value or 0, src, n, (src,))

    def cuMemcpyDtoDAsync(self, dst: int, src: int, n: int, stream: ctypes.c_void_p) -> int:
        return self._copy(dst, src, n, (dst, src))

    def cuMemsetD8Async(self, dst: int, value: int, n: int, stream: ctypes.c_void_p) -> int:
        n &= _SIZE_T
        if not self._current():
            return 201
        if not self._inside(dst, n):
            return 1
        ctypes.memset(dst, value, n)
        return 0

    # streams and events
    def cuStreamSynchronize(self, stream: ctypes.c_void_p) -> int:
        return 0

    def cuEventCreate(self, out: Any, flags: int) -> int:
        out._obj.value = self._handle()
        return 0

    def cuEventRecord(self, event: ctypes.c_void_p, stream: ctypes.c_void_p) -> int:
        return 0

    def cuEventDestroy(self, event: ctypes.c_void_p) -> int:
        return 0

    def cuStreamWaitEvent(self, stream: ctypes.c_void_p, event: ctypes.c_void_p, flags: int) -> int:
        self.waits.append(stream.value or 0)
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any]) -> Iterator[FakeDriver]:
    """The runtime talks to a fresh FakeDriver with two devices (no device chosen, no context current)."""
    d = FakeDriver()
    monkeypatch.setattr(device_state, "_driver", d)
    monkeypatch.setattr(device_state, "_devices", {})
    use_device(None)
    monkeypatch.setattr(context_state, "_primary", {})
    yield d
    gc.collect()  # free the test's buffers while the fake driver is still the driver


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a new thread (where no context is current yet); its result, or its exception re-raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # handed back to the test
            out.append((False, exc))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


# --------------------------------------------------------------------------- 1. sizes beyond 64 bits


@pytest.mark.parametrize("shape", [(2**62 + 1,), (2**32, 2**30 + 1), (np.int64(2**40), 2**40)])
def test_shapes_beyond_64_bit_sizes_are_refused_before_the_driver(fake: FakeDriver, shape: tuple[int, ...]) -> None:
    nbytes = int(np.prod([int(n) for n in shape], dtype=object)) * 4
    pattern = rf"shape \({int(shape[0])}, .*of float32 is {nbytes} bytes" if len(shape) > 1 else (
        rf"shape \({shape[0]},\) of float32 is {nbytes} bytes")
    for make in (empty, zeros, lambda s, dt: full(s, 1.0, dt)):
        with pytest.raises(ValueError, match=pattern):
            make(shape, "float32")
    with pytest.raises(ValueError, match="more than a 64-bit size"):
        DeviceArray(shape, "float32", ptr=0x1000)  # a view of that size could not be copied either
    assert fake.allocs == []


def test_device_buffer_refuses_sizes_beyond_64_bits(fake: FakeDriver) -> None:
    for n in (2**64, 2**64 + 8):
        with pytest.raises(ValueError, match=f"cannot allocate {n} bytes"):
            DeviceBuffer(n)
    assert fake.allocs == []
    with pytest.raises(CUDAError, match="OUT_OF_MEMORY"):
        DeviceBuffer(2**64 - 1)  # the largest size the driver can be asked for: asked as it is
    assert fake.allocs == [2**64 - 1]
    assert zeros((2**61 - 1, 0), "float64").nbytes == 0


# --------------------------------------------------------------------------- 2. byte order


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">f8", ">i2"])
def test_big_endian_host_data_keeps_its_values(fake: FakeDriver, dtype: str) -> None:
    h = np.arange(-3, 9).astype(dtype).reshape(3, 4)
    for a in (from_numpy(h), asarray(h), asarray(h[:, ::2])):
        want = h if a.shape == h.shape else h[:, ::2]
        assert a.dtype == want.dtype.newbyteorder("=") and a.dtype.isnative
        np.testing.assert_array_equal(a.numpy(), want)
    a = zeros((3, 4), "float32")
    a.copy_from_host(h)
    np.testing.assert_array_equal(a.numpy(), h.astype(np.float32))


def test_device_buffer_copies_convert_non_native_byte_order(fake: FakeDriver) -> None:
    h = np.arange(4, dtype=">i4")
    b = DeviceBuffer(16)
    b.copy_from_host(h)
    np.testing.assert_array_equal(b.copy_to_host(np.empty(4, "<i4")), [0, 1, 2, 3])
    swapped = b.copy_to_host(np.zeros(4, ">i4"))
    assert swapped.dtype == np.dtype(">i4")
    np.testing.assert_array_equal(swapped, [0, 1, 2, 3])
    assert bytes(b.copy_to_host()) == np.arange(4, dtype="<i4").tobytes()
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(4, ">i4")
        ro.flags.writeable = False
        b.copy_to_host(ro)


# --------------------------------------------------------------------------- 3. 0-d data


def test_zero_d_host_data_stays_zero_d(fake: FakeDriver) -> None:
    for obj, dtype, value in [(np.float32(3.5), "float32", 3.5), (3.5, "float64", 3.5), (np.array(2.0), "float64", 2.0),
                              (np.array(7, dtype=">i4"), "int32", 7), (True, "bool", True)]:
        a = asarray(obj)
        assert a.shape == () and a.dtype_name == dtype and a.size == 1
        got = a.numpy()
        assert got.shape == () and got == value
    assert asarray(np.float64(1.5), "float32").numpy() == np.float32(1.5)


def test_copy_from_host_into_zero_d_arrays(fake: FakeDriver) -> None:
    z = empty((), "float32")
    z.copy_from_host(5.0)
    assert z.numpy() == 5.0 and z.numpy().shape == ()
    z.copy_from_host(np.array(6.0))
    assert z.numpy() == 6.0
    with pytest.raises(ValueError, match="broadcast"):
        z.copy_from_host(np.array([[6.0]]))  # as numpy refuses z[...] = [[6.0]]
    x = zeros(3, "float32")
    x[1].copy_from_host(7)
    x[2].copy_from_host(np.float32(8))
    np.testing.assert_array_equal(x.numpy(), [0, 7, 8])
    y = zeros((2, 3), "int32")
    y.copy_from_host([1, 2, 3])  # broadcast over rows
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])
    empty(0).copy_from_host(np.empty(0, np.float32))


# --------------------------------------------------------------------------- 4. other threads


def test_transfers_from_another_thread_make_the_context_current(fake: FakeDriver) -> None:
    a = asarray(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(in_thread(a.numpy), [0, 1, 2, 3])
    in_thread(lambda: a.fill(2.0))  # not one repeated byte: copied from the host
    np.testing.assert_array_equal(a.numpy(), [2, 2, 2, 2])
    in_thread(lambda: a.fill(0))  # one repeated byte: a memset
    np.testing.assert_array_equal(a.numpy(), [0, 0, 0, 0])
    in_thread(lambda: a.copy_from_host(np.arange(4)))
    np.testing.assert_array_equal(a.numpy(), [0, 1, 2, 3])
    in_thread(a.poison)
    assert np.isnan(a.numpy()).all()
    assert in_thread(lambda: asarray(np.ones(3)).numpy()).tolist() == [1, 1, 1]

    b = DeviceBuffer(8)
    in_thread(lambda: b.copy_from_host(b"abcdefgh"))
    assert bytes(in_thread(b.copy_to_host)) == b"abcdefgh"
    in_thread(lambda: b.memset(ord("z"), 4))
    c = DeviceBuffer(8)
    in_thread(lambda: c.copy_from_device(b.ptr, 8))
    assert bytes(c.copy_to_host()) == b"abcdzzzz"


# --------------------------------------------------------------------------- 5. DLPack stream=None


def test_dlpack_export_with_stream_none_orders_after_the_current_stream(fake: FakeDriver) -> None:
    a = zeros(4)
    previous = set_current_stream(0x7770)
    try:
        cases: list[tuple[dict[str, Any], list[int]]] = [
            ({}, [1]), ({"stream": None}, [1]), ({"stream": 1}, [1]), ({"stream": -1}, []),
            ({"stream": 0x8880}, [0x8880]),
        ]
        for kwargs, waits in cases:
            fake.waits.clear()
            a.__dlpack__(**kwargs)
            assert fake.waits == waits, kwargs
    finally:
        set_current_stream(previous)
    fake.waits.clear()
    a.__dlpack__()  # the legacy default stream is current: nothing to order
    assert fake.waits == []


# --------------------------------------------------------------------------- 6. per-object converters


def test_asarray_copies_host_instances_of_a_device_array_class(fake: FakeDriver) -> None:
    dev = zeros(3)
    gpu_first = type("GpuFirst", (SometimesOnGpu,), {})
    assert asarray(gpu_first(dev.ptr)).ptr == dev.ptr
    host = asarray(gpu_first(None))  # the class reads through __cuda_array_interface__: not this one
    assert host.ptr != dev.ptr
    np.testing.assert_array_equal(host.numpy(), [0, 1, 2])
    cpu_first = type("CpuFirst", (SometimesOnGpu,), {})
    np.testing.assert_array_equal(asarray(cpu_first(None)).numpy(), [0, 1, 2])
    assert asarray(cpu_first(dev.ptr)).ptr == dev.ptr


# --------------------------------------------------------------------------- 7. devices


class Foreign:
    """Another library's array, exchanged through DLPack only."""

    def __init__(self, a: DeviceArray) -> None:
        self.a = a

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.a.__dlpack__(stream=stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()


def test_asarray_keeps_the_producers_device(fake: FakeDriver) -> None:
    assert get_device().ordinal == 0
    on1 = from_numpy(np.arange(4.0), device=1)
    assert on1.device.ordinal == 1
    x = asarray(Foreign(on1))
    assert x.device.ordinal == 1 and x.ptr == on1.ptr and x.__dlpack_device__() == (2, 1)
    assert asarray(Foreign(on1), device=1).device.ordinal == 1
    with pytest.raises(ValueError, match=r"on device 1, device 0 was asked for; .*not copy arrays between devices"):
        asarray(Foreign(on1), device=0)
    cai = SometimesOnGpu(on1.ptr)  # no device in __cuda_array_interface__: the current one, or the one asked for
    assert asarray(cai).device.ordinal == 0
    assert asarray(cai, device=1).device.ordinal == 1


def test_asarray_of_a_device_array_checks_the_device(fake: FakeDriver) -> None:
    a = zeros(4)
    assert asarray(a, device=0) is a
    with pytest.raises(ValueError, match="on device 0, device 1 was asked for"):
        asarray(a, device=1)


def test_torch_and_cupy_owners_give_their_device() -> None:
    from tilejit.runtime.array import _producer_device

    torch_like = type("Tensor", (), {"__module__": "torch", "get_device": lambda self: 3})()
    cupy_like = type("ndarray", (), {"__module__": "cupy._core.core", "device": type("D", (), {"id": 2})()})()
    assert _producer_device(torch_like) == 3
    assert _producer_device(cupy_like) == 2
    assert _producer_device(SometimesOnGpu(0x10)) is None


# --------------------------------------------------------------------------- 8. messages


@pytest.mark.parametrize(
    ("cai", "error", "pattern"),
    [
        ({"typestr": "<c8"}, TypeError, r"unsupported __cuda_array_interface__ typestr '<c8'"),
        ({"typestr": ">f4"}, TypeError, r"typestr '>f4' \(need little-endian\)"),
        ({"typestr": "<f4", "strides": 4}, ValueError, r"malformed __cuda_array_interface__ strides 4"),
        ({"typestr": "<f4", "strides": (4.0,)}, ValueError, r"malformed __cuda_array_interface__ strides"),
    ],
)
def test_asarray_says_why_a_device_array_is_refused(cai: dict[str, Any], error: type[Exception], pattern: str) -> None:
    class Cai:
        __cuda_array_interface__ = {"data": (0x7000, False), "shape": (3,), "version": 3, **cai}

    with pytest.raises(error, match=pattern):
        asarray(Cai())


def test_bool_indices_are_refused(fake: FakeDriver) -> None:
    a = asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    for key in (True, False, np.True_, (0, True), (slice(None), False)):
        with pytest.raises(IndexError, match="only ints and slices index a DeviceArray, got bool"):
            a[key]
    assert a[np.int64(1), 2].numpy() == 5


def test_numpy_ints_are_shapes(fake: FakeDriver) -> None:
    assert empty(np.int64(3)).shape == (3,)
    assert empty((np.int64(2), np.int32(3))).shape == (2, 3)
    assert zeros(np.array([2, 1]), "int8").shape == (2, 1)  # type: ignore[arg-type]
    assert full([np.uint8(2)], 1.5).numpy().tolist() == [1.5, 1.5]
    assert empty(()).shape == ()
    for bad in (3.0, True, (2, True), (2, -1), "3", (2, 2.0), None):
        with pytest.raises(ValueError, match="shape must be non-negative ints"):
            empty(bad)  # type: ignore[arg-type]


def test_device_buffer_ranges_name_the_problem(fake: FakeDriver) -> None:
    b = DeviceBuffer(16)
    with pytest.raises(ValueError, match="offset 32 is beyond the end of the 16-byte buffer"):
        b.copy_to_host(offset=32)
    with pytest.raises(ValueError, match="offset 17 is beyond the end of the 16-byte buffer"):
        b.memset(0, 17)
    with pytest.raises(ValueError, match="offset -1 is negative"):
        b.copy_from_host(b"x", -1)
    with pytest.raises(ValueError, match="negative number of bytes"):
        b.copy_to_host(offset=4, nbytes=-2)
    with pytest.raises(ValueError, match=r"range \[8, 24\) is outside the 16-byte buffer"):
        b.copy_from_host(bytes(16), 8)
    assert len(b.copy_to_host(offset=16)) == 0
    assert len(b.copy_to_host(offset=4, nbytes=8)) == 8


def test_ptx_version_message() -> None:
    with pytest.raises(Exception, match=r"ISA version 9\.9 \(from a newer CUDA compiler\)") as info:
        check_ptx_version(".version 9.9\n.target sm_90\n", 13000)
    assert "a a " not in str(info.value)


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_gpu_host_data_byte_order_and_0d() -> None:
    h = np.linspace(-2, 2, 12, dtype=">f4").reshape(3, 4)
    np.testing.assert_array_equal(asarray(h).numpy(), h)
    np.testing.assert_array_equal(from_numpy(h[::2, ::-1]).numpy(), h[::2, ::-1])
    a = zeros((3, 4), "float64")
    a.copy_from_host(h.astype(">f8"))
    np.testing.assert_array_equal(a.numpy(), h.astype(np.float64))
    b = DeviceBuffer(16)
    b.copy_from_host(np.arange(4, dtype=">i4"))
    np.testing.assert_array_equal(b.copy_to_host(np.zeros(4, ">i4")), np.arange(4))
    for obj in (np.float32(3.5), 3.5, np.array(2.0)):
        z = asarray(obj)
        assert z.shape == () and z.numpy() == np.asarray(obj)
    z = empty((), "float32")
    z.copy_from_host(5.0)
    assert z.numpy() == np.float32(5.0)
    x = zeros(3, "float32")
    x[1].copy_from_host(7)
    np.testing.assert_array_equal(x.numpy(), np.array([0, 7, 0], np.float32))


@pytest.mark.gpu
@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_gpu_transfers_from_another_thread() -> None:
    a = asarray(np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(in_thread(a.numpy), np.arange(8, dtype=np.float32))
    in_thread(lambda: a.fill(3.0))
    np.testing.assert_array_equal(a.numpy(), np.full(8, 3.0, np.float32))
    in_thread(lambda: a.copy_from_host(np.arange(8) * 2))
    np.testing.assert_array_equal(a.numpy(), np.arange(8, dtype=np.float32) * 2)
    in_thread(a.poison)
    assert np.isnan(a.numpy()).all()
    b = DeviceBuffer(8)
    in_thread(lambda: b.copy_from_host(b"abcdefgh"))
    in_thread(lambda: b.memset(ord("z"), 4))
    assert bytes(in_thread(b.copy_to_host)) == b"abcdzzzz"


@pytest.mark.gpu
@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_gpu_sizes_and_converters() -> None:
    with pytest.raises(ValueError, match="more than a 64-bit size"):
        zeros((2**62 + 1,), "float32")
    dev = asarray(np.arange(3, dtype=np.float32))
    cls = type("GpuFirstOnGpu", (SometimesOnGpu,), {})
    np.testing.assert_array_equal(asarray(cls(dev.ptr)).numpy(), np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(asarray(cls(None)).numpy(), np.arange(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"device 1 was asked for|does not exist"):
        asarray(dev, device=1)
    cap = dev.__dlpack__()  # stream=None: the legacy default stream
    del cap


def test_view_reads_the_same_bytes_as_another_dtype_of_one_size(fake: FakeDriver) -> None:
    """``view`` (numpy's, same element size): 8-bit float data from and to uint8 bits without ml_dtypes."""
    bits = np.array([[0x38, 0xC0], [0x7F, 0x01]], np.uint8)
    a = asarray(bits)
    f8 = a.view("float8_e4m3fn")
    assert f8.dtype_name == "float8_e4m3fn" and f8.shape == (2, 2) and (f8.ptr, f8.strides) == (a.ptr, a.strides)
    np.testing.assert_array_equal(f8.view(np.uint8).numpy(), bits)
    col = a[:, 1].view("float8_e5m2")  # a strided view keeps its strides
    assert col.strides == (2,) and col.dtype_name == "float8_e5m2"
    np.testing.assert_array_equal(col.view("uint8").numpy(), bits[:, 1])
    with pytest.raises(TypeError, match="a view keeps the element size"):
        a.view("float16")
