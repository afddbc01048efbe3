"""CPU tests of the launch hot path: parameter layout against a C compiler, the packed bytes a
kernel would receive (through a stand-in for the driver's launch entry points), argument errors."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tilejit.errors import CUDAError, LaunchError
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import Launcher, ParamKind, param_layout
from tilejit.runtime.stream import Stream, set_current_stream

FAKE_DRIVER_C = r"""
/* A stand-in for the driver's launch entry points, for CPU tests of tilejit.runtime.launch.
 *
 * cuLaunchKernelEx / cuLaunchKernel record the launch configuration and copy the parameter
 * buffer handed over through CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE; fake_describe_mixed() reads
 * that buffer back as the C struct a kernel with the test's mixed signature would receive.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shm;
    void *stream;
    void *attrs;
    unsigned nattrs;
} Config;

static unsigned char last_params[4096];
static size_t last_size;
static Config last_config;
static void *last_function;
static int calls;
static int next_status;

static int expected_nparams;
static size_t expected_size;
static void *last_pointers[64];

/* kernelParams carry no sizes: the test says how many parameters and how large the block is. */
void fake_expect_params(int n, size_t size) { expected_nparams = n; expected_size = size; }
void *fake_pointer(int i) { return last_pointers[i]; }

static int take_extra(void **params, void **extra) {
    last_size = 0;
    if (params && extra) return 1;
    if (params) {
        for (int i = 0; i < expected_nparams && i < 64; ++i) last_pointers[i] = params[i];
        memcpy(last_params, params[0], expected_size);
        last_size = expected_size;
        return 0;
    }
    if (!extra) return 0;
    void *buf = NULL;
    size_t size = 0;
    for (int i = 0; extra[i]; i += 2) {
        if (extra[i] == (void *)1) buf = extra[i + 1];
        else if (extra[i] == (void *)2) size = *(size_t *)extra[i + 1];
        else return 1;
    }
    if (!buf || size > sizeof last_params) return 1;
    memcpy(last_params, buf, size);
    last_size = size;
    return 0;
}

int cuLaunchKernelEx(const Config *c, void *f, void **params, void **extra) {
    calls++;
    last_config = *c;
    last_function = f;
    if (take_extra(params, extra)) return 1;
    int s = next_status;
    next_status = 0;
    return s;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shm, void *stream, void **params, void **extra) {
    Config c = {gx, gy, gz, bx, by, bz, shm, stream, NULL, 0};
    return cuLaunchKernelEx(&c, f, params, extra);
}

int fake_calls(void) { return calls; }
void fake_set_status(int s) { next_status = s; }
void fake_config(Config *out) { *out = last_config; }
void *fake_function(void) { return last_function; }
size_t fake_params(unsigned char *out, size_t cap) {
    memcpy(out, last_params, last_size < cap ? last_size : cap);
    return last_size;
}

/* The kernel signature of the mixed-parameter test, as a C struct (same order, natural alignment). */
typedef struct { float *ptr; int64_t shape[2]; int64_t stride[2]; } Array2;
typedef struct {
    bool p0;
    int8_t p1;
    double p2;
    uint16_t p3; /* __half */
    Array2 p4;
    float p5;
    int64_t p6;
    uint8_t p7;
    void *p8;
    uint16_t p9; /* __nv_bfloat16 */
    int32_t p10;
} Mixed;

size_t fake_mixed_offset(int i) {
    static const size_t off[] = {offsetof(Mixed, p0), offsetof(Mixed, p1), offsetof(Mixed, p2), offsetof(Mixed, p3),
                                 offsetof(Mixed, p4), offsetof(Mixed, p5), offsetof(Mixed, p6), offsetof(Mixed, p7),
                                 offsetof(Mixed, p8), offsetof(Mixed, p9), offsetof(Mixed, p10)};
    return off[i];
}

size_t fake_mixed_end(void) { return offsetof(Mixed, p10) + sizeof(int32_t); }

void fake_describe_mixed(char *out, size_t cap) {
    Mixed m;
    memcpy(&m, last_params, sizeof m);
    snprintf(out, cap,
             "p0=%d p1=%d p2=%g p3=0x%04x ptr=0x%" PRIxPTR " shape=%" PRId64 ",%" PRId64 " stride=%" PRId64
             ",%" PRId64 " p5=%g p6=%" PRId64 " p7=%u p8=0x%" PRIxPTR " p9=0x%04x p10=%d",
             (int)m.p0, m.p1, m.p2, m.p3, (uintptr_t)m.p4.ptr, m.p4.shape[0], m.p4.shape[1], m.p4.stride[0],
             m.p4.stride[1], (double)m.p5, m.p6, m.p7, (uintptr_t)m.p8, m.p9, m.p10);
}
"""


class Config(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shm")] + [  # type: ignore[assignment]
        ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


class FakeDriver:
    """The launch entry points of the compiled stand-in, plus a ``check`` like the real binding's."""

    def __init__(self, lib: ctypes.CDLL, *, with_ex: bool = True) -> None:
        self.lib = lib
        self.cuLaunchKernelEx = lib.cuLaunchKernelEx if with_ex else None
        self.cuLaunchKernel = lib.cuLaunchKernel
        lib.fake_params.restype = ctypes.c_size_t
        lib.fake_mixed_offset.restype = ctypes.c_size_t
        lib.fake_mixed_end.restype = ctypes.c_size_t
        lib.fake_function.restype = ctypes.c_void_p
        lib.fake_pointer.restype = ctypes.c_void_p
        lib.fake_expect_params.argtypes = [ctypes.c_int, ctypes.c_size_t]

    def check(self, status: int, function: str, detail: str = "") -> None:
        if status:
            raise CUDAError(function, status, "CUDA_ERROR_FAKE", "fake failure", detail)

    def calls(self) -> int:
        return int(self.lib.fake_calls())

    def params(self) -> bytes:
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.fake_params(buf, 4096)
        return buf.raw[:n]

    def config(self) -> Config:
        c = Config()
        self.lib.fake_config(ctypes.byref(c))
        return c

    def describe_mixed(self) -> str:
        buf = ctypes.create_string_buffer(1024)
        self.lib.fake_describe_mixed(buf, 1024)
        return buf.value.decode()


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the stand-in driver")
    d: Path = tmp_path_factory.mktemp("fake_driver")
    src = d / "fake.c"
    src.write_text(FAKE_DRIVER_C)
    so = d / "libfake.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return ctypes.CDLL(str(so))


@pytest.fixture
def fake(fake_lib: ctypes.CDLL) -> FakeDriver:
    return FakeDriver(fake_lib)


def fn(name: str = "k", handle: int = 0xF00D) -> Any:
    return SimpleNamespace(name=name, handle=handle)


MIXED = [
    ("p0", ParamKind.scalar("bool")),
    ("p1", ParamKind.scalar("int8")),
    ("p2", ParamKind.scalar("float64")),
    ("p3", ParamKind.scalar("float16")),
    ("p4", ParamKind.array("float32", 2)),
    ("p5", ParamKind.scalar("float32")),
    ("p6", ParamKind.scalar("int64")),
    ("p7", ParamKind.scalar("uint8")),
    ("p8", ParamKind.pointer(None)),
    ("p9", ParamKind.scalar("bfloat16")),
    ("p10", ParamKind.scalar("int32")),
]


def view(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str = "float32") -> ArrayView:
    return ArrayView(ptr, shape, strides, dtype, None)


MIXED_ARGS: list[Any] = [True, -5, 2.5, 1.0, view(0x1000, (3, 4), (4, 1)), 1.5, -7, 255, 0x2000, 1.0, 42]
MIXED_TEXT = ("p0=1 p1=-5 p2=2.5 p3=0x3c00 ptr=0x1000 shape=3,4 stride=4,1 p5=1.5 p6=-7 p7=255 p8=0x2000 "
              "p9=0x3f80 p10=42")


# --------------------------------------------------------------------------- layout


def test_layout_matches_c_compiler(fake: FakeDriver) -> None:
    fmt, offsets, size = param_layout([k for _, k in MIXED])
    want = tuple(int(fake.lib.fake_mixed_offset(i)) for i in range(len(MIXED)))
    assert offsets == want
    assert size == int(fake.lib.fake_mixed_end())
    assert struct.calcsize(fmt) == size


def test_layout_simple_cases() -> None:
    assert param_layout([ParamKind.scalar("int8"), ParamKind.scalar("int32")])[1:] == ((0, 4), 8)
    assert param_layout([ParamKind.scalar("float16"), ParamKind.pointer("float32")])[1:] == ((0, 8), 16)
    assert param_layout([ParamKind.array("float32", 3), ParamKind.scalar("bool")])[1:] == ((0, 56), 57)
    assert param_layout([])[1:] == ((), 0)


def test_param_kind_from_backend_spec() -> None:
    assert ParamKind.from_spec(("array", "bfloat16", 2)) == ParamKind.array("bfloat16", 2)
    assert ParamKind.from_spec(("scalar", "int64")) == ParamKind.scalar("int64")
    assert str(ParamKind.array("float32", 2)) == "array<float32, 2>"
    assert str(ParamKind.pointer(None)) == "void*"
    with pytest.raises(ValueError, match="spec"):
        ParamKind.from_spec(("tile", "float32"))
    with pytest.raises(ValueError, match="complex64"):
        ParamKind.scalar("complex64")


# --------------------------------------------------------------------------- packed bytes


def test_fast_path_packs_what_the_kernel_reads(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), MIXED, block=(128, 2, 1), shared_bytes=256, driver=fake)
    before = fake.calls()
    launcher((5, 6, 7), MIXED_ARGS)
    assert fake.calls() == before + 1
    assert fake.describe_mixed() == MIXED_TEXT
    assert fake.params() == launcher.pack(MIXED_ARGS)
    c = fake.config()
    assert (c.gx, c.gy, c.gz, c.bx, c.by, c.bz, c.shm) == (5, 6, 7, 128, 2, 1, 256)
    assert (c.stream or 0) == 0 and not c.attrs and c.nattrs == 0
    assert fake.lib.fake_function() == 0xF00D


def test_generic_path_and_legacy_entry_point_pack_the_same(fake: FakeDriver, fake_lib: ctypes.CDLL) -> None:
    launcher = Launcher(fn(), MIXED, block=64, driver=fake)
    launcher.launch_checked(3, MIXED_ARGS)
    assert fake.describe_mixed() == MIXED_TEXT
    legacy = Launcher(fn(), MIXED, block=64, driver=FakeDriver(fake_lib, with_ex=False))
    legacy(9, MIXED_ARGS, 0x77)
    assert fake.describe_mixed() == MIXED_TEXT
    c = fake.config()
    assert (c.gx, c.gy, c.gz, c.bx, c.stream) == (9, 1, 1, 64, 0x77)


@pytest.mark.parametrize("with_ex", [True, False])
def test_kernel_params_pointer_array(fake_lib: ctypes.CDLL, with_ex: bool) -> None:
    """param_passing="pointers" hands the driver one pointer per parameter into the same block."""
    fake = FakeDriver(fake_lib, with_ex=with_ex)
    launcher = Launcher(fn(), MIXED, block=64, driver=fake, param_passing="pointers")
    fake.lib.fake_expect_params(len(MIXED), launcher.size)
    launcher(2, MIXED_ARGS)
    assert fake.describe_mixed() == MIXED_TEXT
    base = fake.lib.fake_pointer(0)
    assert tuple(fake.lib.fake_pointer(i) - base for i in range(len(MIXED))) == launcher.offsets
    launcher.launch_checked(2, MIXED_ARGS)
    assert fake.describe_mixed() == MIXED_TEXT
    with pytest.raises(ValueError, match="param_passing"):
        Launcher(fn(), MIXED, driver=fake, param_passing="registers")


def test_raw_kernel_entry_checks_block_shared_and_device(fake: FakeDriver) -> None:
    """The RawKernel-signature entry launches directly only for its own block/shared/device."""
    from tilejit.runtime import device as device_state

    launcher = Launcher(fn(), MIXED, block=(32, 2, 1), shared_bytes=64, driver=fake)
    redirected: list[tuple[Any, ...]] = []
    entry = launcher.entry((32, 2), 64, device_state.thread_state().device[0], lambda *a: redirected.append(a))
    before = fake.calls()
    entry(3, (32, 2), MIXED_ARGS, shared_mem=64)
    entry(3, (32, 2), MIXED_ARGS, None, 64)
    assert fake.calls() == before + 2 and not redirected
    assert fake.describe_mixed() == MIXED_TEXT
    c = fake.config()
    assert (c.gx, c.bx, c.by, c.shm) == (3, 32, 2, 64)
    entry(3, (64, 2), MIXED_ARGS, None, 64)
    entry(3, (32, 2), MIXED_ARGS)
    assert fake.calls() == before + 2
    assert [(r[1], r[4]) for r in redirected] == [((64, 2), 64), ((32, 2), 0)]


def test_numpy_scalars_and_int_for_float(fake: FakeDriver) -> None:
    args = list(MIXED_ARGS)
    args[0], args[1], args[2], args[5], args[6], args[10] = (
        np.bool_(True), np.int8(-5), np.float32(2.5), 3, np.int64(-7), np.int32(42))
    Launcher(fn(), MIXED, driver=fake)(1, args)
    assert fake.describe_mixed() == MIXED_TEXT.replace("p5=1.5", "p5=3")


def test_python_float_is_rounded_to_float32(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), [("x", ParamKind.scalar("float32"))], driver=fake)
    launcher(1, [0.1])
    assert fake.params() == struct.pack("<f", 0.1)


def test_array_arguments_from_protocols(fake: FakeDriver) -> None:
    class CAI:
        def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str, strides: Any = None) -> None:
            self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                             "strides": strides, "version": 3}

    params = [("a", ParamKind.array("float32", 2)), ("b", ParamKind.pointer("int64")), ("n", ParamKind.scalar("int32"))]
    launcher = Launcher(fn(), params, driver=fake)
    launcher(1, [CAI(0x5000, (2, 3), "<f4", (4, 24)), CAI(0x6000, (10,), "<i8"), 10])
    assert fake.params() == struct.pack("=Q4qQi", 0x5000, 2, 3, 1, 6, 0x6000, 10)


def test_grid_and_stream_forms(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), [("n", ParamKind.scalar("int32"))], block=(32, 1, 1), driver=fake)
    for grid, want in [(4, (4, 1, 1)), ((4,), (4, 1, 1)), ((2, 3), (2, 3, 1)), ([2, 3, 4], (2, 3, 4)),
                       ([2, 3, 4], (2, 3, 4)), (4, (4, 1, 1)), (4, (4, 1, 1))]:
        launcher(grid, (1,))
        c = fake.config()
        assert (c.gx, c.gy, c.gz) == want

    class ProtocolStream:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 0xABC)

    for stream, want_handle in [(None, 0), (0x123, 0x123), (Stream._wrap(0x456), 0x456), (ProtocolStream(), 0xABC)]:
        launcher(4, (1,), stream)
        assert (fake.config().stream or 0) == want_handle
    previous = set_current_stream(0x999)
    try:
        launcher(4, (1,))
        assert fake.config().stream == 0x999
    finally:
        set_current_stream(previous)
    launcher(4, (1,))
    assert (fake.config().stream or 0) == 0


def test_zero_parameter_kernel(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), [], driver=fake)
    launcher(2, ())
    assert fake.params() == b""
    with pytest.raises(LaunchError, match=r"takes 0 argument"):
        launcher(2, (1,))


def test_other_threads_use_their_own_buffers(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), MIXED, driver=fake)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            launcher(1, MIXED_ARGS)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errors
    assert fake.describe_mixed() == MIXED_TEXT


# --------------------------------------------------------------------------- errors


SIG = [("x", ParamKind.array("float32", 1)), ("out", ParamKind.pointer("float32")), ("n", ParamKind.scalar("int32")),
       ("alpha", ParamKind.scalar("float32")), ("flag", ParamKind.scalar("bool"))]
GOOD: list[Any] = [view(0x100, (8,), (1,)), view(0x200, (8,), (1,)), 8, 2.0, True]


@pytest.mark.parametrize(
    ("index", "value", "pattern"),
    [
        (0, np.zeros(8, np.float32), r"parameter 'x' \(array<float32, 1>\).*host \(CPU\) array.*tilejit.asarray"),
        (0, view(0x100, (8,), (1,), "float16"), r"parameter 'x'.*expected a 1-d float32 array, got a 1-d float16"),
        (0, view(0x100, (2, 4), (4, 1)), r"parameter 'x'.*expected a 1-d float32 array, got a 2-d float32"),
        (0, 3, r"parameter 'x'.*expected a device array \(tilejit.DeviceArray, .*got builtins.int"),
        (1, np.zeros(8, np.float32), r"parameter 'out' \(float32\*\).*host \(CPU\) array"),
        (1, view(0x200, (8,), (1,), "int32"), r"parameter 'out'.*expected float32 data, got an array of int32"),
        (1, -1, r"parameter 'out'.*not a 64-bit pointer"),
        (1, "abc", r"parameter 'out' \(float32\*\).*expected a device array"),
        (2, 1.5, r"parameter 'n' \(int32\).*expected an int for int32, got float 1.5"),
        (2, np.float64(2.0), r"parameter 'n'.*expected an int"),
        (2, 1 << 31, r"parameter 'n'.*2147483648 is out of range for int32"),
        (2, view(0x100, (8,), (1,)), r"parameter 'n'.*expected an int32 scalar, got an array"),
        (3, 1e39, r"parameter 'alpha' \(float32\).*out of range for float32"),
        (3, "1.0", r"parameter 'alpha'.*expected a number"),
        (3, np.ones(2), r"parameter 'alpha'.*expected a float32 scalar, got an array"),
        (4, 2.0, r"parameter 'flag' \(bool\).*expected a bool"),
        (4, 2, r"parameter 'flag'.*expected a bool"),
        # A pointer parameter gets only the first element's address: strided views are refused.
        (1, view(0x200, (8,), (2,)), r"parameter 'out' \(float32\*\).*not contiguous .*strides \(2,\).*data_ptr"),
        (1, view(0x200, (8,), (-1,)), r"parameter 'out'.*not contiguous"),
        (1, view(0x200, (2, 4), (1, 2)), r"parameter 'out'.*not contiguous"),
        (3, 10**400, r"parameter 'alpha'.*10000000000000000000\.\.\.00000000 \(401 digits\) is out of range"),
        (3, 1 + 2j, r"parameter 'alpha'.*expected a real number for float32, got complex"),
        (3, np.complex128(1 + 2j), r"parameter 'alpha'.*expected a real number for float32, got numpy.complex128"),
        (0, view(-1, (8,), (1,)), r"parameter 'x'.*address -1, shape \(8,\) or strides \(1,\) do not describe"),
        (0, view(0x100, (1 << 63,), (1,)), r"parameter 'x'.*do not describe device memory"),
        (0, view(0x100, (8,), ()), r"parameter 'x'.*do not describe device memory"),
    ],
)
def test_wrong_argument_names_the_parameter(fake: FakeDriver, index: int, value: Any, pattern: str) -> None:
    launcher = Launcher(fn("vadd"), SIG, driver=fake)
    args = list(GOOD)
    args[index] = value
    before = fake.calls()
    with pytest.raises(LaunchError, match=pattern) as info:
        launcher(1, args)
    assert "kernel 'vadd'" in str(info.value)
    assert isinstance(info.value, TypeError)
    assert fake.calls() == before, "nothing may be launched when an argument is wrong"
    with pytest.raises(LaunchError, match=pattern):
        launcher.launch_checked(1, args)
    launcher(1, GOOD)  # the launcher still works afterwards
    assert fake.calls() == before + 1


def test_wrong_count_grid_and_stream(fake: FakeDriver) -> None:
    launcher = Launcher(fn("vadd"), SIG, driver=fake)
    with pytest.raises(LaunchError, match=r"kernel 'vadd' takes 5 argument\(s\) \(x, out, n, alpha, flag\), got 4"):
        launcher(1, GOOD[:4])
    with pytest.raises(LaunchError, match=r"args must be a tuple or list"):
        launcher(1, GOOD[0])
    for grid in (0, -1, (1, 0), (1, 2, 3, 4), 1.5, (1, 70000), None):
        with pytest.raises(LaunchError, match="grid must be"):
            launcher(grid, GOOD)
    with pytest.raises(LaunchError, match="stream: expected a stream"):
        launcher(1, GOOD, stream=object())
    for handle in (-3, 1 << 64):
        with pytest.raises(LaunchError, match="stream"):
            launcher(1, GOOD, stream=handle)
    launcher(1, GOOD, stream=0x99)  # a raw handle is taken as it is
    assert fake.config().stream == 0x99


def test_contiguous_views_reach_pointer_parameters(fake: FakeDriver) -> None:
    """Views whose layout is C order (any stride on a length-1 axis, or no elements) are contiguous."""
    launcher = Launcher(fn(), [("p", ParamKind.pointer("float32"))], driver=fake)
    for v in (view(0x10, (8,), (1,)), view(0x20, (2, 1, 4), (4, 99, 1)), view(0x30, (0, 5), (7, 3)),
              view(0x40, (1,), (5,)), view(0x50, (), ())):
        launcher(1, [v])
        assert fake.params() == struct.pack("=Q", v.ptr)
        launcher.launch_checked(1, [v])
        assert fake.params() == struct.pack("=Q", v.ptr)


def test_malformed_array_interfaces_are_launch_errors(fake: FakeDriver) -> None:
    class CAI:
        def __init__(self, ptr: Any, shape: Any, strides: Any = None) -> None:
            self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<f4",
                                             "strides": strides, "version": 3}

    launcher = Launcher(fn(), [("a", ParamKind.array("float32", 1))], driver=fake)
    for bad in (CAI(-1, (4,)), CAI(1 << 64, (4,)), CAI(0x1000, (-5,)), CAI(0x1000, (4.7,)), CAI(4096.5, (4,)),
                CAI(0x1000, (4,), (4.0,))):
        for launch in (launcher.launch, launcher.launch_checked):
            with pytest.raises(LaunchError, match=r"parameter 'a'.*malformed __cuda_array_interface__"):
                launch(1, [bad])


def test_bfloat16_overflow_is_an_error_like_float16(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), [("h", ParamKind.scalar("float16")), ("b", ParamKind.scalar("bfloat16"))], driver=fake)
    launcher(1, [1.0, (2 - 2**-7) * 2.0**127])  # bfloat16's largest finite value
    assert fake.params() == struct.pack("=eH", 1.0, 0x7F7F)
    launcher(1, [float("inf"), float("-inf")])
    assert fake.params() == struct.pack("=eH", float("inf"), 0xFF80)
    for args, name in (([65520.0, 1.0], "h"), ([1.0, 3.4e38], "b")):
        for launch in (launcher.launch, launcher.launch_checked):
            with pytest.raises(LaunchError, match=rf"parameter '{name}'.*out of range for b?float16"):
                launch(1, args)


def test_fast_path_takes_only_what_the_checked_path_takes(fake: FakeDriver) -> None:
    """Arguments as a tuple or list only (a set would unpack in any order), grids of exact ints, stream
    handles within 64 bits on either driver entry point: the generated function agrees with the checked one."""
    two = [("a", ParamKind.scalar("int32")), ("b", ParamKind.scalar("int32"))]
    for with_ex in (True, False):
        driver = FakeDriver(fake.lib, with_ex=with_ex)
        launcher = Launcher(fn(), two, driver=driver)
        launcher(4, (1, 8))
        for args in ({1, 8}, iter((1, 8)), np.array([1, 8]), range(1, 3), {1: 0, 8: 0}):
            for launch in (launcher.launch, launcher.launch_checked):
                with pytest.raises(LaunchError, match="args must be a tuple or list"):
                    launch(4, args)
        for grid in (4.0, True, np.float64(4), (4.0,), (4, True)):
            for launch in (launcher.launch, launcher.launch_checked):
                with pytest.raises(LaunchError, match="grid must be"):
                    launch(grid, (1, 8))
        for launch in (launcher.launch, launcher.launch_checked):  # numpy ints are ints
            launch(np.int64(3), (1, 8))
            assert (driver.config().gx, driver.params()) == (3, struct.pack("=ii", 1, 8))
            launch((np.int32(2), 5), (1, 8))
            assert (driver.config().gx, driver.config().gy) == (2, 5)
            with pytest.raises(LaunchError, match="stream"):
                launch(4, (1, 8), (1 << 64) + 0x77)
        empty = Launcher(fn(), [], driver=driver)
        empty(1, ())
        for args in ("", {}, b"", set()):
            for launch in (empty.launch, empty.launch_checked):
                with pytest.raises(LaunchError, match="args must be a tuple or list"):
                    launch(1, args)


def test_a_closed_stream_is_a_launch_error_on_both_paths(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tilejit.runtime import stream as stream_mod

    monkeypatch.setattr(stream_mod, "initialized_driver",
                        lambda: SimpleNamespace(cuStreamDestroy=lambda h: 0, check=lambda *a: None))
    s = Stream._wrap(0x77)
    s._owned = True
    launcher = Launcher(fn(), [("n", ParamKind.scalar("int32"))], driver=fake)
    launcher(1, (1,), s)
    assert fake.config().stream == 0x77
    s.close()
    before = fake.calls()
    for launch in (launcher.launch, launcher.launch_checked):
        with pytest.raises(LaunchError, match=r"stream: <tilejit.Stream 0x0 \(closed\)> was closed"):
            launch(1, (1,), s)
    assert fake.calls() == before


def test_raw_kernel_entry_hands_other_block_and_shared_types_to_the_checked_path(fake: FakeDriver) -> None:
    from tilejit.runtime import device as device_state

    launcher = Launcher(fn(), [("n", ParamKind.scalar("int32"))], block=32, driver=fake)
    redirected: list[tuple[Any, ...]] = []
    entry = launcher.entry(32, 0, device_state.thread_state().device[0], lambda *a: redirected.append(a))
    entry(1, 32, (1,))
    entry(1, 32.0, (1,))
    entry(1, 32, (1,), None, 0.0)
    entry(1, 32, (1,), None, False)
    assert [(r[1], r[4]) for r in redirected] == [(32.0, 0), (32, 0.0), (32, False)]
    with pytest.raises(ValueError, match=r"block must be a positive int or a tuple"):
        Launcher(fn(), [], block=32.0, driver=fake)  # type: ignore[arg-type]


def test_another_launch_function_of_a_signature_reuses_the_compiled_code(fake: FakeDriver) -> None:
    from tilejit.runtime import dispatch

    launcher = Launcher(fn(), SIG, driver=fake)
    first = launcher.launch
    before = dispatch.compiled_code.cache_info()
    own = launcher.private_launch(threading.get_ident())
    after = dispatch.compiled_code.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    assert own is not first and own.buffers is not first.buffers  # type: ignore[attr-defined]
    own(2, GOOD, 0x5)
    assert fake.params() == launcher.pack(GOOD) and fake.config().gx == 2 and fake.config().stream == 0x5


def test_bad_block_and_shared_are_rejected_up_front(fake: FakeDriver) -> None:
    for block in ((2048,), (32, 64), 0, (1, 1, 65)):
        with pytest.raises(ValueError, match="block"):
            Launcher(fn(), SIG, block=block, driver=fake)
    with pytest.raises(ValueError, match="shared_bytes"):
        Launcher(fn(), SIG, shared_bytes=-1, driver=fake)


def test_failed_launch_raises_cuda_error_with_context(fake: FakeDriver) -> None:
    launcher = Launcher(fn("vadd"), SIG, block=256, driver=fake)
    fake.lib.fake_set_status(700)
    with pytest.raises(CUDAError, match=r"cuLaunchKernelEx failed.*\n.*kernel 'vadd' with grid=3 block=\(256, 1, 1\)"):
        launcher(3, GOOD)


# --------------------------------------------------------------------------- remembered state


def test_mutated_list_grid_is_read_again(fake: FakeDriver) -> None:
    """The launch config is repacked only when the grid changes; a list grid is never trusted as unchanged."""
    launcher = Launcher(fn(), [("n", ParamKind.scalar("int32"))], block=32, driver=fake)
    grid = [2, 1, 1]
    launcher(grid, (1,))
    grid[0] = 5
    launcher(grid, (1,))
    assert fake.config().gx == 5
    same = (3, 2)
    launcher(same, (1,))
    launcher(same, (1,))
    c = fake.config()
    assert (c.gx, c.gy, c.gz) == (3, 2, 1)


def test_launch_function_is_generated_on_first_use(fake: FakeDriver) -> None:
    launcher = Launcher(fn(), [("n", ParamKind.scalar("int32"))], block=32, driver=fake)
    assert "launch" not in vars(launcher)
    launch = launcher.launch
    assert launcher.launch is launch and "def launch(grid, args, stream=None)" in launcher.source
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        launcher.nope  # noqa: B018


# --------------------------------------------------------------------------- the last-arguments memo


def test_identical_immutable_arguments_skip_packing_but_launch_right(fake: FakeDriver) -> None:
    """Arguments identical to the last launch's are not packed again, and every launch still carries its own."""
    params = [("a", ParamKind.array("float32", 1)), ("n", ParamKind.scalar("int32")),
              ("s", ParamKind.scalar("float32"))]
    launcher = Launcher(fn(), params, driver=fake)
    va, vb = view(0x1000, (8,), (1,)), view(0x2000, (4,), (2,))
    want_a, want_b = struct.pack("=Qqqif", 0x1000, 8, 1, 1000, 0.5), struct.pack("=Qqqif", 0x2000, 4, 2, 7, 0.25)
    big = 1000
    for args, want in [((va, big, 0.5), want_a), ((va, big, 0.5), want_a), ((vb, 7, 0.25), want_b),
                       ((va, big, 0.5), want_a), ([va, big, 0.5], want_a), ((va, 7, 0.25), struct.pack(
                           "=Qqqif", 0x1000, 8, 1, 7, 0.25))]:
        before = fake.calls()
        launcher(1, args)
        assert fake.calls() == before + 1 and fake.params() == want


def test_failed_pack_clears_the_memo(fake: FakeDriver) -> None:
    """A launch that fails while packing may have overwritten part of the block: the next launch with the
    previous (good) arguments packs them again instead of trusting the memo."""
    params = [("a", ParamKind.pointer("float32")), ("n", ParamKind.scalar("int8"))]
    launcher = Launcher(fn(), params, driver=fake)
    good = (0x1000, 5)
    launcher(1, good)
    with pytest.raises(LaunchError, match="out of range"):
        launcher(1, (0x9999, 1000))  # the pointer is packed, then int8 overflows
    launcher(1, good)
    assert fake.params() == struct.pack("=Qb", 0x1000, 5)


def test_mutable_array_objects_are_read_every_launch(fake: FakeDriver) -> None:
    """Only immutable arguments are remembered: an object whose address changes (as a torch tensor's can)
    is converted again on every launch."""

    class Movable:
        def __init__(self) -> None:
            self.ptr = 0x1000

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            return {"data": (self.ptr, False), "shape": (4,), "typestr": "<f4", "strides": None, "version": 3}

    launcher = Launcher(fn(), [("a", ParamKind.pointer("float32"))], driver=fake)
    m = Movable()
    launcher(1, (m,))
    m.ptr = 0x2000
    launcher(1, (m,))
    assert fake.params() == struct.pack("=Q", 0x2000)


def test_generated_functions_of_one_launcher_keep_separate_buffers(fake: FakeDriver,
                                                                   use_device: Callable[[Any], Any]) -> None:
    """RawKernel's entry and ``launcher.launch`` are two generated functions of one Launcher: interleaved,
    each launch still carries its own arguments, grid and stream (neither trusts the other's memo)."""
    launcher = Launcher(fn(), [("a", ParamKind.pointer("float32")), ("n", ParamKind.scalar("int32"))], block=32,
                        driver=fake)
    dev = use_device(object())
    entry = launcher.entry(32, 0, dev, lambda *a: pytest.fail("fell back"))
    a, b = (0x1000, 1), (0x2000, 2)
    for call, args, grid, want in [(entry, a, 3, a), (launcher.launch, b, 4, b), (entry, a, 3, a),
                                   (launcher.launch, b, 4, b), (entry, a, 5, a)]:
        if call is entry:
            entry(grid, 32, args)
        else:
            call(grid, args)
        assert fake.params() == struct.pack("=Qi", *want) and fake.config().gx == grid


def test_raw_kernel_calls_its_entry_directly() -> None:
    """``kernel(...)`` runs the entry set for that kernel alone (swapped in place, attributes kept); other
    kernels stay on the checked path, and a user's subclass with its own ``__call__`` still works."""
    import functools

    from tilejit.api.raw import RawKernel

    src = 'extern "C" __global__ void k(float* x, int n) {}'
    a, b = RawKernel(src, "k"), RawKernel(src, "k")
    assert a._entry_in_use() is None and a.func == a._first_call
    seen: list[tuple[str, Any]] = []
    a._use(lambda grid, block, args, stream=None, shared_mem=0: seen.append(("first", args)))
    a(1, 32, (0, 1))
    assert seen == [("first", (0, 1))] and type(a) is RawKernel and isinstance(a, functools.partial)
    assert b._entry_in_use() is None and a._entry_in_use() is not None
    a._use(lambda grid, block, args, stream=None, shared_mem=0: seen.append(("second", args)))
    a(1, 32, (0, 2))
    assert seen[-1] == ("second", (0, 2)) and a.name == "k" and len(a.params) == 2  # attributes kept
    assert "RawKernel k(" in repr(a) and a.args == () and not a.keywords

    class Mine(RawKernel):
        def __call__(self, *args: Any, **kwargs: Any) -> None:
            seen.append(("mine", args[2]))
            super().__call__(*args, **kwargs)

    c = Mine(src, "k")
    c._use(lambda grid, block, args, stream=None, shared_mem=0: seen.append(("entry", args)))
    c(1, 32, (0, 3))
    assert seen[-2:] == [("mine", (0, 3)), ("entry", (0, 3))]


def test_generated_launch_code_can_come_from_a_disk_cache(fake: FakeDriver, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``compile_code`` (what the API layer passes: the disk cache), a new process makes a signature's
    launch function without compiling: here the in-process memo is cleared and ``compile`` forbidden."""
    from tilejit.compiler import cache as cache_mod
    from tilejit.compiler.cache import cached_compile
    from tilejit.runtime import dispatch

    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    sig = [("x", ParamKind.pointer("float32")), ("n", ParamKind.scalar("int64"))]
    dispatch.compiled_code.cache_clear()
    Launcher(fn("cached"), sig, block=64, driver=fake, compile_code=cached_compile).launch(1, (0x1000, 5))
    assert len(list(tmp_path.glob("*.tjc"))) == 1

    def no_compile(*args: object) -> object:
        raise AssertionError("compiled again instead of loading the cached code")

    dispatch.compiled_code.cache_clear()
    monkeypatch.setattr(cache_mod, "compile", no_compile, raising=False)
    launcher = Launcher(fn("cached"), sig, block=64, driver=fake, compile_code=cached_compile)
    launcher.launch(3, (0x2000, 7))
    assert fake.params() == launcher.pack((0x2000, 7)) and fake.config().gx == 3
